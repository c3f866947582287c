// The descriptors a weir-mgmt config makes the daemon hold open at once (its
// RLIMIT_NOFILE need, common/fd_limit.h): the start raises the soft limit to
// it and refuses to start when the hard limit is below it.
#pragma once

#include "weir/common/fd_limit.h"
#include "weir/mgmt/server.h"

namespace weir::mgmt {

// The SQLite store's files: the database, its write-ahead log and its
// shared-memory index (journal_mode=WAL), and a temporary file.
inline constexpr uint64_t kSqliteDescriptors = 4;
// The etcd store's libcurl handles (two clients and a watcher), each with
// libcurl's connection cache of 5, and the watcher's wake-up.
inline constexpr uint64_t kEtcdDescriptors = 16;
// Descriptors besides the terms DescriptorsNeeded counts one by one:
// standard streams, the log's journal socket, the event loop and its wake
// descriptors, the [tls] files it watches, and the files read at start.
inline constexpr uint64_t kMgmtFixedDescriptors = 64;

common::DescriptorNeed DescriptorsNeeded(const MgmtConfig& config);

}  // namespace weir::mgmt
