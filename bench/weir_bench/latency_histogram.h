// A log-bucketed latency histogram: 16 buckets per power of two of
// nanoseconds (at most 6.25 % wide), 1024 counters in all, so a run of any
// length keeps no per-query values. Quantiles report the upper bound of the
// bucket that holds them (never optimistic).
//
// Threading: plain values; each sender thread records into its own and the
// report merges them.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

namespace weir::bench {

class LatencyHistogram {
 public:
  static constexpr int kSubBits = 4;
  static constexpr int kBuckets = 1024;

  void Record(uint64_t ns) {
    ++counts_[Index(ns)];
    ++count_;
    sum_ns_ += ns;
    if (ns > max_ns_) max_ns_ = ns;
  }
  void Merge(const LatencyHistogram& o);
  void Clear() { *this = LatencyHistogram(); }

  uint64_t count() const { return count_; }
  uint64_t max_ns() const { return max_ns_; }
  double MeanUs() const { return count_ ? sum_ns_ / 1000.0 / count_ : 0; }
  // q in [0, 1]: the upper bound (us) of the bucket holding the value of
  // rank ceil(q * count), capped by the maximum seen; 0 when empty.
  double QuantileUs(double q) const;
  // The non-empty buckets in order: (upper bound in us, count).
  std::vector<std::pair<double, uint64_t>> Buckets() const;

  static int Index(uint64_t ns) {
    if (ns < (1u << kSubBits)) return static_cast<int>(ns);
    const int e = 63 - __builtin_clzll(ns);
    const int sub = static_cast<int>((ns >> (e - kSubBits)) & ((1u << kSubBits) - 1));
    return ((e - kSubBits + 1) << kSubBits) + sub;
  }
  // Exclusive upper bound of bucket i, in ns.
  static uint64_t UpperNs(int i);

 private:
  std::array<uint64_t, kBuckets> counts_{};
  uint64_t count_ = 0;
  uint64_t max_ns_ = 0;
  double sum_ns_ = 0;
};

}  // namespace weir::bench
