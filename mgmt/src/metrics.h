// weir-mgmt's own Prometheus families (docs/metrics.md): what the server
// counts as it serves, and what it reads from the store and the connections
// at each scrape.
//
// Threading: the mgmt loop thread, which owns the counters, the store and
// the connections; the metrics endpoint gets here through net::LoopMailbox.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "weir/common/histogram.h"
#include "weir/common/prometheus.h"
#include "weir/mgmt/snapshot.h"

namespace weir::mgmt {

// Counted by the server as it serves.
inline constexpr std::array<double, 12> kConvergenceBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                              0.5,   1,    2.5,   5,    10,  30};

struct MgmtCounters {
  uint64_t snapshots_pushed = 0;
  uint64_t acks = 0;
  uint64_t nacks = 0;  // snapshots a node rejected
  uint64_t bad_token = 0;
  uint64_t protocol_errors = 0;         // peers closed for a malformed or unexpected message
  uint64_t connections_refused = 0;     // max_connections reached
  uint64_t persistence_errors = 0;      // the database failed (not a change that was invalid)
  uint64_t conflicts = 0;               // commits refused: another instance committed first
  uint64_t store_refreshes = 0;         // versions another instance committed, taken from the store
  uint64_t deltas_pushed = 0;           // incremental pushes (DELTA); snapshots_pushed: whole ones
  uint64_t delta_resends = 0;           // deltas a node could not apply: the whole snapshot sent
  uint64_t tls_handshake_failures = 0;  // [tls]: handshakes refused or failed (a bad certificate...)
  uint64_t certificate_refused = 0;     // [tls]: a certificate's role or CN did not fit what the peer sent
  // Time from a version reaching this instance (its commit, or its read from
  // the store) to the ACK of the last node connected to it.
  common::FixedHistogram<kConvergenceBounds> convergence;
  double last_convergence_seconds = 0;
  // weirctl requests by (command, ok); commands outside the known set count as "unknown".
  std::map<std::pair<std::string, bool>, uint64_t> requests;
};

// What a scrape reads from the store and the connections.
struct MgmtState {
  const Snapshot* snapshot = nullptr;
  size_t connections = 0;
  // Connected nodes by the kind their HELLO names ("fastpath", "recursor"; any other counts as "other").
  std::map<std::string, size_t> nodes_by_kind;
  // [tls]: the listener certificate's notAfter (Unix seconds); 0 without [tls].
  int64_t tls_cert_not_after = 0;
};

// The store's sizes, computed once per snapshot version (parsing the city
// map at every scrape would cost as much as the scrape).
class SnapshotSizes {
 public:
  void Update(const Snapshot& s);
  size_t tags() const { return tags_; }
  size_t cities() const { return cities_; }
  size_t prefixes() const { return prefixes_; }

 private:
  bool known_ = false;
  uint64_t version_ = 0;
  std::string origin_;
  size_t tags_ = 0, cities_ = 0, prefixes_ = 0;
};

void WriteMgmtMetrics(const MgmtCounters& counters, const MgmtState& state, SnapshotSizes& sizes,
                      common::PrometheusWriter& w);

}  // namespace weir::mgmt
