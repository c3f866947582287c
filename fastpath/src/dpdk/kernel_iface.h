// The kernel side of a port's exception path: the tap interface gets the
// addresses the port owns (rtnetlink, IPv6 without duplicate address
// detection, so it answers ND at once), so the kernel answers ARP, ND and
// ICMP for them and serves DNS over TCP on them.
//
// Threading: control plane, main thread.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "weir/fastpath/config.h"

namespace weir::fastpath::dpdk {

// Adds every address of `addresses` to interface `ifname` (an address it
// already has is fine). Needs CAP_NET_ADMIN.
absl::Status AddInterfaceAddresses(const std::string& ifname, const std::vector<OwnedAddress>& addresses);

}  // namespace weir::fastpath::dpdk
