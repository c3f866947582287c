// Weight conformance: how far the answers a node gave for each weighted
// name and partition are from the weights the GSLB configured.
//
// The metrics thread feeds it, at every scrape, the cumulative answer
// counts per (name, partition, address) and the configured weights of the
// cached sets. Windows are at least `window_seconds` long on the node's
// clock: the first scrape opens one (its counts are the baseline), the first
// scrape at or after window_seconds later closes it and opens the next. For
// each (name, partition) answered in the closed window the deviation is
//   max over addresses | answers(a) / sum(answers) - weight(a) / sum(weight) |
// (an address answered but no longer configured counts with weight 0, a
// configured address never answered with 0 answers), and it stays the
// reported value until the next window closes.
//
// Threading: none; the caller serialises Update() (concurrent scrapes).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>

namespace weir::fastpath {

struct AnswerSeries {
  std::string name;
  std::string partition;
  std::string address;
  auto operator<=>(const AnswerSeries&) const = default;
};

class ConformanceWindow {
 public:
  using Counts = std::map<AnswerSeries, uint64_t>;
  using Weights = std::map<AnswerSeries, uint32_t>;
  using Deviations = std::map<std::pair<std::string, std::string>, double>;  // (name, partition)

  explicit ConformanceWindow(uint32_t window_seconds) : window_(window_seconds) {}

  // `answers`: cumulative counts now; `weights`: the configured weights now.
  // Returns the deviations of the last closed window (empty before one closed).
  const Deviations& Update(uint32_t now, const Counts& answers, const Weights& weights);

  // The deviations of `delta` answers against `weights` (what Update computes).
  static Deviations Compute(const Counts& delta, const Weights& weights);

 private:
  uint32_t window_;
  std::optional<uint32_t> start_;  // the open window's start
  Counts baseline_;
  Deviations last_;
};

}  // namespace weir::fastpath
