// calibration_sim: the traffic-share calibrator (weir/mgmt/calibration.h)
// against a simulated subscriber population, round by round. A benchmark of
// the controller, not a test: it prints the figures of each scenario and,
// with --plot-dir, draws them with gnuplot.
//
// The model. One answer set (one name in one city partition) with two
// addresses, A and B, and GSLB weights W. A round is one feedback window (an
// hour, --round-seconds):
//   - The front answers each query by smooth weighted round-robin (nginx's)
//     over the effective weights round(W_i x factor_i x 1000), at least 1,
//     where factor_i is the calibrator's factor after the previous round.
//   - S stub resolvers (--subscribers). A share of them (--nat-share) sit
//     behind NAT and carry --nat-k times the traffic of a single subscriber.
//     Each stub caches the answer it got for --ttl seconds and asks again
//     when it expires, within --requery-jitter seconds (uniform; a stub asks
//     when its user next needs the name); the first queries' phases are
//     uniform over one TTL. The simulation runs one event per query, and a
//     stub carries its traffic to the address it holds until it asks again.
//     Without the jitter the stubs would ask in the same order every TTL
//     and, with weights of a small integer ratio, each would get the same
//     answer every time: the traffic shares would then hang on which stubs
//     happen to sit behind NAT.
//   - The CDN's traffic per address is skewed in a stable direction (the
//     field test behind the scenario `seed004` answered exactly 1:3 and saw
//     1:2 in the CDN's traffic): address i's traffic over a round is the sum
//     over stubs of (seconds it held i in the round) x (its rate) x skew_i
//     (--skew), times (1 + noise x N(0,1)), at least 0.
//   - At the end of each round the calibrator is given the sample
//     Observe(key, {address, W_i, traffic_i}..., round end) and stepped at
//     the round's end. Wanted share = W_i / sum W; observed = traffic share.
// Everything random comes from std::mt19937_64 seeded by --seed: the
// population (phases, who is behind NAT) is the same in every scenario, the
// re-query delays start from the same stream in each, and each scenario
// draws its noise from a stream of its own.
//
// Scenarios (all by default; --only NAME runs one):
//   seed004      wanted 1:3, no noise, 30 rounds: traffic ratio B:A per round
//                and the first round from which every address's traffic
//                share stays within 5 % (relative) of the wanted share.
//   noise        the same with 5 % noise (--noisy-level), 100 rounds: over
//                rounds 20..100 the largest relative share error, the
//                standard deviation of ln(factor_B) and how often the step
//                of factor_B changes sign. For comparison, the same
//                calibrator on the noise alone (no stubs, traffic exactly
//                W x factor x skew x noise, 20000 rounds): how often its
//                steps change sign, and how many rounds fall outside 5 %
//                with it and with exact factors and no calibrator.
//   hand         the field test's hand tuning, no calibrator: GSLB weights
//                1:3 in rounds 1-2, 1:4 in rounds 3-6, 1:5 from round 7.
//   no_feedback  15 rounds as in seed004, then 48 rounds with steps but no
//                samples: the factors hold, then decay to 1.
// --rounds-scale multiplies every round count (and the rounds the figures
// are taken over); the hand-tuning schedule is fixed.
//
// Plots (--plot-dir DIR): for each, DIR holds NAME.dat, NAME.gp (re-run by
// hand with `gnuplot NAME.gp` in DIR), NAME.png and NAME.svg:
//   calibration_seed004      traffic ratio B/A per round, calibrated and
//                            hand-tuned, against the wanted 3
//   calibration_noise        traffic share of B and factor_B per round, with
//                            the +-5 % band around the wanted share
//   calibration_no_feedback  the factors and the traffic ratio by hours
//                            since the last sample

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "fmt/format.h"
#include "gnuplot_writer.h"
#include "weir/mgmt/calibration.h"

namespace {

using weir::mgmt::CalibrationKey;
using weir::mgmt::CalibrationOptions;
using weir::mgmt::Calibrator;
using weir::mgmt::TrafficObservation;

// The effective weights are integers, as the front's are: W x factor in
// thousandths.
constexpr double kWeightScale = 1000;
// Clock seconds of the first round's start; 0 would read as "no sample".
constexpr uint32_t kClockStart = 1'000'000;
// A share within this relative error of the wanted one counts as reached.
constexpr double kTolerance = 0.05;

struct SimOptions {
  double rounds_scale = 1;
  uint32_t subscribers = 20'000;
  double nat_share = 0.3;
  double nat_k = 8;
  uint32_t ttl = 300;
  double requery_jitter = 1;
  uint32_t round_seconds = 3600;
  std::vector<double> skew = {1.0, 0.6667};
  double noise = 0;           // seed004, hand, no_feedback
  double noisy_level = 0.05;  // the `noise` scenario
  uint64_t seed = 1;
  std::string only;
  std::string plot_dir;
  bool csv = false;
  CalibrationOptions calibration;
};

int Rounds(const SimOptions& o, int rounds) {
  return std::max(1, static_cast<int>(std::lround(rounds * o.rounds_scale)));
}

// The stubs: when each asks first, and how much traffic it carries.
struct Population {
  std::vector<double> phase;  // seconds into the TTL of the first query
  std::vector<double> rate;   // traffic per second: 1, or nat_k behind NAT
};

Population MakePopulation(const SimOptions& o) {
  std::seed_seq seq{o.seed, uint64_t{0}};
  std::mt19937_64 rng(seq);
  const size_t n = o.subscribers;
  Population p;
  p.phase.resize(n);
  std::uniform_real_distribution<double> phase(0, o.ttl);
  for (double& x : p.phase) x = phase(rng);
  // Exactly round(n x nat_share) stubs behind NAT, spread over the phases at
  // random.
  p.rate.assign(n, 1.0);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::shuffle(order.begin(), order.end(), rng);
  const auto nat = static_cast<size_t>(std::lround(static_cast<double>(n) * o.nat_share));
  for (size_t i = 0; i < nat; ++i) p.rate[order[i]] = o.nat_k;
  return p;
}

// nginx's smooth weighted round-robin: every pick adds each weight to its
// running total, takes the largest and subtracts the sum of the weights
// from it. The running totals survive a change of weights, as in a front
// whose weights are updated in place.
class SmoothWeightedRoundRobin {
 public:
  void SetWeights(std::vector<int64_t> weights) {
    weights_ = std::move(weights);
    total_ = std::accumulate(weights_.begin(), weights_.end(), int64_t{0});
    current_.resize(weights_.size(), 0);
  }
  size_t Pick() {
    size_t best = 0;
    for (size_t i = 0; i < weights_.size(); ++i) {
      current_[i] += weights_[i];
      if (current_[i] > current_[best]) best = i;
    }
    current_[best] -= total_;
    return best;
  }

 private:
  std::vector<int64_t> weights_;
  std::vector<int64_t> current_;
  int64_t total_ = 0;
};

// What one round looked like.
struct Round {
  int number = 0;                     // 1-based
  uint32_t end = 0;                   // clock seconds
  std::vector<uint32_t> weights;      // the GSLB's
  std::vector<double> factors;        // in effect during the round
  std::vector<double> factors_after;  // after the round's step
  std::vector<double> traffic;        // as the CDN saw it (with noise)
  std::vector<double> clean;          // without the noise
  bool fed = false;                   // given to the calibrator

  static double Share(const std::vector<double>& t, size_t i) {
    const double sum = std::accumulate(t.begin(), t.end(), 0.0);
    return sum > 0 ? t[i] / sum : 0;
  }
  double Wanted(size_t i) const {
    return static_cast<double>(weights[i]) / std::accumulate(weights.begin(), weights.end(), 0.0);
  }
  // observed share / wanted share - 1, the largest over the addresses.
  double MaxError(const std::vector<double>& t) const {
    double worst = 0;
    for (size_t i = 0; i < t.size(); ++i) worst = std::max(worst, std::abs(Share(t, i) / Wanted(i) - 1));
    return worst;
  }
  double Ratio() const { return traffic[0] > 0 ? traffic[1] / traffic[0] : INFINITY; }
};

struct Scenario {
  std::string name;
  int rounds = 0;
  double noise = 0;
  bool calibrate = true;
  int fed_rounds = -1;                                // rounds whose samples are given; -1: all
  std::function<std::vector<uint32_t>(int)> weights;  // the GSLB weights of round n (1-based)
  uint64_t stream = 0;                                // the noise stream
};

// A stub's next query.
struct Query {
  double t = 0;
  uint32_t stub = 0;
  static bool Later(const Query& a, const Query& b) { return a.t > b.t; }
};

const std::vector<std::string> kAddresses = {"192.0.2.1", "192.0.2.2"};

std::vector<Round> Run(const SimOptions& o, const Population& pop, const Scenario& sc) {
  const size_t n_addr = kAddresses.size();
  const double ttl = o.ttl;
  const double round_s = o.round_seconds;
  const double total = sc.rounds * round_s;
  const CalibrationKey key{"www.example.", "city"};

  // The query times draw from one stream in every scenario, the noise from
  // one of the scenario's own.
  std::seed_seq timing_seq{o.seed, uint64_t{1}};
  std::mt19937_64 timing(timing_seq);
  std::seed_seq noise_seq{o.seed, uint64_t{2}, sc.stream};
  std::mt19937_64 rng(noise_seq);
  std::normal_distribution<double> normal;
  Calibrator calibrator(o.calibration);
  SmoothWeightedRoundRobin front;

  // Per round and address, the seconds x rate the stubs held it.
  std::vector<std::vector<double>> held(sc.rounds, std::vector<double>(n_addr, 0));
  std::vector<Round> out;
  std::vector<double> factors(n_addr, 1.0);
  std::vector<uint32_t> weights = sc.weights(1);
  auto program_front = [&] {
    std::vector<int64_t> effective(n_addr);
    for (size_t i = 0; i < n_addr; ++i) {
      effective[i] = std::max<int64_t>(1, std::llround(weights[i] * factors[i] * kWeightScale));
    }
    front.SetWeights(std::move(effective));
  };
  program_front();

  auto finish = [&](int r) {  // r: 0-based
    Round round;
    round.number = r + 1;
    round.end = kClockStart + static_cast<uint32_t>((r + 1) * o.round_seconds);
    round.weights = weights;
    round.factors = factors;
    for (size_t i = 0; i < n_addr; ++i) {
      const double clean = held[r][i] * o.skew[i];
      round.clean.push_back(clean);
      round.traffic.push_back(std::max(0.0, clean * (1 + sc.noise * normal(rng))));
    }
    if (sc.calibrate) {
      round.fed = sc.fed_rounds < 0 || r < sc.fed_rounds;
      if (round.fed) {
        std::vector<TrafficObservation> sample;
        for (size_t i = 0; i < n_addr; ++i) sample.push_back({kAddresses[i], weights[i], round.traffic[i]});
        if (absl::Status s = calibrator.Observe(key, sample, round.end, round.end); !s.ok()) {
          fmt::print(stderr, "calibration_sim: {} round {}: the sample was refused: {}\n", sc.name,
                     round.number, s.ToString());
          std::exit(1);
        }
      }
      calibrator.Step(round.end);
      for (size_t i = 0; i < n_addr; ++i) factors[i] = calibrator.Factor(key, kAddresses[i]);
    }
    round.factors_after = factors;
    out.push_back(std::move(round));
    if (r + 1 < sc.rounds) {
      weights = sc.weights(r + 2);
      program_front();
    }
  };

  // One event per query, earliest first. Each stub's first query is one
  // TTL before its phase, so that it holds an answer when the run starts.
  std::uniform_real_distribution<double> jitter(0, o.requery_jitter);
  std::vector<Query> queue;
  queue.reserve(pop.phase.size());
  for (size_t s = 0; s < pop.phase.size(); ++s)
    queue.push_back({pop.phase[s] - ttl, static_cast<uint32_t>(s)});
  std::make_heap(queue.begin(), queue.end(), Query::Later);
  int next_round = 0;
  while (!queue.empty() && queue.front().t < total) {
    std::pop_heap(queue.begin(), queue.end(), Query::Later);
    Query& q = queue.back();
    // Every answer of the rounds ending before t has been given: they are
    // complete, and the front takes the next round's weights.
    while (q.t >= (next_round + 1) * round_s) finish(next_round++);
    const size_t a = front.Pick();
    const double next = q.t + ttl + (o.requery_jitter > 0 ? jitter(timing) : 0.0);
    double from = std::max(q.t, 0.0);
    const double to = std::min(next, total);
    for (auto r = static_cast<size_t>(from / round_s); from < to; ++r) {
      const double edge = std::min(to, static_cast<double>(r + 1) * round_s);
      held[r][a] += pop.rate[q.stub] * (edge - from);
      from = edge;
    }
    q.t = next;
    std::push_heap(queue.begin(), queue.end(), Query::Later);
  }
  while (next_round < sc.rounds) finish(next_round++);
  return out;
}

// The first round from which every address's share stays within the
// tolerance to the end, or nullopt when the last round is outside it.
std::optional<int> SettledFrom(const std::vector<Round>& rounds) {
  int settled = 1;
  for (const Round& r : rounds) {
    if (r.MaxError(r.traffic) > kTolerance) settled = r.number + 1;
  }
  if (settled > static_cast<int>(rounds.size())) return std::nullopt;
  return settled;
}

std::string Ratios(const std::vector<Round>& rounds) {
  std::string s;
  for (const Round& r : rounds) {
    s += fmt::format("{}{:>3}: {:.2f}", (r.number - 1) % 10 == 0 ? "\n    " : "  ", r.number, r.Ratio());
  }
  return s;
}

void PrintCsv(const std::string& name, const std::vector<Round>& rounds) {
  for (const Round& r : rounds) {
    fmt::print(
        "{},{},{},{},{},{:.6f},{:.6f},{:.6f},{:.6f},{:.1f},{:.1f},{:.1f},{:.1f},{:.6f},{:.6f},{:.4f},{}\n",
        name, r.number, r.end, r.weights[0], r.weights[1], r.factors[0], r.factors[1], r.factors_after[0],
        r.factors_after[1], r.traffic[0], r.traffic[1], r.clean[0], r.clean[1], Round::Share(r.traffic, 0),
        Round::Share(r.traffic, 1), r.Ratio(), r.fed ? 1 : 0);
  }
}

// ---------------------------------------------------------------- plots

// Each plot through weir-bench's gnuplot writer (gnuplot_writer.h).
using weir::bench::GnuplotWriter;
using weir::bench::Num;

constexpr std::string_view kGrid = "set grid xtics ytics\nset key below\n";

absl::Status PlotSeed(GnuplotWriter& w, const std::vector<Round>* calibrated,
                      const std::vector<Round>* hand) {
  const size_t n = std::max(calibrated ? calibrated->size() : 0, hand ? hand->size() : 0);
  std::string data = "# round calibrated_ratio_B_A hand_tuned_ratio_B_A\n";
  for (size_t i = 0; i < n; ++i) {
    auto ratio = [&](const std::vector<Round>* v) {
      return v != nullptr && i < v->size() ? Num((*v)[i].Ratio()) : std::string("NaN");
    };
    data += fmt::format("{} {} {}\n", i + 1, ratio(calibrated), ratio(hand));
  }
  std::string plot;
  if (calibrated != nullptr) {
    plot +=
        "'calibration_seed004.dat' using 1:2 with linespoints lw 2 pt 7 ps 0.6 title "
        "'calibrated (GSLB weights 1:3)', ";
  }
  if (hand != nullptr) {
    plot +=
        "'calibration_seed004.dat' using 1:3 with linespoints lw 2 pt 5 ps 0.6 title "
        "'hand-tuned (GSLB weights 1:3, 1:4 from round 3, 1:5 from round 7)', ";
  }
  plot += "3 with lines dt 2 lw 1.5 lc rgb 'black' title 'wanted 3'";
  const std::string settings = fmt::format(
      "set title 'seed004: traffic ratio B/A per round'\n"
      "set xlabel 'round (hours)'\n"
      "set ylabel 'traffic B / traffic A'\n"
      "set yrange [1.5:3.75]\n{}",
      kGrid);
  return w.Plot("calibration_seed004", data, settings, plot);
}

absl::Status PlotNoise(GnuplotWriter& w, const std::vector<Round>& rounds, double noise) {
  std::string data = "# round share_B factor_B factor_A share_B_without_noise\n";
  for (const Round& r : rounds) {
    data += fmt::format("{} {} {} {} {}\n", r.number, Num(Round::Share(r.traffic, 1)), Num(r.factors[1]),
                        Num(r.factors[0]), Num(Round::Share(r.clean, 1)));
  }
  const double wanted = rounds[0].Wanted(1);
  const std::string settings = fmt::format(
      "set title 'noise: traffic share of B and factor_B per round (wanted share {:.3g}, {:.3g} % noise)'\n"
      "set xlabel 'round (hours)'\n"
      "set ylabel 'traffic share of B'\n"
      "set y2label 'factor (in effect during the round)'\n"
      "set ytics nomirror\n"
      "set y2tics\n"
      "set yrange [0.5:1]\n"
      "set y2range [0.4:1.6]\n"
      "set object 1 rect from graph 0, first {} to graph 1, first {} fc rgb '#d8ecd8' fs solid 0.5 noborder "
      "behind\n{}",
      wanted, noise * 100, Num(wanted * (1 - kTolerance)), Num(wanted * (1 + kTolerance)), kGrid);
  const std::string plot = fmt::format(
      "'calibration_noise.dat' using 1:2 axes x1y1 with linespoints lw 2 pt 7 ps 0.5 lc 1 title 'share of "
      "B', "
      "'calibration_noise.dat' using 1:5 axes x1y1 with lines lw 1.5 dt 3 lc 1 title 'share of B without the "
      "noise', "
      "{} axes x1y1 with lines dt 2 lw 1.5 lc rgb 'black' title 'wanted share of B (band: +-5 %)', "
      "'calibration_noise.dat' using 1:3 axes x1y2 with linespoints lw 2 pt 5 ps 0.5 lc 7 title 'factor_B "
      "(right)', "
      "'calibration_noise.dat' using 1:4 axes x1y2 with lines lw 1.5 lc 6 title 'factor_A (right)'",
      Num(wanted));
  return w.Plot("calibration_noise", data, settings, plot);
}

absl::Status PlotNoFeedback(GnuplotWriter& w, const std::vector<Round>& rounds, int fed) {
  std::string data = "# hours_since_last_sample factor_A factor_B traffic_ratio_B_A (at each round's end)\n";
  for (const Round& r : rounds) {
    data += fmt::format("{} {} {} {}\n", r.number - fed, Num(r.factors_after[0]), Num(r.factors_after[1]),
                        Num(r.Ratio()));
  }
  const std::string settings = fmt::format(
      "set title 'no_feedback: factors after the last sample (hour 0), GSLB weights 1:3'\n"
      "set xlabel 'hours since the last sample'\n"
      "set ylabel 'factor'\n"
      "set y2label 'traffic B / traffic A in the hour'\n"
      "set ytics nomirror\n"
      "set y2tics\n"
      "set y2range [0:4]\n"
      "set arrow 1 from 0, graph 0 to 0, graph 1 nohead dt 3\n{}",
      kGrid);
  const std::string plot =
      "'calibration_no_feedback.dat' using 1:2 axes x1y1 with linespoints lw 2 pt 7 ps 0.5 title 'factor_A', "
      "'calibration_no_feedback.dat' using 1:3 axes x1y1 with linespoints lw 2 pt 5 ps 0.5 title 'factor_B', "
      "'calibration_no_feedback.dat' using 1:4 axes x1y2 with lines lw 1 dt 2 title 'traffic ratio B/A "
      "(right)'";
  return w.Plot("calibration_no_feedback", data, settings, plot);
}

// ---------------------------------------------------------------- the command line

SimOptions ParseArgs(int argc, char** argv) {
  SimOptions o;
  CLI::App app{
      "calibration_sim: the traffic-share calibrator (weir/mgmt/calibration.h) against a simulated "
      "subscriber population",
      "calibration_sim"};
  app.add_option("--rounds-scale", o.rounds_scale, "multiply every scenario's rounds (default 1)")
      ->type_name("X")
      ->check(CLI::PositiveNumber);
  app.add_option("--subscribers", o.subscribers, "stub resolvers (default 20000)")
      ->type_name("N")
      ->check(CLI::PositiveNumber);
  app.add_option("--nat-share", o.nat_share, "share of the stubs behind NAT (default 0.3)")
      ->type_name("X")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--nat-k", o.nat_k, "traffic of a stub behind NAT, in subscribers (default 8)")
      ->type_name("K")
      ->check(CLI::PositiveNumber);
  app.add_option("--ttl", o.ttl, "answer TTL in seconds (default 300)")
      ->type_name("S")
      ->check(CLI::PositiveNumber);
  app.add_option("--requery-jitter", o.requery_jitter,
                 "a stub asks again up to S s (uniform) after its answer expired (default 1)")
      ->type_name("S")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--round-seconds", o.round_seconds, "length of a feedback window (default 3600)")
      ->type_name("S")
      ->check(CLI::PositiveNumber);
  app.add_option("--skew", o.skew, "traffic multiplier of addresses A and B (default 1 0.6667)")
      ->type_name("X")
      ->expected(2)
      ->check(CLI::PositiveNumber);
  app.add_option("--noise", o.noise, "traffic noise of seed004, hand and no_feedback (default 0)")
      ->type_name("X")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--noisy-level", o.noisy_level, "traffic noise of the scenario `noise` (default 0.05)")
      ->type_name("X")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--seed", o.seed, "random seed (default 1)")->type_name("N");
  app.add_option("--only", o.only, "run one scenario")
      ->type_name("NAME")
      ->check(CLI::IsMember({"seed004", "noise", "hand", "no_feedback"}));
  app.add_option("--plot-dir", o.plot_dir, "write the plots into DIR (default: no plots)")->type_name("DIR");
  app.add_flag("--csv", o.csv, "print each round as a CSV row");
  app.add_option("--gain-p", o.calibration.gain_p, "the controller's proportional gain")->type_name("X");
  app.add_option("--gain-i", o.calibration.gain_i, "the controller's integral gain")->type_name("X");
  app.add_option("--max-step", o.calibration.max_step, "the controller's largest factor ratio per step")
      ->type_name("X");
  app.add_option("--dead-band", o.calibration.dead_band, "the controller's dead band")->type_name("X");
  try {
    app.parse(argc, argv);
    if (o.ttl > o.round_seconds)
      throw CLI::ValidationError("--ttl", "must not be longer than --round-seconds");
    if (absl::Status s = weir::mgmt::ValidateCalibrationOptions(o.calibration); !s.ok()) {
      throw CLI::ValidationError("--gain-p, --gain-i, --max-step, --dead-band", std::string(s.message()));
    }
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }
  return o;
}

// ---------------------------------------------------------------- scenarios

std::vector<uint32_t> OneToThree(int) { return {1, 3}; }

// The field test's hand tuning: 1:3, then 1:4 from round 3, 1:5 from round 7.
std::vector<uint32_t> HandTuned(int round) {
  if (round <= 2) return {1, 3};
  if (round <= 6) return {1, 4};
  return {1, 5};
}

// The mean and the sample standard deviation.
std::pair<double, double> MeanStdDev(const std::vector<double>& v) {
  if (v.empty()) return {0, 0};
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  double var = 0;
  for (double x : v) var += (x - mean) * (x - mean);
  return {mean, v.size() > 1 ? std::sqrt(var / static_cast<double>(v.size() - 1)) : 0.0};
}

// The step of ln(factor_B) per round, over rounds [from, to].
struct StepFigures {
  int nonzero = 0;
  int zero = 0;
  int sign_changes = 0;
  double lag1_correlation = 0;
};

StepFigures Steps(const std::vector<Round>& rounds, int from, int to) {
  StepFigures f;
  std::vector<double> steps;
  for (const Round& r : rounds) {
    if (r.number < from || r.number > to) continue;
    steps.push_back(std::log(r.factors_after[1]) - std::log(r.factors[1]));
  }
  double previous = 0;
  for (double d : steps) {
    if (std::abs(d) < 1e-12) {
      ++f.zero;
      continue;
    }
    if (previous != 0 && (d > 0) != (previous > 0)) ++f.sign_changes;
    previous = d;
    ++f.nonzero;
  }
  if (steps.size() > 2) {
    const double mean = std::accumulate(steps.begin(), steps.end(), 0.0) / static_cast<double>(steps.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
      den += (steps[i] - mean) * (steps[i] - mean);
      if (i > 0) num += (steps[i] - mean) * (steps[i - 1] - mean);
    }
    f.lag1_correlation = den > 0 ? num / den : 0;
  }
  return f;
}

// The controller and the noise alone: the same calibrator on a plant with
// no stubs and no round-robin, where address i's traffic is exactly
// W_i x factor_i x skew_i x (1 + noise x N(0,1)), over many rounds. It tells
// what part of the `noise` figures the controller's answer to the noise
// explains; the shares of the same plant with exact factors (1 / skew_i)
// and no controller are the noise floor of the observed share error.
struct NoiseReference {
  double sign_change_rate = 0;  // sign changes per pair of non-zero steps
  double zero_step_rate = 0;
  double lag1_correlation = 0;
  double outside_controlled = 0;  // share of rounds outside the tolerance
  double outside_exact = 0;
};

NoiseReference ReferenceRuns(const SimOptions& o, double noise) {
  constexpr int kRounds = 20'000;
  constexpr int kSettle = 100;
  const CalibrationKey key{"reference.example.", "city"};
  const std::vector<uint32_t> weights = OneToThree(1);
  std::seed_seq seq{o.seed, uint64_t{3}};
  std::mt19937_64 rng(seq);
  std::normal_distribution<double> normal;
  NoiseReference ref;
  for (const bool controlled : {true, false}) {
    Calibrator calibrator(o.calibration);
    std::vector<double> factors(kAddresses.size());
    for (size_t i = 0; i < factors.size(); ++i) factors[i] = controlled ? 1.0 : 1.0 / o.skew[i];
    std::vector<Round> rounds;
    int outside = 0;
    for (int n = 1; n <= kRounds; ++n) {
      Round r;
      r.number = n;
      r.end = kClockStart + static_cast<uint32_t>(n * o.round_seconds);
      r.weights = weights;
      r.factors = factors;
      std::vector<TrafficObservation> sample;
      for (size_t i = 0; i < factors.size(); ++i) {
        r.clean.push_back(weights[i] * factors[i] * o.skew[i]);
        r.traffic.push_back(std::max(0.0, r.clean[i] * (1 + noise * normal(rng))));
        sample.push_back({kAddresses[i], weights[i], r.traffic[i]});
      }
      if (controlled) {
        // The clean traffic of a round is a few units: min_traffic must not
        // hold the steps back.
        for (TrafficObservation& t : sample) t.traffic *= 1e6;
        if (!calibrator.Observe(key, sample, r.end, r.end).ok()) break;
        calibrator.Step(r.end);
        for (size_t i = 0; i < factors.size(); ++i) factors[i] = calibrator.Factor(key, kAddresses[i]);
      }
      r.factors_after = factors;
      if (n > kSettle) outside += r.MaxError(r.traffic) > kTolerance;
      rounds.push_back(std::move(r));
    }
    const double counted = kRounds - kSettle;
    if (controlled) {
      const StepFigures steps = Steps(rounds, kSettle + 1, kRounds);
      ref.sign_change_rate = steps.nonzero > 1 ? steps.sign_changes / (steps.nonzero - 1.0) : 0;
      ref.zero_step_rate = steps.zero / counted;
      ref.lag1_correlation = steps.lag1_correlation;
      ref.outside_controlled = outside / counted;
    } else {
      ref.outside_exact = outside / counted;
    }
  }
  return ref;
}

}  // namespace

int main(int argc, char** argv) {
  const SimOptions o = ParseArgs(argc, argv);
  const auto started = std::chrono::steady_clock::now();
  const Population pop = MakePopulation(o);
  const bool all = o.only.empty();
  const CalibrationOptions& c = o.calibration;

  fmt::print(
      "calibration_sim: {} stubs ({:.0f} % behind NAT at {:g}x), TTL {} s, rounds of {} s, skew A {:g} B "
      "{:g}, "
      "seed {}\n",
      o.subscribers, o.nat_share * 100, o.nat_k, o.ttl, o.round_seconds, o.skew[0], o.skew[1], o.seed);
  fmt::print(
      "controller: gain_p {:g} gain_i {:g} max_step {:g} factors {:g}..{:g} dead_band {:g}; no sample after "
      "{} s: hold {} s, decay half-life {} s\n",
      c.gain_p, c.gain_i, c.max_step, c.min_factor, c.max_factor, c.dead_band, c.max_feedback_age_s,
      c.hold_time_s, c.decay_half_life_s);
  if (o.csv) {
    fmt::print(
        "scenario,round,round_end,weight_A,weight_B,factor_A,factor_B,factor_A_after,factor_B_after,traffic_"
        "A,"
        "traffic_B,traffic_A_without_noise,traffic_B_without_noise,share_A,share_B,ratio_B_A,fed\n");
  }

  std::optional<std::vector<Round>> seed, noisy, hand, no_feedback;
  int fed_rounds = 0;
  double noisy_level = o.noisy_level;

  if (all || o.only == "seed004") {
    seed = Run(o, pop, {"seed004", Rounds(o, 30), o.noise, true, -1, OneToThree, 1});
    if (o.csv) PrintCsv("seed004", *seed);
    const std::optional<int> settled = SettledFrom(*seed);
    const Round& last = seed->back();
    fmt::print("\nseed004: GSLB weights 1:3, noise {:g} %, {} rounds; traffic ratio B:A per round:{}\n",
               o.noise * 100, seed->size(), Ratios(*seed));
    fmt::print("seed004: final factors A {:.4f} B {:.4f} (B/A {:.4f}), final ratio {:.3f}\n",
               last.factors_after[0], last.factors_after[1], last.factors_after[1] / last.factors_after[0],
               last.Ratio());
    if (settled) {
      fmt::print("seed004: within 5% from round {} (target <= 10): {}\n", *settled,
                 *settled <= 10 ? "met" : "MISSED");
    } else {
      fmt::print("seed004: not within 5% at the end of the run (target <= 10): MISSED\n");
    }
  }

  if (all || o.only == "noise") {
    noisy = Run(o, pop, {"noise", Rounds(o, 100), noisy_level, true, -1, OneToThree, 2});
    if (o.csv) PrintCsv("noise", *noisy);
    const int from = std::min(Rounds(o, 20), static_cast<int>(noisy->size()));
    const int to = static_cast<int>(noisy->size());
    double worst = 0, worst_clean = 0;
    std::vector<double> log_a, log_b, log_ratio;
    for (const Round& r : *noisy) {
      if (r.number < from) continue;
      worst = std::max(worst, r.MaxError(r.traffic));
      worst_clean = std::max(worst_clean, r.MaxError(r.clean));
      log_a.push_back(std::log(r.factors[0]));
      log_b.push_back(std::log(r.factors[1]));
      log_ratio.push_back(std::log(r.factors[1] / r.factors[0]));
    }
    const StepFigures steps = Steps(*noisy, from, to);
    int outside = 0;
    for (const Round& r : *noisy) outside += r.number >= from && r.MaxError(r.traffic) > kTolerance;
    fmt::print("\nnoise: GSLB weights 1:3, noise {:g} %, {} rounds; figures over rounds {}..{}\n",
               noisy_level * 100, noisy->size(), from, to);
    fmt::print(
        "noise: max relative share error {:.1f} % as observed ({} of {} rounds outside 5 %), {:.1f} % in the "
        "traffic without the noise\n",
        worst * 100, outside, to - from + 1, worst_clean * 100);
    const auto [mean_b, sd_b] = MeanStdDev(log_b);
    fmt::print(
        "noise: std dev of ln(factor_B) {:.4f} (factor_B {:.4f} x/÷ {:.4f}); of ln(factor_A) {:.4f}; of "
        "ln(factor_B / factor_A) {:.4f}\n",
        sd_b, std::exp(mean_b), std::exp(sd_b), MeanStdDev(log_a).second, MeanStdDev(log_ratio).second);
    fmt::print(
        "noise: factor_B steps: {} non-zero, {} zero (dead band); {} sign changes, {:.1f} expected if the "
        "steps were independent noise; lag-1 correlation of the steps {:.2f}\n",
        steps.nonzero, steps.zero, steps.sign_changes, steps.nonzero > 0 ? (steps.nonzero - 1) / 2.0 : 0.0,
        steps.lag1_correlation);
    const NoiseReference ref = ReferenceRuns(o, noisy_level);
    fmt::print(
        "noise: reference, the controller on the noise alone (no stubs, 20000 rounds): {:.1f} sign changes "
        "expected for {} non-zero steps ({:.0f} % of pairs), {:.0f} % zero steps, lag-1 correlation {:.2f}; "
        "rounds outside 5 %: {:.0f} % with the controller, {:.0f} % with exact factors and no controller "
        "(here: {:.0f} %)\n",
        ref.sign_change_rate * std::max(0, steps.nonzero - 1), steps.nonzero, ref.sign_change_rate * 100,
        ref.zero_step_rate * 100, ref.lag1_correlation, ref.outside_controlled * 100, ref.outside_exact * 100,
        100.0 * outside / (to - from + 1));
  }

  if (all || o.only == "hand") {
    hand = Run(o, pop, {"hand", Rounds(o, 30), o.noise, false, -1, HandTuned, 3});
    if (o.csv) PrintCsv("hand", *hand);
    fmt::print(
        "\nhand: no calibrator, GSLB weights 1:3 (rounds 1-2), 1:4 (3-6), 1:5 (7-); traffic ratio B:A per "
        "round:{}\n",
        Ratios(*hand));
    const Round& last = hand->back();
    fmt::print("hand: at 1:5 the ratio is {:.2f} (the field test reached 2.87; wanted 3)\n", last.Ratio());
  }

  if (all || o.only == "no_feedback") {
    fed_rounds = Rounds(o, 15);
    no_feedback =
        Run(o, pop, {"no_feedback", fed_rounds + Rounds(o, 48), o.noise, true, fed_rounds, OneToThree, 4});
    if (o.csv) PrintCsv("no_feedback", *no_feedback);
    const Round& at_stop = (*no_feedback)[fed_rounds - 1];
    const double lnb0 = std::log(at_stop.factors_after[1]);
    fmt::print(
        "\nno_feedback: GSLB weights 1:3; samples for {} rounds, then steps only for {} rounds of {} s\n"
        "no_feedback: at the last sample: factor A {:.4f} B {:.4f}, ratio {:.3f}\n",
        fed_rounds, no_feedback->size() - fed_rounds, o.round_seconds, at_stop.factors_after[0],
        at_stop.factors_after[1], at_stop.Ratio());
    // Hours since the last sample and the share of ln(factor_B) left, at
    // each step after it.
    std::vector<std::pair<double, double>> left;
    for (const Round& r : *no_feedback) {
      if (r.number <= fed_rounds) continue;
      left.emplace_back(static_cast<double>(r.end - at_stop.end) / 3600.0,
                        lnb0 != 0 ? std::log(r.factors_after[1]) / lnb0 : 0);
    }
    std::optional<double> held_until, half_at, tenth_at, half_life, onset;
    for (size_t i = 0; i < left.size(); ++i) {
      const auto [since, l] = left[i];
      if (std::abs(l - 1) <= 1e-9) held_until = since;
      if (!half_at && l <= 0.5) half_at = since;
      if (!tenth_at && l <= 0.1) tenth_at = since;
      // From the first two decayed steps: the half-life, and where the
      // decay must have started for the first one to have come that far.
      if (!half_life && i + 1 < left.size() && l < 1 - 1e-9 && l > 0 && left[i + 1].second > 0 &&
          left[i + 1].second < l) {
        half_life = (left[i + 1].first - since) / std::log2(l / left[i + 1].second);
        onset = since - *half_life * std::log2(1 / l);
      }
    }
    fmt::print(
        "no_feedback: by hours since the last sample: factor A / B after that hour's step, traffic ratio B:A "
        "in that hour\n");
    for (const Round& r : *no_feedback) {
      const double since = static_cast<double>(r.end - at_stop.end) / 3600.0;
      const int h = static_cast<int>(std::lround(since));
      if (r.number <= fed_rounds || std::abs(since - h) > 1e-9) continue;
      if (h <= 6 || h == 8 || h == 12 || h == 24 || h == 36 || h == 48 ||
          r.number == no_feedback->back().number) {
        fmt::print("    {:>3} h: {:.4f} / {:.4f}  {:.3f}\n", h, r.factors_after[0], r.factors_after[1],
                   r.Ratio());
      }
    }
    auto hours = [](const std::optional<double>& h) {
      return h ? fmt::format("{:.2f} h", *h) : std::string("n/a (too few rounds)");
    };
    fmt::print(
        "no_feedback: unchanged up to the step at {}; decay from {} (max_feedback_age {} s + hold_time {} s "
        "= {:.2f} h), half-life of ln(factor) {} (decay_half_life {} s); ln(factor_B) halved by the step at "
        "{}, below a tenth by {}; final factors A {:.4f} B {:.4f}\n",
        hours(held_until), hours(onset), c.max_feedback_age_s, c.hold_time_s,
        (c.max_feedback_age_s + c.hold_time_s) / 3600.0, hours(half_life), c.decay_half_life_s,
        hours(half_at), hours(tenth_at), no_feedback->back().factors_after[0],
        no_feedback->back().factors_after[1]);
  }

  if (!o.plot_dir.empty()) {
    std::string dir = o.plot_dir;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    std::vector<std::string> files;
    GnuplotWriter w(dir, "gnuplot", "calibration_sim", &files);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    absl::Status s = ec || !std::filesystem::is_directory(dir, ec)
                         ? absl::FailedPreconditionError(fmt::format("cannot create plot directory {}", dir))
                         : absl::OkStatus();
    if (s.ok() && (seed || hand)) s = PlotSeed(w, seed ? &*seed : nullptr, hand ? &*hand : nullptr);
    if (s.ok() && noisy) s = PlotNoise(w, *noisy, noisy_level);
    if (s.ok() && no_feedback) s = PlotNoFeedback(w, *no_feedback, fed_rounds);
    if (!s.ok()) {
      fmt::print(stderr, "calibration_sim: {}\n", s.ToString());
      return 1;
    }
    fmt::print("\nplots: {} files in {}\n", files.size(), dir);
  }
  fmt::print("run time {:.1f} s\n",
             std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return 0;
}
