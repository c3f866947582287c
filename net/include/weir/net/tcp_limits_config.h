// The [server] keys of net::TcpConnectionLimits, read the same way by every
// daemon that serves DNS over TCP (docs/fastpath-config.md,
// docs/recursor-config.md). Control plane only.
#pragma once

#include <toml++/toml.h>

#include "weir/common/toml_checker.h"
#include "weir/net/tcp_connections.h"

namespace weir::net {

// Reads tcp_max_connections, tcp_max_connections_per_source,
// tcp_source_prefix_v4, tcp_source_prefix_v6, tcp_idle_timeout_ms and
// tcp_lifetime_ms from `server` into `out` (a key left out keeps its
// default; errors go to the checker with their position). The caller's
// OnlyKeys lists them.
inline void ParseTcpLimits(common::TomlChecker& c, const toml::table& server, TcpConnectionLimits* out) {
  c.Int(server, "tcp_max_connections", &out->max_connections, 1, 1000000);
  c.Int(server, "tcp_max_connections_per_source", &out->max_per_source, 0, 1000000);
  c.Int(server, "tcp_source_prefix_v4", &out->source_prefix_v4, 8, 32);
  c.Int(server, "tcp_source_prefix_v6", &out->source_prefix_v6, 16, 128);
  int64_t idle_ms = out->idle_timeout.count();
  c.Int(server, "tcp_idle_timeout_ms", &idle_ms, 100, 600000);
  out->idle_timeout = std::chrono::milliseconds(idle_ms);
  int64_t lifetime_ms = out->lifetime.count();
  c.Int(server, "tcp_lifetime_ms", &lifetime_ms, 1000, 86400000);
  out->lifetime = std::chrono::milliseconds(lifetime_ms);
}

}  // namespace weir::net
