#include "subscriber_ecs.h"

#include <map>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace weir::bench {
namespace {

using ::testing::HasSubstr;

uint32_t V4(int a, int b, int c) { return uint32_t(a) << 24 | uint32_t(b) << 16 | uint32_t(c) << 8; }

// Three prefixes of 16, 4 and 1 /24s (a /28 is its one /24), and an IPv6
// prefix, which is not drawn from.
constexpr char kCityMap[] =
    "# cidr,city,ecs\n"
    "10.0.0.0/20,city-a,10.0.0.0/24\n"
    "10.1.0.0/22,city-b,\n"
    "10.2.0.16/28,city-c,\n"
    "2001:db8::/48,city-d,\n";

TEST(SubscriberSubnetsTest, EverySlash24OfEveryPrefixIsDrawnInProportionToItsSize) {
  auto s = SubscriberSubnets::FromCityMap(kCityMap, "map.csv");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->size(), 21u);
  std::mt19937_64 rng(7);
  std::map<uint32_t, int> seen;
  constexpr int kDraws = 210000;
  for (int i = 0; i < kDraws; ++i) ++seen[s->Draw(rng)];
  // Exactly the 21 /24s, each about 1/21 of the draws: a prefix's share is
  // its size (city-a 16/21, city-b 4/21, city-c 1/21).
  std::vector<uint32_t> want;
  for (int c = 0; c < 16; ++c) want.push_back(V4(10, 0, c));
  for (int c = 0; c < 4; ++c) want.push_back(V4(10, 1, c));
  want.push_back(V4(10, 2, 0));
  ASSERT_EQ(seen.size(), want.size());
  for (uint32_t w : want) {
    ASSERT_TRUE(seen.count(w)) << std::hex << w;
    EXPECT_NEAR(seen[w], kDraws / 21, kDraws / 21 / 10) << std::hex << w;
  }
}

TEST(SubscriberSubnetsTest, TheSameSeedDrawsTheSameSubnets) {
  auto s = SubscriberSubnets::FromCityMap(kCityMap, "map.csv");
  ASSERT_TRUE(s.ok()) << s.status();
  auto draws = [&](uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<uint32_t> out;
    for (int i = 0; i < 1000; ++i) out.push_back(s->Draw(rng));
    return out;
  };
  EXPECT_EQ(draws(1), draws(1));
  EXPECT_NE(draws(1), draws(2));
}

TEST(SubscriberSubnetsTest, TheOptionIsTheSlash24WithScopeZero) {
  const dns::ClientSubnet ecs = SubscriberEcs(V4(10, 1, 3));
  EXPECT_EQ(ecs.family, 1);
  EXPECT_EQ(ecs.source_prefix, 24);
  EXPECT_EQ(ecs.scope_prefix, 0);
  EXPECT_EQ(ecs.AddressBytes(), 3u);
  EXPECT_EQ(ecs.address[0], 10);
  EXPECT_EQ(ecs.address[1], 1);
  EXPECT_EQ(ecs.address[2], 3);
}

TEST(SubscriberSubnetsTest, AMapWithoutIpv4PrefixesIsAnError) {
  auto s = SubscriberSubnets::FromCityMap("2001:db8::/48,city-d,\n", "v6.csv");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("v6.csv: no IPv4 prefix"));
}

}  // namespace
}  // namespace weir::bench
