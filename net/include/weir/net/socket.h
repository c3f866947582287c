// Binding the sockets a daemon listens on.
#pragma once

#include <sys/socket.h>

#include <vector>

#include "absl/status/statusor.h"
#include "weir/common/socket_address.h"

namespace weir::net {

struct BindOptions {
  bool nonblocking = false;
  int listen_backlog = 0;  // stream sockets: listen() with this backlog; 0 does not listen
  // IP_FREEBIND / IPV6_FREEBIND: bind an address no interface has yet (the
  // DPDK backend's exception interface gets its addresses after the bind).
  bool freebind = false;
};

// A socket of `type` (SOCK_DGRAM, SOCK_STREAM) bound to `addr`,
// close-on-exec, IPv6-only for IPv6 addresses; stream sockets with
// SO_REUSEADDR (a restart binds past TIME_WAIT). Datagram sockets never
// share: on Linux SO_REUSEADDR or SO_REUSEPORT on a UDP socket lets a second
// process bind the same port (and port 0 hand out one in use) and take part
// of the queries. The error names the address and the reason.
absl::StatusOr<int> BindSocket(const common::SocketAddress& addr, int type, const BindOptions& options = {});

// `count` (>= 1) UDP sockets on one address that the kernel spreads the
// datagrams over (SO_REUSEPORT): one per worker. The first is bound before it
// allows sharing, so the address must be free of every other socket (a
// second daemon on the port is "address in use", not a silent share of the
// traffic) and port 0 gets a port no other socket has; the others join it.
// On error none stays open.
absl::StatusOr<std::vector<int>> BindUdpGroup(const common::SocketAddress& addr, int count,
                                              const BindOptions& options = {});

// The address a socket is bound to (the port the kernel picked for port 0).
common::SocketAddress LocalAddress(int fd);

// connect() on a stream socket `fd`, bounded by `timeout_ms` (a peer that
// never answers the SYN, a listener whose backlog is full); 0 or an errno
// (ETIMEDOUT when the time ran out). The socket's blocking mode is kept.
int ConnectWithin(int fd, const sockaddr* sa, socklen_t len, int timeout_ms);

}  // namespace weir::net
