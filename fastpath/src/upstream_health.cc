#include "weir/fastpath/upstream_health.h"

namespace weir::fastpath {

UpstreamHealth::UpstreamHealth(std::vector<std::unique_ptr<UpstreamStats>>* stats, double load_factor,
                               int failures, std::chrono::milliseconds probe_interval)
    : stats_(stats),
      ring_(static_cast<int>(stats->size()), 128, load_factor),
      failures_to_down_(failures),
      probe_interval_(probe_interval),
      failures_(stats->size(), 0),
      next_probe_(stats->size()) {}

UpstreamHealth::Change UpstreamHealth::Mark(int u, bool ok, Clock::time_point now) {
  // `up` in the stats is the recursor's health as the operator sees it;
  // the ring's own flag may be set again for a recursor that is down when
  // every one of them is.
  UpstreamStats& s = *(*stats_)[u];
  if (ok) {
    failures_[u] = 0;
    if (!ring_.IsUp(u)) ring_.SetUp(u, true);
    if (s.up.load(std::memory_order_relaxed)) return Change::kNone;
    s.up = true;
    return Change::kUp;
  }
  if (++failures_[u] < failures_to_down_) return Change::kNone;
  Change change = Change::kNone;
  if (s.up.load(std::memory_order_relaxed)) {
    // Down until a probe (or a query) is answered: one change, not one per
    // failure after it.
    s.up = false;
    next_probe_[u] = now + probe_interval_;
    change = Change::kDown;
  }
  if (ring_.IsUp(u)) {
    // The ring moves its share to the next live recursor only. If every
    // recursor is down, all are tried again.
    ring_.SetUp(u, false);
    bool any = false;
    for (int i = 0; i < ring_.size(); ++i) any = any || ring_.IsUp(i);
    if (!any) {
      for (int i = 0; i < ring_.size(); ++i) ring_.SetUp(i, true);
    }
  }
  return change;
}

bool UpstreamHealth::ProbeDue(int u, Clock::time_point now) {
  if (!Down(u) || now < next_probe_[u]) return false;
  next_probe_[u] = now + probe_interval_;
  return true;
}

}  // namespace weir::fastpath
