#include "weir/partitions/citymap.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <thread>

#include "test_util.h"

namespace weir::partitions {
namespace {

using testing::Ip;

constexpr char kCsv[] = R"(# operator city map
10.0.0.0/8, beijing, 192.0.2.0/24
10.1.0.0/16,shanghai,198.51.100.0
10.1.2.0/24, guangzhou ,203.0.113.0/24   # trailing comment

10.1.2.128/25,shenzhen,203.0.113.128/25
10.1.2.200/32,beijing,
2001:db8::/32,beijing,2001:db8:1::/48
2001:db8:ff00::/40,shanghai,2001:db8:2::
)";

TEST(CityMapCsv, ParsesAndLooksUp) {
  auto m = CityMap::FromCsv(kCsv, {.default_city = "other"});
  ASSERT_TRUE(m.ok()) << m.status();
  const CityMap& map = **m;
  auto name = [&](const char* ip) { return map.city(map.Lookup(Ip(ip))).name; };
  EXPECT_EQ(name("10.200.0.1"), "beijing");
  EXPECT_EQ(name("10.1.9.9"), "shanghai");
  EXPECT_EQ(name("10.1.2.1"), "guangzhou");
  EXPECT_EQ(name("10.1.2.127"), "guangzhou");
  EXPECT_EQ(name("10.1.2.128"), "shenzhen");
  EXPECT_EQ(name("10.1.2.199"), "shenzhen");
  EXPECT_EQ(name("10.1.2.200"), "beijing");
  EXPECT_EQ(name("10.1.2.201"), "shenzhen");
  EXPECT_EQ(name("11.0.0.1"), "other");
  EXPECT_EQ(name("9.255.255.255"), "other");
  EXPECT_EQ(name("2001:db8::1"), "beijing");
  EXPECT_EQ(name("2001:db8:ff12::1"), "shanghai");
  EXPECT_EQ(name("2001:db9::1"), "other");
  EXPECT_EQ(name("::"), "other");
  EXPECT_EQ(name("::ffff:10.1.2.130"), "shenzhen");  // v4-mapped uses the v4 table
  EXPECT_EQ(map.city(map.default_city()).name, "other");
  EXPECT_EQ(map.city_count(), 5u);

  const City& bj = map.city(*map.FindCity("beijing"));
  EXPECT_EQ(bj.ecs_v4.family, dns::kEcsFamilyIpv4);
  EXPECT_EQ(bj.ecs_v4.source_prefix, 24);
  EXPECT_EQ(bj.ecs_v4.address[0], 192);
  EXPECT_EQ(bj.ecs_v6.source_prefix, 48);
  const City& sh = map.city(*map.FindCity("shanghai"));
  EXPECT_EQ(sh.ecs_v4.source_prefix, 24);  // default /24
  EXPECT_EQ(sh.ecs_v6.source_prefix, 56);  // default /56
  const City& sz = map.city(*map.FindCity("shenzhen"));
  EXPECT_EQ(sz.ecs_v4.source_prefix, 25);
  EXPECT_EQ(sz.ecs_v4.address[3], 128);
  EXPECT_EQ(sz.EcsFor(6).family, dns::kEcsFamilyIpv4);  // falls back to the only family given
  const City& other = map.city(map.default_city());
  EXPECT_EQ(other.ecs_v4.family, 0);
}

TEST(CityMapCsv, DefaultCityNamedInCsvKeepsItsId) {
  auto m = CityMap::FromCsv("10.0.0.0/8,beijing,192.0.2.0/24\n", {.default_city = "beijing"});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->city_count(), 1u);
  EXPECT_EQ((*m)->LookupV4(0x01020304), (*m)->default_city());
}

TEST(CityMapCsv, EmptyFileMapsEverythingToDefault) {
  auto m = CityMap::FromCsv("# nothing\n\n");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->Lookup(Ip("1.2.3.4")), (*m)->default_city());
  EXPECT_EQ((*m)->Lookup(Ip("2001:db8::1")), (*m)->default_city());
}

struct BadCase {
  const char* csv;
  const char* message;
};

TEST(CityMapCsv, BadLineRejectsWholeFileWithLineNumber) {
  const BadCase cases[] = {
      {"10.0.0.0/8,a,192.0.2.0\n# ok\n10.0.0.1/8,b,192.0.2.0\n", "line 3: host bits set"},
      {"10.0.0.0/33,a,192.0.2.0\n", "line 1: bad prefix length"},
      {"10.0.0.0,a,192.0.2.0\n", "line 1: '10.0.0.0' is not a CIDR"},
      {"300.0.0.0/8,a,192.0.2.0\n", "line 1: bad address"},
      {"10.0.0.0/8,a\n", "line 1: expected 3 fields"},
      {"10.0.0.0/8,a,1.2.3.4,x\n", "line 1: expected 3 fields"},
      {"10.0.0.0/8,,192.0.2.0\n", "line 1: bad city name"},
      {"10.0.0.0/8,a b,192.0.2.0\n", "line 1: bad city name"},
      {"10.0.0.0/8,a,192.0.2.0/33\n", "line 1: bad ECS prefix length"},
      {"10.0.0.0/8,a,192.0.2.0/\n", "line 1: bad ECS prefix length"},
      {"10.0.0.0/8,a,nonsense\n", "line 1: bad ECS address"},
      {"\n\n10.0.0.0/8,a,192.0.2.0\n11.0.0.0/8,a,198.51.100.0\n",
       "line 4: city 'a' already has a different IPv4 ECS source (first on line 3)"},
      {"10.0.0.0/8,a,192.0.2.0\n10.0.0.0/8,b,192.0.2.0\n",
       "line 2: duplicate prefix 10.0.0.0/8 (first on line 1)"},
      {"2001:db8::/32,a,\n2001:db8::/32,a,\n", "line 2: duplicate prefix"},
      {"2001:db8::1/32,a,\n", "line 1: host bits set"},
  };
  for (const BadCase& c : cases) {
    auto m = CityMap::FromCsv(c.csv);
    ASSERT_FALSE(m.ok()) << c.csv;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(m.status().message()).find(c.message), std::string::npos)
        << "got: " << m.status().message() << "\nwant: " << c.message;
  }
}

TEST(CityMapCsv, EveryBadLineIsReportedInLineOrder) {
  const char* csv =
      "10.0.0.0/8,a,192.0.2.0\n"
      "bad\n"
      "10.0.0.0/8,b,\n"
      "11.0.0.0/8,a,198.51.100.0\n"
      "12.0.0.0/8,a b,\n"
      "10.0.0.0/8,c,\n";
  common::LineErrors errors;
  auto m = CityMap::FromCsv(csv, {}, &errors);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message(), "line 2: expected 3 fields 'cidr,city,ecs_address/prefix', got 1");
  EXPECT_EQ(errors.Render("map.csv"),
            (std::vector<std::string>{
                "map.csv:2: expected 3 fields 'cidr,city,ecs_address/prefix', got 1",
                "map.csv:3: duplicate prefix 10.0.0.0/8 (first on line 1)",
                "map.csv:4: city 'a' already has a different IPv4 ECS source (first on line 1)",
                "map.csv:5: bad city name 'a b'",
                "map.csv:6: duplicate prefix 10.0.0.0/8 (first on line 1)",
            }));
}

TEST(CityMapCsv, ErrorsAreCappedAndCounted) {
  std::string csv;
  for (int i = 0; i < 250; ++i) csv += "nonsense\n";
  csv += "10.0.0.0/8,a,\n";
  common::LineErrors errors;
  ASSERT_FALSE(CityMap::FromCsv(csv, {.default_city = "bad name"}, &errors).ok());
  EXPECT_EQ(errors.count(), 251u);
  const std::vector<std::string> lines = errors.Render("m");
  ASSERT_EQ(lines.size(), common::LineErrors::kMaxKept + 1);
  EXPECT_EQ(lines.front().rfind("m:1: expected 3 fields", 0), 0u) << lines.front();
  EXPECT_EQ(lines[99].rfind("m:100: expected 3 fields", 0), 0u) << lines[99];
  EXPECT_EQ(lines.back(), "m: ... and 151 more errors");
}

TEST(CityMapCsv, TooManySplitBlocksIsAnError) {
  std::string csv;
  for (uint32_t i = 0; i < 0x8001; ++i) {
    common::IpAddress a = common::IpAddress::V4((10u << 24) | (i << 8));
    csv += common::IpToString(a) + "/25,c,\n";
  }
  auto m = CityMap::FromCsv(csv);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(std::string(m.status().message()).find("too many /24 blocks"), std::string::npos);
}

// ---------------------------------------------------------------- property

using u128 = unsigned __int128;

u128 Load128(const common::IpAddress& a) {
  u128 v = 0;
  for (int i = 0; i < 16; ++i) v = (v << 8) | a.bytes[i];
  return v;
}

common::IpAddress Store128(u128 v) {
  uint8_t b[16];
  for (int i = 15; i >= 0; --i) {
    b[i] = static_cast<uint8_t>(v);
    v >>= 8;
  }
  return common::IpAddress::V6(b);
}

u128 Mask128(unsigned len) { return len == 0 ? 0 : ~u128{0} << (128 - len); }

// Random prefixes of realistic shape: a few provider blocks, most prefixes
// nested inside them (so nesting and LPM matter), some anywhere.
std::vector<CityPrefix> RandomPrefixes(std::mt19937_64& rng, int family, size_t count, size_t cities) {
  std::vector<CityPrefix> out;
  std::set<std::pair<u128, unsigned>> seen;
  std::vector<std::pair<u128, unsigned>> blocks;
  const unsigned width = family == 4 ? 32 : 128;
  for (int i = 0; i < 8; ++i) {
    unsigned len = family == 4 ? 8 + rng() % 8 : 20 + rng() % 12;
    u128 v = (u128{rng()} << 64) | rng();
    blocks.push_back({v & Mask128(len), len});
  }
  while (out.size() < count) {
    unsigned len;
    u128 v = (u128{rng()} << 64) | rng();
    if (rng() % 10 < 8) {
      auto [base, blen] = blocks[rng() % blocks.size()];
      len = family == 4 ? blen + rng() % (33 - blen) : blen + rng() % (std::min(128u, 72u) - blen);
      v = base | (v & ~Mask128(blen));
    } else {
      len = rng() % (width + 1);
    }
    if (family == 4) {
      v = (v >> 96) << 96;  // keep 32 bits at the top for masking
    }
    v &= Mask128(len);
    if (!seen.insert({v, len}).second) continue;
    CityPrefix p;
    p.cidr.prefix = static_cast<uint8_t>(len);
    if (family == 4) {
      p.cidr.address = common::IpAddress::V4(static_cast<uint32_t>(v >> 96));
    } else {
      p.cidr.address = Store128(v);
    }
    p.city = static_cast<PartitionId>(rng() % cities);
    out.push_back(p);
  }
  return out;
}

void CheckAgainstBruteForce(int family, uint64_t seed) {
  std::mt19937_64 rng(seed);
  constexpr size_t kCities = 300, kPrefixes = 10000, kLookups = 100000;
  std::vector<City> cities(kCities);
  for (size_t i = 0; i < kCities; ++i) cities[i].name = "c" + std::to_string(i);
  auto prefixes = RandomPrefixes(rng, family, kPrefixes, kCities - 1);
  auto built = CityMap::Build(cities, prefixes, kCities - 1);
  ASSERT_TRUE(built.ok()) << built.status();
  const CityMap& map = **built;

  // Oracle: prefixes as (value, length) with 128-bit keys, v4 left-aligned.
  struct P {
    u128 net;
    u128 mask;
    unsigned len;
    PartitionId city;
  };
  std::vector<P> ps;
  for (const CityPrefix& p : prefixes) {
    u128 v = family == 4 ? u128{p.cidr.address.v4()} << 96 : Load128(p.cidr.address);
    ps.push_back({v, Mask128(p.cidr.prefix), p.cidr.prefix, p.city});
  }
  std::sort(ps.begin(), ps.end(), [](const P& a, const P& b) { return a.len > b.len; });

  size_t mismatches = 0;
  for (size_t i = 0; i < kLookups; ++i) {
    u128 a = (u128{rng()} << 64) | rng();
    if (rng() % 4 != 0) {  // mostly inside (or next to) a random prefix
      const P& p = ps[rng() % ps.size()];
      a = p.net | (a & ~p.mask);
      if (rng() % 8 == 0) a = p.net - 1;  // just below it
    }
    if (family == 4) a = (a >> 96) << 96;
    PartitionId want = kCities - 1;
    for (const P& p : ps) {
      if ((a & p.mask) == p.net) {
        want = p.city;
        break;
      }
    }
    PartitionId got = family == 4 ? map.LookupV4(static_cast<uint32_t>(a >> 96)) : map.Lookup(Store128(a));
    if (got != want && ++mismatches < 10) {
      ADD_FAILURE() << "family " << family << " address "
                    << common::IpToString(family == 4 ? common::IpAddress::V4(uint32_t(a >> 96))
                                                      : Store128(a))
                    << " got city " << got << " want " << want;
    }
  }
  EXPECT_EQ(mismatches, 0u);

  // The burst APIs agree with the scalar ones, on addresses inside prefixes
  // and random ones, for burst sizes around and beyond the internal chunk.
  std::vector<uint32_t> v4;
  std::vector<common::IpAddress> any;
  for (size_t i = 0; i < 2000; ++i) {
    u128 a = (u128{rng()} << 64) | rng();
    if (rng() % 4 != 0) {
      const P& p = ps[rng() % ps.size()];
      a = p.net | (a & ~p.mask);
    }
    if (family == 4) {
      v4.push_back(static_cast<uint32_t>(a >> 96));
      // Plain IPv4, v4-mapped IPv6 and (rarely) an unset family.
      const int kind = static_cast<int>(rng() % 8);
      common::IpAddress ip =
          kind == 0 ? Store128((u128{0xffff} << 32) | v4.back()) : common::IpAddress::V4(v4.back());
      if (kind == 1) ip = common::IpAddress{};
      any.push_back(ip);
    } else {
      any.push_back(Store128(a));
    }
  }
  size_t checked = 0;
  for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{7}, size_t{31}, size_t{32}, size_t{33}, size_t{65},
                   size_t{1000}}) {
    std::vector<PartitionId> out(n + 1, 0x7777);  // one past the end must stay untouched
    map.LookupBurst(any.data() + checked % 500, out.data(), n);
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(out[i], map.Lookup(any[checked % 500 + i])) << "n " << n << " i " << i;
    EXPECT_EQ(out[n], 0x7777);
    if (family == 4) {
      std::fill(out.begin(), out.end(), 0x7777);
      map.LookupV4Burst(v4.data() + checked % 500, out.data(), n);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], map.LookupV4(v4[checked % 500 + i])) << "n " << n;
      EXPECT_EQ(out[n], 0x7777);
    }
    checked += n;
  }
}

TEST(CityMapProperty, Ipv4AgreesWithBruteForce) { CheckAgainstBruteForce(4, 1); }
TEST(CityMapProperty, Ipv6AgreesWithBruteForce) { CheckAgainstBruteForce(6, 2); }
TEST(CityMapProperty, Ipv6AgreesWithBruteForceOtherSeed) { CheckAgainstBruteForce(6, 3); }

TEST(CityMapProperty, Ipv6ConcentratedInOneBlock) {
  // Every prefix under one /32: the direct index must skip the common bits.
  std::vector<City> cities(3);
  cities[0].name = "a";
  cities[1].name = "b";
  cities[2].name = "d";
  std::vector<CityPrefix> ps;
  common::Cidr c;
  ASSERT_TRUE(common::ParseCidr("2001:db8::/32", &c).ok());
  ps.push_back({c, 0});
  ASSERT_TRUE(common::ParseCidr("2001:db8:1234:5600::/56", &c).ok());
  ps.push_back({c, 1});
  ASSERT_TRUE(common::ParseCidr("2001:db8:1234:5678::1/128", &c).ok());
  ps.push_back({c, 2});
  auto m = CityMap::Build(cities, ps, 2);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->Lookup(Ip("2001:db8:1234:5678::1")), 2);
  EXPECT_EQ((*m)->Lookup(Ip("2001:db8:1234:5678::2")), 1);
  EXPECT_EQ((*m)->Lookup(Ip("2001:db8:1234:5700::")), 0);
  EXPECT_EQ((*m)->Lookup(Ip("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff")), 0);
  EXPECT_EQ((*m)->Lookup(Ip("2001:db9::")), 2);
  EXPECT_EQ((*m)->Lookup(Ip("ffff::")), 2);
}

TEST(CityMapProperty, Ipv4BlockWithManyRuns) {
  // 10.1.0.0/16 alternates between two cities every /24, more runs than a
  // compact block holds, plus a /26 inside one of them.
  std::string csv = "10.0.0.0/8,a,\n10.1.7.64/26,c,\n";
  for (int i = 0; i < 256; i += 2) csv += "10.1." + std::to_string(i) + ".0/24,b,\n";
  auto m = CityMap::FromCsv(csv);
  ASSERT_TRUE(m.ok()) << m.status();
  const CityMap& map = **m;
  for (int i = 0; i < 256; ++i) {
    const std::string ip = "10.1." + std::to_string(i) + ".1";
    EXPECT_EQ(map.city(map.Lookup(Ip(ip.c_str()))).name, i % 2 == 0 ? "b" : "a") << ip;
  }
  EXPECT_EQ(map.city(map.Lookup(Ip("10.1.7.100"))).name, "c");
  EXPECT_EQ(map.city(map.Lookup(Ip("10.1.7.128"))).name, "a");
  EXPECT_EQ(map.city(map.Lookup(Ip("10.2.0.1"))).name, "a");
  EXPECT_EQ(map.city(map.Lookup(Ip("11.1.0.1"))).name, "default");
}

TEST(CityMapCsv, BurstMixesFamilies) {
  auto m = CityMap::FromCsv(kCsv, {.default_city = "other"});
  ASSERT_TRUE(m.ok()) << m.status();
  const CityMap& map = **m;
  const std::vector<common::IpAddress> addrs = {
      Ip("10.1.2.130"),    Ip("2001:db8:ff12::1"), Ip("::ffff:10.1.2.200"), Ip("2001:db9::1"),
      common::IpAddress{}, Ip("10.1.9.9"),         Ip("2001:db8::1")};
  PartitionId out[7];
  map.LookupBurst(addrs.data(), out, addrs.size());
  const char* want[] = {"shenzhen", "shanghai", "beijing", "other", "other", "shanghai", "beijing"};
  for (size_t i = 0; i < addrs.size(); ++i) EXPECT_EQ(map.city(out[i]).name, want[i]) << i;
}

TEST(CityMapHolder, SwapIsSeenByReadersNextLookup) {
  auto a = CityMap::FromCsv("10.0.0.0/8,a,\n");
  auto b = CityMap::FromCsv("10.0.0.0/8,b,\n");
  ASSERT_TRUE(a.ok() && b.ok());
  CityMapHolder holder(*std::move(a));
  std::atomic<bool> stop{false};
  std::atomic<int> saw_b{0};
  std::thread reader([&] {
    common::RcuThread rcu;
    while (!stop.load()) {
      const CityMap* m = holder.Get();
      const std::string& name = m->city(m->LookupV4(0x0a000001)).name;
      ASSERT_TRUE(name == "a" || name == "b");
      if (name == "b") saw_b.store(1);
      rcu.Quiescent();
    }
  });
  holder.Publish(*std::move(b));  // returns once the old map is freed
  EXPECT_EQ(holder.Get()->city(holder.Get()->LookupV4(0x0a000001)).name, "b");
  while (saw_b.load() == 0) std::this_thread::yield();
  stop.store(true);
  reader.join();
}

}  // namespace
}  // namespace weir::partitions
