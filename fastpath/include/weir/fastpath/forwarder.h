// The upstream side of the front cache: one thread that takes misses from the
// workers, coalesces identical in-flight questions, sends one query per
// question to a recursor chosen by consistent hashing of (partition, qname),
// checks answers against spoofing (shared UDP sockets on random ports,
// random IDs, 0x20, DNS cookies, a reaction to unwanted answers), retries on the next recursor, tracks
// recursor health, and answers every waiting client.
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
#include "weir/fastpath/handler.h"
#include "weir/fastpath/metrics.h"
#include "weir/fastpath/miss_channel.h"

namespace weir::dnstap {
class Producer;
}  // namespace weir::dnstap

namespace weir::fastpath {

struct UpstreamStats {
  std::string name;
  LatencyHistogram latency;
  OwnedCounter queries;
  OwnedCounter timeouts;
  OwnedCounter answers;
  std::atomic<bool> up{true};
};

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

  // Metrics (read by the metrics thread).
  uint64_t coalesced() const { return coalesced_.Read(); }
  // Questions answered at once (stale or SERVFAIL) because every socket
  // allowed (upstream.max_inflight[_per_upstream]) was in use.
  uint64_t inflight_limited() const { return inflight_limited_.Read(); }
  // The memory one question in flight and one waiting client may hold, at
  // most (their state, the query bytes, the map slots, the worker's route):
  // what weir_memory_budget_bytes counts for upstream.max_inflight and
  // max_waiting_clients.
  static constexpr uint64_t kQuestionBytes = 2048;
  static constexpr uint64_t kWaiterBytes = 512;
  // Answers the forwarder holds for one worker whose return ring is full
  // before it stops taking that worker's misses.
  static constexpr size_t kMaxHeldReturns = MissChannel::kSize;
  // Clients that may wait on the upstream side at most: those at the
  // forwarder (upstream.max_waiting_clients) and, per worker slot, a ring of
  // misses, a ring of returns and the held returns.
  static uint64_t MaxWaiting(uint64_t max_waiting_clients, uint64_t slots) {
    return max_waiting_clients + slots * (2 * MissChannel::kSize + kMaxHeldReturns);
  }
  // Misses answered at once because upstream.max_waiting_clients wait.
  uint64_t waiting_limited() const { return waiting_limited_.Read(); }
  // Clients (and prefetches) waiting on the questions in flight.
  uint64_t waiting() const { return waiting_.load(std::memory_order_relaxed); }
  // Upstream answers refused: wrong source, socket, ID, question, 0x20
  // case or cookie (late answers are not among them).
  uint64_t spoofed() const { return spoofed_.Read(); }
  // Of those, the answers that matched no try in flight nor one ended
  // recently: what a blind forger's guesses look like.
  uint64_t unwanted() const { return unwanted_.Read(); }
  // Answers to tries that had already timed out or been abandoned.
  uint64_t late() const { return late_.Read(); }
  // Questions moved to TCP after upstream.unwanted_reply_threshold
  // unwanted answers carrying them.
  uint64_t spoof_reactions() const { return spoof_reactions_.Read(); }
  uint64_t case_mismatches() const { return case_mismatches_.Read(); }
  // Upstreams found not to keep the question's case (answered in another
  // case over TCP, or not over TCP at all): asked without 0x20 for a while.
  uint64_t case_fallbacks() const { return case_fallbacks_.Read(); }
  uint64_t cookie_mismatches() const { return cookie_mismatches_.Read(); }
  // UDP sockets open towards the recursors (the pool and the retired ones
  // still waiting for answers).
  uint64_t udp_sockets() const { return udp_sockets_.load(std::memory_order_relaxed); }
  // Distinct questions waiting for a recursor now.
  uint64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }
  uint64_t upstream_queries() const { return upstream_queries_.Read(); }
  uint64_t learned() const { return learned_.Read(); }
  uint64_t learned_overflow() const { return learned_overflow_.Read(); }
  const std::vector<std::unique_ptr<UpstreamStats>>& upstream_stats(bool weighted) const {
    return weighted ? weighted_stats_ : ordinary_stats_;
  }
  // The share of the consistent-hash ring each upstream of the group owns
  // now (the down ones' arcs moved to the next live one). Any thread.
  std::vector<double> RingShares(bool weighted) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  OwnedCounter coalesced_;
  OwnedCounter inflight_limited_;
  OwnedCounter waiting_limited_;
  OwnedCounter spoofed_;
  OwnedCounter unwanted_;
  OwnedCounter late_;
  OwnedCounter spoof_reactions_;
  OwnedCounter case_mismatches_;
  OwnedCounter case_fallbacks_;
  OwnedCounter cookie_mismatches_;
  std::atomic<uint64_t> udp_sockets_{0};
  std::atomic<uint64_t> in_flight_{0};  // written by the forwarder thread
  std::atomic<uint64_t> waiting_{0};    // written by the forwarder thread
  OwnedCounter upstream_queries_;
  OwnedCounter learned_;
  OwnedCounter learned_overflow_;
  common::Heartbeat heartbeat_;
  std::vector<std::unique_ptr<UpstreamStats>> ordinary_stats_;
  std::vector<std::unique_ptr<UpstreamStats>> weighted_stats_;
};

}  // namespace weir::fastpath
