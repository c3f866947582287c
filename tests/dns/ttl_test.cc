// The TTL rules both tiers share (weir/dns/ttl.h).
#include "weir/dns/ttl.h"

#include <gtest/gtest.h>

#include <vector>

namespace weir::dns {
namespace {

TEST(AnswerTtl, FreshAgesAndStaleHoldsItsFloor) {
  EXPECT_EQ(AnswerTtl::Aged(0).Of(300), 300u);
  EXPECT_EQ(AnswerTtl::Aged(100).Of(300), 200u);
  EXPECT_EQ(AnswerTtl::Aged(400).Of(300), 0u);  // floored at 0
  EXPECT_EQ(AnswerTtl::Stale(30).Of(300), 30u);
  EXPECT_EQ(AnswerTtl::Stale(30).Of(5), 30u);  // every record at the stale TTL
  EXPECT_TRUE(AnswerTtl::Stale(30).stale());
  EXPECT_FALSE(AnswerTtl::Aged(3).stale());
}

TEST(AnswerTtl, RewriteTtlsAtTheirOffsets) {
  std::vector<uint8_t> rec(16, 0);
  Store32(rec.data() + 2, 300);
  Store32(rec.data() + 10, 50);
  const uint16_t offsets[] = {2, 10};
  RewriteTtls(rec.data(), offsets, 0, AnswerTtl::Aged(60));
  EXPECT_EQ(Load32(rec.data() + 2), 240u);
  EXPECT_EQ(Load32(rec.data() + 10), 0u);
  // Offsets counted from a base (a part of the records copied alone).
  const uint16_t based[] = {12};
  RewriteTtls(rec.data(), based, 10, AnswerTtl::Stale(7));
  EXPECT_EQ(Load32(rec.data() + 2), 7u);
}

TEST(SoaMinimum, ReadsTheLastFieldOfAWholeSoa) {
  std::vector<uint8_t> soa(22, 0);  // root, root, five fields
  Store32(soa.data() + 18, 900);
  uint32_t minimum = 0;
  ASSERT_TRUE(SoaMinimum(soa, &minimum));
  EXPECT_EQ(minimum, 900u);
  soa.resize(21);  // too short for two names and five fields
  EXPECT_FALSE(SoaMinimum(soa, &minimum));
}

TEST(PrefetchDue, AtMostThePercentLeftOfATtlOfTenSecondsOrMore) {
  struct Row {
    uint32_t ttl, left, percent;
    bool due;
  };
  const Row rows[] = {
      {100, 11, 10, false},
      {100, 10, 10, true},  // the boundary: "the last 10 %" includes 10 %
      {100, 1, 10, true},
      {100, 0, 10, false},  // expired: not a prefetch
      {9, 1, 50, false},    // TTL under 10 s: never
      {10, 1, 10, true},
      {100, 5, 0, false},                   // 0: off
      {4000000000u, 400000000u, 10, true},  // no overflow
  };
  for (const Row& r : rows) {
    EXPECT_EQ(PrefetchDue(r.ttl, r.left, r.percent), r.due) << r.ttl << " " << r.left << " " << r.percent;
  }
}

}  // namespace
}  // namespace weir::dns
