// Weight shares: what each city's subscribers were given for each weighted
// name, against the weights they should have been given.
//
// ShareCounter is one sender thread's tally: picks per (question, city,
// address) and the runs of one address, in the order that thread received
// the answers. ExpectedWeights holds the weights per (question, city),
// learned from the weight option of probe answers or read from a file.
// AnalyseShares merges the threads' tallies into the report's rows.
//
// Threading: a ShareCounter is written by its thread under its own mutex,
// held for one receive batch at a time; the reporting thread copies it
// under the same mutex once a second. ExpectedWeights is filled before the
// run and read-only during it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "report.h"
#include "weir/partitions/partition.h"

namespace weir::bench {

struct AddressCount {
  common::IpAddress address;
  uint64_t count = 0;
};

struct PairTally {
  std::vector<AddressCount> addresses;
  uint64_t total = 0;
  uint32_t last = UINT32_MAX;  // index into addresses of the previous pick
  uint64_t run = 0;
  uint64_t longest_run = 0;
  uint32_t longest_run_address = 0;
};

inline uint64_t PairKey(uint32_t question, uint32_t city) { return (uint64_t{question} << 32) | city; }

class ShareCounter {
 public:
  // One answer to `question` from a subscriber of `city` whose picked
  // (first) address is `address`. Call with mutex() held.
  void Count(uint32_t question, uint32_t city, const common::IpAddress& address);
  std::mutex& mutex() { return mu_; }
  // Call with mutex() held.
  const absl::flat_hash_map<uint64_t, PairTally>& tallies() const { return tallies_; }

 private:
  std::mutex mu_;
  absl::flat_hash_map<uint64_t, PairTally> tallies_;
};

struct ExpectedSet {
  std::string from;  // "answer" or "file"
  std::vector<std::pair<common::IpAddress, uint32_t>> weights;
};

class ExpectedWeights {
 public:
  void Set(uint32_t question, uint32_t city, ExpectedSet set) {
    sets_[PairKey(question, city)] = std::move(set);
  }
  const ExpectedSet* Find(uint32_t question, uint32_t city) const {
    auto it = sets_.find(PairKey(question, city));
    return it == sets_.end() ? nullptr : &it->second;
  }
  bool empty() const { return sets_.empty(); }

 private:
  absl::flat_hash_map<uint64_t, ExpectedSet> sets_;
};

// Merged tallies of every thread, keyed by PairKey.
using MergedTallies = std::map<uint64_t, PairTally>;
void MergeTallies(const absl::flat_hash_map<uint64_t, PairTally>& from, MergedTallies* into);

// The report rows, one per (question, city) with picks, sorted by name then
// city. `names[q]` and `cities[c]` are the presentation forms.
std::vector<NameCityShare> AnalyseShares(const MergedTallies& tallies, const ExpectedWeights& expected,
                                         const std::vector<std::string>& names,
                                         const std::vector<std::string>& cities);

// The worst deviation (pp) over rows with known weights.
double WorstDeviation(const std::vector<NameCityShare>& rows);

}  // namespace weir::bench
