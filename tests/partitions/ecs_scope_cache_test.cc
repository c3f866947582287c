#include "weir/partitions/ecs_scope_cache.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"
#include "weir/partitions/partition.h"

namespace weir::partitions {
namespace {

using testing::Ip;
using testing::Key;

dns::ClientSubnet Subnet(const char* addr, uint8_t source) {
  const common::IpAddress a = Ip(addr);
  dns::ClientSubnet s;
  s.family = a.family == 4 ? dns::kEcsFamilyIpv4 : dns::kEcsFamilyIpv6;
  s.source_prefix = source;
  for (unsigned bit = 0; bit < source; ++bit) s.address[bit / 8] |= a.bytes[bit / 8] & (0x80u >> (bit % 8));
  return s;
}

TEST(EcsScopeCache, LongestScopeWinsAndScopeZeroIsGlobal) {
  EcsScopeCache<std::string> c;
  const dns::NameKey q = Key("cdn.example");
  c.Insert(q.span(), 1, Subnet("192.0.2.0", 24), 0, 0, 100, "global");
  c.Insert(q.span(), 1, Subnet("192.0.2.0", 24), 16, 0, 100, "slash16");
  c.Insert(q.span(), 1, Subnet("192.0.2.0", 24), 24, 0, 100, "slash24");
  uint8_t scope = 99;
  EXPECT_EQ(*c.Lookup(q.span(), 1, Subnet("192.0.2.0", 24), 1, &scope), "slash24");
  EXPECT_EQ(scope, 24);
  EXPECT_EQ(*c.Lookup(q.span(), 1, Subnet("192.0.9.0", 24), 1, &scope), "slash16");
  EXPECT_EQ(*c.Lookup(q.span(), 1, Subnet("10.0.0.0", 24), 1, &scope), "global");
  EXPECT_EQ(scope, 0);
  EXPECT_EQ(*c.Lookup(q.span(), 1, Subnet("2001:db8::", 56), 1), "global");  // scope 0: any family
  // A query with a shorter source cannot use a longer scope.
  EXPECT_EQ(*c.Lookup(q.span(), 1, Subnet("192.0.2.0", 20), 1), "slash16");
  EXPECT_EQ(c.Lookup(q.span(), 28, Subnet("192.0.2.0", 24), 1), nullptr);  // other qtype
  // Expiry.
  EXPECT_EQ(c.Lookup(q.span(), 1, Subnet("192.0.2.0", 24), 100), nullptr);
}

TEST(EcsScopeCache, ScopeLongerThanSourceIsStoredAtSource) {
  EcsScopeCache<int> c;
  const dns::NameKey q = Key("cdn.example");
  c.Insert(q.span(), 1, Subnet("192.0.2.0", 24), 32, 0, 100, 7);
  uint8_t scope = 0;
  // Another address of the same /24 uses it: stored at /24, not /32.
  ASSERT_NE(c.Lookup(q.span(), 1, Subnet("192.0.2.77", 32), 1, &scope), nullptr);
  EXPECT_EQ(scope, 24);
  EXPECT_EQ(c.Lookup(q.span(), 1, Subnet("192.0.3.0", 24), 1), nullptr);
}

TEST(EcsScopeCache, AtMostNSubnetsPerNameEvictingSoonestExpiry) {
  EcsScopeCache<int> c(100);
  const dns::NameKey q = Key("cdn.example");
  for (int i = 0; i < 150; ++i) {
    dns::ClientSubnet s = Subnet("10.0.0.0", 24);
    s.address[1] = static_cast<uint8_t>(i);
    c.Insert(q.span(), 1, s, 24, 0, 1000 + i, i);
    ASSERT_LE(c.SubnetCount(q.span(), 1), 100u);
  }
  EXPECT_EQ(c.SubnetCount(q.span(), 1), 100u);
  dns::ClientSubnet oldest = Subnet("10.0.0.0", 24), newest = Subnet("10.0.0.0", 24);
  oldest.address[1] = 0;
  newest.address[1] = 149;
  EXPECT_EQ(c.Lookup(q.span(), 1, oldest, 1), nullptr);
  ASSERT_NE(c.Lookup(q.span(), 1, newest, 1), nullptr);
  // Re-inserting the same subnet replaces, it does not add.
  c.Insert(q.span(), 1, newest, 24, 0, 5000, -1);
  EXPECT_EQ(c.SubnetCount(q.span(), 1), 100u);
  EXPECT_EQ(*c.Lookup(q.span(), 1, newest, 1), -1);
  // Kept: expiries 1050..1148 and the replaced one (5000); 1050..1100 go.
  c.Expire(1100);
  EXPECT_EQ(c.SubnetCount(q.span(), 1), 49u);
}

TEST(EcsScopeCache, EraseIfDropsOnlyMatchingAnswersAndEmptyNames) {
  EcsScopeCache<std::string> c;
  const dns::NameKey a = Key("a.cdn.example");
  const dns::NameKey b = Key("b.cdn.example");
  c.Insert(a.span(), 1, Subnet("192.0.2.0", 24), 24, 0, 100, "a-192.0.2");
  c.Insert(a.span(), 1, Subnet("198.51.100.0", 24), 24, 0, 100, "a-198.51.100");
  c.Insert(a.span(), 1, Subnet("198.51.100.0", 24), 0, 0, 100, "a-global");
  c.Insert(b.span(), 28, Subnet("198.51.100.0", 24), 16, 0, 100, "b-198.51");
  EXPECT_EQ(c.answer_count(), 4u);
  // Every answer is seen once, with its own name, type and scope.
  std::vector<std::string> seen;
  c.ForEach([&](std::span<const uint8_t> qname, uint16_t qtype, const auto& x) {
    const bool is_a = qname.size() == a.len && std::equal(qname.begin(), qname.end(), a.bytes.begin());
    EXPECT_EQ(qtype, is_a ? 1 : 28) << x.value;
    seen.push_back(x.value);
  });
  EXPECT_EQ(seen.size(), 4u);
  // The 198.51.100.0/24 answers of every name (scope 24 and 16), not the
  // global one nor another subnet's.
  const size_t n = c.EraseIf([](std::span<const uint8_t>, uint16_t, const auto& x) {
    return x.scope != 0 && x.address[0] == 198 && x.address[1] == 51;
  });
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(c.answer_count(), 2u);
  EXPECT_EQ(c.name_count(), 1u);  // b had only that answer
  EXPECT_EQ(*c.Lookup(a.span(), 1, Subnet("198.51.100.0", 24), 1), "a-global");
  EXPECT_EQ(*c.Lookup(a.span(), 1, Subnet("192.0.2.0", 24), 1), "a-192.0.2");
  EXPECT_EQ(c.Lookup(b.span(), 28, Subnet("198.51.100.0", 24), 1), nullptr);
}

}  // namespace
}  // namespace weir::partitions
