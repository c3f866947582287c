#include "weir/partitions/partition.h"

#include <gtest/gtest.h>

#include <set>

#include "test_util.h"

namespace weir::partitions {
namespace {

using testing::Ip;

TEST(PartitionKey, LevelsAreDisjoint) {
  const common::IpAddress v4 = Ip("10.1.2.3"), v6 = Ip("2001:db8:1:2:3::1");
  EXPECT_EQ(PartitionKey(CacheLevel::kGlobal, 7, v4), kCommonPartition);
  EXPECT_EQ(PartitionKey(CacheLevel::kGlobal, 9, v6), kCommonPartition);
  std::set<Partition> keys;
  for (PartitionId c : {0, 1, 2, 0x7ffe}) keys.insert(PartitionKey(CacheLevel::kCity, c, v4));
  EXPECT_EQ(keys.size(), 4u);
  EXPECT_FALSE(keys.count(kCommonPartition));
  // Subnet level: the /24 and the /56, nothing finer.
  EXPECT_EQ(PartitionKey(CacheLevel::kSubnet, 0, Ip("10.1.2.3")),
            PartitionKey(CacheLevel::kSubnet, 5, Ip("10.1.2.250")));
  EXPECT_NE(PartitionKey(CacheLevel::kSubnet, 0, Ip("10.1.2.3")),
            PartitionKey(CacheLevel::kSubnet, 0, Ip("10.1.3.3")));
  EXPECT_EQ(PartitionKey(CacheLevel::kSubnet, 0, Ip("2001:db8:1:200::1")),
            PartitionKey(CacheLevel::kSubnet, 0, Ip("2001:db8:1:2ff:ffff::9")));
  EXPECT_NE(PartitionKey(CacheLevel::kSubnet, 0, Ip("2001:db8:1:200::1")),
            PartitionKey(CacheLevel::kSubnet, 0, Ip("2001:db8:1:300::1")));
  // v4-mapped clients share their IPv4 /24.
  EXPECT_EQ(PartitionKey(CacheLevel::kSubnet, 0, Ip("::ffff:10.1.2.9")),
            PartitionKey(CacheLevel::kSubnet, 0, v4));
  // Families and levels never collide: 0.0.0.0/24 vs ::/56 vs city 0.
  std::set<Partition> zero = {PartitionKey(CacheLevel::kSubnet, 0, Ip("0.0.0.1")),
                              PartitionKey(CacheLevel::kSubnet, 0, Ip("::1")),
                              PartitionKey(CacheLevel::kCity, 0, v4), kCommonPartition};
  EXPECT_EQ(zero.size(), 4u);
  // Adaptive-level answers: a space of their own; PartitionKey gives the
  // subnet partition a miss is asked under.
  EXPECT_EQ(PartitionKey(CacheLevel::kAdaptive, 3, v4), PartitionKey(CacheLevel::kSubnet, 0, v4));
  for (const uint64_t id : {uint64_t{0}, uint64_t{1}, uint64_t{0xffffff}, kMaxAnswerId}) {
    EXPECT_EQ(LevelOf(AnswerPartition(id)), CacheLevel::kAdaptive) << id;
    EXPECT_EQ(AnswerIdOf(AnswerPartition(id)), id);
    EXPECT_FALSE(zero.count(AnswerPartition(id)));
  }
  for (const char* a : {"255.255.255.255", "ffff:ffff:ffff:ffff::1", "0.0.0.0", "::"})
    EXPECT_EQ(LevelOf(PartitionKey(CacheLevel::kSubnet, 0, Ip(a))), CacheLevel::kSubnet) << a;
}

TEST(PartitionKey, SubnetEcs) {
  dns::ClientSubnet s = SubnetEcs(Ip("10.1.2.3"));
  EXPECT_EQ(s.family, dns::kEcsFamilyIpv4);
  EXPECT_EQ(s.source_prefix, 24);
  EXPECT_EQ(s.address[0], 10);
  EXPECT_EQ(s.address[2], 2);
  EXPECT_EQ(s.address[3], 0);
  s = SubnetEcs(Ip("2001:db8:1:2ff::1"));
  EXPECT_EQ(s.family, dns::kEcsFamilyIpv6);
  EXPECT_EQ(s.source_prefix, 56);
  EXPECT_EQ(s.address[6], 0x02);
  EXPECT_EQ(s.address[7], 0);
}

}  // namespace
}  // namespace weir::partitions
