// The [server] keys of net::TcpConnectionLimits, read the same way by every
// daemon that serves DNS over TCP (docs/fastpath-config.md,
// docs/recursor-config.md). Control plane only.
#pragma once

#include <toml++/toml.h>

#include <string>
#include <string_view>

#include "weir/common/toml_checker.h"
#include "weir/net/tcp_connections.h"

namespace weir::net {

// Reads <prefix>max_connections, <prefix>max_connections_per_source,
// <prefix>source_prefix_v4, <prefix>source_prefix_v6,
// <prefix>idle_timeout_ms and <prefix>lifetime_ms from `table` into `out`
// (a key left out keeps its default; errors go to the checker with their
// position). The caller's OnlyKeys lists them. [server] names them with
// "tcp_", weir-fastpath's [tls] without a prefix.
inline void ParseTcpLimits(common::TomlChecker& c, const toml::table& table, TcpConnectionLimits* out,
                           std::string_view prefix = "tcp_") {
  auto key = [&](std::string_view name) { return std::string(prefix) + std::string(name); };
  c.Int(table, key("max_connections"), &out->max_connections, 1, 1000000);
  c.Int(table, key("max_connections_per_source"), &out->max_per_source, 0, 1000000);
  c.Int(table, key("source_prefix_v4"), &out->source_prefix_v4, 8, 32);
  c.Int(table, key("source_prefix_v6"), &out->source_prefix_v6, 16, 128);
  int64_t idle_ms = out->idle_timeout.count();
  c.Int(table, key("idle_timeout_ms"), &idle_ms, 100, 600000);
  out->idle_timeout = std::chrono::milliseconds(idle_ms);
  int64_t lifetime_ms = out->lifetime.count();
  c.Int(table, key("lifetime_ms"), &lifetime_ms, 1000, 86400000);
  out->lifetime = std::chrono::milliseconds(lifetime_ms);
}

}  // namespace weir::net
