// weir-mgmt's calibration service on a real (in-memory SQLite) store with
// explicit times: what an import commits and pushes, what the timer's step
// does when feedback stops, and that names without calibrate=on are never
// touched.
#include "weir/mgmt/calibration_service.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "weir/common/text.h"
#include "weir/partitions/weight_factors.h"

namespace weir::mgmt {
namespace {

using common::Cat;

constexpr uint32_t kNow = 1'800'000'000;

std::string Csv(uint32_t end, double low, double high, std::string_view name = "x.cdn.example.net") {
  return Cat(end - 300, ",", end, ",", name, ",city-a,192.0.2.1,1,", low, "\n", end - 300, ",", end, ",",
             name, ",city-a,192.0.2.2,3,", high, "\n");
}

class CalibrationServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = Store::Open(":memory:");
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = *std::move(s);
    ASSERT_TRUE(store_->ImportCitymap("127.1.0.0/16,city-a,198.51.100.0/24\n", "t").ok());
    ASSERT_TRUE(store_->AddTag("cdn.example.net weight=on ecs=on calibrate=on", false, "t").ok());
    ASSERT_TRUE(store_->AddTag("other.example weight=on", false, "t").ok());
  }
  // The factors the nodes get, parsed as a node parses them.
  partitions::WeightFactors Pushed() {
    auto f = partitions::WeightFactors::FromText(store_->snapshot().factors);
    EXPECT_TRUE(f.ok()) << f.status();
    return f.ok() ? *std::move(f) : partitions::WeightFactors();
  }
  std::unique_ptr<Store> store_;
};

TEST_F(CalibrationServiceTest, ImportStepsCommitsAndPushesTheFactors) {
  CalibrationService svc(*store_, CalibrationOptions{});
  const uint64_t before = store_->version();
  auto r = svc.Import(Csv(kNow - 60, 1000, 2000) + Csv(kNow - 60, 1000, 2000, "www.other.example"), "t.csv",
                      "alice", kNow);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->json()["accepted"], 1);
  EXPECT_EQ(r->json()["skipped_count"], 1);
  EXPECT_EQ(r->json()["skipped"][0]["name"], "www.other.example.");
  EXPECT_EQ(r->json()["version"], before + 1);
  EXPECT_EQ(store_->version(), before + 1);
  // One set, both addresses, the low one down and the high one up.
  const partitions::WeightFactors f = Pushed();
  ASSERT_EQ(f.size(), 1u);
  const auto& set = f.sets().begin()->second;
  ASSERT_EQ(set.addresses().size(), 2u);
  EXPECT_LT(set.addresses()[0].factor, 1.0);
  EXPECT_GT(set.addresses()[1].factor, 1.0);
  // Audited with the actor.
  auto audit = store_->Audit(1);
  ASSERT_TRUE(audit.ok());
  EXPECT_EQ(audit->back().action, "traffic import");
  EXPECT_EQ(audit->back().actor, "alice");
  // A bad line refuses the whole input, naming the file and the line.
  auto bad = svc.Import(Csv(kNow - 30, 1000, 2000) + "1,2,x.cdn.example.net,city-a,192.0.2.300,1,5\n",
                        "t2.csv", "alice", kNow);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("t2.csv:3:"), std::string::npos) << bad.status();
  EXPECT_EQ(store_->version(), before + 1);
}

TEST_F(CalibrationServiceTest, TimerHoldsThenDecaysToOneAndStopsCommitting) {
  CalibrationOptions o;
  CalibrationService svc(*store_, o);
  ASSERT_TRUE(svc.Import(Csv(kNow - 60, 1000, 2000), "t.csv", "t", kNow).ok());
  const uint64_t imported = store_->version();
  // Within max_feedback_age + hold: nothing moves, nothing is committed.
  for (uint32_t t = kNow + 300; t < kNow - 60 + o.max_feedback_age_s + o.hold_time_s; t += 300) {
    auto v = svc.Tick(t);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, 0u) << t;
  }
  EXPECT_EQ(store_->version(), imported);
  // Then decay: a commit per step while a factor moves, then none once
  // every factor is 1 (and the nodes get no factors at all).
  uint32_t t = kNow - 60 + o.max_feedback_age_s + o.hold_time_s;
  int commits = 0;
  for (int i = 0; i < 400 && !Pushed().empty(); ++i, t += 300) {
    auto v = svc.Tick(t);
    ASSERT_TRUE(v.ok()) << v.status();
    commits += *v != 0;
  }
  EXPECT_TRUE(Pushed().empty());
  EXPECT_GT(commits, 3);
  const uint64_t settled = store_->version();
  for (int i = 0; i < 10; ++i, t += 300) EXPECT_EQ(*svc.Tick(t), 0u);
  EXPECT_EQ(store_->version(), settled);
}

TEST_F(CalibrationServiceTest, ATagThatLosesCalibrateStopsItsFactorsAndForgetsTheSet) {
  CalibrationService svc(*store_, CalibrationOptions{});
  ASSERT_TRUE(svc.Import(Csv(kNow - 60, 1000, 2000), "t.csv", "t", kNow).ok());
  ASSERT_FALSE(Pushed().empty());
  ASSERT_TRUE(store_->EditTag("cdn.example.net", {"calibrate=off"}, "t").ok());
  // The same commit that changed the tag stopped the factors.
  EXPECT_TRUE(Pushed().empty());
  EXPECT_FALSE(store_->calibration().empty());
  // The next step forgets the set.
  auto v = svc.Tick(kNow + 300);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_NE(*v, 0u);
  EXPECT_TRUE(store_->calibration().empty());
  EXPECT_TRUE(svc.List("").json()["addresses"].empty());
}

TEST_F(CalibrationServiceTest, AnotherInstancesStateIsTakenBeforeActing) {
  CalibrationService a(*store_, CalibrationOptions{});
  ASSERT_TRUE(a.Import(Csv(kNow - 600, 1000, 2000), "t.csv", "t", kNow).ok());
  // Another weir-mgmt's service on the same store (here: a second one on the
  // same Store) takes the committed state and refuses the same window again.
  CalibrationService b(*store_, CalibrationOptions{});
  auto again = b.Import(Csv(kNow - 600, 1000, 2000), "t.csv", "t", kNow);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->json()["accepted"], 0);
  EXPECT_EQ(b.List("x.cdn.example.net").json()["addresses"].size(), 2u);
}

// A commit that fails (another weir-mgmt committed first) leaves nothing
// ahead of the store: the same feedback sent again is taken.
TEST(CalibrationServiceConflict, AFailedCommitLeavesTheFeedbackToBeSentAgain) {
  char path[] = "/tmp/weir-calibration-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  unlink(path);
  auto a = Store::Open(path);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE((*a)->AddTag("cdn.example.net weight=on calibrate=on", false, "t").ok());
  auto b = Store::Open(path);  // a second instance on the same database
  ASSERT_TRUE(b.ok()) << b.status();
  CalibrationService svc(**b, CalibrationOptions{});
  ASSERT_TRUE((*a)->AddTag("other.example weight=on", false, "t").ok());  // b is behind now
  const std::string feedback = Csv(kNow - 60, 1000, 2000);
  auto first = svc.Import(feedback, "t.csv", "t", kNow);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), absl::StatusCode::kAborted) << first.status();
  EXPECT_TRUE(svc.List("").json()["addresses"].empty());
  auto again = svc.Import(feedback, "t.csv", "t", kNow);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->json()["accepted"], 1);
  EXPECT_FALSE((*b)->snapshot().factors.empty());
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) unlink((std::string(path) + suffix).c_str());
}

}  // namespace
}  // namespace weir::mgmt
