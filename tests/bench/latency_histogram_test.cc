#include "latency_histogram.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace weir::bench {
namespace {

// Inclusive lower bound of bucket i: the buckets tile [0, 2^64) without gaps.
uint64_t LowerNs(int i) { return i == 0 ? 0 : LatencyHistogram::UpperNs(i - 1); }

void ExpectInOwnBucket(uint64_t v) {
  const int i = LatencyHistogram::Index(v);
  ASSERT_GE(i, 0) << v;
  ASSERT_LT(i, LatencyHistogram::kBuckets) << v;
  EXPECT_LE(LowerNs(i), v) << "bucket " << i;
  EXPECT_LT(v, LatencyHistogram::UpperNs(i)) << "bucket " << i;
}

TEST(LatencyHistogramTest, EveryValueLandsInABucketThatContainsIt) {
  for (uint64_t v = 0; v < 4096; ++v) ExpectInOwnBucket(v);
  for (int e = 0; e <= 63; ++e) {
    const uint64_t p = uint64_t{1} << e;
    ExpectInOwnBucket(p);
    ExpectInOwnBucket(p - 1);
    ExpectInOwnBucket(p + 1);
  }
  std::mt19937_64 rng(7);
  for (int n = 0; n < 200000; ++n) {
    // Uniform over the exponent, then over the mantissa, so every octave up
    // to 2^63 is tried.
    const int e = static_cast<int>(rng() % 64);
    const uint64_t v = (uint64_t{1} << e) | (rng() & ((uint64_t{1} << e) - 1));
    ExpectInOwnBucket(v);
  }
}

TEST(LatencyHistogramTest, BucketsAreContiguousAndIncreasing) {
  const int last = LatencyHistogram::Index(uint64_t{1} << 63);
  for (int i = 1; i <= last; ++i) {
    EXPECT_GT(LatencyHistogram::UpperNs(i), LatencyHistogram::UpperNs(i - 1)) << i;
    // The first value of each bucket maps back to it.
    EXPECT_EQ(LatencyHistogram::Index(LowerNs(i)), i);
    EXPECT_EQ(LatencyHistogram::Index(LatencyHistogram::UpperNs(i) - 1), i);
  }
}

TEST(LatencyHistogramTest, BucketsAboveSixteenNsAreAtMostOneSixteenthWide) {
  const int last = LatencyHistogram::Index(uint64_t{1} << 63);
  for (int i = LatencyHistogram::Index(16); i <= last; ++i) {
    const uint64_t lower = LowerNs(i), upper = LatencyHistogram::UpperNs(i);
    ASSERT_GE(lower, 16u);
    // width / lower <= 1/16, in integers (the top bucket saturates at 2^64-1).
    EXPECT_LE((upper - lower) * 16, lower) << "bucket " << i << " [" << lower << ", " << upper << ")";
  }
  // Below 16 ns every value has its own bucket.
  for (uint64_t v = 0; v < 16; ++v) EXPECT_EQ(LatencyHistogram::UpperNs(LatencyHistogram::Index(v)), v + 1);
}

TEST(LatencyHistogramTest, EmptyHistogramReportsZero) {
  LatencyHistogram h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.max_ns(), 0u);
  EXPECT_EQ(h.MeanUs(), 0);
  EXPECT_EQ(h.QuantileUs(0), 0);
  EXPECT_EQ(h.QuantileUs(0.5), 0);
  EXPECT_EQ(h.QuantileUs(1), 0);
  EXPECT_TRUE(h.Buckets().empty());
}

TEST(LatencyHistogramTest, QuantilesOfAUniformDistributionAreNeverOptimistic) {
  LatencyHistogram h;
  constexpr uint64_t kN = 100000;
  for (uint64_t v = 1; v <= kN; ++v) h.Record(v);
  EXPECT_EQ(h.count(), kN);
  EXPECT_EQ(h.max_ns(), kN);
  EXPECT_DOUBLE_EQ(h.MeanUs(), (kN + 1) / 2.0 / 1000.0);
  for (double q : {0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999}) {
    // The value of rank ceil(q * n) is that rank itself.
    const double truth_us = static_cast<double>(static_cast<uint64_t>(std::ceil(q * kN))) / 1000.0;
    const double got = h.QuantileUs(q);
    EXPECT_GE(got, truth_us) << "q=" << q;
    EXPECT_LE(got, truth_us * 1.0625) << "q=" << q;
  }
  // p50 is rank 50000: its bucket is [49152, 51200).
  EXPECT_DOUBLE_EQ(h.QuantileUs(0.5), 51.2);
  // The top is capped by the maximum seen, not the bucket's bound.
  EXPECT_DOUBLE_EQ(h.QuantileUs(1), 100.0);
  // q = 0 is the smallest value's bucket (1 ns -> [1, 2)).
  EXPECT_DOUBLE_EQ(h.QuantileUs(0), 0.002);
  // Out-of-range q is clamped.
  EXPECT_DOUBLE_EQ(h.QuantileUs(2), 100.0);
  EXPECT_DOUBLE_EQ(h.QuantileUs(-1), 0.002);
}

TEST(LatencyHistogramTest, QuantilesOfATwoPointDistribution) {
  LatencyHistogram h;
  for (int i = 0; i < 990; ++i) h.Record(100'000);    // 100 us
  for (int i = 0; i < 10; ++i) h.Record(10'000'000);  // 10 ms
  EXPECT_EQ(h.count(), 1000u);
  EXPECT_EQ(h.max_ns(), 10'000'000u);
  EXPECT_DOUBLE_EQ(h.MeanUs(), (990 * 100.0 + 10 * 10'000.0) / 1000);
  EXPECT_GE(h.QuantileUs(0.5), 100.0);
  EXPECT_LE(h.QuantileUs(0.5), 100.0 * 1.0625);
  EXPECT_GE(h.QuantileUs(0.985), 100.0);  // rank 985 is still 100 us
  EXPECT_LE(h.QuantileUs(0.985), 100.0 * 1.0625);
  EXPECT_DOUBLE_EQ(h.QuantileUs(0.991), 10'000.0);  // rank 991: the max caps its bucket
  const auto buckets = h.Buckets();
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0].second, 990u);
  EXPECT_EQ(buckets[1].second, 10u);
  EXPECT_GT(buckets[0].first, 100.0);
  EXPECT_GT(buckets[1].first, 10'000.0);
}

TEST(LatencyHistogramTest, MergeEqualsRecordingBothSets) {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> dist(11, 2);  // around 60 us, long tail
  LatencyHistogram a, b, both;
  for (int i = 0; i < 50000; ++i) {
    const uint64_t v = static_cast<uint64_t>(dist(rng));
    (i % 3 == 0 ? a : b).Record(v);
    both.Record(v);
  }
  LatencyHistogram merged = a;
  merged.Merge(b);
  EXPECT_EQ(merged.count(), both.count());
  EXPECT_EQ(merged.max_ns(), both.max_ns());
  EXPECT_NEAR(merged.MeanUs(), both.MeanUs(), 1e-9 * both.MeanUs());
  EXPECT_EQ(merged.Buckets(), both.Buckets());
  for (double q = 0; q <= 1.0; q += 0.01) EXPECT_EQ(merged.QuantileUs(q), both.QuantileUs(q)) << q;

  // Merging an empty histogram changes nothing, and into an empty one copies.
  LatencyHistogram empty;
  merged.Merge(empty);
  EXPECT_EQ(merged.Buckets(), both.Buckets());
  empty.Merge(both);
  EXPECT_EQ(empty.count(), both.count());
  EXPECT_EQ(empty.QuantileUs(0.99), both.QuantileUs(0.99));
}

TEST(LatencyHistogramTest, ClearForgetsEverything) {
  LatencyHistogram h;
  h.Record(5);
  h.Record(1'000'000);
  h.Clear();
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.max_ns(), 0u);
  EXPECT_EQ(h.QuantileUs(0.5), 0);
  EXPECT_TRUE(h.Buckets().empty());
}

TEST(LatencyHistogramTest, HugeValuesDoNotOverflowTheTable) {
  LatencyHistogram h;
  h.Record(UINT64_MAX);
  h.Record(uint64_t{1} << 63);
  EXPECT_EQ(h.count(), 2u);
  EXPECT_EQ(h.max_ns(), UINT64_MAX);
  EXPECT_LT(LatencyHistogram::Index(UINT64_MAX), LatencyHistogram::kBuckets);
  EXPECT_DOUBLE_EQ(h.QuantileUs(1), static_cast<double>(UINT64_MAX) / 1000.0);
}

}  // namespace
}  // namespace weir::bench
