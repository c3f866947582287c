// The traffic-share calibrator (weir/mgmt/calibration.h) against a plant
// with a known skew: traffic_i = weight_i x factor_i x skew_i (what the CDN
// sees when an address's answers carry skew_i times the traffic), fed back
// each round on an injected clock.
#include "weir/mgmt/calibration.h"

#include "weir/common/text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace weir::mgmt {
namespace {

constexpr uint32_t kRound = 3600;  // one feedback window

const CalibrationKey kKey{"cdn.example.net.", "beijing"};

struct Plant {
  std::vector<std::string> addresses;
  std::vector<uint32_t> weights;
  std::vector<double> skew;
  double noise = 0;  // relative, per sample
  std::mt19937_64 rng{7};

  std::vector<TrafficObservation> Sample(const Calibrator& c) {
    std::normal_distribution<double> n(0, 1);
    std::vector<TrafficObservation> out;
    for (size_t i = 0; i < addresses.size(); ++i) {
      const double t = 1e6 * weights[i] * c.Factor(kKey, addresses[i]) * skew[i] * (1 + noise * n(rng));
      out.push_back({addresses[i], weights[i], std::max(t, 0.0)});
    }
    return out;
  }
  // Each address's traffic share over the wanted one, minus 1.
  std::vector<double> Errors(const std::vector<TrafficObservation>& s) const {
    double w = 0, t = 0;
    for (const auto& o : s) {
      w += o.weight;
      t += o.traffic;
    }
    std::vector<double> e;
    for (const auto& o : s) e.push_back((o.traffic / t) / (o.weight / w) - 1);
    return e;
  }
};

double MaxAbs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// One round: the traffic under the current factors is observed, then a step.
std::vector<double> Round(Calibrator& c, Plant& p, uint32_t* now) {
  const auto s = p.Sample(c);
  *now += kRound;
  EXPECT_TRUE(c.Observe(kKey, s, *now, *now).ok());
  c.Step(*now);
  return p.Errors(s);
}

TEST(Calibration, ConvergesOnTheSeedsConstantSkew) {
  // Wanted 1:3; at DNS shares 1:3 the traffic came out 1:2.
  Calibrator c({});
  Plant p{{"192.0.2.1", "192.0.2.2"}, {1, 3}, {1.0, 2.0 / 3.0}};
  uint32_t now = 0;
  const std::vector<double> first = Round(c, p, &now);
  EXPECT_NEAR(first[1], 2.0 / 3.0 / 0.75 - 1, 1e-9);  // B's share: 2/3 instead of 3/4
  int within = -1;
  for (int round = 1; round <= 30; ++round) {
    const double err = MaxAbs(Round(c, p, &now));
    if (err <= 0.05 && within < 0) within = round;
    if (err > 0.05) within = -1;
  }
  ASSERT_GT(within, 0);
  EXPECT_LE(within, 10) << "traffic shares within 5 % of the wanted ones from round " << within;
  // The factors undo the skew: B's over A's is 1.5.
  EXPECT_NEAR(c.Factor(kKey, "192.0.2.2") / c.Factor(kKey, "192.0.2.1"), 1.5, 0.06);
}

TEST(Calibration, HoldsOnNoiseWithinTheDeadBand) {
  CalibrationOptions o;
  o.dead_band = 0.05;
  Calibrator c(o);
  Plant p{{"192.0.2.1", "192.0.2.2", "192.0.2.3"}, {2, 1, 1}, {1, 1, 1}};
  p.noise = 0.01;  // shares off by ~1-2 %: inside the band
  uint32_t now = 0;
  for (int round = 0; round < 50; ++round) Round(c, p, &now);
  for (const char* a : {"192.0.2.1", "192.0.2.2", "192.0.2.3"}) EXPECT_EQ(c.Factor(kKey, a), 1.0) << a;
}

TEST(Calibration, FivePercentNoiseDoesNotOscillate) {
  Calibrator c({});
  Plant p{{"192.0.2.1", "192.0.2.2"}, {1, 3}, {1.0, 2.0 / 3.0}};
  p.noise = 0.05;
  uint32_t now = 0;
  std::vector<double> log_factor;
  for (int round = 0; round < 100; ++round) {
    Round(c, p, &now);
    log_factor.push_back(std::log(c.Factor(kKey, "192.0.2.2") / c.Factor(kKey, "192.0.2.1")));
  }
  // After it settled: near ln 1.5, never far from it.
  double worst = 0;
  for (size_t i = 20; i < log_factor.size(); ++i)
    worst = std::max(worst, std::abs(log_factor[i] - std::log(1.5)));
  EXPECT_LT(worst, 0.1) << "the factor ratio strays by up to " << std::exp(worst);
}

TEST(Calibration, EveryBoundHolds) {
  CalibrationOptions o;
  o.max_step = 1.2;
  o.min_factor = 0.5;
  o.max_factor = 2.0;
  Calibrator c(o);
  // A skew no factor within the bounds can undo.
  Plant p{{"192.0.2.1", "192.0.2.2"}, {1, 1}, {1.0, 0.05}};
  uint32_t now = 0;
  double previous = 1.0;
  std::vector<double> ratio;
  for (int round = 0; round < 40; ++round) {
    Round(c, p, &now);
    const double f = c.Factor(kKey, "192.0.2.2");
    const double a = c.Factor(kKey, "192.0.2.1");
    EXPECT_LE(f, 2.0 + 1e-12);
    EXPECT_GE(a, 0.5 - 1e-12);
    // At most max_step per step, the rescaling included (two addresses: x1.2 and /1.2 at most).
    EXPECT_LE(f / previous, 1.2 * 1.2 + 1e-9);
    previous = f;
    ratio.push_back(f / a);
  }
  // Held at the bound (A's factor at its minimum) without creeping.
  EXPECT_NEAR(c.Factor(kKey, "192.0.2.1"), 0.5, 1e-9);
  EXPECT_NEAR(ratio.back(), ratio[ratio.size() - 10], 1e-9);
  EXPECT_LE(ratio.back(), 2.0 / 0.5 + 1e-9);
  // No windup: once the skew goes away, the factors come back at once.
  p.skew = {1.0, 1.0};
  Round(c, p, &now);
  EXPECT_LT(c.Factor(kKey, "192.0.2.2") / c.Factor(kKey, "192.0.2.1"), ratio.back() / 1.1);
}

TEST(Calibration, StaleFeedbackHoldsThenDecaysToOne) {
  CalibrationOptions o;
  o.max_feedback_age_s = 1800;
  o.hold_time_s = 3600;
  o.decay_half_life_s = 3600;
  Calibrator c(o);
  Plant p{{"192.0.2.1", "192.0.2.2"}, {1, 3}, {1.0, 2.0 / 3.0}};
  uint32_t now = 0;
  for (int round = 0; round < 20; ++round) Round(c, p, &now);
  const double settled = c.Factor(kKey, "192.0.2.2");
  ASSERT_GT(settled, 1.05);
  const uint32_t last_sample = now;
  // No more samples: held through max_feedback_age + hold_time.
  for (now = last_sample + 600; now <= last_sample + 5400; now += 600) {
    c.Step(now);
    EXPECT_EQ(c.Factor(kKey, "192.0.2.2"), settled) << now - last_sample;
  }
  // Then halfway (in log) to 1 per half-life.
  c.Step(last_sample + 5400 + 3600);
  EXPECT_NEAR(std::log(c.Factor(kKey, "192.0.2.2")), std::log(settled) / 2, 1e-9);
  c.Step(last_sample + 5400 + 10 * 3600);
  EXPECT_NEAR(c.Factor(kKey, "192.0.2.2"), 1.0, 0.001);
  // Fresh feedback takes over again.
  now = last_sample + 5400 + 11 * 3600;
  Round(c, p, &now);
  EXPECT_GT(c.Factor(kKey, "192.0.2.2"), 1.0);
}

TEST(Calibration, HoldForGoodWithoutHalfLife) {
  CalibrationOptions o;
  o.decay_half_life_s = 0;
  Calibrator c(o);
  Plant p{{"192.0.2.1", "192.0.2.2"}, {1, 3}, {1.0, 2.0 / 3.0}};
  uint32_t now = 0;
  for (int round = 0; round < 10; ++round) Round(c, p, &now);
  const double f = c.Factor(kKey, "192.0.2.2");
  c.Step(now + 30 * 86400);
  EXPECT_EQ(c.Factor(kKey, "192.0.2.2"), f);
}

TEST(Calibration, OnlyTheSetsFedAreTouched) {
  // A name whose tag has no calibrate=on is never fed: it has no state, its
  // factor is 1 whatever else moves.
  Calibrator c({});
  Plant p{{"192.0.2.1", "192.0.2.2"}, {1, 3}, {1.0, 2.0 / 3.0}};
  uint32_t now = 0;
  for (int round = 0; round < 10; ++round) Round(c, p, &now);
  const CalibrationKey other{"other.example.", "beijing"};
  EXPECT_EQ(c.Find(other), nullptr);
  EXPECT_EQ(c.Factor(other, "192.0.2.2"), 1.0);
  const CalibrationKey other_city{kKey.name, "shanghai"};
  EXPECT_EQ(c.Factor(other_city, "192.0.2.2"), 1.0);
  EXPECT_EQ(c.sets().size(), 1u);
}

TEST(Calibration, BadSamplesAreRefusedWhole) {
  Calibrator c({});
  const std::vector<TrafficObservation> zero_weight{{"192.0.2.1", 0, 10}};
  const std::vector<TrafficObservation> negative{{"192.0.2.1", 1, -1}};
  const std::vector<TrafficObservation> nan{{"192.0.2.1", 1, std::nan("")}};
  const std::vector<TrafficObservation> twice{{"192.0.2.1", 1, 10}, {"192.0.2.1", 1, 10}};
  for (const auto* s : {&zero_weight, &negative, &nan, &twice})
    EXPECT_FALSE(c.Observe(kKey, *s, 10, 10).ok());
  EXPECT_FALSE(c.Observe(kKey, {}, 10, 10).ok());
  EXPECT_EQ(c.Step(20), 0u);
  EXPECT_TRUE(c.sets().empty());
}

TEST(Calibration, MoreAddressesThanAnAnswerSetAreRefused) {
  Calibrator c({});
  std::vector<TrafficObservation> s;
  for (int i = 0; i <= 64; ++i) s.push_back({common::Cat("192.0.2.", i), 1, 100});
  const absl::Status st = c.Observe(kKey, s, 10, 10);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("65 addresses"), std::string::npos) << st;
  s.pop_back();
  EXPECT_TRUE(c.Observe(kKey, s, 10, 10).ok());
}

// The client picks the family, weir picks within it: a skew between IPv4
// and IPv6 traffic is not weir's to correct, and does not drag the factors
// of either family to a bound.
TEST(Calibration, EachFamilyIsCorrectedApart) {
  Calibrator c({});
  uint32_t now = 1'000'000;
  for (int round = 0; round < 30; ++round) {
    // 80 % of the traffic over IPv4, each family exactly as weighted within it.
    const double f1 = c.Factor(kKey, "192.0.2.1"), f2 = c.Factor(kKey, "192.0.2.2");
    const double g1 = c.Factor(kKey, "2001:db8::1"), g2 = c.Factor(kKey, "2001:db8::2");
    const double v4 = 1 * f1 + 3 * f2, v6 = 1 * g1 + 1 * g2;
    const std::vector<TrafficObservation> s{{"192.0.2.1", 1, 8000 * f1 / v4},
                                            {"192.0.2.2", 3, 8000 * 3 * f2 / v4},
                                            {"2001:db8::1", 1, 2000 * g1 / v6},
                                            {"2001:db8::2", 1, 2000 * g2 / v6}};
    now += kRound;
    ASSERT_TRUE(c.Observe(kKey, s, now, now).ok());
    c.Step(now);
  }
  for (const char* a : {"192.0.2.1", "192.0.2.2", "2001:db8::1", "2001:db8::2"})
    EXPECT_EQ(c.Factor(kKey, a), 1.0) << a;
  // A skew inside one family is corrected inside it only.
  for (int round = 0; round < 30; ++round) {
    const double f1 = c.Factor(kKey, "192.0.2.1"), f2 = c.Factor(kKey, "192.0.2.2");
    const double v4 = 1 * f1 + 3 * f2 * 0.5;  // the second address carries half its share
    const std::vector<TrafficObservation> s{{"192.0.2.1", 1, 8000 * f1 / v4},
                                            {"192.0.2.2", 3, 8000 * 3 * f2 * 0.5 / v4},
                                            {"2001:db8::1", 1, 1000},
                                            {"2001:db8::2", 1, 1000}};
    now += kRound;
    ASSERT_TRUE(c.Observe(kKey, s, now, now).ok());
    c.Step(now);
  }
  EXPECT_NEAR(c.Factor(kKey, "192.0.2.2") / c.Factor(kKey, "192.0.2.1"), 2.0, 0.1);
  EXPECT_EQ(c.Factor(kKey, "2001:db8::1"), 1.0);
  EXPECT_EQ(c.Factor(kKey, "2001:db8::2"), 1.0);
}

TEST(Calibration, TooLittleTrafficOrAnOlderSampleChangesNothing) {
  CalibrationOptions o;
  o.min_traffic = 1000;
  Calibrator c(o);
  const std::vector<TrafficObservation> thin{{"192.0.2.1", 1, 10}, {"192.0.2.2", 3, 5}};
  ASSERT_TRUE(c.Observe(kKey, thin, 100, 100).ok());
  c.Step(100);
  EXPECT_EQ(c.Factor(kKey, "192.0.2.2"), 1.0);
  const std::vector<TrafficObservation> skewed{{"192.0.2.1", 1, 5000}, {"192.0.2.2", 3, 5000}};
  // Older than the last sample: refused, and said so.
  EXPECT_EQ(c.Observe(kKey, skewed, 50, 200).code(), absl::StatusCode::kFailedPrecondition);
  c.Step(200);
  EXPECT_EQ(c.Factor(kKey, "192.0.2.2"), 1.0);
  ASSERT_TRUE(c.Observe(kKey, skewed, 300, 300).ok());
  c.Step(300);
  EXPECT_GT(c.Factor(kKey, "192.0.2.2"), 1.0);
}

TEST(Calibration, AWindowInTheFutureIsRefused) {
  Calibrator c({});
  const std::vector<TrafficObservation> s{{"192.0.2.1", 1, 5000}, {"192.0.2.2", 3, 5000}};
  // A typo in the year: refused, so later samples are still taken.
  EXPECT_EQ(c.Observe(kKey, s, 4'000'000'000u, 1'000'000).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(c.Observe(kKey, s, 1'000'000 + Calibrator::kMaxClockSkew, 1'000'000).ok());  // skew allowed
  c.Step(1'000'000);
  EXPECT_GT(c.Factor(kKey, "192.0.2.2"), 1.0);
}

TEST(Calibration, AStaleSampleIsNotActedOn) {
  CalibrationOptions o;
  o.max_feedback_age_s = 1800;
  Calibrator c(o);
  const std::vector<TrafficObservation> s{{"192.0.2.1", 1, 5000}, {"192.0.2.2", 3, 5000}};
  // Yesterday's traffic imported today: it moves nothing.
  ASSERT_TRUE(c.Observe(kKey, s, 100'000, 186'400).ok());
  c.Step(186'400);
  EXPECT_EQ(c.Factor(kKey, "192.0.2.2"), 1.0);
  ASSERT_NE(c.Find(kKey), nullptr);
  EXPECT_EQ(c.Find(kKey)->sample_time, 100'000u);
}

TEST(Calibration, AClockGoingBackChangesNothing) {
  CalibrationOptions o;
  o.max_feedback_age_s = 0;
  o.hold_time_s = 0;
  o.decay_half_life_s = 3600;
  Calibrator c(o);
  Plant p{{"192.0.2.1", "192.0.2.2"}, {1, 3}, {1.0, 2.0 / 3.0}};
  uint32_t now = 100'000;
  for (int round = 0; round < 5; ++round) Round(c, p, &now);
  c.Step(now + 3600);
  const double f = c.Factor(kKey, "192.0.2.2");
  c.Step(now - 7200);  // back: no decay away from 1, no change at all
  EXPECT_EQ(c.Factor(kKey, "192.0.2.2"), f);
  c.Step(now + 3600);
  EXPECT_EQ(c.Factor(kKey, "192.0.2.2"), f);
  c.Step(now + 7200);
  EXPECT_NEAR(std::log(c.Factor(kKey, "192.0.2.2")), std::log(f) / 2, 1e-9);
}

TEST(Calibration, ANewAddressSetStartsFromOne) {
  Calibrator c({});
  Plant p{{"192.0.2.1", "192.0.2.2"}, {1, 3}, {1.0, 2.0 / 3.0}};
  uint32_t now = 0;
  for (int round = 0; round < 10; ++round) Round(c, p, &now);
  ASSERT_NE(c.Factor(kKey, "192.0.2.2"), 1.0);
  // The GSLB answers with another set: its traffic as wanted, so from 1
  // nothing moves (the old factors are not carried over).
  const std::vector<TrafficObservation> other{{"192.0.2.2", 1, 1e6}, {"192.0.2.3", 1, 1e6}};
  now += kRound;
  ASSERT_TRUE(c.Observe(kKey, other, now, now).ok());
  c.Step(now);
  EXPECT_EQ(c.Factor(kKey, "192.0.2.2"), 1.0);
  EXPECT_EQ(c.Factor(kKey, "192.0.2.3"), 1.0);
  EXPECT_EQ(c.Factor(kKey, "192.0.2.1"), 1.0);  // gone: unknown
}

TEST(Calibration, AnAddressWithNoTrafficIsPushedUpBoundedly) {
  Calibrator c({});
  const std::vector<TrafficObservation> s{{"192.0.2.1", 1, 0}, {"192.0.2.2", 1, 1e6}};
  ASSERT_TRUE(c.Observe(kKey, s, 10, 10).ok());
  c.Step(10);
  const double f = c.Factor(kKey, "192.0.2.1");
  EXPECT_GT(f, 1.0);
  EXPECT_LE(f / c.Factor(kKey, "192.0.2.2"), 1.5 * 1.5 + 1e-9);  // max_step each way
}

TEST(Calibration, OptionsAreChecked) {
  EXPECT_TRUE(ValidateCalibrationOptions({}).ok());
  CalibrationOptions o;
  o.min_factor = 0;
  EXPECT_FALSE(ValidateCalibrationOptions(o).ok());
  o = {};
  o.max_factor = 0.5;
  EXPECT_FALSE(ValidateCalibrationOptions(o).ok());
  o = {};
  o.gain_i = std::nan("");
  EXPECT_FALSE(ValidateCalibrationOptions(o).ok());
  o = {};
  o.dead_band = 0.9;
  EXPECT_FALSE(ValidateCalibrationOptions(o).ok());
}

}  // namespace
}  // namespace weir::mgmt

namespace weir::mgmt {
namespace {

TEST(CalibrationState, ARestoreGivesTheSameState) {
  Calibrator c({});
  Plant p{{"192.0.2.1", "2001:db8::1"}, {1, 3}, {1.0, 2.0 / 3.0}};
  uint32_t now = 1'000'000;
  for (int round = 0; round < 7; ++round) Round(c, p, &now);
  const std::string text = c.FormatState();
  EXPECT_NE(text.find("cdn.example.net. beijing 2001:db8::1 3 "), std::string::npos) << text;
  Calibrator restored({});
  common::LineErrors errors;
  ASSERT_TRUE(restored.RestoreState(text, &errors).ok()) << errors.Render("state")[0];
  EXPECT_EQ(restored.FormatState(), text);
  for (const char* a : {"192.0.2.1", "2001:db8::1"}) EXPECT_EQ(restored.Factor(kKey, a), c.Factor(kKey, a));
  // The restored one goes on exactly as the original.
  Plant q = p;
  uint32_t now2 = now;
  Round(c, p, &now);
  Round(restored, q, &now2);
  EXPECT_EQ(restored.FormatState(), c.FormatState());
}

// A state made under a wider range (the operator narrowed [calibration]
// since) is taken, each factor held to this range at once.
TEST(CalibrationState, FactorsOutsideTheRangeAreHeldToIt) {
  Calibrator c({});
  common::LineErrors errors;
  ASSERT_TRUE(c.RestoreState("a.example. x 192.0.2.1 1 9 0 10 10 1\n"
                             "a.example. x 192.0.2.2 1 0.01 0 10 10 1\n",
                             &errors)
                  .ok());
  EXPECT_EQ(c.Factor({"a.example.", "x"}, "192.0.2.1"), 5.0);
  EXPECT_EQ(c.Factor({"a.example.", "x"}, "192.0.2.2"), 0.2);
}

TEST(CalibrationState, EveryBadLineIsNamedAndNothingChanges) {
  Calibrator c({});
  common::LineErrors first;
  ASSERT_TRUE(c.RestoreState("a.example. x 192.0.2.1 1 1.5 0 10 10 1\n", &first).ok());
  common::LineErrors errors;
  EXPECT_FALSE(c.RestoreState("a.example. x 192.0.2.1 1 1.5 0 10 10 1\n"
                              "a.example. x 192.0.2.1 1 1.5 0 10 10 1\n"
                              "a.example. x 192.0.2.2 1 900 0 10 10 1\n"
                              "a.example. x 192.0.2.3 1 1 0 11 10 1\n"
                              "bad..name x 192.0.2.1 1 1 0 10 10 1\n"
                              "b.example. x 192.0.2.1 0 1 0 10 10 1\n"
                              "b.example. x 192.0.2.1 1 nan 0 10 10 1\n"
                              "b.example. x 192.0.2.1 1 1\n",
                              &errors)
                   .ok());
  const std::vector<std::string> e = errors.Render("state");
  ASSERT_EQ(e.size(), 7u) << ::testing::PrintToString(e);
  EXPECT_EQ(e[0], "state:2: address 192.0.2.1 listed twice in its set");
  EXPECT_EQ(e[1], "state:3: factor '900' must be 0.001..100");
  EXPECT_EQ(e[2], "state:4: the times and steps differ from the set's first line (1)");
  EXPECT_EQ(e[3], "state:5: bad name 'bad..name'");
  EXPECT_EQ(e[4], "state:6: weight '0' must be 1..65535");
  EXPECT_EQ(e[5], "state:7: factor 'nan' must be 0.001..100");
  EXPECT_NE(e[6].find("state:8: expected 9 fields"), std::string::npos);
  EXPECT_EQ(c.Factor({"a.example.", "x"}, "192.0.2.1"), 1.5);  // the state before, kept
}

}  // namespace
}  // namespace weir::mgmt
