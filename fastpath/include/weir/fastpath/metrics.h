// Counters for the Prometheus endpoint.
//
// Each worker owns a WorkerCounters block (cache-line aligned, written only by
// that worker with plain relaxed load+store, never an atomic read-modify-write)
// and the metrics thread sums the blocks when scraped.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "weir/common/prometheus.h"

namespace weir::fastpath {

// Why a query was not answered, or answered with an error.
enum class DropReason : uint8_t {
  kGarbage,          // not a DNS query at all: silently dropped
  kFormErr,          // malformed query: answered FORMERR
  kRefused,          // source outside the ACL: answered REFUSED
  kRateLimited,      // over the per-source rate: dropped
  kNotImpl,          // opcode other than QUERY: answered NOTIMP
  kMissQueueFull,    // no room to hand the miss to the upstream side
  kSpoofedAnswer,    // upstream answer with wrong ID/port/question: dropped
  kUpstreamFailure,  // every upstream failed and nothing stale: SERVFAIL
  kInflightLimit,  // a new upstream question over upstream.max_inflight[_per_upstream]: stale or SERVFAIL at
                   // once
  kCount,
};
std::string_view DropReasonName(DropReason r);

// A counter written by exactly one thread.
class OwnedCounter {
 public:
  void Add(uint64_t n = 1) { v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  uint64_t Read() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

struct alignas(64) WorkerCounters {
  OwnedCounter queries_udp;
  OwnedCounter queries_tcp;
  OwnedCounter hits;
  OwnedCounter misses;
  OwnedCounter stale_served;
  OwnedCounter truncated;
  OwnedCounter any_minimal;  // ANY over UDP answered with the RFC 8482 HINFO
  std::array<OwnedCounter, static_cast<size_t>(DropReason::kCount)> drops;
  std::array<OwnedCounter, 24> rcodes;  // responses by RCODE (0..23)

  void Drop(DropReason r) { drops[static_cast<size_t>(r)].Add(); }
};

// Latency histogram with fixed Prometheus buckets (seconds).
class LatencyHistogram {
 public:
  static constexpr std::array<double, 12> kBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                     0.05,   0.1,   0.25,   0.5,   1.0,  2.5};
  void Observe(double seconds);
  // Adds this histogram's series with `labels` to `family` (a histogram).
  void Render(common::PrometheusWriter::Family& family, common::MetricLabels labels) const;

 private:
  std::array<OwnedCounter, kBounds.size() + 1> buckets_;
  OwnedCounter count_;
  std::atomic<double> sum_{0};
};

}  // namespace weir::fastpath
