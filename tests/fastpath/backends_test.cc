// The backend factory and the kernel backend behind the Backend interface.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "gtest/gtest.h"
#include "weir/fastpath/backend.h"
#include "weir/fastpath/config.h"

namespace weir::fastpath {
namespace {

FastpathConfig KernelConfig(int workers, bool tcp) {
  auto c = ParseConfig(
      "[server]\nlisten = [\"127.0.0.1:0\", \"127.0.0.1:0\"]\n[acl]\nallow = [\"127.0.0.0/8\"]\n"
      "[upstream]\nordinary = [\"127.0.0.1:1\"]\n",
      "t.toml");
  EXPECT_TRUE(c.ok()) << c.status();
  c->workers = workers;
  c->tcp = tcp;
  return *c;
}

int Connect(int type, uint16_t port) {
  int fd = socket(AF_INET, type, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// "listening udp 127.0.0.1:P tcp 127.0.0.1:P" -> P
std::vector<uint16_t> Ports(const std::string& describe) {
  std::vector<uint16_t> ports;
  size_t at = 0;
  while ((at = describe.find("listening udp 127.0.0.1:", at)) != std::string::npos) {
    at += sizeof("listening udp 127.0.0.1:") - 1;
    ports.push_back(static_cast<uint16_t>(std::stoi(describe.substr(at))));
  }
  return ports;
}

TEST(Backends, TheBuildHasTheKernelBackendAndEveryNameItListsIsMade) {
  const std::vector<std::string>& built = BuiltBackends();
  ASSERT_FALSE(built.empty());
  EXPECT_EQ(built.front(), "kernel");
  for (const std::string& name : built) {
    EXPECT_NE(std::find(AllBackends().begin(), AllBackends().end(), name), AllBackends().end()) << name;
    FastpathConfig c = KernelConfig(1, true);
    c.backend = name;
    auto b = MakeBackend(c);
    EXPECT_TRUE(b.ok()) << name << ": " << b.status();
  }
}

TEST(Backends, AnUnknownBackendIsAnError) {
  FastpathConfig c = KernelConfig(1, true);
  c.backend = "xdp";
  auto b = MakeBackend(c);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(std::string(b.status().message()).find("\"xdp\""), std::string::npos) << b.status();
}

TEST(Backends, KernelBackendBindsEveryAddressForUdpAndTcpOnOnePort) {
  FastpathConfig c = KernelConfig(3, true);
  auto b = MakeBackend(c);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE((*b)->Init().ok());
  EXPECT_EQ((*b)->workers(), 3);
  EXPECT_TRUE((*b)->serves_tcp());
  const std::string text = (*b)->Describe();
  const std::vector<uint16_t> ports = Ports(text);
  ASSERT_EQ(ports.size(), 2u) << text;
  EXPECT_NE(ports[0], ports[1]);
  for (uint16_t p : ports) {
    EXPECT_NE(text.find("tcp 127.0.0.1:" + std::to_string(p)), std::string::npos) << text;
    const int tcp = Connect(SOCK_STREAM, p);
    EXPECT_GE(tcp, 0) << "the TCP listener of port " << p;
    if (tcp >= 0) close(tcp);
  }
  // Destroyed: every socket closed, so the ports are free again.
  b->reset();
  for (uint16_t p : ports) EXPECT_LT(Connect(SOCK_STREAM, p), 0) << p;
}

TEST(Backends, KernelBackendWithoutTcpListensOnUdpOnly) {
  FastpathConfig c = KernelConfig(1, false);
  auto b = MakeBackend(c);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE((*b)->Init().ok());
  EXPECT_FALSE((*b)->serves_tcp());
  const std::string text = (*b)->Describe();
  EXPECT_EQ(text.find(" tcp "), std::string::npos) << text;
  for (uint16_t p : Ports(text)) EXPECT_LT(Connect(SOCK_STREAM, p), 0) << p;
}

}  // namespace
}  // namespace weir::fastpath
