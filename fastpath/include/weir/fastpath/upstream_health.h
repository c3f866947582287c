// The forwarder's view of its recursors' health, per group (ordinary,
// weighted): the consistent-hash ring that spreads the questions, the
// failures in a row that mark a recursor down, and the probes that bring it
// back (docs/behaviour.md#the-front-cache).
//
// A recursor is marked down after `failures` tries in a row failed (a
// timeout, a refused connection, an answer that cannot be read); its arc of
// the ring moves to the next live recursor. While down it gets a probe
// (". NS") every probe interval; any genuine answer to a probe or a query
// marks it up again. When every recursor of a group is down, the ring tries
// them all again (answering late beats not answering), while the operator's
// view (weir_upstream_up) still says down.
//
// Pure logic on the time it is given. Threading: the forwarder's thread;
// UpstreamStats::up is read by the metrics thread.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "weir/fastpath/metrics.h"
#include "weir/fastpath/upstream_ring.h"

namespace weir::fastpath {

struct UpstreamStats {
  std::string name;
  LatencyHistogram latency;
  OwnedCounter queries;
  OwnedCounter timeouts;
  OwnedCounter answers;
  std::atomic<bool> up{true};
};

class UpstreamHealth {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Change : uint8_t { kNone, kDown, kUp };

  // `stats`: one per upstream (their `up` flags are written here).
  UpstreamHealth(std::vector<std::unique_ptr<UpstreamStats>>* stats, double load_factor, int failures,
                 std::chrono::milliseconds probe_interval);

  // The outcome of one try at upstream `u`: what changed for the operator.
  Change Mark(int u, bool ok, Clock::time_point now);
  // True when down upstream `u` is due a probe now; the next one is then
  // due an interval later.
  bool ProbeDue(int u, Clock::time_point now);
  // Down for the operator (weir_upstream_up 0).
  bool Down(int u) const { return !(*stats_)[u]->up.load(std::memory_order_relaxed); }
  int failures(int u) const { return failures_[u]; }
  int size() const { return ring_.size(); }
  UpstreamRing& ring() { return ring_; }
  const UpstreamRing& ring() const { return ring_; }

 private:
  std::vector<std::unique_ptr<UpstreamStats>>* stats_;
  UpstreamRing ring_;
  int failures_to_down_;
  std::chrono::milliseconds probe_interval_;
  std::vector<int> failures_;
  std::vector<Clock::time_point> next_probe_;
};

}  // namespace weir::fastpath
