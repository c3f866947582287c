// Kernel-socket helpers of the kernel backend.
#pragma once

#include <sys/socket.h>

#include "weir/partitions/partition.h"

namespace weir::fastpath::kernel {

// The client address straight from the kernel's sockaddr (IPv4-mapped IPv6
// sources become IPv4), without building a SocketAddress per packet.
common::IpAddress ClientAddress(const sockaddr_storage& ss);
// Its port, in host order.
uint16_t ClientPort(const sockaddr_storage& ss);

}  // namespace weir::fastpath::kernel
