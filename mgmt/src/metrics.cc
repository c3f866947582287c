#include "metrics.h"

#include <algorithm>
#include <array>
#include <string_view>

#include "weir/mgmt/commands.h"
#include "weir/partitions/citymap.h"

namespace weir::mgmt {

void SnapshotSizes::Update(const Snapshot& s) {
  if (known_ && s.version == version_ && s.origin == origin_) return;
  known_ = true;
  version_ = s.version;
  origin_ = s.origin;
  tags_ = static_cast<size_t>(std::count(s.tags.begin(), s.tags.end(), '\n'));
  // The store only holds city maps that parse.
  auto cm = partitions::CityMap::FromCsv(s.citymap, partitions::CityMapOptions{});
  cities_ = cm.ok() ? (*cm)->city_count() : 0;
  prefixes_ = cm.ok() ? (*cm)->prefixes().size() : 0;
}

void WriteMgmtMetrics(const MgmtCounters& c, const MgmtState& s, SnapshotSizes& sizes,
                      common::PrometheusWriter& w) {
  sizes.Update(*s.snapshot);
  w.Gauge("weir_mgmt_store_version", "The newest snapshot version in the store (0: an empty database).")
      .Add({}, s.snapshot->version);
  w.Gauge("weir_mgmt_store_tags", "Tagged domain suffixes in the current snapshot.").Add({}, sizes.tags());
  w.Gauge("weir_mgmt_store_cities", "Cities in the current snapshot's city map (the default city included).")
      .Add({}, sizes.cities());
  w.Gauge("weir_mgmt_store_prefixes", "Prefixes in the current snapshot's city map.")
      .Add({}, sizes.prefixes());
  w.Gauge("weir_mgmt_store_bytes", "Size of the current snapshot's tag text and city map CSV, in bytes.")
      .Add({}, s.snapshot->tags.size() + s.snapshot->citymap.size());

  w.Gauge("weir_mgmt_connections", "Open connections (nodes, weirctl and peers not yet identified).")
      .Add({}, s.connections);
  auto& nodes = w.Gauge("weir_mgmt_nodes_connected", "Nodes connected, by kind.");
  for (const char* kind : {"fastpath", "recursor"}) {
    auto it = s.nodes_by_kind.find(kind);
    nodes.Add({{"kind", kind}}, it == s.nodes_by_kind.end() ? 0 : it->second);
  }
  if (auto it = s.nodes_by_kind.find("other"); it != s.nodes_by_kind.end())
    nodes.Add({{"kind", "other"}}, it->second);

  auto& pushed =
      w.Counter("weir_mgmt_pushes_total",
                "Versions pushed to nodes: whole snapshots, or deltas against the version a node runs.");
  pushed.Add({{"kind", "snapshot"}}, c.snapshots_pushed);
  pushed.Add({{"kind", "delta"}}, c.deltas_pushed);
  w.Counter("weir_mgmt_delta_resends_total",
            "Deltas a node could not apply to what it runs (its base differed): the whole snapshot was sent.")
      .Add({}, c.delta_resends);
  w.Counter("weir_mgmt_snapshots_pushed_total", "Versions sent to nodes (whole snapshots and deltas).")
      .Add({}, c.snapshots_pushed + c.deltas_pushed);
  c.convergence.Render(w.Histogram("weir_mgmt_convergence_seconds",
                                   "From a version reaching this instance (committed here or read from the "
                                   "store) to the ACK of the last node connected to it."),
                       {});
  w.Gauge("weir_mgmt_convergence_last_seconds", "The last weir_mgmt_convergence_seconds observed.")
      .Add({}, c.last_convergence_seconds);
  w.Counter("weir_mgmt_node_acks_total", "Snapshots nodes acknowledged (ACK).").Add({}, c.acks);
  w.Counter("weir_mgmt_node_rejections_total", "Snapshots nodes rejected (NACK).").Add({}, c.nacks);
  auto& refused = w.Counter("weir_mgmt_peer_errors_total", "Peers closed on an error, by reason.");
  refused.Add({{"reason", "bad_token"}}, c.bad_token);
  refused.Add({{"reason", "protocol"}}, c.protocol_errors);
  refused.Add({{"reason", "connection_limit"}}, c.connections_refused);
  refused.Add({{"reason", "certificate"}}, c.certificate_refused);
  w.Counter("weir_mgmt_tls_handshake_failures_total",
            "TLS handshakes refused or failed ([tls]): no client certificate, one not signed by ca_file, "
            "expired, or one whose OU names no role.")
      .Add({}, c.tls_handshake_failures);
  if (s.tls_cert_not_after != 0) {
    w.Gauge("weir_mgmt_tls_cert_expiry_seconds",
            "When the listener's TLS certificate expires (its notAfter), in Unix seconds.")
        .Add({}, s.tls_cert_not_after);
  }
  auto& requests =
      w.Counter("weir_mgmt_requests_total", "weirctl requests, by command and result (ok or error).");
  std::map<std::pair<std::string, bool>, uint64_t> all = c.requests;
  // Every series from the start: each request of the table, and the
  // requests no row knows.
  for (const CommandSpec& command : kCommands) {
    for (bool ok : {true, false}) all.try_emplace({std::string(command.verb), ok}, 0);
  }
  for (std::string_view other : {kUnknownCommand, kInvalidCommand}) {
    for (bool ok : {true, false}) all.try_emplace({std::string(other), ok}, 0);
  }
  for (const auto& [key, n] : all) {
    requests.Add({{"command", key.first}, {"result", key.second ? "ok" : "error"}}, n);
  }
  w.Counter("weir_mgmt_persistence_errors_total",
            "Store operations that failed (SQLite errors, etcd unreachable or its answer lost).")
      .Add({}, c.persistence_errors);
  w.Counter("weir_mgmt_commit_conflicts_total",
            "Changes refused because another weir-mgmt instance committed first (weirctl may retry them).")
      .Add({}, c.conflicts);
  w.Counter("weir_mgmt_store_refreshes_total",
            "Versions another weir-mgmt instance committed, read from the store.")
      .Add({}, c.store_refreshes);
}

}  // namespace weir::mgmt
