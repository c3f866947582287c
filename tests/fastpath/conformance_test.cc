#include "weir/fastpath/conformance.h"

#include <gtest/gtest.h>

namespace weir::fastpath {
namespace {

AnswerSeries S(const char* address, const char* partition = "city-a") {
  return {"x.example.", partition, address};
}

TEST(ConformanceTest, ExactSharesDeviateByZero) {
  const ConformanceWindow::Counts delta = {{S("a"), 500}, {S("b"), 300}, {S("c"), 100}};
  const ConformanceWindow::Weights weights = {{S("a"), 5}, {S("b"), 3}, {S("c"), 1}};
  const auto d = ConformanceWindow::Compute(delta, weights);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_DOUBLE_EQ(d.at({"x.example.", "city-a"}), 0.0);
}

TEST(ConformanceTest, WorstAddressIsReported) {
  // 1:1 configured, 60:40 observed: each is 10 points off.
  const auto d = ConformanceWindow::Compute({{S("a"), 60}, {S("b"), 40}}, {{S("a"), 1}, {S("b"), 1}});
  EXPECT_NEAR(d.at({"x.example.", "city-a"}), 0.10, 1e-12);
}

TEST(ConformanceTest, UnconfiguredAndUnansweredAddressesCount) {
  // "c" answered but no longer in the set; "b" configured but never answered.
  const auto d = ConformanceWindow::Compute({{S("a"), 50}, {S("c"), 50}}, {{S("a"), 1}, {S("b"), 1}});
  EXPECT_NEAR(d.at({"x.example.", "city-a"}), 0.5, 1e-12);
}

TEST(ConformanceTest, PartitionsAreSeparateAndUnconfiguredGroupsSkipped) {
  const auto d = ConformanceWindow::Compute({{S("a"), 10}, {S("a", "city-b"), 10}, {S("b", "city-b"), 30}},
                                            {{S("a"), 1}, {S("a", "city-b"), 1}, {S("b", "city-b"), 1}});
  EXPECT_DOUBLE_EQ(d.at({"x.example.", "city-a"}), 0.0);
  EXPECT_NEAR(d.at({"x.example.", "city-b"}), 0.25, 1e-12);
  // No weights known (the set expired): nothing to compare with.
  EXPECT_TRUE(ConformanceWindow::Compute({{S("a"), 10}}, {}).empty());
}

TEST(ConformanceTest, WindowsCloseOnlyAfterTheirLength) {
  ConformanceWindow w(60);
  const ConformanceWindow::Weights weights = {{S("a"), 1}, {S("b"), 1}};
  EXPECT_TRUE(w.Update(1000, {{S("a"), 100}, {S("b"), 100}}, weights).empty());  // opens
  EXPECT_TRUE(w.Update(1059, {{S("a"), 200}, {S("b"), 110}}, weights).empty());  // still open
  // Closes: the window's own answers (a +150, b +50), not the totals.
  auto d = w.Update(1060, {{S("a"), 250}, {S("b"), 150}}, weights);
  EXPECT_NEAR(d.at({"x.example.", "city-a"}), 0.25, 1e-12);
  // The next window: balanced again, reported once it closes.
  d = w.Update(1100, {{S("a"), 300}, {S("b"), 200}}, weights);
  EXPECT_NEAR(d.at({"x.example.", "city-a"}), 0.25, 1e-12);
  d = w.Update(1120, {{S("a"), 350}, {S("b"), 250}}, weights);
  EXPECT_DOUBLE_EQ(d.at({"x.example.", "city-a"}), 0.0);
  // A window without answers to the name reports nothing for it.
  EXPECT_TRUE(w.Update(1200, {{S("a"), 350}, {S("b"), 250}}, weights).empty());
}

}  // namespace
}  // namespace weir::fastpath
