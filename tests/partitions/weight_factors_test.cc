#include "weir/partitions/weight_factors.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "test_util.h"
#include "weir/partitions/swrr.h"

namespace weir::partitions {
namespace {

using testing::Ip;
using testing::Key;
using testing::MakeAEntry;

WeightFactors Parse(std::string_view text) {
  common::LineErrors errors;
  auto f = WeightFactors::FromText(text, &errors);
  EXPECT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(errors.empty());
  return f.ok() ? *std::move(f) : WeightFactors();
}

std::optional<Partition> Cities(std::string_view name) {
  if (name == "beijing") return PartitionKey(CacheLevel::kCity, 3, {});
  if (name == "shanghai") return PartitionKey(CacheLevel::kCity, 4, {});
  return std::nullopt;
}

TEST(WeightFactorsText, ReadsAndFormatsCanonically) {
  const WeightFactors f = Parse(
      "# pushed by weir-mgmt\n"
      "\n"
      "CDN.Example.com.  beijing\t192.0.2.2 0.75   # trailing comment\n"
      "cdn.example.com beijing 192.0.2.1 1.5\n"
      "cdn.example.com common 2001:DB8::1 100\n"
      "cdn.example.com common 192.0.2.1 0.001\n"
      "a.example.com common 192.0.2.9 1e0\n");
  ASSERT_EQ(f.size(), 3u);
  const auto it = f.sets().find({Key("cdn.example.com"), "beijing"});
  ASSERT_NE(it, f.sets().end());
  ASSERT_EQ(it->second.addresses().size(), 2u);
  EXPECT_EQ(it->second.addresses()[0], (AddressFactor{Ip("192.0.2.1"), 1.5}));
  EXPECT_EQ(it->second.addresses()[1], (AddressFactor{Ip("192.0.2.2"), 0.75}));
  // Sets by wire name ("\1a" before "\3cdn"), then partition; IPv4 before
  // IPv6; names lower case with the dot; factors in shortest form.
  const std::string canonical =
      "a.example.com. common 192.0.2.9 1\n"
      "cdn.example.com. beijing 192.0.2.1 1.5\n"
      "cdn.example.com. beijing 192.0.2.2 0.75\n"
      "cdn.example.com. common 192.0.2.1 0.001\n"
      "cdn.example.com. common 2001:db8::1 100\n";
  EXPECT_EQ(f.Format(), canonical);
  const WeightFactors again = Parse(f.Format());
  EXPECT_EQ(again, f);
  EXPECT_EQ(again.Format(), canonical);
  EXPECT_TRUE(Parse("# nothing\n\n").empty());
}

TEST(WeightFactorsText, ShortestFactorReadsBackExactly) {
  const WeightFactors f = Parse("x.example common 192.0.2.1 0.1234567890123456789\n");
  EXPECT_EQ(Parse(f.Format()), f);
  EXPECT_EQ(f.Format(), "x.example. common 192.0.2.1 0.12345678901234568\n");
}

TEST(WeightFactorsText, EveryBadLineIsReportedAndNothingReturned) {
  std::string text =
      "ok.example common 192.0.2.1 1\n"        // 1
      "bad!name.example common 192.0.2.1 1\n"  // 2
      "ok.example bad/city 192.0.2.1 1\n"      // 3
      "ok.example common 192.0.2.300 1\n"      // 4
      "ok.example common 192.0.2.2 0\n"        // 5
      "ok.example common 192.0.2.3 -1\n"       // 6
      "ok.example common 192.0.2.4 1000\n"     // 7
      "ok.example common 192.0.2.5 nan\n"      // 8
      "ok.example common 192.0.2.6 lots\n"     // 9
      "ok.example common 192.0.2.7\n"          // 10
      "ok.example common 192.0.2.7 1 extra\n"  // 11
      "ok.example common 192.0.2.1 2\n"        // 12: duplicate of line 1
      "ok.example common 192.0.2.8 inf\n"      // 13
      "ok.example common 192.0.2.9 0.0009\n"   // 14
      "a..b common 192.0.2.1 1\n"              // 15
      "ok.example common 192.0.2.10 1.5x\n"    // 16
      "ok.example " +
      std::string(65, 'c') + " 192.0.2.1 1\n";  // 17
  // A set of 65 addresses: the 65th line is refused.
  for (int i = 0; i < 65; ++i) text += "big.example beijing 10.0.0." + std::to_string(i) + " 1\n";  // 18..82
  common::LineErrors errors;
  auto f = WeightFactors::FromText(text, &errors);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(), "line 2: bad name 'bad!name.example'");
  EXPECT_EQ(errors.Render("factors"),
            (std::vector<std::string>{
                "factors:2: bad name 'bad!name.example'",
                "factors:3: bad partition 'bad/city'",
                "factors:4: bad address '192.0.2.300'",
                "factors:5: factor '0' must be a number in 0.001..100",
                "factors:6: factor '-1' must be a number in 0.001..100",
                "factors:7: factor '1000' must be a number in 0.001..100",
                "factors:8: factor 'nan' must be a number in 0.001..100",
                "factors:9: factor 'lots' must be a number in 0.001..100",
                "factors:10: expected 4 fields 'name partition address factor', got 3",
                "factors:11: expected 4 fields 'name partition address factor', got 5",
                "factors:12: address 192.0.2.1 listed twice for ok.example. common (first on line 1)",
                "factors:13: factor 'inf' must be a number in 0.001..100",
                "factors:14: factor '0.0009' must be a number in 0.001..100",
                "factors:15: bad name 'a..b'",
                "factors:16: factor '1.5x' must be a number in 0.001..100",
                "factors:17: bad partition '" + std::string(65, 'c') + "'",
                "factors:82: more than 64 addresses for big.example. beijing",
            }));
  // The same set in another partition, or 64 addresses, is fine.
  std::string ok;
  for (int i = 0; i < 64; ++i) ok += "big.example beijing 10.0.0." + std::to_string(i) + " 1\n";
  ok += "big.example shanghai 10.0.0.0 1\n";
  EXPECT_EQ(Parse(ok).sets().at({Key("big.example"), "beijing"}).addresses().size(), 64u);
}

TEST(WeightFactorsBind, LeavesOutCitiesTheMapLacks) {
  const WeightFactors f = Parse(
      "cdn.example.com common 192.0.2.1 2\n"
      "cdn.example.com beijing 192.0.2.1 3\n"
      "cdn.example.com guangzhou 192.0.2.1 4\n"
      "img.example.com guangzhou 192.0.2.1 4\n"
      "img.example.com beijing 192.0.2.1 5\n");
  std::vector<std::string> asked;
  const BoundWeightFactors b = f.Bind([&](std::string_view city) {
    asked.emplace_back(city);
    return Cities(city);
  });
  EXPECT_EQ(b.size(), 3u);
  EXPECT_FALSE(b.empty());
  EXPECT_EQ(b.unbound_sets(), 2u);
  // Each city once; `common` is never asked.
  std::sort(asked.begin(), asked.end());
  EXPECT_EQ(asked, (std::vector<std::string>{"beijing", "guangzhou"}));

  const Partition beijing = PartitionKey(CacheLevel::kCity, 3, {});
  const uint8_t v4[4] = {192, 0, 2, 1};
  const FactorSet* s = b.Find(beijing, Key("cdn.example.com").span());
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->Factor(v4), 3.0);
  s = b.Find(kCommonPartition, Key("cdn.example.com").span());
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->Factor(v4), 2.0);
  ASSERT_NE(b.Find(beijing, Key("img.example.com").span()), nullptr);
  EXPECT_EQ(b.Find(beijing, Key("img.example.com").span())->Factor(v4), 5.0);
  EXPECT_EQ(b.Find(kCommonPartition, Key("img.example.com").span()), nullptr);
}

TEST(WeightFactorsBind, FindMatchesPartitionAndCanonicalName) {
  const BoundWeightFactors b = Parse("CDN.Example.COM shanghai 192.0.2.1 2\n").Bind(Cities);
  const Partition shanghai = PartitionKey(CacheLevel::kCity, 4, {});
  EXPECT_NE(b.Find(shanghai, Key("cdn.example.com").span()), nullptr) << "text of any case";
  EXPECT_EQ(b.Find(PartitionKey(CacheLevel::kCity, 3, {}), Key("cdn.example.com").span()), nullptr);
  EXPECT_EQ(b.Find(kCommonPartition, Key("cdn.example.com").span()), nullptr);
  EXPECT_EQ(b.Find(shanghai, Key("cdn.example.net").span()), nullptr);
  EXPECT_EQ(b.Find(shanghai, Key("www.cdn.example.com").span()), nullptr) << "exact names, not suffixes";
  // The hit path passes canonical (lower-case) keys; wire bytes in another
  // case are another key.
  const std::vector<uint8_t> upper = dns::testing::WireName("CDN.example.com.");
  EXPECT_EQ(b.Find(shanghai, upper), nullptr);
  EXPECT_EQ(b.Find(shanghai, {}), nullptr);

  const BoundWeightFactors none = WeightFactors().Bind(Cities);
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.Find(kCommonPartition, Key("cdn.example.com").span()), nullptr);
}

TEST(WeightFactorsPick, AllOneKeepsTheGslbWeights) {
  const std::vector<uint8_t> w = {1, 3, 200};
  const std::vector<double> f = {1, 1, 1};
  uint8_t out[3] = {};
  EXPECT_EQ(PickWeights(w, f, out), 0u);
  EXPECT_EQ(std::vector<uint8_t>(out, out + 3), w);
  EXPECT_EQ(MixPickDigest(0x1234, 0), 0x1234u) << "the entry's own SWRR sequence goes on";
}

TEST(WeightFactorsPick, ScalesWeightTimesFactor) {
  const std::vector<uint8_t> w = {1, 3};
  uint8_t out[2] = {};
  const uint64_t d = PickWeights(w, std::vector<double>{1.5, 0.75}, out);
  EXPECT_NE(d, 0u);
  // 1.5 : 2.25, the larger at 255.
  EXPECT_EQ(out[1], 255);
  EXPECT_EQ(out[0], 170);
  EXPECT_NEAR(double(out[0]) / out[1], 1.5 / 2.25, 0.5 / 255);

  uint8_t other[2] = {};
  const uint64_t d2 = PickWeights(w, std::vector<double>{1.2, 0.75}, other);
  EXPECT_NE(d2, 0u);
  EXPECT_NE(d2, d) << "another factor restarts the sequence";
  EXPECT_NE(MixPickDigest(7, d2), MixPickDigest(7, d));
  EXPECT_NE(MixPickDigest(7, d), 7u);
  // The same factors, the same digest.
  EXPECT_EQ(PickWeights(w, std::vector<double>{1.5, 0.75}, other), d);
}

TEST(WeightFactorsPick, ExtremeRatioFloorsAtOne) {
  const std::vector<uint8_t> w = {1, 255, 10};
  uint8_t out[3] = {};
  EXPECT_NE(PickWeights(w, std::vector<double>{0.001, 100, 1}, out), 0u);
  EXPECT_EQ(std::vector<uint8_t>(out, out + 3), (std::vector<uint8_t>{1, 255, 1}));
}

TEST(WeightFactorsPick, ScaledBackToTheGslbWeightsIsNoChange) {
  // Equal factors on weights already at the top: the same pick weights.
  const std::vector<uint8_t> w = {255, 255};
  uint8_t out[2] = {};
  EXPECT_EQ(PickWeights(w, std::vector<double>{2, 2}, out), 0u);
  EXPECT_EQ(std::vector<uint8_t>(out, out + 2), w);
}

TEST(WeightFactorsPick, CachedEntryUsesItsAddresses) {
  const dns::NameKey q = Key("cdn.example.com");
  // The entry's three addresses (192.0.2.3 at factor 1), and an IPv6
  // address of the same set: another family, corrected apart.
  const WeightFactors f = Parse(
      "cdn.example.com common 192.0.2.1 1.5\n"
      "cdn.example.com common 192.0.2.2 0.75\n"
      "cdn.example.com common 192.0.2.3 1\n"
      "cdn.example.com common c000:203:: 50\n");
  ASSERT_EQ(f.size(), 1u);
  const FactorSet& factors = f.sets().begin()->second;
  CacheEntryPtr e = MakeAEntry(kCommonPartition, q, {0xc0000201, 0xc0000202, 0xc0000203}, {1, 3, 2}, 100);
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(e->address_count(), 3);
  EXPECT_EQ(factors.Factor(e->address(0)), 1.5);
  EXPECT_EQ(factors.Factor(e->address(2)), 1.0);
  uint8_t out[3] = {};
  const uint64_t d = factors.PickWeights(*e, out);
  EXPECT_NE(d, 0u);
  // 1.5 : 2.25 : 2 -> 170 : 255 : 226.7
  EXPECT_EQ(std::vector<uint8_t>(out, out + 3), (std::vector<uint8_t>{170, 255, 227}));
  EXPECT_EQ(std::vector<uint8_t>(e->weights().begin(), e->weights().end()), (std::vector<uint8_t>{1, 3, 2}))
      << "the entry keeps the GSLB's weights for the weight option";

  // The picks follow the pick weights: SWRR gives each address its weight
  // per window.
  SwrrTable swrr;
  const uint64_t fp = MixPickDigest(e->fingerprint(), d);
  size_t count[3] = {};
  for (int i = 0; i < 170 + 255 + 227; ++i)
    ++count[swrr.Pick(e->lineage(), fp, std::span<const uint8_t>(out, 3))];
  EXPECT_EQ(count[0], 170u);
  EXPECT_EQ(count[1], 255u);
  EXPECT_EQ(count[2], 227u);

  // A set without any of the entry's addresses changes nothing; nor one
  // made for another set of addresses (the GSLB added or dropped one since
  // the feedback): the GSLB's weights until feedback for the new set.
  for (const char* other : {"cdn.example.com common 192.0.2.77 3\n",
                            "cdn.example.com common 192.0.2.1 1.5\ncdn.example.com common 192.0.2.2 0.75\n",
                            "cdn.example.com common 192.0.2.1 1.5\ncdn.example.com common 192.0.2.2 0.75\n"
                            "cdn.example.com common 192.0.2.3 1\ncdn.example.com common 192.0.2.4 2\n"}) {
    const WeightFactors unrelated = Parse(other);
    EXPECT_EQ(unrelated.sets().begin()->second.PickWeights(*e, out), 0u) << other;
    EXPECT_EQ(std::vector<uint8_t>(out, out + 3), (std::vector<uint8_t>{1, 3, 2})) << other;
  }
}

TEST(WeightFactorsPick, AaaaEntry) {
  const dns::NameKey q = Key("v6.example.com");
  CacheEntryBuilder b({kCommonPartition, q.span(), dns::type::kAaaa, dns::klass::kIn});
  const common::IpAddress a1 = Ip("2001:db8::1"), a2 = Ip("2001:db8::2");
  b.AddAddress(q.span(), a1.bytes, 300);
  b.AddAddress(q.span(), a2.bytes, 300);
  b.SetWeights(std::vector<uint8_t>{10, 10});
  auto e = b.Build(EntryKind::kPositive, 100);
  ASSERT_TRUE(e.ok()) << e.status();
  const WeightFactors f = Parse(
      "v6.example.com common 2001:db8::1 1\n"
      "v6.example.com common 2001:db8::2 4\n"
      "v6.example.com common 32.1.13.184 9\n");  // the first 4 bytes of 2001:db8::: another family
  uint8_t out[2] = {};
  EXPECT_NE(f.sets().begin()->second.PickWeights(**e, out), 0u);
  EXPECT_EQ(std::vector<uint8_t>(out, out + 2), (std::vector<uint8_t>{64, 255}));
}

}  // namespace
}  // namespace weir::partitions
