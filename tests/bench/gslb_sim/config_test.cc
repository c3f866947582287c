// gslb-sim's config loader (bench/gslb_sim/config.cc): the format of
// docs/gslb-sim.md, and every error reported as the daemons' configs report
// theirs (common::TomlChecker): "file:line:column: reason", in file order.
#include "config.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "weir/common/config_file.h"
#include "weir/dns/message.h"

namespace weir::gslb_sim {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr const char* kZone = R"([[zone]]
origin = "example.com."
[zone.soa]
mname = "ns1"
rname = "hostmaster"
)";

NameBytes Key(const char* text) {
  dns::NameKey k;
  EXPECT_TRUE(dns::NameKeyFromText(text, &k)) << text;
  return NameBytes(reinterpret_cast<const char*>(k.bytes.data()), k.len);
}

// The errors of a config that must be rejected, one per entry.
std::vector<std::string> Errors(const std::string& text) {
  absl::StatusOr<ZoneSet> zs = LoadConfigFromString(text, "z.toml");
  EXPECT_FALSE(zs.ok()) << text;
  if (zs.ok()) return {};
  EXPECT_EQ(zs.status().code(), absl::StatusCode::kInvalidArgument);
  return common::ErrorLines(common::ToStd(zs.status().message()));
}

TEST(GslbSimConfigTest, ExampleConfigLoads) {
  absl::StatusOr<ZoneSet> zs =
      LoadConfig(std::string(WEIR_TEST_DATA_DIR) + "/../examples/gslb-sim/zones.toml");
  ASSERT_TRUE(zs.ok()) << zs.status();
  EXPECT_FALSE(zs->zones.empty());
}

TEST(GslbSimConfigTest, EveryKeyIsRead) {
  absl::StatusOr<ZoneSet> zs = LoadConfigFromString(R"(
[defaults]
empty_weight_option = true
[faults]
latency_ms = 5
loss = 0.25
servfail = true
truncate = false

[[zone]]
origin = "example.com."
lame = "no-aa"
[zone.soa]
mname = "ns1"
rname = "hostmaster.example.org."
serial = 7
refresh = 1
retry = 2
expire = 3
minimum = 4
ttl = 5

[[zone.record]]
name = "www"
type = "A"
ttl = 30
data = "192.0.2.1"

[[zone.record]]
name = "t"
type = "TXT"
data = ["a", "bc"]

[[zone.record]]
name = "@"
type = "MX"
data = "10 mail"

[[zone.name]]
name = "x"
ttl = 20
weights = false
empty_weight_option = false
loss = 1
servfail = 0.5
  [[zone.name.view]]
  cidr = "198.51.100.0/24"
  scope = 20
  addresses = ["192.0.2.10", "2001:db8::1"]
  weights = [2, 300]
  [zone.name.default]
  ttl = 7
  addresses = ["192.0.2.99"]

[[zone.delegation]]
name = "sub"
ttl = 60
ns = ["ns.sub"]
  [[zone.delegation.glue]]
  name = "ns.sub"
  addresses = ["192.0.2.53", "2001:db8::53"]
)",
                                                    "z.toml");
  ASSERT_TRUE(zs.ok()) << zs.status();
  EXPECT_EQ(zs->source_path, "z.toml");
  EXPECT_TRUE(zs->empty_weight_option);
  EXPECT_EQ(zs->global_faults.latency_ms, 5u);
  EXPECT_EQ(zs->global_faults.loss, 0.25);
  EXPECT_EQ(zs->global_faults.servfail, 1.0);
  EXPECT_EQ(zs->global_faults.truncate, false);
  ASSERT_EQ(zs->zones.size(), 1u);
  const Zone& z = zs->zones[0];
  EXPECT_EQ(z.origin, Key("example.com."));
  EXPECT_EQ(z.lame, Lame::kNoAa);
  EXPECT_EQ(z.soa.mname, Key("ns1.example.com."));
  EXPECT_EQ(z.soa.rname, Key("hostmaster.example.org."));
  EXPECT_EQ(z.soa.serial, 7u);
  EXPECT_EQ(z.soa.minimum, 4u);
  EXPECT_EQ(z.soa.ttl, 5u);

  const Node& www = z.nodes.at(Key("www.example.com."));
  ASSERT_NE(www.Find(dns::type::kA), nullptr);
  EXPECT_EQ(www.Find(dns::type::kA)->ttl, 30u);
  EXPECT_EQ(www.Find(dns::type::kA)->rdata, std::vector<std::string>{std::string("\xc0\x00\x02\x01", 4)});
  EXPECT_EQ(z.nodes.at(Key("t.example.com.")).Find(dns::type::kTxt)->rdata[0], std::string("\1a\2bc"));
  EXPECT_EQ(z.nodes.at(Key("example.com.")).Find(dns::type::kMx)->rdata[0],
            std::string("\0\x0a", 2) + Key("mail.example.com."));

  const NameSettings& x = *z.nodes.at(Key("x.example.com.")).settings;
  EXPECT_FALSE(x.weights);
  EXPECT_EQ(x.empty_weight_option, false);
  EXPECT_EQ(x.faults.loss, 1.0);
  EXPECT_EQ(x.faults.servfail, 0.5);
  ASSERT_EQ(x.views.size(), 1u);
  EXPECT_EQ(x.views[0].Label(), "198.51.100.0/24");
  EXPECT_EQ(x.views[0].scope, 20);
  EXPECT_EQ(x.views[0].ttl, 20u);  // the name's
  ASSERT_EQ(x.views[0].addresses.size(), 2u);
  EXPECT_EQ(x.views[0].addresses[1].family, 2);
  EXPECT_EQ(x.views[0].addresses[1].weight, 300);  // out of the valid range on purpose
  ASSERT_TRUE(x.default_view.has_value());
  EXPECT_EQ(x.default_view->ttl, 7u);

  const Delegation& d = z.cuts.at(Key("sub.example.com."));
  EXPECT_EQ(d.ttl, 60u);
  EXPECT_EQ(d.ns, std::vector<NameBytes>{Key("ns.sub.example.com.")});
  ASSERT_EQ(d.glue.size(), 2u);
  EXPECT_EQ(d.glue[1].type, dns::type::kAaaa);
}

TEST(GslbSimConfigTest, UnknownKeysWrongTypesAndRangesAsTheDaemonsReportThem) {
  EXPECT_THAT(Errors(std::string("colour = 1\n") + kZone),
              ElementsAre("z.toml:1:1: unknown key 'colour' in [top level]"));
  EXPECT_THAT(Errors(std::string(kZone) + "[[zone.name]]\nname = \"x\"\nadresses = []\n"),
              ElementsAre("z.toml:8:1: unknown key 'adresses' in [zone.name]"));
  EXPECT_THAT(Errors(std::string(kZone) + "[[zone.record]]\nname = \"w\"\ntype = \"A\"\nttl = \"long\"\n"
                                          "data = \"192.0.2.1\"\n"),
              ElementsAre("z.toml:9:7: 'ttl' must be an integer"));
  EXPECT_THAT(Errors(std::string(kZone) + "serial = -1\n"),
              ElementsAre("z.toml:6:10: 'serial' must be between 0 and 4294967295, not -1"));
  EXPECT_THAT(Errors(std::string("[faults]\nloss = 2\n") + kZone),
              ElementsAre("z.toml:2:8: 'loss' must be between 0.000000 and 1.000000"));
  EXPECT_THAT(Errors(std::string("[faults]\nloss = nan\n") + kZone),
              ElementsAre("z.toml:2:8: 'loss' must be between 0.000000 and 1.000000"));
  EXPECT_THAT(Errors(std::string("[faults]\nservfail = \"often\"\n") + kZone),
              ElementsAre("z.toml:2:12: 'servfail' must be true, false or a probability from 0 to 1"));
  EXPECT_THAT(Errors(std::string("[faults]\ntruncate = 1\n") + kZone),
              ElementsAre("z.toml:2:12: 'truncate' must be true or false"));
  EXPECT_THAT(Errors(std::string("defaults = 3\n") + kZone),
              ElementsAre("z.toml:1:12: 'defaults' must be a table ([defaults])"));
}

TEST(GslbSimConfigTest, EveryErrorInFileOrder) {
  EXPECT_THAT(
      Errors(std::string(kZone) +
             "[[zone.record]]\nname = \"a\"\ntype = \"A\"\ndata = \"192.0.2.300\"\n"  // 6-9
             "[[zone.record]]\nname = \"b\"\ntype = \"SPF\"\ndata = \"x\"\n"          // 10-13
             "[[zone.name]]\nname = \"c\"\nttl = 1.5\n"),                             // 14-16
      ElementsAre("z.toml:9:8: invalid IP address '192.0.2.300'",
                  "z.toml:12:8: unsupported record type 'SPF' (A, AAAA, CNAME, DNAME, NS, TXT, MX, SOA, "
                  "RRSIG)",
                  "z.toml:16:7: 'ttl' must be an integer"));
}

TEST(GslbSimConfigTest, ReasonsOfTheFormat) {
  auto one = [](const std::string& text) {
    const std::vector<std::string> e = Errors(text);
    return e.size() == 1 ? e[0] : ::testing::PrintToString(e);
  };
  EXPECT_EQ(one(""), "z.toml:1:1: no [[zone]] defined");
  EXPECT_EQ(one("[[zone]]\n"), "z.toml:1:1: missing key 'origin'");
  EXPECT_EQ(one("[[zone]]\norigin = \"example.com\"\n"),
            "z.toml:2:10: origin must be absolute (end with '.')");
  EXPECT_EQ(one("[[zone]]\norigin = \"example.com.\"\n"),
            "z.toml:1:1: zone 'example.com.' needs [zone.soa] or an SOA record");
  EXPECT_EQ(one(std::string(kZone) +
                "[[zone.name]]\nname = \"x\"\n  [[zone.name.view]]\n  cidr = \"198.51.100.0/24\"\n"
                "  addresses = [\"192.0.2.1\", \"192.0.2.2\"]\n  weights = [2, 1, 3]\n"),
            "z.toml:11:13: 'weights' has 3 entries for 2 addresses");
  EXPECT_EQ(one(std::string(kZone) +
                "[[zone.name]]\nname = \"x\"\n  [[zone.name.view]]\n  cidr = \"198.51.100.1/24\"\n"
                "  addresses = [\"192.0.2.1\"]\n"),
            "z.toml:9:10: cidr '198.51.100.1/24' has bits set past /24");
  EXPECT_EQ(one(std::string(kZone) + "[[zone.delegation]]\nname = \"sub\"\n"),
            "z.toml:6:1: 'ns' must be a non-empty array of server names");
  EXPECT_EQ(one("[[zone]]\norigin = \"example.com.\"\nlame = \"sometimes\"\n[zone.soa]\nmname = \"a\"\n"
                "rname = \"b\"\n"),
            "z.toml:3:8: 'lame' must be \"refused\" or \"no-aa\", got 'sometimes'");
  EXPECT_EQ(one(std::string(kZone) +
                "[[zone]]\norigin = \"example.com.\"\n[zone.soa]\nmname = \"a\"\nrname = \"b\"\n"),
            "z.toml:6:1: zone 'example.com.' defined twice");
  // A rule across the zone is not checked while an element of it is wrong:
  // the broken SOA record is reported once, not again as a missing SOA.
  EXPECT_EQ(one("[[zone]]\norigin = \"example.com.\"\n[[zone.record]]\nname = \"@\"\ntype = \"SOA\"\n"
                "data = \"ns1 hostmaster 1 2 3\"\n"),
            "z.toml:6:8: SOA data must be 'mname rname serial refresh retry expire minimum'");
  EXPECT_THAT(one("[[zone]\n"), HasSubstr("z.toml:1:"));  // a syntax error
}

TEST(GslbSimConfigTest, UnreadableFile) {
  absl::StatusOr<ZoneSet> zs = LoadConfig("/nonexistent/zones.toml");
  ASSERT_FALSE(zs.ok());
  EXPECT_THAT(std::string(zs.status().message()), HasSubstr("/nonexistent/zones.toml"));
}

}  // namespace
}  // namespace weir::gslb_sim
