// A latency histogram with fixed Prometheus buckets (seconds): the bounds are
// a constexpr array the type is made from, so a histogram is its counters
// only and Observe is a short scan with no allocation.
//
// Threading: one thread observes (the owner); any thread may read (AddTo,
// Render) at the same time. Buckets are OwnedCounters and the sum is a
// relaxed atomic written by load and store, never a read-modify-write, so
// observing costs what plain counters do. A reader may see a bucket and the
// sum from slightly different moments; each value is whole.
#pragma once

#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "weir/common/owned_counter.h"
#include "weir/common/prometheus.h"

namespace weir::common {

// `Bounds`: a constexpr std::array<double, N> of increasing upper bounds in
// seconds; the histogram has N + 1 buckets, the last above every bound.
template <const auto& Bounds>
class FixedHistogram {
 public:
  static constexpr const auto& kBounds = Bounds;
  using Buckets = std::array<uint64_t, Bounds.size() + 1>;

  // Only the owning thread calls Observe.
  void Observe(double seconds, uint64_t n = 1) {
    size_t i = 0;
    while (i < Bounds.size() && seconds > Bounds[i]) ++i;
    buckets_[i].Add(n);
    sum_.store(sum_.load(std::memory_order_relaxed) + seconds * static_cast<double>(n),
               std::memory_order_relaxed);
  }
  // Adds the counts to `buckets` and the sum to `*sum` (to sum histograms).
  void AddTo(Buckets& buckets, double* sum) const {
    for (size_t i = 0; i < buckets.size(); ++i) buckets[i] += buckets_[i].Read();
    *sum += sum_.load(std::memory_order_relaxed);
  }
  // Adds this histogram's series with `labels` to `family` (a histogram).
  void Render(PrometheusWriter::Family& family, MetricLabels labels) const {
    Buckets buckets{};
    double sum = 0;
    AddTo(buckets, &sum);
    family.Histogram(labels, Bounds, buckets, sum);
  }

 private:
  std::array<OwnedCounter, Bounds.size() + 1> buckets_;
  std::atomic<double> sum_{0};
};

// The bucket that holds the value of rank ceil(q * total) in `buckets` (as
// FixedHistogram::AddTo fills them), or buckets.size() when they are all
// zero. Its bound is kBounds[i] for i < kBounds.size(); the last bucket has
// none (above every bound).
template <size_t N>
size_t QuantileBucket(const std::array<uint64_t, N>& buckets, double q) {
  uint64_t total = 0;
  for (uint64_t b : buckets) total += b;
  if (total == 0) return N;
  const auto rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(total)));
  uint64_t seen = 0;
  for (size_t i = 0; i < N; ++i) {
    seen += buckets[i];
    if (seen >= rank) return i;
  }
  return N - 1;
}

}  // namespace weir::common
