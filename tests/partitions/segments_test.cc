#include "weir/partitions/segments.h"

#include "weir/partitions/segment_report.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "test_util.h"
#include "weir/common/rcu.h"

namespace weir::partitions {
namespace {

using testing::Ip;
using testing::Key;
using testing::MakeAEntry;

constexpr uint16_t kA = dns::type::kA;

dns::ClientSubnet Subnet(std::string_view address) { return SubnetEcs(Ip(address)); }

class SegmentTableTest : public ::testing::Test {
 protected:
  // What the table answers for a subscriber: its segment's text and
  // fingerprint, or "-".
  std::string SegmentOf(const SegmentTable& t, std::string_view who,
                        const dns::NameKey& name = Key("x.cdn")) {
    const SegmentSet* set = t.Find(name.span(), kA);
    const Segment* s = set != nullptr ? set->Match(SegmentAddressOf(Ip(who))) : nullptr;
    return s == nullptr ? "-" : SegmentText(*s) + "=" + std::to_string(s->fingerprint);
  }
  SegmentTable::Learned Learn(SegmentTable& t, std::string_view subnet, uint8_t scope, uint64_t fp,
                              uint32_t now = 1000, uint32_t ttl = 60, size_t max = 256,
                              const dns::NameKey& name = Key("x.cdn")) {
    return t.Learn(name, kA, Subnet(subnet), scope, fp, ttl, now, max);
  }
  common::RcuThread rcu_;
};

TEST_F(SegmentTableTest, ThreeSegmentsOfOneCityEachKeepTheirAnswer) {
  SegmentTable t(16);
  const auto a = Learn(t, "10.1.0.1", 20, 1);
  const auto b = Learn(t, "10.1.16.1", 22, 2);
  const auto c = Learn(t, "10.1.32.1", 24, 3);
  ASSERT_TRUE(a.stored && b.stored && c.stored);
  EXPECT_EQ(LevelOf(a.answer), CacheLevel::kAdaptive);
  EXPECT_EQ(std::set<Partition>({a.answer, b.answer, c.answer}).size(), 3u);
  EXPECT_EQ(SegmentOf(t, "10.1.15.200"), "10.1.0.0/20=1");
  EXPECT_EQ(SegmentOf(t, "10.1.19.7"), "10.1.16.0/22=2");
  EXPECT_EQ(SegmentOf(t, "10.1.32.9"), "10.1.32.0/24=3");
  EXPECT_EQ(SegmentOf(t, "10.1.33.9"), "-") << "never learned";
  EXPECT_EQ(SegmentOf(t, "10.1.20.1"), "-") << "past the /22";
  EXPECT_EQ(t.stats().segments.load(), 3u);
  EXPECT_EQ(t.stats().names.load(), 1u);
  // Another name knows none of them.
  EXPECT_EQ(t.Find(Key("y.cdn").span(), kA), nullptr);
  EXPECT_EQ(t.Find(Key("x.cdn").span(), dns::type::kAaaa), nullptr);
}

TEST_F(SegmentTableTest, ScopeIsCutToTheSourceAndZeroIsTheWholeFamily) {
  SegmentTable t(16);
  // A scope longer than the /24 asked: the /24.
  Learn(t, "10.9.9.9", 28, 7);
  EXPECT_EQ(SegmentOf(t, "10.9.9.200"), "10.9.9.0/24=7");
  // Scope 0: every IPv4 subscriber; longer segments still win.
  Learn(t, "10.200.0.1", 0, 8);
  EXPECT_EQ(SegmentOf(t, "192.0.2.1"), "0.0.0.0/0=8");
  EXPECT_EQ(SegmentOf(t, "10.9.9.1"), "10.9.9.0/24=7");
  EXPECT_EQ(SegmentOf(t, "2001:db8::1"), "-") << "IPv6 is a space of its own";
  Learn(t, "2001:db8:1::1", 48, 9);
  EXPECT_EQ(SegmentOf(t, "2001:db8:1:ff::1"), "2001:db8:1::/48=9");
  EXPECT_EQ(SegmentOf(t, "::ffff:10.9.9.3"), "10.9.9.0/24=7") << "v4-mapped is IPv4";
}

TEST_F(SegmentTableTest, SiblingsWithOneAnswerMergeIntoTheirParent) {
  SegmentTable t(16);
  const auto a = Learn(t, "10.1.0.1", 21, 5);
  const auto b = Learn(t, "10.1.8.1", 21, 5);
  EXPECT_EQ(a.answer, b.answer) << "one entry per distinct answer";
  EXPECT_EQ(SegmentOf(t, "10.1.3.1"), "10.1.0.0/20=5");
  EXPECT_EQ(SegmentOf(t, "10.1.15.1"), "10.1.0.0/20=5");
  EXPECT_EQ(t.stats().merges.Read(), 1u);
  EXPECT_EQ(t.stats().segments.load(), 1u);
  // Repeatedly: the /20's sibling with the same answer makes a /19.
  Learn(t, "10.1.16.1", 20, 5);
  EXPECT_EQ(SegmentOf(t, "10.1.31.1"), "10.1.0.0/19=5");
  EXPECT_EQ(t.stats().merges.Read(), 2u);
  // A sibling with another answer is not merged.
  Learn(t, "10.1.32.1", 19, 6);
  EXPECT_EQ(SegmentOf(t, "10.1.40.1"), "10.1.32.0/19=6");
  EXPECT_EQ(t.stats().segments.load(), 2u);
  // Nor one past its time.
  Learn(t, "10.2.0.1", 24, 4, /*now=*/1000, /*ttl=*/10);
  Learn(t, "10.2.1.1", 24, 4, /*now=*/1011);
  EXPECT_EQ(SegmentOf(t, "10.2.1.1"), "10.2.1.0/24=4");
  EXPECT_EQ(t.stats().merges.Read(), 2u);
}

TEST_F(SegmentTableTest, AnotherAnswerInsideASegmentSplitsIt) {
  SegmentTable t(16);
  Learn(t, "10.1.0.1", 16, 1);
  const auto inner = Learn(t, "10.1.77.1", 24, 2);
  EXPECT_EQ(t.stats().splits.Read(), 1u);
  EXPECT_EQ(SegmentOf(t, "10.1.77.9"), "10.1.77.0/24=2");
  EXPECT_EQ(SegmentOf(t, "10.1.76.9"), "10.1.0.0/16=1");
  EXPECT_EQ(SegmentOf(t, "10.1.78.9"), "10.1.0.0/16=1");
  EXPECT_EQ(SegmentOf(t, "10.1.255.9"), "10.1.0.0/16=1");
  // The GSLB answers the whole /16 alike again: the inner segment goes,
  // and with it its answer (the caller erases that entry).
  const auto whole = Learn(t, "10.1.77.1", 16, 1);
  EXPECT_EQ(SegmentOf(t, "10.1.77.9"), "10.1.0.0/16=1");
  EXPECT_EQ(whole.unused, std::vector<Partition>{inner.answer});
  EXPECT_EQ(t.stats().absorbed.Read(), 1u);
  EXPECT_EQ(t.stats().segments.load(), 1u);
}

TEST_F(SegmentTableTest, ARefreshWithTheSameAnswerKeepsTheSegmentsSequence) {
  SegmentTable t(16);
  Learn(t, "10.1.0.1", 24, 1, 1000);
  const uint64_t id = t.Find(Key("x.cdn").span(), kA)->segments()[0].id;
  Learn(t, "10.1.0.9", 24, 1, 1050);
  EXPECT_EQ(t.Find(Key("x.cdn").span(), kA)->segments()[0].id, id);
  EXPECT_EQ(t.Find(Key("x.cdn").span(), kA)->segments()[0].expires, 1110u);
  Learn(t, "10.1.0.9", 24, 2, 1060);
  EXPECT_NE(t.Find(Key("x.cdn").span(), kA)->segments()[0].id, id) << "another answer: a new sequence";
}

TEST_F(SegmentTableTest, TheSameAnswerAgainMovesTheTimeOnInPlace) {
  SegmentTable t(16);
  Learn(t, "10.1.0.1", 24, 1, 1000);
  Learn(t, "10.3.0.1", 22, 2, 1000);
  const SegmentSet* set = t.Find(Key("x.cdn").span(), kA);
  // Learned again after its TTL, same answer: the published set is the
  // same object, its time moved on.
  const auto l = Learn(t, "10.1.0.7", 24, 1, 1070, /*ttl=*/30);
  EXPECT_TRUE(l.stored);
  EXPECT_EQ(t.Find(Key("x.cdn").span(), kA), set);
  const Segment& x = set->segments()[0];
  EXPECT_EQ(SegmentText(x), "10.1.0.0/24");
  EXPECT_EQ(x.Expires(), 1100u);
  EXPECT_EQ(x.Ttl(), 30u);
  EXPECT_EQ(x.Learned(), 1070u);
  EXPECT_EQ(l.answer, x.answer);
  EXPECT_EQ(t.stats().refreshed.Read(), 1u);
  EXPECT_EQ(t.stats().learned.Read(), 3u);
  EXPECT_EQ(SegmentOf(t, "10.1.0.200"), "10.1.0.0/24=1");

  // Anything else publishes a new set: another answer,
  Learn(t, "10.1.0.7", 24, 5, 1071);
  const SegmentSet* after_change = t.Find(Key("x.cdn").span(), kA);
  EXPECT_NE(after_change, set);
  EXPECT_EQ(SegmentOf(t, "10.1.0.200"), "10.1.0.0/24=5");
  // a live sibling with the same answer (they merge),
  Learn(t, "10.1.1.7", 24, 5, 1072);
  EXPECT_EQ(SegmentOf(t, "10.1.0.200"), "10.1.0.0/23=5");
  const SegmentSet* merged = t.Find(Key("x.cdn").span(), kA);
  Learn(t, "10.1.1.7", 23, 5, 1073);  // the merged parent learned as such: in place
  EXPECT_EQ(t.Find(Key("x.cdn").span(), kA), merged);
  // a longer segment holding the subnet asked (absorbed by the wider answer).
  Learn(t, "10.3.1.1", 24, 7, 1074);  // a split inside 10.3.0.0/22
  EXPECT_EQ(SegmentOf(t, "10.3.1.9"), "10.3.1.0/24=7");
  const SegmentSet* split = t.Find(Key("x.cdn").span(), kA);
  Learn(t, "10.3.1.1", 22, 2, 1075);
  EXPECT_NE(t.Find(Key("x.cdn").span(), kA), split);
  EXPECT_EQ(SegmentOf(t, "10.3.1.9"), "10.3.0.0/22=2");
  EXPECT_EQ(t.stats().absorbed.Read(), 1u);
  EXPECT_EQ(t.stats().refreshed.Read(), 2u);
}

TEST_F(SegmentTableTest, AHotNameKeepsThousandsOfSegmentsAndRefreshesThemInPlace) {
  // 6,000 /24 segments of one name (a GSLB with 300 segments in each of 20
  // cities), every other /24 so none merge, alternating answers.
  SegmentTable t(16, 100000);
  const dns::NameKey name = Key("hot.cdn");
  auto subnet = [](int i) {
    return std::to_string(10 + (2 * i) / 65536) + "." + std::to_string((2 * i) / 256 % 256) + "." +
           std::to_string((2 * i) % 256) + ".1";
  };
  for (int i = 0; i < 6000; ++i) {
    ASSERT_TRUE(t.Learn(name, kA, Subnet(subnet(i)), 24, 1 + i % 7, 60, 1000, 16384).stored) << i;
  }
  EXPECT_EQ(t.stats().segments.load(), 6000u);
  EXPECT_EQ(t.stats().bound_drops.Read(), 0u);
  const SegmentSet* set = t.Find(name.span(), kA);
  for (int i = 0; i < 6000; ++i) {
    const Segment* s = set->Match(SegmentAddressOf(Ip(subnet(i))));
    ASSERT_NE(s, nullptr) << i;
    EXPECT_EQ(s->fingerprint, uint64_t(1 + i % 7)) << i;
  }
  // One TTL later every segment is learned again with its answer: all in
  // place, nothing republished.
  for (int i = 0; i < 6000; ++i) t.Learn(name, kA, Subnet(subnet(i)), 24, 1 + i % 7, 60, 1060, 16384);
  EXPECT_EQ(t.Find(name.span(), kA), set);
  EXPECT_EQ(t.stats().refreshed.Read(), 6000u);
  for (const Segment& s : set->segments()) EXPECT_EQ(s.Expires(), 1120u);
  // The bound, at the most a tag allows.
  EXPECT_EQ(SegmentTable::kMaxMaxSegments, size_t{65534});
}

TEST_F(SegmentTableTest, AParentLeftByRefreshesInPlaceIsSweptOnceBothHalvesCoverIt) {
  SegmentTable t(16);
  Learn(t, "10.0.0.1", 23, 1, 1000, 30);  // 10.0.0.0/23 until 1030
  Learn(t, "10.0.0.1", 24, 2, 1010);      // both halves with other answers
  Learn(t, "10.0.1.1", 24, 3, 1010);
  EXPECT_EQ(t.stats().segments.load(), 3u) << "the /23 is still served: it stays";
  // Past the /23's time the halves are learned again with their answers:
  // refreshes in place, which leave the /23 (it serves no address).
  Learn(t, "10.0.0.1", 24, 2, 1080);
  Learn(t, "10.0.1.1", 24, 3, 1080);
  EXPECT_EQ(t.stats().refreshed.Read(), 2u);
  EXPECT_EQ(t.stats().segments.load(), 3u);
  // The sweep takes it (long before the stale window's end).
  EXPECT_EQ(t.Sweep(1081, /*horizon=*/86400, 1 << 10), 1u);
  EXPECT_EQ(t.stats().segments.load(), 2u);
  EXPECT_EQ(SegmentOf(t, "10.0.0.9"), "10.0.0.0/24=2");
  EXPECT_EQ(SegmentOf(t, "10.0.1.9"), "10.0.1.0/24=3");
  EXPECT_EQ(t.Sweep(1082, 86400, 1 << 10), 0u);
}

TEST_F(SegmentTableTest, ABoundLoweredByATagReloadDropsTheLeastRecentInOnePass) {
  // 5,000 segments learned one second apart, then a learn under a bound of
  // 10 (the tag was reloaded): the new segment and the 9 learned last stay.
  SegmentTable t(16, 100000);
  auto subnet = [](int i) {
    return "10." + std::to_string((2 * i) / 256) + "." + std::to_string((2 * i) % 256) + ".1";
  };
  for (int i = 0; i < 5000; ++i) {
    ASSERT_TRUE(Learn(t, subnet(i), 24, 1 + i % 5, 1000 + i, 100000, 65534).stored) << i;
  }
  EXPECT_EQ(t.stats().segments.load(), 5000u);
  const auto l = Learn(t, "10.200.0.1", 24, 9, 30000, 60, 10);
  EXPECT_TRUE(l.stored);
  EXPECT_EQ(t.stats().segments.load(), 10u);
  EXPECT_EQ(t.stats().bound_drops.Read(), 4991u);
  EXPECT_EQ(SegmentOf(t, "10.200.0.1"), "10.200.0.0/24=9");
  for (int i = 4991; i < 5000; ++i) EXPECT_NE(SegmentOf(t, subnet(i)), "-") << i;
  EXPECT_EQ(SegmentOf(t, subnet(4990)), "-");
  EXPECT_EQ(SegmentOf(t, subnet(0)), "-");
}

TEST_F(SegmentTableTest, TheBoundDropsWhatIsPastItsTimeThenTheLeastRecentlyLearned) {
  SegmentTable t(16);
  // Four /24s far apart (no siblings), learned one second apart; the first
  // has a short TTL and is past its time when the fifth comes.
  Learn(t, "10.0.0.1", 24, 1, 1000, /*ttl=*/5, /*max=*/4);
  Learn(t, "10.0.2.1", 24, 2, 1001, 60, 4);
  Learn(t, "10.0.4.1", 24, 3, 1002, 60, 4);
  Learn(t, "10.0.6.1", 24, 4, 1003, 60, 4);
  Learn(t, "10.0.8.1", 24, 5, 1010, 60, 4);
  EXPECT_EQ(t.stats().segments.load(), 4u);
  EXPECT_EQ(SegmentOf(t, "10.0.0.1"), "-") << "past its time: dropped first";
  EXPECT_EQ(t.stats().bound_drops.Read(), 1u);
  // Now all are served: the least recently learned (10.0.2.0/24) goes.
  Learn(t, "10.0.10.1", 24, 6, 1011, 60, 4);
  EXPECT_EQ(SegmentOf(t, "10.0.2.1"), "-");
  EXPECT_EQ(t.stats().bound_drops.Read(), 2u);
  // The least recently learned goes even when its sibling is a segment:
  // merging would give its subscribers the sibling's answer.
  Learn(t, "10.0.5.1", 24, 9, 1012, 60, 4);  // 10.0.4.0/24's sibling
  EXPECT_EQ(t.stats().segments.load(), 4u);
  EXPECT_EQ(t.stats().bound_drops.Read(), 3u);
  EXPECT_EQ(SegmentOf(t, "10.0.4.1"), "-");
  EXPECT_EQ(SegmentOf(t, "10.0.5.1"), "10.0.5.0/24=9");
  EXPECT_EQ(SegmentOf(t, "10.0.10.1"), "10.0.10.0/24=6") << "the newest stays";
}

TEST_F(SegmentTableTest, ADroppedSegmentTakesTheSegmentsAroundItAlong) {
  // A /24 with its own answer inside a /16: when the bound drops the /24,
  // its subscribers must be asked again, not given the /16's answer.
  SegmentTable t(16);
  Learn(t, "10.1.5.1", 24, 2, 1000, 60, 2);
  Learn(t, "10.1.200.1", 16, 1, 1001, 60, 2);
  EXPECT_EQ(SegmentOf(t, "10.1.5.9"), "10.1.5.0/24=2");
  EXPECT_EQ(SegmentOf(t, "10.1.9.9"), "10.1.0.0/16=1");
  const auto l = Learn(t, "10.9.0.1", 24, 3, 1002, 60, 2);
  EXPECT_EQ(SegmentOf(t, "10.1.5.9"), "-");
  EXPECT_EQ(SegmentOf(t, "10.1.9.9"), "-");
  EXPECT_EQ(SegmentOf(t, "10.9.0.9"), "10.9.0.0/24=3");
  EXPECT_EQ(l.unused.size(), 2u) << "both answers' entries may go";
}

TEST_F(SegmentTableTest, ManyMoreNamesThanRoomAndASegmentBound) {
  // More names than the table holds: the first 1,000 are learned and found,
  // the others counted as overflow and never found.
  SegmentTable t(1000, 100000);
  for (int i = 0; i < 5000; ++i) {
    const dns::NameKey name = Key("n" + std::to_string(i) + ".cdn");
    const auto l = t.Learn(name, kA, Subnet("10.1.2.3"), 24, i + 1, 60, 1000, 256);
    EXPECT_EQ(l.stored, i < 1000) << i;
  }
  EXPECT_EQ(t.stats().names.load(), 1000u);
  EXPECT_EQ(t.stats().overflow.Read(), 4000u);
  for (int i = 0; i < 5000; ++i) {
    const dns::NameKey name = Key("n" + std::to_string(i) + ".cdn");
    const SegmentSet* s = t.Find(name.span(), kA);
    ASSERT_EQ(s != nullptr, i < 1000) << i;
    if (s != nullptr) {
      EXPECT_EQ(s->segments()[0].fingerprint, uint64_t(i + 1));
    }
  }
  // The total bound: a learn that adds a segment past it is not stored.
  SegmentTable small(16, 3);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(Learn(small, "10.0." + std::to_string(2 * i) + ".1", 24, 1).stored);
  EXPECT_FALSE(Learn(small, "10.0.9.1", 24, 2).stored);
  EXPECT_TRUE(Learn(small, "10.0.0.1", 24, 3).stored) << "replacing a segment adds none";
  EXPECT_EQ(small.stats().overflow.Read(), 1u);
}

TEST_F(SegmentTableTest, LongestMatchOverManyNestedSegments) {
  // Nested and disjoint segments of every length, checked against a plain
  // scan over every /24 of the /16.
  SegmentTable t(16);
  uint64_t fp = 1;
  for (int len = 16; len <= 24; len += 2) {
    for (int j = 0; j < 256; j += (1 << (24 - len)) * 3)
      Learn(t, "10.7." + std::to_string(j) + ".1", len, fp++ * 2);
  }
  const SegmentSet* set = t.Find(Key("x.cdn").span(), kA);
  ASSERT_NE(set, nullptr);
  for (int j = 0; j < 256; ++j) {
    const SegmentAddress a = SegmentAddressOf(Ip("10.7." + std::to_string(j) + ".5"));
    const Segment* best = nullptr;
    for (const Segment& s : set->segments())
      if (s.Contains(a.family, a.bits) && (best == nullptr || s.len > best->len)) {
        best = &s;
      }
    EXPECT_EQ(set->Match(a), best) << j;
  }
}

TEST_F(SegmentTableTest, DiffFindsSplitAndAlikeCitiesAndProposesAMapThatFollowsTheGslb) {
  auto cm = CityMap::FromCsv(
      "10.1.0.0/16,a,10.1.0.0/24\n10.2.0.0/16,b,10.2.0.0/24\n10.3.0.0/16,c,10.3.0.0/24\n"
      "2001:db8::/32,a,2001:db8::/56\n");
  ASSERT_TRUE(cm.ok()) << cm.status();
  SegmentTable t(16);
  // x: city a is two segments (a /17 each); b and c are one segment each,
  // with the same answer for both. y: the same picture.
  for (const char* name : {"x.cdn", "y.cdn"}) {
    const dns::NameKey k = Key(name);
    t.Learn(k, kA, Subnet("10.1.1.1"), 17, 1, 60, 1000, 256);
    t.Learn(k, kA, Subnet("10.1.200.1"), 17, 2, 60, 1000, 256);
    t.Learn(k, kA, Subnet("10.2.0.1"), 16, 3, 60, 1000, 256);
    t.Learn(k, kA, Subnet("10.3.0.1"), 16, 3, 60, 1000, 256);
  }
  auto diff = DiffSegments(t, **cm, {});
  ASSERT_TRUE(diff.ok()) << diff.status();
  EXPECT_EQ(diff->names, 2u);
  ASSERT_EQ(diff->cities.size(), 3u);
  EXPECT_EQ(diff->cities[0].cells, 2u);
  EXPECT_EQ(diff->cities[0].slash24s, 256u);
  EXPECT_EQ(diff->cities[1].cells, 1u);
  ASSERT_EQ(diff->alike.size(), 1u);
  EXPECT_EQ(diff->alike[0],
            (std::vector<PartitionId>{(*cm)->FindCity("b").value(), (*cm)->FindCity("c").value()}));
  std::map<std::string, std::pair<std::string, std::string>> lines;
  for (const SegmentDiff::Line& l : diff->proposal) lines[l.cidr] = {l.city, l.ecs};
  EXPECT_EQ(lines["10.1.0.0/17"].second, "10.1.0.0/24");
  EXPECT_EQ(lines["10.1.128.0/17"].second, "10.1.128.0/24");
  EXPECT_NE(lines["10.1.0.0/17"].first, lines["10.1.128.0/17"].first);
  EXPECT_EQ(lines["10.2.0.0/16"], std::make_pair(std::string("b_c"), std::string("10.2.0.0/24")));
  EXPECT_EQ(lines["10.3.0.0/16"], std::make_pair(std::string("b_c"), std::string("10.2.0.0/24")));
  EXPECT_EQ(lines["2001:db8::/32"], std::make_pair(std::string("a"), std::string("2001:db8::/56")))
      << "IPv6 lines are carried over";
  EXPECT_EQ(lines.size(), 5u);
  // The proposal reads back as a city map.
  std::string csv;
  for (const SegmentDiff::Line& l : diff->proposal) csv += l.cidr + "," + l.city + "," + l.ecs + "\n";
  EXPECT_TRUE(CityMap::FromCsv(csv).ok()) << csv;
  // One name asked for; a map too large is refused.
  SegmentDiffOptions only;
  only.names.push_back(Key("y.cdn"));
  EXPECT_EQ(DiffSegments(t, **cm, only)->names, 1u);
  SegmentDiffOptions small;
  small.max_slash24s = 500;
  EXPECT_FALSE(DiffSegments(t, **cm, small).ok());
}

TEST_F(SegmentTableTest, SweepDropsWhatIsLongPastItsTimeAndFreesTheName) {
  SegmentTable t(2);
  Learn(t, "10.1.0.1", 20, 1, /*now=*/1000, /*ttl=*/60, 256, Key("a.cdn"));
  Learn(t, "10.2.0.1", 20, 2, /*now=*/1000, /*ttl=*/60, 256, Key("b.cdn"));
  Learn(t, "10.2.64.1", 20, 3, /*now=*/5000, /*ttl=*/60, 256, Key("b.cdn"));
  EXPECT_FALSE(Learn(t, "10.3.0.1", 20, 4, 5000, 60, 256, Key("c.cdn")).stored) << "two names at most";
  // An hour past a's and b's first segment: they go; b keeps its second.
  EXPECT_EQ(t.Sweep(1060 + 3600, 3600, 1 << 20), 2u);
  EXPECT_EQ(t.Find(Key("a.cdn").span(), kA), nullptr);
  EXPECT_EQ(SegmentOf(t, "10.2.64.1", Key("b.cdn")), "10.2.64.0/20=3");
  EXPECT_EQ(SegmentOf(t, "10.2.0.1", Key("b.cdn")), "-");
  EXPECT_EQ(t.stats().names.load(), 1u);
  EXPECT_EQ(t.stats().segments.load(), 1u);
  EXPECT_EQ(t.stats().swept.Read(), 2u);
  // a's slot is free again: a third name fits.
  EXPECT_TRUE(Learn(t, "10.3.0.1", 20, 4, 5000, 60, 256, Key("c.cdn")).stored);
  EXPECT_EQ(SegmentOf(t, "10.3.0.1", Key("c.cdn")), "10.3.0.0/20=4");
  EXPECT_EQ(SegmentOf(t, "10.2.64.1", Key("b.cdn")), "10.2.64.0/20=3");
  // Nothing to serve, nothing learned.
  EXPECT_FALSE(Learn(t, "10.4.0.1", 20, 5, 5000, /*ttl=*/0, 256, Key("c.cdn")).stored);
}

TEST(AnswerIdentity, SameRecordsAndWeightsWhateverTheTtlOrOrder) {
  common::RcuThread rcu;
  const dns::NameKey name = Key("x.cdn");
  auto id = [&](const std::vector<uint32_t>& addresses, const std::vector<uint8_t>& weights, uint32_t ttl) {
    return AnswerIdentity(*MakeAEntry(AnswerPartition(1), name, addresses, weights, 1000, ttl));
  };
  EXPECT_EQ(id({1, 2}, {3, 4}, 60), id({1, 2}, {3, 4}, 300));
  EXPECT_EQ(id({1, 2}, {3, 4}, 60), id({2, 1}, {4, 3}, 60));
  EXPECT_NE(id({1, 2}, {3, 4}, 60), id({1, 2}, {4, 3}, 60));
  EXPECT_NE(id({1, 2}, {3, 4}, 60), id({1, 3}, {3, 4}, 60));
  EXPECT_NE(id({1, 2}, {}, 60), id({1}, {}, 60));
}

}  // namespace
}  // namespace weir::partitions
