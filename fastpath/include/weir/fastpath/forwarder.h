// The upstream side of the front cache: the forwarder thread, its event
// loop, the kernel-socket transport and the forwarder's logic
// (ForwarderCore: coalescing, the recursor ring and health, the answer
// guard, the cache fill) put together. docs/architecture.md#the-forwarder
// says which part does what.
//
// Workers reach it only through their MissChannels (a ring each way); it
// never touches a worker's socket or route.
//
// Threading: Notify() from any thread; everything else runs on the
// forwarder thread, or before Start / after Stop.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "weir/common/heartbeat.h"
#include "weir/fastpath/config.h"
#include "weir/fastpath/forwarder_core.h"
#include "weir/fastpath/handler.h"
#include "weir/fastpath/metrics.h"
#include "weir/fastpath/miss_channel.h"

namespace weir::dnstap {
class Producer;
}  // namespace weir::dnstap

namespace weir::fastpath {

class Forwarder {
 public:
  // One channel per worker (index = ClientRoute::worker), owned by the
  // caller and alive until after Stop().
  Forwarder(const FastpathConfig& config, std::vector<MissChannel*> channels, SharedState* shared);
  ~Forwarder();

  // Fails (nothing started) when its event loop cannot be set up.
  absl::Status Start();
  void Stop();

  // Taps its queries to the recursors and their answers (FORWARDER_QUERY,
  // FORWARDER_RESPONSE) to `tap`; before Start.
  void SetTap(dnstap::Producer* tap);

  // Wakes the forwarder after a worker pushed misses (one syscall a burst).
  void Notify();

  // Beaten once per turn of the forwarder's loop (at least every 50 ms).
  const common::Heartbeat& heartbeat() const { return heartbeat_; }

  // Metrics (read by the metrics thread): ForwarderStats says what each counts.
  const ForwarderStats& stats() const { return stats_; }
  uint64_t coalesced() const { return stats_.coalesced.Read(); }
  uint64_t inflight_limited() const { return stats_.inflight_limited.Read(); }
  // The memory one question in flight and one waiting client may hold, at
  // most (their state, the query bytes, the map slots, the worker's route):
  // what weir_memory_budget_bytes counts for upstream.max_inflight and
  // max_waiting_clients.
  static constexpr uint64_t kQuestionBytes = 2048;
  static constexpr uint64_t kWaiterBytes = 512;
  // The memory one scheduled active refresh may hold at most (its question,
  // its key in the map and at most twice in the queue, the map slot): what weir_memory_budget_bytes
  // counts for cache.active_refresh_max.
  static constexpr uint64_t kRefreshBytes = 1536;
  // Answers the forwarder holds for one worker whose return ring is full
  // before it stops taking that worker's misses.
  static constexpr size_t kMaxHeldReturns = ForwarderCore::kMaxHeldReturns;
  // Clients that may wait on the upstream side at most: those at the
  // forwarder (upstream.max_waiting_clients) and, per worker slot, a ring of
  // misses, a ring of returns and the held returns.
  static uint64_t MaxWaiting(uint64_t max_waiting_clients, uint64_t slots) {
    return max_waiting_clients + slots * (2 * MissChannel::kSize + kMaxHeldReturns);
  }
  uint64_t waiting_limited() const { return stats_.waiting_limited.Read(); }
  uint64_t waiting() const { return stats_.waiting.load(std::memory_order_relaxed); }
  uint64_t spoofed() const { return stats_.spoofed.Read(); }
  uint64_t unwanted() const { return stats_.unwanted.Read(); }
  uint64_t late() const { return stats_.late.Read(); }
  uint64_t spoof_reactions() const { return stats_.spoof_reactions.Read(); }
  uint64_t case_mismatches() const { return stats_.case_mismatches.Read(); }
  uint64_t case_fallbacks() const { return stats_.case_fallbacks.Read(); }
  uint64_t cookie_mismatches() const { return stats_.cookie_mismatches.Read(); }
  uint64_t udp_sockets() const { return stats_.udp_sockets.load(std::memory_order_relaxed); }
  uint64_t in_flight() const { return stats_.in_flight.load(std::memory_order_relaxed); }
  uint64_t upstream_queries() const { return stats_.upstream_queries.Read(); }
  uint64_t learned() const { return stats_.learned.Read(); }
  uint64_t learned_overflow() const { return stats_.learned_overflow.Read(); }
  const std::vector<std::unique_ptr<UpstreamStats>>& upstream_stats(bool weighted) const {
    return weighted ? stats_.weighted : stats_.ordinary;
  }
  // The share of the consistent-hash ring each upstream of the group owns
  // now (the down ones' arcs moved to the next live one). Any thread.
  std::vector<double> RingShares(bool weighted) const;

 private:
  struct Impl;
  ForwarderStats stats_;
  std::unique_ptr<Impl> impl_;
  common::Heartbeat heartbeat_;
};

}  // namespace weir::fastpath
