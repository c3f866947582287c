#include "weir/recursor/waiter.h"

namespace weir::recursor {

void ServeStaleOrFail(Replies& replies, const Waiter& w, const Answer* stale, uint32_t stale_ttl,
                      WaitStats& stats) {
  if (stale != nullptr) {
    ++stats.stale_served;
    return replies.Answer(w, *stale, 0, stale_ttl);
  }
  replies.Error(w, dns::Rcode::kServFail);
}

void ServeOverloaded(Replies& replies, const Waiter& w, const Answer* stale, uint32_t stale_ttl,
                     WaitStats& stats) {
  ++stats.inflight_limited;
  ServeStaleOrFail(replies, w, stale, stale_ttl, stats);
}

void ExpireWaiters(Replies& replies, std::vector<Waiter>& waiters, const Answer* stale, uint32_t stale_ttl,
                   SteadyClock::time_point now, WaitStats& stats) {
  auto due = [&](const Waiter& w) { return w.HasFront() && w.deadline <= now; };
  for (const Waiter& w : waiters) {
    if (!due(w)) continue;
    ++(stale != nullptr ? stats.deadline_stale : stats.deadline_servfail);
    ServeStaleOrFail(replies, w, stale, stale_ttl, stats);
  }
  std::erase_if(waiters, due);
}

}  // namespace weir::recursor
