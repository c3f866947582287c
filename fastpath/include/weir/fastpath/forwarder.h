// The upstream side of the front cache: one thread that takes misses from the
// workers, coalesces identical in-flight questions, sends one query per
// question to a recursor chosen by consistent hashing of (partition, qname),
// checks answers against spoofing, retries on the next recursor, tracks
// recursor health, and answers every waiting client.
//
// Threading: Submit() is called by worker `w` only (one SPSC ring per
// worker); everything else runs on the forwarder thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "weir/fastpath/config.h"
#include "weir/fastpath/handler.h"
#include "weir/fastpath/metrics.h"
#include "weir/fastpath/net.h"

namespace weir::fastpath {

// Where a miss's answer goes.
struct ReplyRoute {
  int udp_fd = -1;  // UDP: the worker's socket and the client address
  SocketAddress peer;
  uint64_t tcp_conn = 0;  // TCP: connection id in the TCP server
};

struct PendingClient {
  MissRequest miss;
  ReplyRoute route;
  int worker = -1;             // who gets the query back; -1: a prefetch, nobody waits
  std::vector<uint8_t> query;  // the client's query bytes, for its ID/question/EDNS
  // When the forwarder first took the query (kept if it is asked again as a
  // learned tagged name): its answer deadline counts from here.
  std::chrono::steady_clock::time_point accepted{};
};

// A miss handed back to its worker once the upstream side is done: the
// worker handles the query again in `mode` (so weighted answers come from the
// worker's own SWRR sequence) and sends `fallback` if the cache cannot answer.
struct ReturnedQuery {
  PendingClient client;
  HandleMode mode = HandleMode::kAfterFill;
  std::vector<uint8_t> fallback;
};

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
  // `workers` queues in each direction; worker i's returns are signalled on
  // return_fd(i) (an eventfd the worker polls).
  Forwarder(const FastpathConfig& config, int workers, SharedState* shared);
  ~Forwarder();

  void Start();
  void Stop();

  // Worker `worker` hands over a miss. False when its queue is full.
  bool Submit(int worker, PendingClient&& p);
  // Wakes the forwarder after a burst of Submit() calls (one syscall/burst).
  void Notify();
  // Worker side of the return path.
  int return_fd(int worker) const;
  bool TakeReturned(int worker, ReturnedQuery* out);

  // Metrics (read by the metrics thread).
  const WorkerCounters& counters() const { return counters_; }
  uint64_t coalesced() const { return coalesced_.Read(); }
  uint64_t upstream_queries() const { return upstream_queries_.Read(); }
  uint64_t learned() const { return learned_.Read(); }
  uint64_t learned_overflow() const { return learned_overflow_.Read(); }
  const std::vector<std::unique_ptr<UpstreamStats>>& upstream_stats(bool weighted) const {
    return weighted ? weighted_stats_ : ordinary_stats_;
  }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  WorkerCounters counters_;
  OwnedCounter coalesced_;
  OwnedCounter upstream_queries_;
  OwnedCounter learned_;
  OwnedCounter learned_overflow_;
  std::vector<std::unique_ptr<UpstreamStats>> ordinary_stats_;
  std::vector<std::unique_ptr<UpstreamStats>> weighted_stats_;
};

}  // namespace weir::fastpath
