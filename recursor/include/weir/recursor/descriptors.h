// The descriptors a weir-recursor config makes the daemon hold open at once
// (its RLIMIT_NOFILE need, common/fd_limit.h): the start raises the soft
// limit to it and refuses to start when the hard limit is below it.
#pragma once

#include "weir/common/fd_limit.h"
#include "weir/recursor/config.h"

namespace weir::recursor {

// libunbound's outgoing-range: the UDP sockets its resolving process keeps
// for queries in flight. weir does not set it, so it is the library's own
// default (16 in libunbound 1.17, util/config_file.c config_create_forlib).
inline constexpr uint64_t kLibunboundOutgoingRange = 16;
// Connections to the [server] control port at once: it has no limit of its
// own (only control_allow, loopback by default); room for an operator's
// tools.
inline constexpr uint64_t kServerControlConnections = 32;
// Descriptors besides the terms DescriptorsNeeded counts one by one:
// standard streams, the log's journal socket, the dnstap socket or file,
// the weir-mgmt session, the event loops and their wake descriptors, the
// pipes to libunbound's resolving process and the descriptors it inherits,
// and the files read at start and reload.
inline constexpr uint64_t kRecursorFixedDescriptors = 64;

common::DescriptorNeed DescriptorsNeeded(const RecursorConfig& config);

}  // namespace weir::recursor
