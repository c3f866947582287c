// The descriptors a weir-fastpath config makes the daemon hold open at once
// (its RLIMIT_NOFILE need, common/fd_limit.h): the start raises the soft
// limit to it and refuses to start when the hard limit is below it.
#pragma once

#include "weir/common/fd_limit.h"
#include "weir/fastpath/config.h"

namespace weir::fastpath {

// Descriptors besides the terms DescriptorsNeeded counts one by one:
// standard streams, the log's journal socket, the dnstap socket or file,
// the weir-mgmt session, the event loops of the TCP, encrypted-front,
// forwarder and control threads, and the files read at start and reload.
inline constexpr uint64_t kFastpathFixedDescriptors = 64;
// The DPDK backend's EAL: hugepage segment files, device and VFIO files,
// interrupt event descriptors, the tap and netlink sockets.
inline constexpr uint64_t kDpdkDescriptors = 256;

common::DescriptorNeed DescriptorsNeeded(const FastpathConfig& config);

}  // namespace weir::fastpath
