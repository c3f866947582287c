#include "weir/fastpath/metrics.h"

#include "weir/common/text.h"

namespace weir::fastpath {

using common::Cat;
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

void LatencyHistogram::Render(std::string* out, std::string_view name, std::string_view labels) const {
  uint64_t cumulative = 0;
  const std::string sep = labels.empty() ? "" : ",";
  for (size_t i = 0; i <= kBounds.size(); ++i) {
    cumulative += buckets_[i].Read();
    std::string le = i < kBounds.size() ? std::to_string(kBounds[i]) : std::string("+Inf");
    *out += Cat(name, "_bucket{", labels, sep, "le=\"", le, "\"} ", cumulative, "\n");
  }
  *out += Cat(name, "_sum{", labels, "} ", std::to_string(sum_.load(std::memory_order_relaxed)), "\n");
  *out += Cat(name, "_count{", labels, "} ", count_.Read(), "\n");
}

}  // namespace weir::fastpath
