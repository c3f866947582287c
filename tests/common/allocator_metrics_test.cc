#include "weir/common/allocator_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

namespace weir::common {
namespace {

using ::testing::HasSubstr;

TEST(AllocatorMetricsTest, RendersEveryFamilyOfASample) {
  PrometheusWriter w;
  AddAllocatorMetrics(w, AllocatorSample{"jemalloc", "5.3.0-0-g54eaed1d8b56b1aa528be3bdd1877e59c56fa90c",
                                         1000, 4096, 8192, 16384});
  auto text = w.Render();
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(
      *text, HasSubstr("# TYPE weir_allocator_allocated_bytes gauge\nweir_allocator_allocated_bytes 1000\n"));
  EXPECT_THAT(*text, HasSubstr("weir_allocator_active_bytes 4096\n"));
  EXPECT_THAT(*text, HasSubstr("weir_allocator_resident_bytes 8192\n"));
  EXPECT_THAT(*text, HasSubstr("weir_allocator_mapped_bytes 16384\n"));
  EXPECT_THAT(*text, HasSubstr("weir_allocator_info{allocator=\"jemalloc\",version=\"5.3.0-0-"
                               "g54eaed1d8b56b1aa528be3bdd1877e59c56fa90c\"} 1\n"));
}

TEST(AllocatorMetricsTest, NoSampleNoFamilies) {
  PrometheusWriter w;
  AddAllocatorMetrics(w, std::nullopt);
  auto text = w.Render();
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "");
}

#ifdef WEIR_TEST_JEMALLOC
// This test binary links jemalloc as the daemons do: the statistics are
// there and follow what the program allocates (after the epoch refresh).
TEST(AllocatorMetricsTest, JemallocStatisticsFollowAllocations) {
  const auto before = ReadAllocatorSample();
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(before->allocator, "jemalloc");
  EXPECT_FALSE(before->version.empty());
  constexpr size_t kBytes = size_t{64} << 20;
  auto block = std::make_unique<char[]>(kBytes);
  std::memset(block.get(), 1, kBytes);  // resident, not just reserved
  const auto during = ReadAllocatorSample();
  ASSERT_TRUE(during.has_value());
  EXPECT_GE(during->allocated_bytes, before->allocated_bytes + kBytes);
  EXPECT_GE(during->resident_bytes, kBytes);
  EXPECT_LE(during->allocated_bytes, during->active_bytes);
  EXPECT_LE(during->active_bytes, during->mapped_bytes);
  block.reset();
  const auto after = ReadAllocatorSample();
  ASSERT_TRUE(after.has_value());
  EXPECT_LE(after->allocated_bytes + kBytes, during->allocated_bytes);
}
#else
TEST(AllocatorMetricsTest, WithoutJemallocTheFamiliesAreLeftOut) {
  EXPECT_FALSE(ReadAllocatorSample().has_value());
}
#endif

}  // namespace
}  // namespace weir::common
