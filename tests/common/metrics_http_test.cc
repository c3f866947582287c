#include "weir/common/metrics_http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace weir::common {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
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

// A POST with its Content-Length.
std::string Post(std::string_view path, std::string_view body, std::string_view headers = "") {
  return "POST " + std::string(path) + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" +
         std::string(headers) + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
         std::string(body);
}

// The same body in chunked transfer coding, one chunk per piece.
std::string ChunkedPost(std::string_view path, const std::vector<std::string>& pieces) {
  std::string r = "POST " + std::string(path) +
                  " HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (const std::string& piece : pieces) {
    char size[16];
    std::snprintf(size, sizeof(size), "%zx\r\n", piece.size());
    r += size + piece + "\r\n";
  }
  return r + "0\r\n\r\n";
}

std::string Body(const std::string& response) { return response.substr(response.find("\r\n\r\n") + 4); }

class MetricsHttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fd_ = Listen(&port_);
    server_.AddRoute("/test/echo", [](const HttpQueryArgs& args) {
      auto it = args.find("seconds");
      if (it == args.end()) return HttpReply{400, "want seconds\n"};
      return HttpReply{200, "seconds " + it->second + "\n"};
    });
    server_.AddPostRoute("/feedback", [this](const HttpRequest& request) {
      std::lock_guard<std::mutex> l(mu_);
      posts_.push_back(request);
      return HttpReply{202, R"({"accepted":true})", "application/json", {{"X-Feedback-Id", "7"}}};
    });
    ASSERT_TRUE(server_.Start(fd_).ok());
  }
  void TearDown() override {
    server_.Stop();
    close(fd_);
  }

  // What /feedback's handler received, on the server's threads.
  std::vector<HttpRequest> Posts() {
    std::lock_guard<std::mutex> l(mu_);
    return posts_;
  }

  static constexpr size_t kMaxBody = 1024;
  int fd_ = -1;
  uint16_t port_ = 0;
  int renders_ = 0;
  std::mutex mu_;
  std::vector<HttpRequest> posts_;
  MetricsHttpServer server_{[this]() -> absl::StatusOr<std::string> {
                              ++renders_;
                              return std::string("# HELP a_total A.\n# TYPE a_total counter\na_total 1\n");
                            },
                            MetricsHttpServer::Options{.max_body_bytes = kMaxBody}};
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

TEST_F(MetricsHttpServerTest, PostRouteGetsTheWholeRequest) {
  const std::string body = R"({"cells":[{"id":"c1","load":0.5}]})";
  const std::string r = Exchange(port_, Post("/feedback?region=eu%2Dwest", body,
                                             "Content-Type: application/json\r\nX-Api-Key: s3cret\r\n"
                                             "X-Twice: a\r\nX-Twice: b\r\n"));
  // The handler's status, content type and header reach the client.
  EXPECT_THAT(r, StartsWith("HTTP/1.1 202"));
  EXPECT_THAT(r, HasSubstr("Content-Type: application/json\r\n"));
  EXPECT_THAT(r, HasSubstr("X-Feedback-Id: 7\r\n"));
  EXPECT_EQ(Body(r), R"({"accepted":true})");
  const std::vector<HttpRequest> posts = Posts();
  ASSERT_EQ(posts.size(), 1u);
  const HttpRequest& p = posts[0];
  EXPECT_EQ(p.method, "POST");
  EXPECT_EQ(p.path, "/feedback");
  EXPECT_EQ(p.args, (HttpQueryArgs{{"region", "eu-west"}}));
  EXPECT_EQ(p.headers.at("content-type"), "application/json");
  EXPECT_EQ(p.headers.at("x-api-key"), "s3cret");
  EXPECT_EQ(p.headers.at("x-twice"), "a, b");
  EXPECT_EQ(p.headers.at("content-length"), std::to_string(body.size()));
  EXPECT_EQ(p.body, body);
  EXPECT_EQ(p.peer, "127.0.0.1");
}

TEST_F(MetricsHttpServerTest, ChunkedPostIsReassembled) {
  // Each chunk its own segment: libmicrohttpd hands the body over in pieces.
  const std::string request = ChunkedPost("/feedback", {R"({"cells":)", "[1,2,", "3]}"});
  const int fd = Connect(port_);
  const size_t head = request.find("\r\n\r\n") + 4;
  for (size_t at = 0; at < request.size();) {
    const size_t n = at == 0 ? head : std::min<size_t>(7, request.size() - at);
    ASSERT_EQ(send(fd, request.data() + at, n, MSG_NOSIGNAL), static_cast<ssize_t>(n));
    at += n;
  }
  std::string r;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) r.append(buf, static_cast<size_t>(n));
  close(fd);
  EXPECT_THAT(r, StartsWith("HTTP/1.1 202"));
  const std::vector<HttpRequest> posts = Posts();
  ASSERT_EQ(posts.size(), 1u);
  EXPECT_EQ(posts[0].body, R"({"cells":[1,2,3]})");
  EXPECT_EQ(posts[0].headers.count("content-length"), 0u);
}

TEST_F(MetricsHttpServerTest, PostWithoutContentLengthHasAnEmptyBody) {
  EXPECT_THAT(Exchange(port_, Request("POST", "/feedback")), StartsWith("HTTP/1.1 202"));
  const std::vector<HttpRequest> posts = Posts();
  ASSERT_EQ(posts.size(), 1u);
  EXPECT_EQ(posts[0].body, "");
}

TEST_F(MetricsHttpServerTest, BodyOverTheLimitIs413AndNeverReachesTheHandler) {
  // Declared by Content-Length: refused from the headers.
  const std::string declared = Exchange(port_, Post("/feedback", std::string(kMaxBody + 1, 'x')));
  EXPECT_THAT(declared, StartsWith("HTTP/1.1 413"));
  EXPECT_THAT(declared, HasSubstr("over 1024 bytes"));
  // Chunked: found out while reading, answered at its end.
  const std::string chunked =
      Exchange(port_, ChunkedPost("/feedback", {std::string(600, 'a'), std::string(600, 'b')}));
  EXPECT_THAT(chunked, StartsWith("HTTP/1.1 413"));
  EXPECT_TRUE(Posts().empty());
  // The limit itself is allowed, either way.
  EXPECT_THAT(Exchange(port_, Post("/feedback", std::string(kMaxBody, 'x'))), StartsWith("HTTP/1.1 202"));
  EXPECT_THAT(Exchange(port_, ChunkedPost("/feedback", {std::string(512, 'a'), std::string(512, 'b')})),
              StartsWith("HTTP/1.1 202"));
  const std::vector<HttpRequest> posts = Posts();
  ASSERT_EQ(posts.size(), 2u);
  EXPECT_EQ(posts[0].body.size(), kMaxBody);
  EXPECT_EQ(posts[1].body, std::string(512, 'a') + std::string(512, 'b'));
}

TEST_F(MetricsHttpServerTest, MethodsFollowTheRoutes) {
  const std::string get = Exchange(port_, Request("GET", "/feedback"));
  EXPECT_THAT(get, StartsWith("HTTP/1.1 405"));
  EXPECT_THAT(get, HasSubstr("Allow: POST\r\n"));
  EXPECT_THAT(Exchange(port_, Request("HEAD", "/feedback")), StartsWith("HTTP/1.1 405"));
  const std::string metrics = Exchange(port_, Post("/metrics", "{}"));
  EXPECT_THAT(metrics, StartsWith("HTTP/1.1 405"));
  EXPECT_THAT(metrics, HasSubstr("Allow: GET, HEAD\r\n"));
  EXPECT_THAT(Exchange(port_, Post("/test/echo", "{}")), StartsWith("HTTP/1.1 405"));
  EXPECT_THAT(Exchange(port_, Post("/other", "{}")), StartsWith("HTTP/1.1 404"));
  EXPECT_TRUE(Posts().empty());
}

TEST_F(MetricsHttpServerTest, ClientGoneMidBodyLeavesTheServerServing) {
  // "Expect: 100-continue": the server's "100 Continue" says it took the
  // headers and holds the upload's state when half the body comes and the
  // client goes (the ASan build's leak check covers that state's release).
  const int fd = Connect(port_);
  const std::string head =
      "POST /feedback HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n";
  ASSERT_EQ(send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  char buf[256];
  const ssize_t n = read(fd, buf, sizeof(buf));
  ASSERT_GT(n, 0);
  EXPECT_THAT(std::string(buf, static_cast<size_t>(n)), StartsWith("HTTP/1.1 100"));
  ASSERT_EQ(send(fd, "0123456789", 10, MSG_NOSIGNAL), 10);
  close(fd);
  EXPECT_THAT(Exchange(port_, Post("/feedback", "{}")), StartsWith("HTTP/1.1 202"));
  const std::vector<HttpRequest> posts = Posts();
  ASSERT_EQ(posts.size(), 1u);
  EXPECT_EQ(posts[0].body, "{}");
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

TEST(MetricsHttpServer, RefusedReplyHeaderIs500) {
  uint16_t port = 0;
  const int fd = Listen(&port);
  MetricsHttpServer server([]() -> absl::StatusOr<std::string> { return std::string(); });
  server.AddPostRoute("/feedback", [](const HttpRequest&) {
    return HttpReply{401, "", "text/plain; charset=utf-8", {{"WWW-Authenticate", "Bearer\r\nX-Injected: 1"}}};
  });
  ASSERT_TRUE(server.Start(fd).ok());
  const std::string r = Exchange(port, Post("/feedback", "{}"));
  EXPECT_THAT(r, StartsWith("HTTP/1.1 500"));
  EXPECT_THAT(r, HasSubstr("WWW-Authenticate was refused"));
  EXPECT_THAT(r, Not(HasSubstr("X-Injected")));
  server.Stop();
  close(fd);
}

TEST(MetricsHttpServer, PathWithGetAndPostRoutesAnswersBoth) {
  uint16_t port = 0;
  const int fd = Listen(&port);
  MetricsHttpServer server([]() -> absl::StatusOr<std::string> { return std::string(); });
  server.AddRoute("/weights", [](const HttpQueryArgs&) { return HttpReply{200, "current\n"}; });
  server.AddPostRoute("/weights", [](const HttpRequest& r) {
    return HttpReply{200, "got " + r.body + "\n"};
  });
  ASSERT_TRUE(server.Start(fd).ok());
  EXPECT_EQ(Body(Exchange(port, Request("GET", "/weights"))), "current\n");
  EXPECT_EQ(Body(Exchange(port, Post("/weights", "w=1"))), "got w=1\n");
  const std::string del = Exchange(port, Request("DELETE", "/weights"));
  EXPECT_THAT(del, StartsWith("HTTP/1.1 405"));
  EXPECT_THAT(del, HasSubstr("Allow: GET, HEAD, POST\r\n"));
  server.Stop();
  close(fd);
}

// Admit sees the head before any body is read: a refusal is sent at once
// (the declared body never held), the route never runs.
TEST(MetricsHttpServer, AdmitRefusesOnTheHeadBeforeTheBody) {
  uint16_t port = 0;
  const int fd = Listen(&port);
  MetricsHttpServer server([]() -> absl::StatusOr<std::string> { return std::string(); });
  std::atomic<int> routed{0}, admitted_bodies{0};
  server.AddPostRoute(
      "/in",
      [&](const HttpRequest& r) {
        ++routed;
        return HttpReply{200, "got " + r.body + "\n"};
      },
      [&](const HttpRequest& head) -> std::optional<HttpReply> {
        admitted_bodies += head.body.empty() ? 0 : 1;
        auto it = head.headers.find("authorization");
        if (it != head.headers.end() && it->second == "Bearer good") return std::nullopt;
        return HttpReply{401, "no\n", "text/plain", {{"WWW-Authenticate", "Bearer"}}};
      });
  ASSERT_TRUE(server.Start(fd).ok());
  // The head alone, a large body declared and never sent: answered anyway.
  const int c = Connect(port);
  const std::string head = "POST /in HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n";
  ASSERT_EQ(send(c, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  char buf[512] = {};
  const ssize_t n = recv(c, buf, sizeof(buf) - 1, 0);
  close(c);
  ASSERT_GT(n, 0);
  EXPECT_THAT(std::string(buf, static_cast<size_t>(n)), StartsWith("HTTP/1.1 401"));
  EXPECT_THAT(std::string(buf, static_cast<size_t>(n)), HasSubstr("WWW-Authenticate: Bearer\r\n"));
  EXPECT_EQ(Body(Exchange(port, Post("/in", "w=1", "Authorization: Bearer good\r\n"))), "got w=1\n");
  EXPECT_EQ(routed.load(), 1);
  EXPECT_EQ(admitted_bodies.load(), 0);
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
