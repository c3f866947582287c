// Socket addresses and prefixes, parsed once at the control plane and used by
// value on the data path.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "weir/common/socket_address.h"
#include "weir/partitions/partition.h"

namespace weir::fastpath {

using common::SocketAddress;

// The client address of a packet, in the partitions' form.
partitions::IpAddress ToIpAddress(const SocketAddress& a);

}  // namespace weir::fastpath
