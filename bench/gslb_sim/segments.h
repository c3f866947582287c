// gslb-sim's segment model ([segments], docs/gslb-sim.md "[segments]"): a
// procedurally generated GSLB that answers every subscriber segment of a
// carrier's address space on its own, as a CDN's GSLB does inside one city,
// without listing views.
//
// Cities own contiguous runs of segments carved from `prefix`; each name
// falls into a name group (a stable hash of the name), and per group the
// segments of a city are cut into runs of neighbours that share one answer
// (a whole city is one run for `city_level_fraction` of the (group, city)
// pairs). A run's answer is a rotation of its city's CDN nodes; every change
// epoch a deterministic fraction of the runs move to another rotation.
// Everything follows from the seed, so the ground truth can be exported.
//
// Memory: 4 bytes per (name group, segment) for the runs and 4 per (name
// group, run) for the answers; nothing per name. A query costs one binary
// search over the segments and a hash of the name.
//
// Not thread-safe: owned by the server's single thread, like the ZoneSet.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "config.h"

namespace weir::gslb_sim {

struct SegmentConfig {
  uint64_t seed = 1;
  uint32_t cities = 30;
  uint32_t segments_per_city = 300;
  Prefix prefix;  // IPv4, the carrier space the segments are carved from
  uint8_t min_length = 20;
  uint8_t max_length = 24;
  uint32_t nodes_per_city = 8;
  Prefix node_prefix;  // IPv4, where the CDN node addresses are taken from
  uint32_t addresses_per_answer = 2;
  bool weights = true;  // send the answer's weights in the weight option
  uint16_t weight_min = 1;
  uint16_t weight_max = 10;
  uint32_t ttl = 60;
  NameBytes suffix;       // names strictly below it are answered from the model
  NameBytes zone_origin;  // the zone that holds `suffix`
  uint32_t name_groups = 16;
  double city_level_fraction = 0.2;
  uint32_t run_min = 1;  // neighbouring segments sharing one answer
  uint32_t run_max = 4;
  uint32_t change_every_s = 0;  // 0: the epoch only changes by `segments-epoch`
  double change_fraction = 0.1;
  // The ECS scope of an answer: false, the segment's own prefix; true
  // (`scope = "run"`), the shortest aligned prefix holding the segment that
  // lies inside its run (a GSLB that aggregates neighbours it answers alike).
  bool run_scope = false;
};

// The highest epoch `segments-epoch` and the export accept: reaching epoch N
// replays N changes.
inline constexpr uint64_t kMaxSegmentEpoch = 1000000;

class SegmentModel {
 public:
  struct Segment {
    uint32_t start = 0;  // host order
    uint8_t length = 0;
    uint32_t city = 0;
    uint32_t Size() const { return uint32_t{1} << (32 - length); }
  };

  // Lays out the segments and the runs. Fails when the segments do not fit
  // in the prefix or the nodes in the node prefix (the reason names which).
  static absl::StatusOr<SegmentModel> Build(const SegmentConfig& config);

  const SegmentConfig& config() const { return config_; }
  const std::vector<Segment>& segments() const { return segments_; }

  // True when `name` (canonical key) is strictly below the suffix, in the
  // zone that holds it.
  bool Covers(std::string_view name, std::string_view zone_origin) const;
  uint32_t GroupOf(std::string_view name) const;
  // The segment containing the IPv4 address `addr` (host order), if any.
  std::optional<uint32_t> Find(uint32_t addr) const;

  // Moves the model to change epoch `epoch` (replaying the changes from the
  // nearest known epoch; cheap when it is unchanged).
  void SetEpoch(uint64_t epoch);
  uint64_t epoch() const { return epoch_; }

  // The answer of `group` for `segment` (nullopt: the default answer) at the
  // current epoch: cidr, scope, ttl and weighted addresses in `out`.
  void Fill(uint32_t group, std::optional<uint32_t> segment, View* out) const;
  // The prefix `group`'s answers for `segment` are scoped to: the segment,
  // or with `run_scope` the widest aligned prefix holding it inside its run.
  Prefix ScopeOf(uint32_t group, uint32_t segment) const;

  // The ground truth (JSON, one line): every /24 of the prefix with its
  // segment, city, scope and answer, for `group` at `epoch`.
  std::string TruthJson(uint32_t group, uint64_t epoch, std::string_view name) const;
  // The cities as a weir city map (docs/operator-guide.md "The city map").
  std::string CityMapCsv() const;
  static std::string CityName(uint32_t city) { return "city-" + std::to_string(city); }

 private:
  explicit SegmentModel(const SegmentConfig& c) : config_(c) {}
  // The rotations of `group`'s runs at epoch 0; Step applies the changes of
  // epochs from_epoch + 1 .. to_epoch to them.
  void InitialRotations(uint32_t group, uint32_t* rot) const;
  void Step(uint32_t group, uint64_t from_epoch, uint64_t to_epoch, uint32_t* rot) const;
  uint32_t RunsOf(uint32_t group) const { return run_base_[group + 1] - run_base_[group]; }
  void AnswerOf(uint32_t city, uint32_t rotation, View* out) const;

  SegmentConfig config_;
  std::vector<Segment> segments_;  // sorted, contiguous from the prefix start
  uint32_t end_ = 0;               // one past the last segment's last address (0: 2^32)
  // run_[group * segments + s]: the run (index within the group) of segment s.
  std::vector<uint32_t> run_;
  std::vector<uint32_t> run_base_;  // group g's runs are [run_base_[g], run_base_[g + 1])
  std::vector<uint32_t> rotation_;  // per (group, run) at epoch_
  uint64_t epoch_ = 0;
};

// The ground truth for `which`: a name below the suffix ("a.seg.example.",
// trailing dot optional) or "group=N"; at `epoch`. Used by the
// `segments-truth` control command and `--segments-truth`.
absl::StatusOr<std::string> SegmentTruth(const SegmentModel& model, std::string_view which, uint64_t epoch);

// The change epoch from the server's steady clock: `base` at `since`, one
// more every `period_s` seconds (never when 0). `segments-epoch N` re-bases it.
class SegmentClock {
 public:
  using Clock = std::chrono::steady_clock;
  SegmentClock(uint32_t period_s, Clock::time_point now) : period_s_(period_s), since_(now) {}
  uint64_t EpochAt(Clock::time_point now) const;
  void Set(uint64_t epoch, Clock::time_point now) {
    base_ = epoch;
    since_ = now;
  }
  // A new period (after `reload`), keeping the epoch reached so far.
  void SetPeriod(uint32_t period_s, Clock::time_point now) {
    Set(EpochAt(now), now);
    period_s_ = period_s;
  }

 private:
  uint32_t period_s_;
  Clock::time_point since_;
  uint64_t base_ = 0;
};

}  // namespace weir::gslb_sim
