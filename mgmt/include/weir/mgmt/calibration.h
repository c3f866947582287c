// Traffic-share calibration of the GSLB weights.
//
// The GSLB's weights say what share of the traffic each address of an answer
// set should carry; weir answers subscribers in those shares exactly, yet
// the traffic the CDN sees can be off in a stable direction (one answer
// behind NAT serves many users; stub caches keep answers). Given the traffic
// each address actually carried, the calibrator keeps a correction factor
// per (name, partition, address): the front picks with weight x factor,
// so that the observed traffic shares move to the wanted ones.
//
// The controller works on the log of the share ratio, where the skew is
// multiplicative: per address, the error is e = ln(wanted / observed)
// (wanted = weight / sum of weights, observed = traffic / sum of traffic,
// both within the address's family: IPv4 and IPv6 are corrected apart),
// 0 inside the dead band (|observed / wanted - 1| <= dead_band). Each step
// is a velocity-form PI update of ln(factor):
//     d = gain_p * (e - e_previous) + gain_i * e
// bounded to +-ln(max_step) per step, then the set's factors are rescaled
// so that sum(weight x factor) = sum(weight) (only ratios matter to the
// picks) and each is held in [min_factor, max_factor]. The velocity form
// never winds up: at a bound, the next opposite error moves away at once.
//
// Feedback is a sample per (name, partition): each address's weight as the
// GSLB gave it and the traffic it carried over a window. A sample older
// than max_feedback_age (or none) leaves the factors held for hold_time,
// then they decay to 1 with decay_half_life (reaching 1 within kDecaySnap; 0: held for good); a set
// whose addresses change starts again from factor 1.
//
// Threading: one thread (weir-mgmt's loop); time is given by the caller
// (an injected clock in tests).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "weir/common/line_errors.h"
#include "weir/partitions/tagtable.h"

namespace weir::mgmt {

struct CalibrationOptions {
  double gain_p = 0.1;
  double gain_i = 0.4;
  double max_step = 1.5;  // a factor changes by at most this ratio per step
  double min_factor = 0.2;
  double max_factor = 5.0;
  double dead_band = 0.03;  // relative share error left alone
  // Below this much traffic in a sample (sum over the set), the sample is
  // noise: it is not acted on.
  double min_traffic = 100;
  uint32_t max_feedback_age_s = 1800;
  uint32_t hold_time_s = 3600;
  uint32_t decay_half_life_s = 3600;  // 0: hold for good
};

// Checks the ranges (gains 0..2, max_step 1..10, 0 < min <= 1 <= max <= 100,
// dead_band 0..0.5); the message names the field.
absl::Status ValidateCalibrationOptions(const CalibrationOptions& o);

// One address of a sample: its GSLB weight and the traffic it carried
// (bytes, requests: any unit, the same for the whole sample).
struct TrafficObservation {
  std::string address;  // as the answer carries it ("192.0.2.1", "2001:db8::1")
  uint32_t weight = 0;
  double traffic = 0;
};

struct CalibrationKey {
  std::string name;       // presentation form, lower case, trailing dot
  std::string partition;  // the city, "common" or "subnet"
  friend bool operator<(const CalibrationKey& a, const CalibrationKey& b) {
    return a.name != b.name ? a.name < b.name : a.partition < b.partition;
  }
};

// A key and an address from text, made canonical: a host name (letters,
// digits, '-', '_'; lower case, trailing dot), a partition of 1 to 64 of A-Z a-z 0-9 _ . -, an IPv4
// or IPv6 address. False with the reason in `why`.
bool ParseCalibrationKey(std::string_view name, std::string_view partition, CalibrationKey* out,
                         std::string* why);
bool ParseCalibrationAddress(std::string_view address, std::string* out, std::string* why);

// A set's state: per address (sorted by address) its factor and the error
// of the last step; what weir-mgmt persists and pushes.
struct AddressFactor {
  std::string address;
  uint32_t weight = 0;  // the GSLB weight of the last sample
  double factor = 1.0;
  double last_error = 0.0;
};
struct CalibrationSet {
  std::vector<AddressFactor> addresses;
  uint32_t sample_time = 0;   // the end of the last sample's window (clock seconds)
  uint32_t stepped_time = 0;  // the last step that used it
  uint64_t steps = 0;
};

class Calibrator {
 public:
  explicit Calibrator(CalibrationOptions options) : o_(options) {}

  // A sample for (name, partition) whose window ended at `window_end`,
  // given at `now`. Refused, nothing changed: an empty sample, one of more
  // than kMaxAddresses addresses (both families together), a zero weight, a negative or non-finite traffic, a
  // repeated address (InvalidArgument), a window ending more than kMaxClockSkew after `now` (InvalidArgument:
  // a typo there would hold the set for years), a window that ends no later than the set's last sample
  // (FailedPrecondition).
  static constexpr uint32_t kMaxClockSkew = 300;
  // At most this many addresses in a sample: an answer set's bound
  // (dns::kMaxWeightedAddresses), what the front's factors can hold.
  static constexpr size_t kMaxAddresses = 64;
  // A decaying factor this close to 1 becomes 1.
  static constexpr double kDecaySnap = 0.005;
  absl::Status Observe(const CalibrationKey& key, std::span<const TrafficObservation> sample,
                       uint32_t window_end, uint32_t now);

  // One control step at `now` for every set: a fresh sample not yet used is
  // acted on (one already older than max_feedback_age only dates the set);
  // a stale set holds, then decays; a `now` before the last step changes
  // nothing. Returns how many sets changed
  // a factor.
  size_t Step(uint32_t now);

  // The set's state, or null.
  const CalibrationSet* Find(const CalibrationKey& key) const;
  // The factor of one address (1 when unknown).
  double Factor(const CalibrationKey& key, std::string_view address) const;
  const std::map<CalibrationKey, CalibrationSet>& sets() const { return sets_; }
  // The state as text, what weir-mgmt keeps and pushes: one line per
  // address, sets in key order, each set's addresses in order:
  //   NAME PARTITION ADDRESS WEIGHT FACTOR LAST_ERROR SAMPLE_TIME STEPPED_TIME STEPS
  // (numbers in their shortest exact form: a restore gives the same state).
  std::string FormatState() const;
  // Replaces every set with those of `text`; on any error (every bad line
  // in `errors`: a bad field, a factor outside kMinStoredFactor..
  // kMaxStoredFactor, an address twice in a set, a set's lines disagreeing
  // on its times) nothing changes. A factor outside the options' range is
  // held to it (the range was narrowed since). Samples not yet stepped on
  // are dropped.
  static constexpr double kMinStoredFactor = 0.001;
  static constexpr double kMaxStoredFactor = 100;
  absl::Status RestoreState(std::string_view text, common::LineErrors* errors);

  // Forgets a set (its tag lost calibrate=on, the name is gone).
  void Erase(const CalibrationKey& key) {
    sets_.erase(key);
    pending_.erase(key);
  }

 private:
  struct Pending {
    std::vector<TrafficObservation> sample;  // sorted by address
    uint32_t window_end = 0;
  };
  void Act(CalibrationSet& set, const Pending& p);
  // One family's addresses of the sample (indices): true when it acted.
  bool ActFamily(CalibrationSet& set, const Pending& p, const std::vector<size_t>& idx);
  bool Decay(CalibrationSet& set, uint32_t now);

  CalibrationOptions o_;
  std::map<CalibrationKey, CalibrationSet> sets_;
  std::map<CalibrationKey, Pending> pending_;  // samples not yet stepped on
};

// The weight factors the front nodes pick with (partitions::WeightFactors
// text: NAME PARTITION ADDRESS FACTOR per line): those of the sets whose
// name `tags` covers with calibrate=on, every address of each; a set whose
// factors are all exactly 1 left out.
std::string CalibratedFactorsText(const Calibrator& calibrator, const partitions::TagTable& tags);
// Whether a calibrate=on tag covers `name` (presentation form): the only
// names the calibration touches.
bool NameIsCalibrated(const partitions::TagTable& tags, std::string_view name);

}  // namespace weir::mgmt
