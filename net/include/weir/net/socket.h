// Binding the sockets a daemon listens on.
#pragma once

#include "absl/status/statusor.h"
#include "weir/common/socket_address.h"

namespace weir::net {

struct BindOptions {
  bool nonblocking = false;
  bool reuseport = false;  // SO_REUSEPORT: one socket per worker on the same address
  int listen_backlog = 0;  // stream sockets: listen() with this backlog; 0 does not listen
  // IP_FREEBIND / IPV6_FREEBIND: bind an address no interface has yet (the
  // DPDK backend's exception interface gets its addresses after the bind).
  bool freebind = false;
};

// A socket of `type` (SOCK_DGRAM, SOCK_STREAM) bound to `addr` with
// SO_REUSEADDR, close-on-exec, IPv6-only for IPv6 addresses. The error
// names the address and the reason.
absl::StatusOr<int> BindSocket(const common::SocketAddress& addr, int type, const BindOptions& options = {});

// The address a socket is bound to (the port the kernel picked for port 0).
common::SocketAddress LocalAddress(int fd);

}  // namespace weir::net
