#include "weir/common/histogram.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>

namespace weir::common {
namespace {

using ::testing::HasSubstr;

constexpr std::array<double, 3> kBounds = {0.001, 0.01, 0.1};
using Histogram = FixedHistogram<kBounds>;

// Prometheus buckets are "less than or equal": a value on a bound counts in
// that bound's bucket; above the last it counts in +Inf only.
TEST(FixedHistogramTest, BucketsAreUpperBoundsInclusive) {
  Histogram h;
  h.Observe(0.0005);
  h.Observe(0.001);
  h.Observe(0.0011);
  h.Observe(0.1);
  h.Observe(7, 2);
  Histogram::Buckets b{};
  double sum = 0;
  h.AddTo(b, &sum);
  EXPECT_EQ(b, (Histogram::Buckets{2, 1, 1, 2}));
  EXPECT_DOUBLE_EQ(sum, 0.0005 + 0.001 + 0.0011 + 0.1 + 14);
  // AddTo adds: two histograms sum bucket by bucket.
  Histogram other;
  other.Observe(0.005);
  other.AddTo(b, &sum);
  EXPECT_EQ(b, (Histogram::Buckets{2, 2, 1, 2}));
  EXPECT_DOUBLE_EQ(sum, 0.0005 + 0.001 + 0.0011 + 0.1 + 14 + 0.005);
}

TEST(FixedHistogramTest, RendersAPrometheusHistogram) {
  Histogram h;
  h.Observe(0.002);
  h.Observe(0.5);
  PrometheusWriter w;
  h.Render(w.Histogram("x_seconds", "X."), {{"path", "hit"}});
  auto text = w.Render();
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("x_seconds_bucket{path=\"hit\",le=\"0.001\"} 0\n"));
  EXPECT_THAT(*text, HasSubstr("x_seconds_bucket{path=\"hit\",le=\"0.01\"} 1\n"));
  EXPECT_THAT(*text, HasSubstr("x_seconds_bucket{path=\"hit\",le=\"0.1\"} 1\n"));
  EXPECT_THAT(*text, HasSubstr("x_seconds_bucket{path=\"hit\",le=\"+Inf\"} 2\n"));
  EXPECT_THAT(*text, HasSubstr("x_seconds_count{path=\"hit\"} 2\n"));
}

// One thread observes while another reads (the metrics scrape): a reader
// never sees more than was observed, and sees everything once the writer
// is done. (Under TSan this is also the data-race check.)
TEST(FixedHistogramTest, ReadWhileObserved) {
  Histogram h;
  constexpr uint64_t kN = 200000;
  std::thread writer([&] {
    for (uint64_t i = 0; i < kN; ++i) h.Observe(0.005);
  });
  uint64_t last = 0;
  for (int i = 0; i < 1000; ++i) {
    Histogram::Buckets b{};
    double sum = 0;
    h.AddTo(b, &sum);
    EXPECT_GE(b[1], last);
    EXPECT_LE(b[1], kN);
    last = b[1];
  }
  writer.join();
  Histogram::Buckets b{};
  double sum = 0;
  h.AddTo(b, &sum);
  EXPECT_EQ(b[1], kN);
}

TEST(FixedHistogramTest, QuantileBucket) {
  EXPECT_EQ(QuantileBucket(Histogram::Buckets{}, 0.99), 4u) << "empty: no bucket";
  // 99 fast answers and one slow: p99 is still the fast bucket, p100 not.
  EXPECT_EQ(QuantileBucket(Histogram::Buckets{99, 0, 0, 1}, 0.99), 0u);
  EXPECT_EQ(QuantileBucket(Histogram::Buckets{99, 0, 0, 1}, 1.0), 3u);
  EXPECT_EQ(QuantileBucket(Histogram::Buckets{98, 0, 1, 1}, 0.99), 2u);
}

}  // namespace
}  // namespace weir::common
