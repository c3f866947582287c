#include "weir/fastpath/upstream_ring.h"

#include <map>
#include <string>

#include <gtest/gtest.h>

namespace weir::fastpath {
namespace {

uint64_t H(int i) {
  const std::string s = "name" + std::to_string(i);
  return StableHash(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

TEST(UpstreamRing, SpreadsKeysAcrossUpstreams) {
  UpstreamRing ring(4);
  std::map<int, int> count;
  for (int i = 0; i < 40000; ++i) ++count[ring.Pick(H(i))];
  ASSERT_EQ(count.size(), 4u);
  for (const auto& [u, n] : count) {
    EXPECT_GT(n, 7000) << "upstream " << u;
    EXPECT_LT(n, 13000) << "upstream " << u;
  }
}

TEST(UpstreamRing, SameKeySameUpstream) {
  UpstreamRing a(3), b(3);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(a.Pick(H(i)), b.Pick(H(i)));
}

TEST(UpstreamRing, DownUpstreamMovesOnlyItsShare) {
  UpstreamRing ring(4);
  std::vector<int> before(10000);
  for (int i = 0; i < 10000; ++i) before[i] = ring.Pick(H(i));
  ring.SetUp(2, false);
  for (int i = 0; i < 10000; ++i) {
    const int now = ring.Pick(H(i));
    EXPECT_NE(now, 2);
    if (before[i] != 2) {
      EXPECT_EQ(now, before[i]) << "key " << i << " moved though its upstream is up";
    }
  }
}

TEST(UpstreamRing, SharesMatchWherePickSendsKeys) {
  // Load bound out of the way (a huge factor): Pick follows the ring alone.
  UpstreamRing ring(4, 128, 1e9);
  for (int down = -1; down < 4; ++down) {
    std::vector<bool> up(4, true);
    if (down >= 0) {
      up[down] = false;
      ring.SetUp(down, false);
    }
    const std::vector<double> shares = ring.Shares(up);
    double total = 0;
    for (double s : shares) total += s;
    EXPECT_NEAR(total, 1.0, 1e-9);
    if (down >= 0) {
      EXPECT_EQ(shares[down], 0.0);
    }
    std::vector<int> count(4, 0);
    constexpr int kKeys = 200000;
    for (int i = 0; i < kKeys; ++i) ++count[ring.Pick(H(i))];
    for (int u = 0; u < 4; ++u) {
      EXPECT_NEAR(static_cast<double>(count[u]) / kKeys, shares[u], 0.01)
          << "upstream " << u << " down " << down;
    }
    if (down >= 0) ring.SetUp(down, true);
  }
  EXPECT_EQ(ring.Shares({false, false, false, false}), std::vector<double>(4, 0.0));
}

TEST(UpstreamRing, ExcludeSkipsTriedUpstreams) {
  UpstreamRing ring(3);
  const uint64_t h = H(7);
  const int first = ring.Pick(h);
  const int second = ring.Pick(h, uint64_t{1} << first);
  EXPECT_NE(second, first);
  const int third = ring.Pick(h, (uint64_t{1} << first) | (uint64_t{1} << second));
  EXPECT_NE(third, first);
  EXPECT_NE(third, second);
  EXPECT_EQ(ring.Pick(h, 0b111), -1);
}

TEST(UpstreamRing, BoundedLoadSpillsToTheNext) {
  UpstreamRing ring(2, 128, 1.0);
  const uint64_t h = H(1);
  const int home = ring.Pick(h);
  // The home upstream carries everything in flight: the bound sends the
  // next query elsewhere.
  ring.AddLoad(home, 10);
  EXPECT_NE(ring.Pick(h), home);
  ring.AddLoad(home, -10);
  EXPECT_EQ(ring.Pick(h), home);
}

// Every front node, whatever its release, must send a question to the same
// recursor (its cache entry lives there): where keys land is part of the
// format. These placements were recorded from the release before the hash
// moved to common::HashBytes.
TEST(UpstreamRing, PlacementIsTheSameInEveryRelease) {
  UpstreamRing four(4), three(3);
  std::string on_four, on_three;
  for (int i = 0; i < 32; ++i) {
    on_four += std::to_string(four.Pick(H(i)));
    on_three += std::to_string(three.Pick(H(i)));
  }
  EXPECT_EQ(on_four, "03203203320000112123122013030231");
  EXPECT_EQ(on_three, "00200201120000112121122010010211");
  EXPECT_EQ(H(0), 0x740139bc8c121b83u);
}

TEST(UpstreamRing, AllDownIsMinusOne) {
  UpstreamRing ring(2);
  ring.SetUp(0, false);
  ring.SetUp(1, false);
  EXPECT_EQ(ring.Pick(H(3)), -1);
}

}  // namespace
}  // namespace weir::fastpath
