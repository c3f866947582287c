#include "weir/fastpath/metrics.h"

#include "weir/common/text.h"

namespace weir::fastpath {

using common::ToStd;

std::string_view DropReasonName(DropReason r) {
  switch (r) {
    case DropReason::kGarbage:
      return "garbage";
    case DropReason::kFormErr:
      return "formerr";
    case DropReason::kRefused:
      return "refused";
    case DropReason::kRateLimited:
      return "rate_limited";
    case DropReason::kNotImpl:
      return "notimp";
    case DropReason::kMissQueueFull:
      return "miss_queue_full";
    case DropReason::kSpoofedAnswer:
      return "spoofed_answer";
    case DropReason::kInflightLimit:
      return "inflight_limit";
    case DropReason::kUpstreamFailure:
      return "upstream_failure";
    case DropReason::kCount:
      break;
  }
  return "unknown";
}

void LatencyHistogram::Observe(double seconds) {
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  buckets_[i].Add();
  count_.Add();
  sum_.store(sum_.load(std::memory_order_relaxed) + seconds, std::memory_order_relaxed);
}

void LatencyHistogram::Render(common::PrometheusWriter::Family& family, common::MetricLabels labels) const {
  std::array<uint64_t, kBounds.size() + 1> buckets;
  for (size_t i = 0; i < buckets.size(); ++i) buckets[i] = buckets_[i].Read();
  family.Histogram(labels, kBounds, buckets, sum_.load(std::memory_order_relaxed));
}

}  // namespace weir::fastpath
