// net::BindSocket and net::LocalAddress on loopback.
#include "weir/net/socket.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

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
  // A listening TCP socket (SO_REUSEADDR lets two UDP sockets share a port).
  auto first = BindSocket(Loopback(0), SOCK_STREAM, {.listen_backlog = 8});
  ASSERT_TRUE(first.ok());
  const common::SocketAddress bound = LocalAddress(*first);
  auto second = BindSocket(bound, SOCK_STREAM, {.listen_backlog = 8});
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("bind " + bound.ToString()), std::string_view::npos)
      << second.status();
  close(*first);
}

TEST(BindSocket, ReuseportSharesTheAddressAcrossWorkers) {
  auto first = BindSocket(Loopback(0), SOCK_DGRAM, {.reuseport = true});
  ASSERT_TRUE(first.ok());
  auto second = BindSocket(LocalAddress(*first), SOCK_DGRAM, {.reuseport = true});
  ASSERT_TRUE(second.ok()) << second.status();
  close(*first);
  close(*second);
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
