// net::BindSocket, net::BindUdpGroup and net::LocalAddress on loopback.
#include "weir/net/socket.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>
#include <vector>

namespace weir::net {
namespace {

common::SocketAddress Loopback(uint16_t port) { return *common::SocketAddress::Parse("127.0.0.1", port); }

TEST(BindSocket, PortZeroGetsAPortThatLocalAddressNames) {
  auto fd = BindSocket(Loopback(0), SOCK_DGRAM);
  ASSERT_TRUE(fd.ok()) << fd.status();
  const common::SocketAddress bound = LocalAddress(*fd);
  EXPECT_NE(bound.port(), 0);
  EXPECT_EQ(bound.ToString().rfind("127.0.0.1:", 0), 0u) << bound.ToString();
  EXPECT_FALSE(fcntl(*fd, F_GETFL) & O_NONBLOCK);
  close(*fd);
}

TEST(BindSocket, AnAddressInUseIsAnErrorNamingIt) {
  // A listening TCP socket: SO_REUSEADDR lets a restart past TIME_WAIT, not two listeners.
  auto first = BindSocket(Loopback(0), SOCK_STREAM, {.listen_backlog = 8});
  ASSERT_TRUE(first.ok());
  const common::SocketAddress bound = LocalAddress(*first);
  auto second = BindSocket(bound, SOCK_STREAM, {.listen_backlog = 8});
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("bind " + bound.ToString()), std::string_view::npos)
      << second.status();
  close(*first);
}

TEST(BindSocket, AUdpPortInUseIsAnError) {
  // No SO_REUSEADDR on datagram sockets: a second daemon on the port would
  // take part of its queries.
  auto first = BindSocket(Loopback(0), SOCK_DGRAM);
  ASSERT_TRUE(first.ok());
  auto second = BindSocket(LocalAddress(*first), SOCK_DGRAM);
  EXPECT_FALSE(second.ok());
  close(*first);
}

TEST(BindUdpGroup, TheWorkersShareOneAddress) {
  auto group = BindUdpGroup(Loopback(0), 4);
  ASSERT_TRUE(group.ok()) << group.status();
  ASSERT_EQ(group->size(), 4u);
  const common::SocketAddress bound = LocalAddress(group->front());
  EXPECT_NE(bound.port(), 0);
  for (int fd : *group) EXPECT_EQ(LocalAddress(fd).ToString(), bound.ToString());
  for (int fd : *group) close(fd);
}

TEST(BindUdpGroup, AnAddressAnotherGroupHoldsIsAnError) {
  // A second daemon started on the port of a running one: an error, not a
  // silent share of the datagrams.
  auto running = BindUdpGroup(Loopback(0), 2);
  ASSERT_TRUE(running.ok());
  const common::SocketAddress bound = LocalAddress(running->front());
  auto second = BindUdpGroup(bound, 2);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("bind " + bound.ToString()), std::string_view::npos)
      << second.status();
  auto single = BindSocket(bound, SOCK_DGRAM);
  EXPECT_FALSE(single.ok());
  for (int fd : *running) close(fd);
}

TEST(BindUdpGroup, PortZeroNeverHandsOutAPortInUse) {
  // The kernel gives a SO_REUSEPORT socket bound to port 0 a port other
  // such sockets hold; 1,000 groups of 2 open at once (a third of the
  // ephemeral range) would meet one another many times over.
  std::vector<int> fds;
  std::set<uint16_t> ports;
  for (int i = 0; i < 1000; ++i) {
    auto group = BindUdpGroup(Loopback(0), 2);
    ASSERT_TRUE(group.ok()) << group.status();
    ports.insert(LocalAddress(group->front()).port());
    fds.insert(fds.end(), group->begin(), group->end());
  }
  EXPECT_EQ(ports.size(), 1000u);
  for (int fd : fds) close(fd);
}

TEST(BindSocket, StreamWithBacklogListensAndIsNonBlockingWhenAsked) {
  auto fd = BindSocket(Loopback(0), SOCK_STREAM, {.nonblocking = true, .listen_backlog = 8});
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_TRUE(fcntl(*fd, F_GETFL) & O_NONBLOCK);
  const common::SocketAddress bound = LocalAddress(*fd);
  const int c = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(connect(c, bound.sa(), bound.len), 0) << "the socket listens";
  close(c);
  close(*fd);
}

}  // namespace
}  // namespace weir::net
