#include "latency_histogram.h"

#include <algorithm>
#include <cmath>

namespace weir::bench {

void LatencyHistogram::Merge(const LatencyHistogram& o) {
  for (int i = 0; i < kBuckets; ++i) counts_[i] += o.counts_[i];
  count_ += o.count_;
  sum_ns_ += o.sum_ns_;
  max_ns_ = std::max(max_ns_, o.max_ns_);
}

uint64_t LatencyHistogram::UpperNs(int i) {
  if (i < (1 << kSubBits)) return static_cast<uint64_t>(i) + 1;
  const int e = (i >> kSubBits) + kSubBits - 1;
  const uint64_t sub = static_cast<uint64_t>(i & ((1 << kSubBits) - 1));
  const uint64_t width = uint64_t{1} << (e - kSubBits);
  const uint64_t lower = ((uint64_t{1} << kSubBits) + sub) * width;
  // The last bucket's bound would overflow: saturate.
  return lower > UINT64_MAX - width ? UINT64_MAX : lower + width;
}

double LatencyHistogram::QuantileUs(double q) const {
  if (count_ == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  const uint64_t rank =
      std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * static_cast<double>(count_))));
  uint64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    seen += counts_[i];
    if (seen >= rank) return static_cast<double>(std::min(UpperNs(i), max_ns_)) / 1000.0;
  }
  return static_cast<double>(max_ns_) / 1000.0;
}

std::vector<std::pair<double, uint64_t>> LatencyHistogram::Buckets() const {
  std::vector<std::pair<double, uint64_t>> out;
  for (int i = 0; i < kBuckets; ++i) {
    if (counts_[i] != 0) out.emplace_back(static_cast<double>(UpperNs(i)) / 1000.0, counts_[i]);
  }
  return out;
}

}  // namespace weir::bench
