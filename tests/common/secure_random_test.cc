// The kernel-backed random source of IDs, ports, 0x20 bits and secrets.
#include "weir/common/secure_random.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

namespace weir::common {
namespace {

TEST(SecureRandomTest, BelowIsInRangeAndCoversIt) {
  SecureRandom rng;
  std::vector<int> seen(7);
  for (int i = 0; i < 7000; ++i) {
    const uint32_t v = rng.Below(7);
    ASSERT_LT(v, 7u);
    ++seen[v];
  }
  for (int n : seen) EXPECT_GT(n, 700);
}

TEST(SecureRandomTest, NoRepeatsAcrossBufferRefills) {
  SecureRandom rng;
  std::set<uint64_t> seen;
  // 4 KiB a refill: 2000 words cross it four times.
  for (int i = 0; i < 2000; ++i) seen.insert(rng.Next64());
  EXPECT_EQ(seen.size(), 2000u);
}

TEST(SecureRandomTest, FillCoversOddLengthsAndEveryByte) {
  SecureRandom rng;
  std::vector<uint8_t> a(5000), b(5000);  // longer than the buffer
  rng.Fill(a.data(), a.size());
  rng.Fill(b.data(), b.size());
  EXPECT_NE(a, b);
  std::set<uint8_t> values(a.begin(), a.end());
  EXPECT_GT(values.size(), 250u) << "5000 random bytes take nearly every value";
}

TEST(SecureRandomTest, IsAUniformRandomBitGenerator) {
  SecureRandom rng;
  std::uniform_int_distribution<int> d(1, 6);
  std::set<int> seen;
  for (int i = 0; i < 600; ++i) seen.insert(d(rng));
  EXPECT_EQ(seen, (std::set<int>{1, 2, 3, 4, 5, 6}));
}

}  // namespace
}  // namespace weir::common
