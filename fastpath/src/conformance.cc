#include "weir/fastpath/conformance.h"

#include <algorithm>
#include <cmath>

namespace weir::fastpath {

ConformanceWindow::Deviations ConformanceWindow::Compute(const Counts& delta, const Weights& weights) {
  struct Group {
    uint64_t answers = 0;
    uint64_t weight = 0;
    std::map<std::string, std::pair<uint64_t, uint32_t>> addresses;  // answers, weight
  };
  std::map<std::pair<std::string, std::string>, Group> groups;
  for (const auto& [s, n] : delta) {
    if (n == 0) continue;
    Group& g = groups[{s.name, s.partition}];
    g.answers += n;
    g.addresses[s.address].first += n;
  }
  for (const auto& [s, w] : weights) {
    auto it = groups.find({s.name, s.partition});
    if (it == groups.end()) continue;  // not answered in the window: nothing to compare
    it->second.weight += w;
    it->second.addresses[s.address].second = w;
  }
  Deviations out;
  for (const auto& [key, g] : groups) {
    if (g.weight == 0) continue;  // no configured set to compare with (expired, evicted)
    double worst = 0;
    for (const auto& [address, aw] : g.addresses) {
      const double observed = static_cast<double>(aw.first) / static_cast<double>(g.answers);
      const double configured = static_cast<double>(aw.second) / static_cast<double>(g.weight);
      worst = std::max(worst, std::fabs(observed - configured));
    }
    out[key] = worst;
  }
  return out;
}

const ConformanceWindow::Deviations& ConformanceWindow::Update(uint32_t now, const Counts& answers,
                                                               const Weights& weights) {
  if (!start_) {
    start_ = now;
    baseline_ = answers;
    return last_;
  }
  if (now - *start_ < window_) return last_;
  Counts delta;
  for (const auto& [s, n] : answers) {
    auto it = baseline_.find(s);
    const uint64_t before = it == baseline_.end() ? 0 : it->second;
    // A counter never goes back; a smaller value is a series that left and
    // came back (its worker slot was not kept): count it from zero.
    delta[s] = n >= before ? n - before : n;
  }
  last_ = Compute(delta, weights);
  start_ = now;
  baseline_ = answers;
  return last_;
}

}  // namespace weir::fastpath
