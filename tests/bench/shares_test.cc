#include "shares.h"

#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace weir::bench {
namespace {

common::IpAddress Ip(const char* text) {
  common::IpAddress a;
  EXPECT_TRUE(common::ParseIp(text, &a)) << text;
  return a;
}

void CountN(ShareCounter* c, uint32_t q, uint32_t city, const char* addr, int n) {
  std::lock_guard<std::mutex> lock(c->mutex());
  for (int i = 0; i < n; ++i) c->Count(q, city, Ip(addr));
}

const PairTally& TallyOf(ShareCounter& c, uint32_t q, uint32_t city) {
  std::lock_guard<std::mutex> lock(c.mutex());
  return c.tallies().at(PairKey(q, city));
}

TEST(ShareCounterTest, CountsAndLongestRun) {
  ShareCounter c;
  CountN(&c, 0, 0, "192.0.2.1", 3);
  CountN(&c, 0, 0, "192.0.2.2", 1);
  CountN(&c, 0, 0, "192.0.2.1", 2);
  {
    const PairTally& t = TallyOf(c, 0, 0);
    EXPECT_EQ(t.total, 6u);
    ASSERT_EQ(t.addresses.size(), 2u);
    EXPECT_EQ(t.addresses[0].address, Ip("192.0.2.1"));
    EXPECT_EQ(t.addresses[0].count, 5u);
    EXPECT_EQ(t.addresses[1].address, Ip("192.0.2.2"));
    EXPECT_EQ(t.addresses[1].count, 1u);
    EXPECT_EQ(t.longest_run, 3u);  // the first three, not 3 + 2
    EXPECT_EQ(t.longest_run_address, 0u);
  }
  CountN(&c, 0, 0, "192.0.2.2", 4);
  {
    const PairTally& t = TallyOf(c, 0, 0);
    EXPECT_EQ(t.total, 10u);
    EXPECT_EQ(t.longest_run, 4u);
    EXPECT_EQ(t.longest_run_address, 1u);
  }
  // An equal run later does not displace the first.
  CountN(&c, 0, 0, "192.0.2.1", 4);
  EXPECT_EQ(TallyOf(c, 0, 0).longest_run_address, 1u);
}

TEST(ShareCounterTest, PairsAreCountedApart) {
  ShareCounter c;
  CountN(&c, 0, 0, "192.0.2.1", 2);
  CountN(&c, 0, 1, "192.0.2.1", 3);
  CountN(&c, 1, 0, "2001:db8::1", 4);
  std::lock_guard<std::mutex> lock(c.mutex());
  ASSERT_EQ(c.tallies().size(), 3u);
  EXPECT_EQ(c.tallies().at(PairKey(0, 0)).total, 2u);
  EXPECT_EQ(c.tallies().at(PairKey(0, 1)).total, 3u);
  EXPECT_EQ(c.tallies().at(PairKey(1, 0)).total, 4u);
  EXPECT_EQ(c.tallies().at(PairKey(1, 0)).addresses[0].address, Ip("2001:db8::1"));
}

TEST(ShareCounterTest, AlternatingPicksHaveRunsOfOne) {
  ShareCounter c;
  for (int i = 0; i < 10; ++i) CountN(&c, 0, 0, i % 2 ? "192.0.2.1" : "192.0.2.2", 1);
  EXPECT_EQ(TallyOf(c, 0, 0).longest_run, 1u);
}

TEST(MergeTalliesTest, SumsAndKeepsTheLongestRunsAddress) {
  ShareCounter a, b;
  CountN(&a, 0, 0, "192.0.2.1", 3);  // a: run of 3 on .1
  CountN(&a, 0, 0, "192.0.2.2", 1);
  CountN(&b, 0, 0, "192.0.2.2", 5);  // b: run of 5 on .2, which is b's index 0
  CountN(&b, 0, 0, "192.0.2.3", 1);
  CountN(&b, 7, 1, "192.0.2.9", 2);
  MergedTallies m;
  {
    std::lock_guard<std::mutex> lock(a.mutex());
    MergeTallies(a.tallies(), &m);
  }
  {
    std::lock_guard<std::mutex> lock(b.mutex());
    MergeTallies(b.tallies(), &m);
  }
  ASSERT_EQ(m.size(), 2u);
  const PairTally& t = m.at(PairKey(0, 0));
  EXPECT_EQ(t.total, 10u);
  ASSERT_EQ(t.addresses.size(), 3u);
  EXPECT_EQ(t.addresses[0].address, Ip("192.0.2.1"));
  EXPECT_EQ(t.addresses[0].count, 3u);
  EXPECT_EQ(t.addresses[1].address, Ip("192.0.2.2"));
  EXPECT_EQ(t.addresses[1].count, 6u);
  EXPECT_EQ(t.addresses[2].address, Ip("192.0.2.3"));
  EXPECT_EQ(t.addresses[2].count, 1u);
  EXPECT_EQ(t.longest_run, 5u);
  // An index into the merged list, where .2 is second.
  ASSERT_LT(t.longest_run_address, t.addresses.size());
  EXPECT_EQ(t.addresses[t.longest_run_address].address, Ip("192.0.2.2"));
  EXPECT_EQ(m.at(PairKey(7, 1)).total, 2u);

  // A shorter run merged later keeps the longer one.
  ShareCounter c;
  CountN(&c, 0, 0, "192.0.2.1", 2);
  {
    std::lock_guard<std::mutex> lock(c.mutex());
    MergeTallies(c.tallies(), &m);
  }
  EXPECT_EQ(m.at(PairKey(0, 0)).longest_run, 5u);
  EXPECT_EQ(m.at(PairKey(0, 0)).total, 12u);
  EXPECT_EQ(m.at(PairKey(0, 0)).addresses[m.at(PairKey(0, 0)).longest_run_address].address, Ip("192.0.2.2"));
}

TEST(MergeTalliesTest, MergingTwiceDoublesTheCounts) {
  ShareCounter a;
  CountN(&a, 0, 0, "192.0.2.1", 3);
  MergedTallies m;
  std::lock_guard<std::mutex> lock(a.mutex());
  MergeTallies(a.tallies(), &m);
  MergeTallies(a.tallies(), &m);
  EXPECT_EQ(m.at(PairKey(0, 0)).total, 6u);
  EXPECT_EQ(m.at(PairKey(0, 0)).addresses[0].count, 6u);
  EXPECT_EQ(m.at(PairKey(0, 0)).longest_run, 3u);  // runs do not join across threads
}

ExpectedSet Set(const char* from, std::vector<std::pair<const char*, uint32_t>> weights) {
  ExpectedSet s;
  s.from = from;
  for (const auto& [a, w] : weights) s.weights.emplace_back(Ip(a), w);
  return s;
}

const AddressShare* Find(const NameCityShare& row, const std::string& address) {
  for (const AddressShare& s : row.addresses) {
    if (s.address == address) return &s;
  }
  return nullptr;
}

class AnalyseSharesTest : public ::testing::Test {
 protected:
  const std::vector<std::string> names_ = {"x.example.", "a.example.", "m.example."};
  const std::vector<std::string> cities_ = {"munich", "berlin"};
};

TEST_F(AnalyseSharesTest, ExpectedObservedDeviationAndLeaks) {
  ExpectedWeights ew;
  ew.Set(0, 1, Set("file", {{"192.0.2.1", 3}, {"192.0.2.2", 1}}));  // x in berlin
  ew.Set(0, 0, Set("answer", {{"192.0.2.3", 1}}));                  // x in munich
  ShareCounter c;
  CountN(&c, 0, 1, "192.0.2.1", 60);
  CountN(&c, 0, 1, "192.0.2.2", 20);
  CountN(&c, 0, 1, "192.0.2.3", 10);  // munich's node: a leak
  CountN(&c, 0, 1, "192.0.2.4", 10);  // in no set: not a leak
  MergedTallies m;
  {
    std::lock_guard<std::mutex> lock(c.mutex());
    MergeTallies(c.tallies(), &m);
  }
  const auto rows = AnalyseShares(m, ew, names_, cities_);
  ASSERT_EQ(rows.size(), 1u);  // only pairs with picks
  const NameCityShare& r = rows[0];
  EXPECT_EQ(r.name, "x.example.");
  EXPECT_EQ(r.city, "berlin");
  EXPECT_EQ(r.weights_from, "file");
  EXPECT_EQ(r.answers, 100u);
  EXPECT_EQ(r.longest_run, 60u);
  EXPECT_EQ(r.longest_run_address, "192.0.2.1");
  EXPECT_EQ(r.leaked_answers, 10u);
  ASSERT_EQ(r.addresses.size(), 4u);
  // The city's set first, in its order, then the others as picked.
  EXPECT_EQ(r.addresses[0].address, "192.0.2.1");
  EXPECT_EQ(r.addresses[1].address, "192.0.2.2");
  EXPECT_EQ(r.addresses[2].address, "192.0.2.3");
  EXPECT_EQ(r.addresses[3].address, "192.0.2.4");
  EXPECT_EQ(r.addresses[0].weight, 3u);
  EXPECT_DOUBLE_EQ(r.addresses[0].expected_pct, 75);
  EXPECT_DOUBLE_EQ(r.addresses[0].observed_pct, 60);
  EXPECT_EQ(r.addresses[0].answers, 60u);
  EXPECT_EQ(r.addresses[1].weight, 1u);
  EXPECT_DOUBLE_EQ(r.addresses[1].expected_pct, 25);
  EXPECT_DOUBLE_EQ(r.addresses[1].observed_pct, 20);
  for (int i : {2, 3}) {
    EXPECT_EQ(r.addresses[i].weight, 0u);
    EXPECT_DOUBLE_EQ(r.addresses[i].expected_pct, 0);
    EXPECT_DOUBLE_EQ(r.addresses[i].observed_pct, 10);
    EXPECT_EQ(r.addresses[i].answers, 10u);
  }
  EXPECT_DOUBLE_EQ(r.max_deviation_pp, 15);  // 60 % observed against 75 %
  EXPECT_DOUBLE_EQ(WorstDeviation(rows), 15);
}

TEST_F(AnalyseSharesTest, AnAddressOfTheSetNeverPickedShowsZeroObserved) {
  ExpectedWeights ew;
  ew.Set(0, 0, Set("answer", {{"192.0.2.1", 1}, {"2001:db8::1", 1}}));
  ShareCounter c;
  CountN(&c, 0, 0, "192.0.2.1", 8);
  MergedTallies m;
  {
    std::lock_guard<std::mutex> lock(c.mutex());
    MergeTallies(c.tallies(), &m);
  }
  const auto rows = AnalyseShares(m, ew, names_, cities_);
  ASSERT_EQ(rows.size(), 1u);
  const AddressShare* v6 = Find(rows[0], "2001:db8::1");
  ASSERT_NE(v6, nullptr);
  EXPECT_EQ(v6->answers, 0u);
  EXPECT_DOUBLE_EQ(v6->observed_pct, 0);
  EXPECT_DOUBLE_EQ(v6->expected_pct, 50);
  EXPECT_DOUBLE_EQ(rows[0].max_deviation_pp, 50);
  EXPECT_EQ(rows[0].leaked_answers, 0u);
}

TEST_F(AnalyseSharesTest, AnAddressInBothSetsIsNotALeak) {
  ExpectedWeights ew;
  ew.Set(0, 0, Set("answer", {{"192.0.2.1", 1}, {"192.0.2.9", 1}}));
  ew.Set(0, 1, Set("answer", {{"192.0.2.9", 1}}));
  ShareCounter c;
  CountN(&c, 0, 0, "192.0.2.9", 4);
  CountN(&c, 0, 0, "192.0.2.1", 4);
  MergedTallies m;
  {
    std::lock_guard<std::mutex> lock(c.mutex());
    MergeTallies(c.tallies(), &m);
  }
  const auto rows = AnalyseShares(m, ew, names_, cities_);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].leaked_answers, 0u);
  EXPECT_DOUBLE_EQ(rows[0].max_deviation_pp, 0);
}

TEST_F(AnalyseSharesTest, AnotherNamesSetDoesNotMakeALeak) {
  ExpectedWeights ew;
  ew.Set(0, 0, Set("answer", {{"192.0.2.1", 1}}));
  ew.Set(1, 1, Set("answer", {{"192.0.2.5", 1}}));  // a.example in berlin
  ShareCounter c;
  CountN(&c, 0, 0, "192.0.2.5", 4);
  MergedTallies m;
  {
    std::lock_guard<std::mutex> lock(c.mutex());
    MergeTallies(c.tallies(), &m);
  }
  const auto rows = AnalyseShares(m, ew, names_, cities_);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].leaked_answers, 0u);
}

TEST_F(AnalyseSharesTest, RowsSortedByNameThenCityAndUnknownWeights) {
  ExpectedWeights ew;
  ew.Set(0, 0, Set("answer", {{"192.0.2.1", 1}}));
  ew.Set(0, 1, Set("answer", {{"192.0.2.1", 1}}));
  ew.Set(1, 0, Set("answer", {{"192.0.2.1", 1}, {"192.0.2.2", 1}}));
  ShareCounter c;
  CountN(&c, 0, 0, "192.0.2.1", 5);  // x.example munich
  CountN(&c, 2, 1, "192.0.2.7", 3);  // m.example berlin: no expected set
  CountN(&c, 2, 1, "192.0.2.8", 1);
  CountN(&c, 0, 1, "192.0.2.1", 5);  // x.example berlin
  CountN(&c, 1, 0, "192.0.2.1", 9);  // a.example munich: 90 % against 50 %
  CountN(&c, 1, 0, "192.0.2.2", 1);
  MergedTallies m;
  {
    std::lock_guard<std::mutex> lock(c.mutex());
    MergeTallies(c.tallies(), &m);
  }
  const auto rows = AnalyseShares(m, ew, names_, cities_);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].name, "a.example.");
  EXPECT_EQ(rows[0].city, "munich");
  EXPECT_EQ(rows[1].name, "m.example.");
  EXPECT_EQ(rows[1].city, "berlin");
  EXPECT_EQ(rows[2].name, "x.example.");
  EXPECT_EQ(rows[2].city, "berlin");
  EXPECT_EQ(rows[3].name, "x.example.");
  EXPECT_EQ(rows[3].city, "munich");

  EXPECT_DOUBLE_EQ(rows[0].max_deviation_pp, 40);
  const NameCityShare& none = rows[1];
  EXPECT_EQ(none.weights_from, "none");
  EXPECT_EQ(none.answers, 4u);
  ASSERT_EQ(none.addresses.size(), 2u);
  EXPECT_EQ(none.addresses[0].weight, 0u);
  EXPECT_DOUBLE_EQ(none.addresses[0].observed_pct, 75);
  EXPECT_DOUBLE_EQ(none.addresses[1].observed_pct, 25);
  EXPECT_DOUBLE_EQ(none.max_deviation_pp, 0);
  EXPECT_EQ(none.leaked_answers, 0u);
  EXPECT_DOUBLE_EQ(WorstDeviation(rows), 40);
}

TEST(WorstDeviationTest, IgnoresRowsWithoutKnownWeights) {
  std::vector<NameCityShare> rows(3);
  rows[0].weights_from = "answer";
  rows[0].max_deviation_pp = 2.5;
  rows[1].weights_from = "none";
  rows[1].max_deviation_pp = 80;
  rows[2].weights_from = "file";
  rows[2].max_deviation_pp = 7;
  EXPECT_DOUBLE_EQ(WorstDeviation(rows), 7);
  rows[2].weights_from = "none";
  EXPECT_DOUBLE_EQ(WorstDeviation(rows), 2.5);
  EXPECT_DOUBLE_EQ(WorstDeviation({}), 0);
}

}  // namespace
}  // namespace weir::bench
