// gslb-sim's segment model (bench/gslb_sim/segments.cc, docs/gslb-sim.md
// "[segments]"): the layout, the shared answers, the scopes, the change
// epochs, the exports, the config errors, and the answers on the wire.
#include "segments.h"

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "authority.h"
#include "dns/test_util.h"
#include "weir/common/config_file.h"
#include "weir/dns/message.h"
#include "weir/partitions/citymap.h"

namespace weir::gslb_sim {
namespace {

using ::testing::ElementsAre;

constexpr const char* kZone = R"([[zone]]
origin = "example."
[zone.soa]
mname = "ns1"
rname = "hostmaster"
)";

// A [segments] table over kZone with its three required keys; `keys` go at
// its end (TOML forbids a key twice, so tests pass only other keys).
std::string Config(const std::string& keys) {
  return std::string(kZone) + "[segments]\nprefix = \"10.0.0.0/8\"\nnode_prefix = \"198.18.0.0/16\"\n" +
         "suffix = \"seg.example.\"\n" + keys;
}

SegmentModel Load(const std::string& keys) {
  absl::StatusOr<ZoneSet> zs = LoadConfigFromString(Config(keys), "z.toml");
  EXPECT_TRUE(zs.ok()) << zs.status();
  if (!zs.ok() || !zs->segments) std::abort();
  return *zs->segments;
}

NameBytes Key(const std::string& text) {
  dns::NameKey k;
  EXPECT_TRUE(dns::NameKeyFromText(text, &k)) << text;
  return NameBytes(reinterpret_cast<const char*>(k.bytes.data()), k.len);
}

uint32_t Ip(const char* text) {
  uint16_t family = 0;
  std::array<uint8_t, 16> b{};
  EXPECT_TRUE(ParseAddress(text, &family, &b));
  return uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | b[3];
}

std::string Dotted(const std::array<uint8_t, 16>& b) {
  return std::to_string(b[0]) + "." + std::to_string(b[1]) + "." + std::to_string(b[2]) + "." +
         std::to_string(b[3]);
}

// An answer as comparable text: "198.18.0.3/7 198.18.0.4/2" (address/weight).
std::string Answer(const SegmentModel& m, uint32_t group, std::optional<uint32_t> segment) {
  View v;
  m.Fill(group, segment, &v);
  std::string out;
  for (const WeightedAddress& a : v.addresses) {
    out += (out.empty() ? "" : " ") + Dotted(a.bytes) + "/" + std::to_string(a.weight);
  }
  return out;
}

std::vector<std::string> Errors(const std::string& text) {
  absl::StatusOr<ZoneSet> zs = LoadConfigFromString(text, "z.toml");
  EXPECT_FALSE(zs.ok()) << text;
  if (zs.ok()) return {};
  return common::ErrorLines(common::ToStd(zs.status().message()));
}

TEST(GslbSimSegmentsTest, DefaultsAndEveryKey) {
  const SegmentModel d = Load("");
  EXPECT_EQ(d.config().cities, 30u);
  EXPECT_EQ(d.config().segments_per_city, 300u);
  EXPECT_EQ(d.segments().size(), 9000u);
  EXPECT_EQ(d.config().name_groups, 16u);
  EXPECT_EQ(d.config().zone_origin, Key("example."));

  const SegmentModel m = Load(
      "seed = 9\ncities = 3\nsegments_per_city = 5\nsegment_lengths = [22, 23]\nnodes_per_city = 4\n"
      "addresses_per_answer = 3\nweights = false\nweight_range = [5, 5]\nttl = 7\nname_groups = 2\n"
      "city_level_fraction = 0.5\nsegments_per_answer = [2, 2]\nchange_every_s = 30\nchange_fraction = "
      "0.5\n");
  const SegmentConfig& c = m.config();
  EXPECT_EQ(c.seed, 9u);
  EXPECT_EQ(m.segments().size(), 15u);
  EXPECT_EQ((std::pair{c.min_length, c.max_length}), (std::pair<uint8_t, uint8_t>{22, 23}));
  EXPECT_EQ(c.nodes_per_city, 4u);
  EXPECT_EQ(c.addresses_per_answer, 3u);
  EXPECT_FALSE(c.weights);
  EXPECT_EQ(c.weight_min, 5);
  EXPECT_EQ(c.ttl, 7u);
  EXPECT_EQ(c.name_groups, 2u);
  EXPECT_EQ(c.city_level_fraction, 0.5);
  EXPECT_EQ((std::pair{c.run_min, c.run_max}), (std::pair<uint32_t, uint32_t>{2, 2}));
  EXPECT_EQ(c.change_every_s, 30u);
  EXPECT_EQ(c.change_fraction, 0.5);
  View v;
  m.Fill(1, 0, &v);
  EXPECT_EQ(v.ttl, 7u);
  ASSERT_EQ(v.addresses.size(), 3u);
  for (const WeightedAddress& a : v.addresses) EXPECT_EQ(a.weight, 5);
}

TEST(GslbSimSegmentsTest, ExampleConfigLoads) {
  absl::StatusOr<ZoneSet> zs =
      LoadConfig(std::string(WEIR_TEST_DATA_DIR) + "/../examples/gslb-sim/segments.toml");
  ASSERT_TRUE(zs.ok()) << zs.status();
  ASSERT_NE(zs->segments, nullptr);
  EXPECT_EQ(zs->segments->segments().size(), 9000u);
  EXPECT_EQ(zs->segments->config().change_every_s, 600u);
}

TEST(GslbSimSegmentsTest, DeterministicFromTheSeed) {
  const SegmentModel a = Load("seed = 3\n"), b = Load("seed = 3\n"), other = Load("seed = 4\n");
  ASSERT_EQ(a.segments().size(), b.segments().size());
  bool layout_differs = false;
  for (size_t i = 0; i < a.segments().size(); ++i) {
    EXPECT_EQ(a.segments()[i].start, b.segments()[i].start);
    EXPECT_EQ(a.segments()[i].length, b.segments()[i].length);
    layout_differs |= a.segments()[i].length != other.segments()[i].length;
  }
  EXPECT_TRUE(layout_differs);
  EXPECT_EQ(a.CityMapCsv(), b.CityMapCsv());
  for (const char* name : {"a.seg.example.", "www.b.seg.example.", "x9.seg.example."}) {
    EXPECT_EQ(a.GroupOf(Key(name)), b.GroupOf(Key(name)));
    for (uint32_t s = 0; s < a.segments().size(); s += 97) {
      EXPECT_EQ(Answer(a, a.GroupOf(Key(name)), s), Answer(b, b.GroupOf(Key(name)), s));
    }
  }
  // Names spread over the groups.
  std::set<uint32_t> groups;
  for (int i = 0; i < 200; ++i) groups.insert(a.GroupOf(Key("n" + std::to_string(i) + ".seg.example.")));
  EXPECT_EQ(groups.size(), 16u);
}

TEST(GslbSimSegmentsTest, SegmentsTileThePrefixWithoutOverlap) {
  const SegmentModel m = Load("segment_lengths = [20, 24]\n");
  const auto& segs = m.segments();
  ASSERT_EQ(segs.size(), 9000u);
  uint64_t next = Ip("10.0.0.0");
  std::set<int> lengths;
  std::vector<uint32_t> per_city(30);
  for (size_t i = 0; i < segs.size(); ++i) {
    const SegmentModel::Segment& s = segs[i];
    EXPECT_EQ(s.start, next) << i;           // contiguous: no gap, no overlap
    EXPECT_EQ(s.start % s.Size(), 0u) << i;  // aligned to its own size
    EXPECT_GE(s.length, 20);
    EXPECT_LE(s.length, 24);
    lengths.insert(s.length);
    EXPECT_EQ(s.city, i / 300) << "a city's segments are neighbours";
    ++per_city[s.city];
    next = uint64_t{s.start} + s.Size();
  }
  EXPECT_LE(next, uint64_t{Ip("11.0.0.0")}) << "inside the prefix";
  EXPECT_EQ(lengths.size(), 5u) << "segments differ in size";
  for (uint32_t n : per_city) EXPECT_EQ(n, 300u);
  // The lookup finds each segment at both ends, and nothing past the last.
  for (uint32_t i = 0; i < segs.size(); ++i) {
    EXPECT_EQ(m.Find(segs[i].start), i);
    EXPECT_EQ(m.Find(segs[i].start + segs[i].Size() - 1), i);
  }
  EXPECT_EQ(m.Find(static_cast<uint32_t>(next)), std::nullopt);
  EXPECT_EQ(m.Find(Ip("9.255.255.255")), std::nullopt);
  EXPECT_EQ(m.Find(Ip("11.0.0.0")), std::nullopt);
}

TEST(GslbSimSegmentsTest, ScopeIsTheSegmentLengthAndNoSegmentGetsTheDefault) {
  const SegmentModel m = Load("cities = 2\nsegments_per_city = 10\nname_groups = 1\n");
  for (uint32_t i = 0; i < m.segments().size(); ++i) {
    View v;
    m.Fill(0, i, &v);
    EXPECT_EQ(v.scope, m.segments()[i].length);
    ASSERT_TRUE(v.cidr.has_value());
    EXPECT_EQ(v.cidr->length, m.segments()[i].length);
    EXPECT_EQ(v.addresses.size(), 2u);
  }
  // Outside every segment: scope 0 and city 0's first nodes, 198.18.0.1 and .2.
  View v;
  m.Fill(0, std::nullopt, &v);
  EXPECT_EQ(v.scope, 0);
  EXPECT_FALSE(v.cidr.has_value());
  ASSERT_EQ(v.addresses.size(), 2u);
  EXPECT_EQ(v.addresses[0].bytes[3], 1);
  EXPECT_EQ(v.addresses[1].bytes[3], 2);
}

TEST(GslbSimSegmentsTest, NeighboursShareAnswersInRunsAndCityLevelCities) {
  // Runs of exactly 3 neighbours: segments 3k..3k+2 of a city share one answer.
  const SegmentModel runs =
      Load("segments_per_answer = [3, 3]\ncity_level_fraction = 0\nnodes_per_city = 64\n");
  size_t distinct_neighbours = 0;
  for (uint32_t g = 0; g < 16; ++g) {
    for (uint32_t s = 0; s < runs.segments().size(); ++s) {
      const uint32_t i = s % 300;
      if (i % 3 != 0) {
        EXPECT_EQ(Answer(runs, g, s), Answer(runs, g, s - 1)) << g << " " << s;
      } else if (i != 0) {
        distinct_neighbours += Answer(runs, g, s) != Answer(runs, g, s - 1);
      }
    }
  }
  // Different runs draw their rotations independently: most differ.
  EXPECT_GT(distinct_neighbours, 16u * 30 * 99 * 9 / 10);

  // Every city one answer per group.
  const SegmentModel city = Load("city_level_fraction = 1\n");
  for (uint32_t g = 0; g < 16; ++g) {
    std::set<std::string> answers;
    for (uint32_t s = 0; s < 300; ++s) answers.insert(Answer(city, g, s));
    EXPECT_EQ(answers.size(), 1u);
  }

  // The default mix: some (group, city) pairs are city-level, others have
  // many distinct answers, and the segmentation differs between groups.
  const SegmentModel mix = Load("nodes_per_city = 32\n");
  size_t city_level = 0, many = 0;
  std::set<std::vector<bool>> cuts;  // where a city-0 answer changes, per group
  for (uint32_t g = 0; g < 16; ++g) {
    std::vector<bool> cut;
    for (uint32_t c = 0; c < 30; ++c) {
      std::set<std::string> answers;
      for (uint32_t i = 0; i < 300; ++i) {
        answers.insert(Answer(mix, g, c * 300 + i));
        if (c == 0 && i > 0) cut.push_back(Answer(mix, g, i) != Answer(mix, g, i - 1));
      }
      city_level += answers.size() == 1;
      many += answers.size() >= 10;
    }
    cuts.insert(cut);
  }
  EXPECT_GT(city_level, 16u * 30 / 10);  // 20% expected
  EXPECT_GT(many, 16u * 30 / 2);
  EXPECT_GT(cuts.size(), 8u);
}

TEST(GslbSimSegmentsTest, EachEpochMovesTheConfiguredFraction) {
  SegmentModel m = Load("change_fraction = 0.25\ncity_level_fraction = 0\nnodes_per_city = 16\n");
  auto snapshot = [&] {
    std::vector<std::string> out;
    for (uint32_t g = 0; g < 16; ++g) {
      for (uint32_t s = 0; s < m.segments().size(); ++s) out.push_back(Answer(m, g, s));
    }
    return out;
  };
  const std::vector<std::string> e0 = snapshot();
  std::vector<std::string> prev = e0;
  for (uint64_t e = 1; e <= 3; ++e) {
    m.SetEpoch(e);
    EXPECT_EQ(m.epoch(), e);
    const std::vector<std::string> now = snapshot();
    size_t moved = 0;
    for (size_t i = 0; i < now.size(); ++i) moved += now[i] != prev[i];
    const double fraction = static_cast<double>(moved) / static_cast<double>(now.size());
    EXPECT_NEAR(fraction, 0.25, 0.02) << "epoch " << e;
    prev = now;
  }
  // Epochs are a pure function of the number: back to 0, then straight to 3.
  const std::vector<std::string> e3 = prev;
  m.SetEpoch(0);
  EXPECT_EQ(snapshot(), e0);
  m.SetEpoch(3);
  EXPECT_EQ(snapshot(), e3);

  SegmentModel still = Load("change_fraction = 0\n");
  const std::string before = Answer(still, 0, 0);
  still.SetEpoch(50);
  EXPECT_EQ(Answer(still, 0, 0), before);

  SegmentModel all = Load("change_fraction = 1\ncities = 1\nsegments_per_city = 50\n");
  std::vector<std::string> a0;
  for (uint32_t s = 0; s < 50; ++s) a0.push_back(Answer(all, 3, s));
  all.SetEpoch(1);
  for (uint32_t s = 0; s < 50; ++s) EXPECT_NE(Answer(all, 3, s), a0[s]) << s;
}

TEST(GslbSimSegmentsTest, ClockAdvancesEveryPeriodAndCanBeSet) {
  using namespace std::chrono_literals;
  const SegmentClock::Clock::time_point t0{};
  SegmentClock clock(60, t0);
  EXPECT_EQ(clock.EpochAt(t0), 0u);
  EXPECT_EQ(clock.EpochAt(t0 + 59s), 0u);
  EXPECT_EQ(clock.EpochAt(t0 + 60s), 1u);
  EXPECT_EQ(clock.EpochAt(t0 + 185s), 3u);
  clock.Set(10, t0 + 185s);
  EXPECT_EQ(clock.EpochAt(t0 + 185s), 10u);
  EXPECT_EQ(clock.EpochAt(t0 + 245s), 11u);
  clock.SetPeriod(0, t0 + 245s);  // never again by itself
  EXPECT_EQ(clock.EpochAt(t0 + 10000s), 11u);
}

TEST(GslbSimSegmentsTest, TruthListsEverySlash24WithItsSegmentCityAndAnswer) {
  SegmentModel m = Load("");  // the defaults: 9,000 segments in a /8
  m.SetEpoch(2);
  const std::string name = Key("www.seg.example.");
  const uint32_t group = m.GroupOf(name);
  absl::StatusOr<std::string> text = SegmentTruth(m, "www.seg.example", 2);
  ASSERT_TRUE(text.ok()) << text.status();
  const nlohmann::json doc = nlohmann::json::parse(*text);
  EXPECT_EQ(doc["name"], "www.seg.example.");
  EXPECT_EQ(doc["group"], group);
  EXPECT_EQ(doc["epoch"], 2);
  EXPECT_EQ(doc["segments"].size(), 9000u);
  const nlohmann::json& subnets = doc["subnets"];
  ASSERT_EQ(subnets.size(), 65536u);
  size_t outside = 0;
  for (size_t i = 0; i < subnets.size(); i += 61) {
    const uint32_t a = Ip("10.0.0.0") + static_cast<uint32_t>(i << 8);
    const std::optional<uint32_t> seg = m.Find(a);
    View v;
    m.Fill(group, seg, &v);
    const nlohmann::json& o = subnets[i];
    EXPECT_EQ(o["scope"], v.scope);
    ASSERT_EQ(o["addresses"].size(), v.addresses.size());
    for (size_t k = 0; k < v.addresses.size(); ++k) {
      EXPECT_EQ(o["weights"][k], v.addresses[k].weight);
      EXPECT_EQ(o["addresses"][k], Dotted(v.addresses[k].bytes));
    }
    if (seg) {
      EXPECT_EQ(o["segment"], v.cidr->ToText());
      EXPECT_EQ(o["city"], SegmentModel::CityName(m.segments()[*seg].city));
    } else {
      EXPECT_TRUE(o["segment"].is_null());
      ++outside;
    }
  }
  EXPECT_GT(outside, 0u) << "the tail of the /8 past the last segment";
  // By group, and the errors.
  EXPECT_TRUE(SegmentTruth(m, "group=15", 0).ok());
  EXPECT_EQ(SegmentTruth(m, "group=16", 0).status().message(),
            "'group=16': the group must be a number from 0 to 15");
  EXPECT_EQ(SegmentTruth(m, "www.example.", 0).status().message(),
            "'www.example.' is not below the segments suffix seg.example.");
}

TEST(GslbSimSegmentsTest, CityMapCsvIsOneWeirReads) {
  const SegmentModel m = Load("cities = 5\nsegments_per_city = 40\n");
  absl::StatusOr<std::unique_ptr<const partitions::CityMap>> map =
      partitions::CityMap::FromCsv(m.CityMapCsv());
  ASSERT_TRUE(map.ok()) << map.status();
  for (const SegmentModel::Segment& s : m.segments()) {
    for (uint32_t a : {s.start, s.start + s.Size() - 1}) {
      EXPECT_EQ((*map)->city((*map)->LookupV4(a)).name, SegmentModel::CityName(s.city));
    }
  }
  EXPECT_EQ((*map)->LookupV4(Ip("10.200.0.0")), (*map)->default_city());
}

TEST(GslbSimSegmentsTest, CarrierScaleLoadsFast) {
  const auto start = std::chrono::steady_clock::now();
  SegmentModel m = Load("name_groups = 64\n");
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, std::chrono::milliseconds(500));
  // 100k names need no storage: each one hashes to a group.
  std::map<uint32_t, int> per_group;
  for (int i = 0; i < 100000; ++i) ++per_group[m.GroupOf(Key("n" + std::to_string(i) + ".seg.example."))];
  EXPECT_EQ(per_group.size(), 64u);
}

TEST(GslbSimSegmentsTest, RunScopeIsTheWidestAlignedPrefixInsideTheRun) {
  // scope = "run": an answer is valid for the shortest aligned prefix that
  // holds the segment and lies inside its run; checked against the runs of
  // the ground truth: every segment inside the scope is of the same run, the
  // next shorter prefix is not.
  const SegmentModel m = Load("scope = \"run\"\nname_groups = 2\n");
  const SegmentModel plain = Load("name_groups = 2\n");
  const auto& segs = m.segments();
  size_t wider = 0, wide = 0;
  for (uint32_t g = 0; g < 2; ++g) {
    const nlohmann::json truth = nlohmann::json::parse(m.TruthJson(g, 0, ""));
    ASSERT_EQ(truth["segments"].size(), segs.size());
    // The run of the segment holding `addr`, -1 outside every segment.
    auto run_at = [&](uint64_t addr) -> int64_t {
      const std::optional<uint32_t> s = m.Find(static_cast<uint32_t>(addr));
      return s ? truth["segments"][*s]["run"].get<int64_t>() : -1;
    };
    for (uint32_t i = 0; i < segs.size(); ++i) {
      View v;
      m.Fill(g, i, &v);
      const Prefix scope = m.ScopeOf(g, i);
      EXPECT_EQ(v.scope, scope.length);
      EXPECT_EQ(truth["segments"][i]["scope"], scope.length);
      ASSERT_TRUE(v.cidr.has_value());
      EXPECT_EQ(v.cidr->ToText(), scope.ToText());
      ASSERT_LE(scope.length, segs[i].length);
      const uint64_t size = uint64_t{1} << (32 - scope.length);
      const uint64_t start = segs[i].start & ~(size - 1);
      EXPECT_EQ(Ip(scope.ToText().substr(0, scope.ToText().find('/')).c_str()), start) << i;
      const int64_t run = run_at(segs[i].start);
      for (uint64_t a = start; a < start + size; a += 256) ASSERT_EQ(run_at(a), run) << i << " " << a;
      if (scope.length > 8) {
        const uint64_t up = size * 2, up_start = start & ~(up - 1);
        bool leaves = false;
        for (uint64_t a = up_start; a < up_start + up && !leaves; a += 256) leaves = run_at(a) != run;
        EXPECT_TRUE(leaves) << i;
      }
      wider += scope.length < segs[i].length;
      wide += scope.length <= 16;
      // The answers are those of scope = "segment".
      EXPECT_EQ(Answer(m, g, i), Answer(plain, g, i));
    }
  }
  EXPECT_GT(wider, segs.size() / 4);
  EXPECT_GT(wide, 0u);  // city-wide runs give wide prefixes
}

TEST(GslbSimSegmentsTest, ConfigErrorsNameTheirPosition) {
  auto one = [](const std::string& text) {
    const std::vector<std::string> e = Errors(text);
    return e.size() == 1 ? e[0] : ::testing::PrintToString(e);
  };
  const std::string head = std::string(kZone) + "[segments]\n";  // [segments] is line 6
  const std::string ok_prefixes = "node_prefix = \"198.18.0.0/16\"\nsuffix = \"seg.example.\"\n";
  EXPECT_EQ(one(head + "prefix = \"10.0.0.1/8\"\n" + ok_prefixes),
            "z.toml:7:10: cidr '10.0.0.1/8' has bits set past /8");
  EXPECT_EQ(one(head + "prefix = \"10.0.0.0\"\n" + ok_prefixes),
            "z.toml:7:10: cidr '10.0.0.0' needs a /length");
  EXPECT_EQ(one(head + "prefix = \"2001:db8::/32\"\n" + ok_prefixes),
            "z.toml:7:10: 'prefix' must be an IPv4 prefix, got '2001:db8::/32'");
  EXPECT_EQ(one(head + ok_prefixes), "z.toml:6:1: missing key 'prefix'");
  const std::string p = head + "prefix = \"10.0.0.0/16\"\n" + ok_prefixes;  // keys from line 10
  EXPECT_EQ(one(p + "cities = 0\n"), "z.toml:10:10: 'cities' must be between 1 and 65535, not 0");
  EXPECT_EQ(one(p + "scope = \"city\"\n"),
            "z.toml:10:9: 'scope' must be \"segment\" or \"run\", not \"city\"");
  EXPECT_EQ(one(p + "scope = 24\n"), "z.toml:10:9: 'scope' must be a string");
  EXPECT_EQ(one(p + "segments_per_city = 0\n"),
            "z.toml:10:21: 'segments_per_city' must be between 1 and 1048576, not 0");
  EXPECT_EQ(one(p + "nodes_per_city = 0\n"),
            "z.toml:10:18: 'nodes_per_city' must be between 1 and 65535, not 0");
  EXPECT_EQ(one(p + "name_groups = 0\n"), "z.toml:10:15: 'name_groups' must be between 1 and 1024, not 0");
  EXPECT_EQ(
      one(p + "segment_lengths = [24, 20]\n"),
      "z.toml:10:19: 'segment_lengths' must be [low, high], two integers from 1 to 24, low <= high, not [24, "
      "20]");
  EXPECT_EQ(one(p + "segment_lengths = [12, 24]\n"),
            "z.toml:10:19: segments of /12 do not fit in 'prefix' 10.0.0.0/16: lengths must be at least /16");
  EXPECT_EQ(one(p + "segment_lengths = 22\n"),
            "z.toml:10:19: 'segment_lengths' must be [low, high], two integers from 1 to 24");
  // 9,000 segments of /20../24 in a /16 (256 /24s): they do not fit.
  EXPECT_EQ(
      one(p),
      "z.toml:6:1: 9000 segments of /20../24 do not fit in 10.0.0.0/16: it is full after 86 (use a shorter "
      "prefix, longer segment lengths or fewer segments)");
  EXPECT_EQ(one(p + "cities = 2\nsegments_per_city = 10\nnodes_per_city = 4\naddresses_per_answer = 5\n"),
            "z.toml:13:24: 'addresses_per_answer' (5) must not exceed 'nodes_per_city' (4)");
  EXPECT_EQ(
      one(head + "prefix = \"10.0.0.0/8\"\nnode_prefix = \"198.18.0.0/28\"\nsuffix = \"seg.example.\"\n"),
      "z.toml:6:1: 30 cities x 8 nodes do not fit in 198.18.0.0/28");
  EXPECT_EQ(
      one(head + "prefix = \"10.0.0.0/8\"\nnode_prefix = \"198.18.0.0/16\"\nsuffix = \"seg.example.org.\"\n"),
      "z.toml:9:10: 'suffix' seg.example.org. is in no [[zone]]");
  EXPECT_EQ(one(head + "prefix = \"10.0.0.0/8\"\nnode_prefix = \"198.18.0.0/16\"\nsuffix = \"seg\"\n"),
            "z.toml:9:10: 'suffix' must be absolute (end with '.')");
  EXPECT_EQ(one(p + "change_fraction = 1.5\n"),
            "z.toml:10:19: 'change_fraction' must be between 0.000000 and 1.000000");
  EXPECT_EQ(one(p + "colour = 1\n"), "z.toml:10:1: unknown key 'colour' in [segments]");
  EXPECT_THAT(Errors(p + "cities = 0\nname_groups = 5000\n"),
              ElementsAre("z.toml:10:10: 'cities' must be between 1 and 65535, not 0",
                          "z.toml:11:15: 'name_groups' must be between 1 and 1024, not 5000"));
}

// The answers on the wire, through the Authority.
class SegmentAnswerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<ZoneSet> zs = LoadConfigFromString(
        Config("cities = 2\nsegments_per_city = 8\nsegment_lengths = [22, 24]\nnodes_per_city = 16\n") +
            "[[zone.record]]\nname = \"static.seg\"\ntype = \"A\"\ndata = \"198.18.9.9\"\n",
        "z.toml");
    ASSERT_TRUE(zs.ok()) << zs.status();
    model_ = zs->segments;
    authority_ = std::make_unique<Authority>(*std::move(zs), 65001, 1);
  }

  struct Reply {
    uint16_t rcode = 0;
    std::vector<std::string> addresses;  // dotted quads
    int scope = -1;                      // -1: no ECS
    std::vector<uint16_t> weights;
  };

  // Asks `qname` A with ECS `ecs` (3 bytes, /24) if given, and the weight option.
  Reply Ask(const std::string& qname, std::optional<std::array<uint8_t, 3>> ecs,
            uint16_t qtype = dns::type::kA) {
    std::vector<uint8_t> opts = {0xfd, 0xe9, 0, 0};  // the weight option, empty
    if (ecs) {
      const std::vector<uint8_t> e = {0, 8, 0, 7, 0, 1, 24, 0, (*ecs)[0], (*ecs)[1], (*ecs)[2]};
      opts.insert(opts.end(), e.begin(), e.end());
    }
    const std::vector<uint8_t> q =
        dns::testing::PacketBuilder().Header(7, 0, 1, 0, 0, 1).Question(qname, qtype).Opt(1232, opts).Build();
    Client client;
    client.family = 1;
    client.address = {127, 0, 0, 1};
    uint8_t out[4096];
    QueryRecord rec;
    const size_t n = authority_->Handle(q, client, out, sizeof(out), &rec);
    EXPECT_GT(n, 12u);
    Reply r;
    r.rcode = out[3] & 0x0F;
    const uint16_t an = dns::Load16(out + 6), ns = dns::Load16(out + 8), ar = dns::Load16(out + 10);
    size_t pos = 12;
    auto skip_name = [&] {
      while (out[pos] != 0 && (out[pos] & 0xC0) != 0xC0) pos += 1 + out[pos];
      pos += out[pos] == 0 ? 1 : 2;
    };
    skip_name();
    pos += 4;
    for (int i = 0; i < an + ns + ar; ++i) {
      skip_name();
      const uint16_t t = dns::Load16(out + pos);
      const uint16_t rdlen = dns::Load16(out + pos + 8);
      const uint8_t* rd = out + pos + 10;
      if (t == dns::type::kA && i < an) {
        r.addresses.push_back(Dotted({rd[0], rd[1], rd[2], rd[3]}));
      }
      if (t == dns::type::kOpt) {
        for (size_t o = 0; o + 4 <= rdlen;) {
          const uint16_t code = dns::Load16(rd + o), len = dns::Load16(rd + o + 2);
          if (code == 8) r.scope = rd[o + 4 + 3];
          if (code == 65001) {
            for (size_t k = 0; k + 1 < len; k += 2) r.weights.push_back(dns::Load16(rd + o + 4 + k));
          }
          o += 4u + len;
        }
      }
      pos += 10u + rdlen;
    }
    return r;
  }

  std::shared_ptr<SegmentModel> model_;
  std::unique_ptr<Authority> authority_;
};

TEST_F(SegmentAnswerTest, EcsPicksTheSegmentAndScopeIsItsLength) {
  const NameBytes name = Key("a.seg.example.");
  const uint32_t group = model_->GroupOf(name);
  for (uint32_t i = 0; i < model_->segments().size(); ++i) {
    const SegmentModel::Segment& s = model_->segments()[i];
    const uint32_t last24 = s.start + s.Size() - 256;
    const Reply r = Ask("a.seg.example", std::array<uint8_t, 3>{static_cast<uint8_t>(last24 >> 24),
                                                                static_cast<uint8_t>(last24 >> 16),
                                                                static_cast<uint8_t>(last24 >> 8)});
    EXPECT_EQ(r.rcode, 0);
    EXPECT_EQ(r.scope, s.length) << i;
    View v;
    model_->Fill(group, i, &v);
    ASSERT_EQ(r.addresses.size(), 2u);
    EXPECT_EQ(r.addresses,
              (std::vector<std::string>{Dotted(v.addresses[0].bytes), Dotted(v.addresses[1].bytes)}));
    EXPECT_EQ(r.weights, (std::vector<uint16_t>{v.addresses[0].weight, v.addresses[1].weight}));
  }
  // Outside the segments, and without ECS (127.0.0.1): scope 0, the default.
  const Reply out = Ask("a.seg.example", std::array<uint8_t, 3>{10, 200, 0});
  EXPECT_EQ(out.scope, 0);
  EXPECT_EQ(out.addresses, (std::vector<std::string>{"198.18.0.1", "198.18.0.2"}));
  const Reply none = Ask("a.seg.example", std::nullopt);
  EXPECT_EQ(none.scope, -1);
  EXPECT_EQ(none.addresses, (std::vector<std::string>{"198.18.0.1", "198.18.0.2"}));
  // AAAA: NODATA; a name with its own data keeps it; the suffix itself is not a model name.
  const Reply aaaa = Ask("a.seg.example", std::array<uint8_t, 3>{10, 0, 0}, dns::type::kAaaa);
  EXPECT_EQ(aaaa.rcode, 0);
  EXPECT_TRUE(aaaa.addresses.empty());
  EXPECT_EQ(Ask("static.seg.example", std::array<uint8_t, 3>{10, 0, 0}).addresses,
            std::vector<std::string>{"198.18.9.9"});
  EXPECT_EQ(Ask("seg.example", std::array<uint8_t, 3>{10, 0, 0}).addresses, std::vector<std::string>{});
  EXPECT_EQ(Ask("a.other.example", std::array<uint8_t, 3>{10, 0, 0}).rcode, 3);  // NXDOMAIN
}

TEST_F(SegmentAnswerTest, EpochChangesTheAnswer) {
  const Reply before = Ask("b.seg.example", std::array<uint8_t, 3>{10, 0, 0});
  // change_fraction 0.1: some epoch soon moves segment 0's run.
  bool changed = false;
  for (uint64_t e = 1; e <= 100 && !changed; ++e) {
    authority_->SetSegmentsEpoch(e);
    changed = Ask("b.seg.example", std::array<uint8_t, 3>{10, 0, 0}).addresses != before.addresses;
  }
  EXPECT_TRUE(changed);
  authority_->SetSegmentsEpoch(0);
  EXPECT_EQ(Ask("b.seg.example", std::array<uint8_t, 3>{10, 0, 0}).addresses, before.addresses);
}

}  // namespace
}  // namespace weir::gslb_sim
