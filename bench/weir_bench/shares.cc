#include "shares.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace weir::bench {

void ShareCounter::Count(uint32_t question, uint32_t city, const common::IpAddress& address) {
  PairTally& t = tallies_[PairKey(question, city)];
  uint32_t i = 0;
  while (i < t.addresses.size() && !(t.addresses[i].address == address)) ++i;
  if (i == t.addresses.size()) t.addresses.push_back(AddressCount{address, 0});
  ++t.addresses[i].count;
  ++t.total;
  t.run = i == t.last ? t.run + 1 : 1;
  t.last = i;
  if (t.run > t.longest_run) {
    t.longest_run = t.run;
    t.longest_run_address = i;
  }
}

void MergeTallies(const absl::flat_hash_map<uint64_t, PairTally>& from, MergedTallies* into) {
  for (const auto& [key, t] : from) {
    PairTally& m = (*into)[key];
    for (const AddressCount& a : t.addresses) {
      auto it = std::find_if(m.addresses.begin(), m.addresses.end(),
                             [&](const AddressCount& x) { return x.address == a.address; });
      if (it == m.addresses.end()) {
        m.addresses.push_back(a);
      } else {
        it->count += a.count;
      }
    }
    m.total += t.total;
    if (t.longest_run > m.longest_run) {
      m.longest_run = t.longest_run;
      // Index into m.addresses of the thread's run address.
      const common::IpAddress& addr = t.addresses[t.longest_run_address].address;
      for (uint32_t i = 0; i < m.addresses.size(); ++i) {
        if (m.addresses[i].address == addr) m.longest_run_address = i;
      }
    }
  }
}

std::vector<NameCityShare> AnalyseShares(const MergedTallies& tallies, const ExpectedWeights& expected,
                                         const std::vector<std::string>& names,
                                         const std::vector<std::string>& cities) {
  std::vector<NameCityShare> rows;
  for (const auto& [key, t] : tallies) {
    const uint32_t q = static_cast<uint32_t>(key >> 32), c = static_cast<uint32_t>(key & 0xffffffffu);
    NameCityShare row;
    row.name = names[q];
    row.city = cities[c];
    row.answers = t.total;
    row.longest_run = t.longest_run;
    if (t.longest_run_address < t.addresses.size()) {
      row.longest_run_address = common::IpToString(t.addresses[t.longest_run_address].address);
    }
    const ExpectedSet* set = expected.Find(q, c);
    row.weights_from = set != nullptr ? set->from : "none";
    // Addresses of the same name in the other cities' sets: a pick of one
    // that is not in this city's set is a leak.
    std::set<std::string> others;
    for (uint32_t oc = 0; oc < cities.size(); ++oc) {
      if (oc == c) continue;
      if (const ExpectedSet* os = expected.Find(q, oc)) {
        for (const auto& [a, w] : os->weights) others.insert(common::IpToString(a));
      }
    }
    uint64_t weight_sum = 0;
    if (set != nullptr) {
      for (const auto& [a, w] : set->weights) weight_sum += w;
      for (const auto& [a, w] : set->weights) {
        AddressShare s;
        s.address = common::IpToString(a);
        s.weight = w;
        s.expected_pct = weight_sum ? 100.0 * w / static_cast<double>(weight_sum) : 0;
        row.addresses.push_back(std::move(s));
      }
    }
    std::set<std::string> own;
    for (const AddressShare& s : row.addresses) own.insert(s.address);
    for (const AddressCount& a : t.addresses) {
      const std::string text = common::IpToString(a.address);
      auto it = std::find_if(row.addresses.begin(), row.addresses.end(),
                             [&](const AddressShare& s) { return s.address == text; });
      if (it == row.addresses.end()) {
        row.addresses.push_back(AddressShare{text, 0, 0, 0, 0, {}});
        it = row.addresses.end() - 1;
      }
      it->answers = a.count;
      if (!own.count(text) && others.count(text)) row.leaked_answers += a.count;
    }
    for (AddressShare& s : row.addresses) {
      s.observed_pct = t.total ? 100.0 * static_cast<double>(s.answers) / static_cast<double>(t.total) : 0;
      if (set != nullptr)
        row.max_deviation_pp = std::max(row.max_deviation_pp, std::fabs(s.observed_pct - s.expected_pct));
    }
    rows.push_back(std::move(row));
  }
  std::sort(rows.begin(), rows.end(), [](const NameCityShare& a, const NameCityShare& b) {
    return std::tie(a.name, a.city) < std::tie(b.name, b.city);
  });
  return rows;
}

double WorstDeviation(const std::vector<NameCityShare>& rows) {
  double worst = 0;
  for (const NameCityShare& r : rows) {
    if (r.weights_from != "none") worst = std::max(worst, r.max_deviation_pp);
  }
  return worst;
}

}  // namespace weir::bench
