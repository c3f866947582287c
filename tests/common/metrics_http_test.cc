#include "weir/common/metrics_http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace weir::common {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

int Listen(uint16_t* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(listen(fd, 64), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

int Connect(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// One request on a fresh connection; the whole response.
std::string Exchange(uint16_t port, const std::string& request) {
  const int fd = Connect(port);
  EXPECT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

std::string Request(std::string_view method, std::string_view path) {
  return std::string(method) + " " + std::string(path) + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
}

class MetricsHttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fd_ = Listen(&port_);
    server_.AddRoute("/test/echo", [](const HttpQueryArgs& args) {
      auto it = args.find("seconds");
      if (it == args.end()) return HttpReply{400, "want seconds\n"};
      return HttpReply{200, "seconds " + it->second + "\n"};
    });
    ASSERT_TRUE(server_.Start(fd_).ok());
  }
  void TearDown() override {
    server_.Stop();
    close(fd_);
  }

  int fd_ = -1;
  uint16_t port_ = 0;
  int renders_ = 0;
  MetricsHttpServer server_{[this]() -> absl::StatusOr<std::string> {
    ++renders_;
    return std::string("# HELP a_total A.\n# TYPE a_total counter\na_total 1\n");
  }};
};

TEST_F(MetricsHttpServerTest, GetMetrics) {
  const std::string r = Exchange(port_, Request("GET", "/metrics"));
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(r, HasSubstr("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
  EXPECT_THAT(r, HasSubstr("\r\n\r\n# HELP a_total A.\n"));
}

TEST_F(MetricsHttpServerTest, HeadHasNoBody) {
  const std::string r = Exchange(port_, Request("HEAD", "/metrics"));
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(r, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  EXPECT_EQ(r.substr(r.find("\r\n\r\n") + 4), "");
}

TEST_F(MetricsHttpServerTest, NotFoundAndMethodNotAllowed) {
  EXPECT_THAT(Exchange(port_, Request("GET", "/other")), StartsWith("HTTP/1.1 404"));
  const std::string post = Exchange(port_, Request("POST", "/metrics"));
  EXPECT_THAT(post, StartsWith("HTTP/1.1 405"));
  EXPECT_THAT(post, HasSubstr("Allow: GET, HEAD\r\n"));
  EXPECT_THAT(Exchange(port_, Request("DELETE", "/metrics")), StartsWith("HTTP/1.1 405"));
}

TEST_F(MetricsHttpServerTest, RoutesGetTheirQueryArguments) {
  const std::string r = Exchange(port_, Request("GET", "/test/echo?seconds=42"));
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(r, HasSubstr("\r\n\r\nseconds 42\n"));
  EXPECT_THAT(Exchange(port_, Request("GET", "/test/echo")), StartsWith("HTTP/1.1 400"));
}

TEST_F(MetricsHttpServerTest, IdleConnectionsDoNotDelayAScrape) {
  std::vector<int> idle;
  for (int i = 0; i < 40; ++i) {
    idle.push_back(Connect(port_));
    if (i % 2 == 1) send(idle.back(), "GET /metr", 9, MSG_NOSIGNAL);  // half a request line
  }
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(Exchange(port_, Request("GET", "/metrics")), StartsWith("HTTP/1.1 200"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  for (int fd : idle) close(fd);
}

TEST_F(MetricsHttpServerTest, StopLeavesTheCallersSocketOpen) {
  server_.Stop();
  EXPECT_NE(fcntl(fd_, F_GETFD), -1);
  server_.Stop();  // idempotent
}

TEST(MetricsHttpServer, RenderFailureIs500WithTheReason) {
  uint16_t port = 0;
  const int fd = Listen(&port);
  MetricsHttpServer server(
      []() -> absl::StatusOr<std::string> { return absl::InternalError("broken family"); });
  ASSERT_TRUE(server.Start(fd).ok());
  const std::string r = Exchange(port, Request("GET", "/metrics"));
  EXPECT_THAT(r, StartsWith("HTTP/1.1 500"));
  EXPECT_THAT(r, HasSubstr("broken family"));
  server.Stop();
  close(fd);
}

TEST(MetricsHttpServer, UnavailableIs503) {
  uint16_t port = 0;
  const int fd = Listen(&port);
  MetricsHttpServer server(
      []() -> absl::StatusOr<std::string> { return absl::UnavailableError("the loop is busy"); });
  ASSERT_TRUE(server.Start(fd).ok());
  const std::string r = Exchange(port, Request("GET", "/metrics"));
  EXPECT_THAT(r, StartsWith("HTTP/1.1 503"));
  EXPECT_THAT(r, HasSubstr("the loop is busy"));
  server.Stop();
  close(fd);
}

TEST(MetricsHttpServer, StartFailsWithAReason) {
  MetricsHttpServer server([]() -> absl::StatusOr<std::string> { return std::string(); });
  const absl::Status st = server.Start(-1);
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("listen socket"));
}

}  // namespace
}  // namespace weir::common
