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
  int udp_fd = -1;           // UDP: the worker's socket and the client address
  SocketAddress peer;
  uint64_t tcp_conn = 0;     // TCP: connection id in the TCP server
};

struct PendingClient {
  MissRequest miss;
  ReplyRoute route;
  std::vector<uint8_t> query;  // the client's query bytes, for its ID/question/EDNS
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
  // `tcp_reply` delivers an answer to a TCP client (called on the forwarder
  // thread; it must not block).
  Forwarder(const FastpathConfig& config, int workers,
            std::function<void(uint64_t conn, std::vector<uint8_t> reply)> tcp_reply);
  ~Forwarder();

  void Start();
  void Stop();

  // Worker `worker` hands over a miss. False when its queue is full.
  bool Submit(int worker, PendingClient&& p);
  // Wakes the forwarder after a burst of Submit() calls (one syscall/burst).
  void Notify();

  // Metrics (read by the metrics thread).
  const WorkerCounters& counters() const { return counters_; }
  uint64_t coalesced() const { return coalesced_.Read(); }
  uint64_t upstream_queries() const { return upstream_queries_.Read(); }
  const std::vector<std::unique_ptr<UpstreamStats>>& upstream_stats(bool weighted) const {
    return weighted ? weighted_stats_ : ordinary_stats_;
  }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  WorkerCounters counters_;
  OwnedCounter coalesced_;
  OwnedCounter upstream_queries_;
  std::vector<std::unique_ptr<UpstreamStats>> ordinary_stats_;
  std::vector<std::unique_ptr<UpstreamStats>> weighted_stats_;
};

}  // namespace weir::fastpath
