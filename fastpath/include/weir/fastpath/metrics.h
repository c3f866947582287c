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

#include "weir/common/histogram.h"
#include "weir/common/owned_counter.h"
#include "weir/common/prometheus.h"

namespace weir::fastpath {

// Why a query got no response at all. With weir_responses_total these
// account for every query: queries = responses + drops.
enum class DropReason : uint8_t {
  kGarbage,        // not a DNS query at all (too short, or a response)
  kRateLimited,    // over the per-source rate
  kAcl,            // source outside the ACL and the query unreadable: nothing to answer
  kMissQueueFull,  // no room to hand the miss to the upstream side
  kNoRoom,         // the response could not be written (no room for even the header)
  kCount,
};
std::string_view DropReasonName(DropReason r);

// Why a query was answered with an error code (the response is counted in
// weir_responses_total as well).
enum class ErrorReason : uint8_t {
  kFormErr,          // malformed query: FORMERR
  kAcl,              // source outside the ACL: REFUSED
  kNotImpl,          // opcode other than QUERY: NOTIMP
  kBadVers,          // EDNS version other than 0: BADVERS
  kClass,            // class other than IN: REFUSED
  kUpstreamFailure,  // no recursor answered (or none had room) and nothing stale: SERVFAIL
  kCount,
};
std::string_view ErrorReasonName(ErrorReason r);
std::string_view DropReasonName(DropReason r);

using common::OwnedCounter;

// A recursor's answer time.
inline constexpr std::array<double, 12> kUpstreamLatencyBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                                  0.05,   0.1,   0.25,   0.5,   1.0,  2.5};
using LatencyHistogram = common::FixedHistogram<kUpstreamLatencyBounds>;
// A client's answer time in weir: microseconds for a hit, an upstream
// round trip for a miss.
inline constexpr std::array<double, 17> kResponseLatencyBounds = {
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
    0.01,    0.025,    0.05,    0.1,    0.25,    0.5,    1.0,   2.5};
using ResponseLatencyHistogram = common::FixedHistogram<kResponseLatencyBounds>;

struct alignas(64) WorkerCounters {
  OwnedCounter queries_udp;
  OwnedCounter queries_tcp;
  OwnedCounter hits;
  OwnedCounter misses;
  OwnedCounter stale_served;
  OwnedCounter truncated;
  OwnedCounter any_minimal;         // ANY over UDP answered with the RFC 8482 HINFO
  OwnedCounter rate_limited_bytes;  // UDP answers sent with TC over the source's byte budget
  std::array<OwnedCounter, static_cast<size_t>(DropReason::kCount)> drops;
  std::array<OwnedCounter, static_cast<size_t>(ErrorReason::kCount)> errors;
  std::array<std::array<OwnedCounter, 24>, 2> responses;  // [tcp][RCODE 0..23] (larger: 2)
  // From the worker taking the query to its answer written: at once (a
  // hit, or an error), or after the upstream side answered (a miss).
  ResponseLatencyHistogram hit_latency;
  ResponseLatencyHistogram miss_latency;

  void Drop(DropReason r) { drops[static_cast<size_t>(r)].Add(); }
  void Error(ErrorReason r) { errors[static_cast<size_t>(r)].Add(); }
  void Response(bool tcp, unsigned rcode) { responses[tcp ? 1 : 0][rcode < 24 ? rcode : 2].Add(); }
};

}  // namespace weir::fastpath
