// Kernel-socket helpers of the kernel backend.
#pragma once

#include <sys/socket.h>

#include "absl/status/statusor.h"
#include "weir/common/socket_address.h"
#include "weir/partitions/partition.h"

namespace weir::fastpath::kernel {

using common::SocketAddress;

// A socket of `type` bound to `addr` (SO_REUSEPORT when asked; IPv6 only
// for IPv6 addresses).
absl::StatusOr<int> BindSocket(const SocketAddress& addr, int type, bool reuseport);
SocketAddress LocalAddress(int fd);

// The client address straight from the kernel's sockaddr (IPv4-mapped IPv6
// sources become IPv4), without building a SocketAddress per packet.
partitions::IpAddress ClientAddress(const sockaddr_storage& ss);

}  // namespace weir::fastpath::kernel
