#include "sources.h"

#include <arpa/inet.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace weir::bench {
namespace {

namespace fs = std::filesystem;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

common::Cidr Net(const char* text) {
  auto c = common::Cidr::Parse(text);
  EXPECT_TRUE(c.ok()) << text;
  return c.ok() ? *c : common::Cidr{};
}

// city-c's /24 sits inside city-a's /16; city-d has only an IPv6 prefix.
constexpr char kCityMap[] =
    "# cidr,city,ecs\n"
    "127.1.0.0/16,city-a,\n"
    "127.2.0.0/16,city-b,\n"
    "127.1.5.0/24,city-c,\n"
    "2001:db8:d::/48,city-d,\n";

class SourcesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "weir_sources_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    tmp_ = tmpl;
    map_file_ = (tmp_ / "citymap.csv").string();
    std::ofstream(map_file_, std::ios::binary) << kCityMap;
  }
  void TearDown() override { fs::remove_all(tmp_); }

  Options WithMap(uint32_t per_city) const {
    Options o;
    o.citymap_file = map_file_;
    o.sources_per_city = per_city;
    return o;
  }

  const BenchCity* FindCity(const Sources& s, const std::string& name) {
    for (const BenchCity& c : s.cities()) {
      if (c.name == name) return &c;
    }
    return nullptr;
  }

  // Every source is distinct, has the wanted family, belongs to the city that
  // lists it, and the city map gives its address to that city.
  void ExpectConsistent(const Sources& s, uint8_t family) {
    ASSERT_NE(s.city_map(), nullptr);
    std::set<std::string> texts;
    for (uint32_t ci = 0; ci < s.cities().size(); ++ci) {
      const BenchCity& c = s.cities()[ci];
      const auto id = s.city_map()->FindCity(c.name);
      ASSERT_TRUE(id.has_value()) << c.name;
      for (uint32_t si : c.sources) {
        ASSERT_LT(si, s.sources().size());
        const Source& src = s.sources()[si];
        EXPECT_EQ(src.city, ci) << src.text;
        EXPECT_TRUE(texts.insert(src.text).second) << "duplicate " << src.text;
        common::IpAddress ip;
        ASSERT_TRUE(common::ParseIp(src.text, &ip)) << src.text;
        EXPECT_EQ(ip.family, family) << src.text;
        EXPECT_EQ(s.city_map()->Lookup(ip), *id) << src.text << " listed for " << c.name;
        EXPECT_EQ(src.address.family(), family == 4 ? AF_INET : AF_INET6) << src.text;
        // The ECS option carries the source's own /24 or /56.
        EXPECT_EQ(src.ecs.family, family == 4 ? dns::kEcsFamilyIpv4 : dns::kEcsFamilyIpv6);
        EXPECT_EQ(src.ecs.source_prefix, family == 4 ? 24 : 56);
        dns::ClientSubnet want;
        ASSERT_TRUE(
            dns::MakeClientSubnet({ip.bytes.data(), family == 4 ? 4u : 16u}, family == 4 ? 24 : 56, &want));
        EXPECT_EQ(src.ecs, want) << src.text;
      }
    }
    EXPECT_EQ(texts.size(), s.sources().size());
    const double sum = std::accumulate(s.cities().begin(), s.cities().end(), 0.0,
                                       [](double a, const BenchCity& c) { return a + c.share; });
    EXPECT_NEAR(sum, 1.0, 1e-12);
  }

  fs::path tmp_;
  std::string map_file_;
};

TEST_F(SourcesTest, EachIPv4CityGetsItsOwnSources) {
  for (uint32_t per_city : {1u, 16u, 64u, 200u}) {
    SCOPED_TRACE(per_city);
    auto s = Sources::Build(WithMap(per_city), AF_INET);
    ASSERT_TRUE(s.ok()) << s.status();
    ExpectConsistent(*s, 4);
    ASSERT_EQ(s->cities().size(), 3u);
    for (const char* name : {"city-a", "city-b", "city-c"}) {
      const BenchCity* c = FindCity(*s, name);
      ASSERT_NE(c, nullptr) << name;
      EXPECT_EQ(c->sources.size(), per_city) << name;
      EXPECT_DOUBLE_EQ(c->share, 1.0 / 3) << name;
    }
    // None of city-a's sources is in city-c's /24 inside it.
    const common::Cidr a = Net("127.1.0.0/16"), c = Net("127.1.5.0/24"), b = Net("127.2.0.0/16");
    for (uint32_t si : FindCity(*s, "city-a")->sources) {
      common::IpAddress ip;
      ASSERT_TRUE(common::ParseIp(s->sources()[si].text, &ip));
      EXPECT_TRUE(a.Contains(ip)) << s->sources()[si].text;
      EXPECT_FALSE(c.Contains(ip)) << s->sources()[si].text;
    }
    for (uint32_t si : FindCity(*s, "city-c")->sources) {
      common::IpAddress ip;
      ASSERT_TRUE(common::ParseIp(s->sources()[si].text, &ip));
      EXPECT_TRUE(c.Contains(ip)) << s->sources()[si].text;
    }
    for (uint32_t si : FindCity(*s, "city-b")->sources) {
      common::IpAddress ip;
      ASSERT_TRUE(common::ParseIp(s->sources()[si].text, &ip));
      EXPECT_TRUE(b.Contains(ip)) << s->sources()[si].text;
    }
    // city-d has no IPv4 prefix.
    EXPECT_THAT(s->skipped_cities(), Contains("city-d"));
    EXPECT_EQ(FindCity(*s, "city-d"), nullptr);
  }
}

TEST_F(SourcesTest, AnIPv6ServerGetsTheIPv6Cities) {
  auto s = Sources::Build(WithMap(8), AF_INET6);
  ASSERT_TRUE(s.ok()) << s.status();
  ExpectConsistent(*s, 6);
  ASSERT_EQ(s->cities().size(), 1u);
  EXPECT_EQ(s->cities()[0].name, "city-d");
  EXPECT_DOUBLE_EQ(s->cities()[0].share, 1.0);
  EXPECT_EQ(s->cities()[0].sources.size(), 8u);
  const common::Cidr d = Net("2001:db8:d::/48");
  for (const Source& src : s->sources()) {
    common::IpAddress ip;
    ASSERT_TRUE(common::ParseIp(src.text, &ip));
    EXPECT_TRUE(d.Contains(ip)) << src.text;
  }
  for (const char* name : {"city-a", "city-b", "city-c"}) EXPECT_THAT(s->skipped_cities(), Contains(name));
}

TEST_F(SourcesTest, CitySharesAreNormalised) {
  Options o = WithMap(4);
  o.city_share = {{"city-a", 3}, {"city-b", 1}};
  auto s = Sources::Build(o, AF_INET);
  ASSERT_TRUE(s.ok()) << s.status();
  ExpectConsistent(*s, 4);
  ASSERT_EQ(s->cities().size(), 2u);
  EXPECT_DOUBLE_EQ(FindCity(*s, "city-a")->share, 0.75);
  EXPECT_DOUBLE_EQ(FindCity(*s, "city-b")->share, 0.25);
  // A city not named gets no load and no sources.
  EXPECT_EQ(FindCity(*s, "city-c"), nullptr);
  EXPECT_THAT(s->skipped_cities(), Contains("city-c"));
  EXPECT_EQ(s->sources().size(), 8u);
}

TEST_F(SourcesTest, AShareOfZeroSkipsTheCity) {
  Options o = WithMap(4);
  o.city_share = {{"city-a", 0}, {"city-b", 2}, {"city-c", 2}};
  auto s = Sources::Build(o, AF_INET);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(FindCity(*s, "city-a"), nullptr);
  EXPECT_THAT(s->skipped_cities(), Contains("city-a"));
  EXPECT_DOUBLE_EQ(FindCity(*s, "city-b")->share, 0.5);
  EXPECT_THAT(s->skipped_cities(), Not(Contains("city-b")));
}

TEST_F(SourcesTest, CityShareErrors) {
  {
    Options o = WithMap(4);
    o.city_share = {{"city-a", 1}, {"atlantis", 1}};
    auto s = Sources::Build(o, AF_INET);
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(Message(s.status()), HasSubstr("--city-share"));
    EXPECT_THAT(Message(s.status()), HasSubstr("atlantis"));
  }
  {
    // A share for a city that cannot send over the server's family.
    Options o = WithMap(4);
    o.city_share = {{"city-d", 1}};
    auto s = Sources::Build(o, AF_INET);
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(Message(s.status()), HasSubstr("city-d"));
  }
  {
    // Every share 0: nothing to send from.
    Options o = WithMap(4);
    o.city_share = {{"city-a", 0}};
    EXPECT_FALSE(Sources::Build(o, AF_INET).ok());
  }
}

TEST_F(SourcesTest, MapFileErrors) {
  {
    Options o = WithMap(4);
    o.citymap_file = (tmp_ / "missing.csv").string();
    auto s = Sources::Build(o, AF_INET);
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(Message(s.status()), HasSubstr("missing.csv"));
  }
  {
    const std::string bad = (tmp_ / "bad.csv").string();
    std::ofstream(bad) << "127.1.0.0/16,city-a,\nnot-a-cidr,city-b,\n";
    Options o = WithMap(4);
    o.citymap_file = bad;
    auto s = Sources::Build(o, AF_INET);
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(Message(s.status()), HasSubstr("bad.csv"));
  }
  {
    // Only IPv6 prefixes, IPv4 server.
    const std::string v6 = (tmp_ / "v6.csv").string();
    std::ofstream(v6) << "2001:db8::/32,city-d,\n";
    Options o = WithMap(4);
    o.citymap_file = v6;
    auto s = Sources::Build(o, AF_INET);
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(Message(s.status()), HasSubstr("IPv4"));
  }
}

TEST(SourcesWithoutMapTest, DefaultSourceIsLoopback) {
  Options o;
  auto s = Sources::Build(o, AF_INET);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->city_map(), nullptr);
  ASSERT_EQ(s->sources().size(), 1u);
  EXPECT_EQ(s->sources()[0].text, "127.0.0.1");
  EXPECT_EQ(s->sources()[0].address.family(), AF_INET);
  EXPECT_EQ(s->sources()[0].city, 0u);
  ASSERT_EQ(s->cities().size(), 1u);
  EXPECT_DOUBLE_EQ(s->cities()[0].share, 1.0);
  EXPECT_EQ(s->cities()[0].sources, std::vector<uint32_t>{0});
  EXPECT_TRUE(s->skipped_cities().empty());

  auto s6 = Sources::Build(o, AF_INET6);
  ASSERT_TRUE(s6.ok()) << s6.status();
  ASSERT_EQ(s6->sources().size(), 1u);
  EXPECT_EQ(s6->sources()[0].text, "::1");
  EXPECT_EQ(s6->sources()[0].address.family(), AF_INET6);
}

TEST(SourcesWithoutMapTest, ExplicitSources) {
  Options o;
  o.sources = {"127.0.0.5", "127.0.0.6"};
  auto s = Sources::Build(o, AF_INET);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->sources().size(), 2u);
  EXPECT_EQ(s->sources()[0].text, "127.0.0.5");
  EXPECT_EQ(s->sources()[1].text, "127.0.0.6");
  EXPECT_EQ(s->cities()[0].sources, (std::vector<uint32_t>{0, 1}));
}

TEST(SourcesWithoutMapTest, WrongFamilyOrBadAddressIsAnError) {
  Options o;
  o.sources = {"127.0.0.5", "::1"};
  auto s = Sources::Build(o, AF_INET);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(Message(s.status()), HasSubstr("::1"));
  EXPECT_THAT(Message(s.status()), HasSubstr("family"));

  o.sources = {"127.0.0.5"};
  EXPECT_FALSE(Sources::Build(o, AF_INET6).ok());

  o.sources = {"nonsense"};
  s = Sources::Build(o, AF_INET);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(Message(s.status()), HasSubstr("nonsense"));
}

}  // namespace
}  // namespace weir::bench
