// weir-mgmt's side of the traffic-share calibration (docs/calibration.md):
// the Calibrator fed with the CDN's traffic feedback (`weirctl traffic
// import`, the HTTP feedback endpoint), stepped on each import and on a
// timer (hold, then decay, when feedback stops), its state committed to the
// store so that the nodes get the factors with the next version and another
// weir-mgmt (or this one restarted) goes on from the same state.
//
// Only names whose tag has calibrate=on are touched: samples for any other
// name are reported and dropped, and the sets of a name whose tag lost it
// are forgotten at the next step.
//
// Threading: the mgmt loop thread only (the HTTP endpoint's handler calls
// in through the loop's mailbox). Control plane only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "weir/mgmt/calibration.h"
#include "weir/mgmt/store.h"
#include "weir/mgmt/structured_reply.h"

namespace weir::mgmt {

class CalibrationService {
 public:
  CalibrationService(Store& store, CalibrationOptions options);

  // Takes the store's state when it is not the one this instance runs (at
  // start; after another instance committed). A state the store holds that
  // does not read is logged and replaced by the next commit.
  void Sync();

  // Feedback: a CSV or JSON document (told apart by its first character:
  // '{' is JSON). Any parse error refuses the whole input (InvalidArgument,
  // every bad line or element named after `source`). A sample for a name
  // without calibrate=on, or one the calibrator refuses (a window not newer
  // than the set's last, one in the future), is skipped and reported; the
  // rest are stepped on at once and the new state committed (`actor` in the
  // audit log). The reply: version (0: nothing committed), samples,
  // accepted, skipped (each with its reason), sets changed.
  absl::StatusOr<StructuredReply> Import(std::string_view text, const std::string& source,
                                         const std::string& actor, uint32_t now);

  // The timer's step: stale sets hold, then decay. Commits when the state
  // changed; returns the new version, or 0 when nothing changed.
  absl::StatusOr<uint64_t> Tick(uint32_t now);

  // `weirctl calibration ls [NAME]`: every set (or NAME's) with each
  // address's GSLB weight, factor and effective share.
  StructuredReply List(std::string_view name) const;

 private:
  // Takes the store's state, whatever this instance ran.
  void Reload();
  // Drops the sets whose name no calibrate=on tag covers; true when any was.
  bool ForgetUncalibrated();
  // Commits the calibrator's state; on failure takes the store's back.
  absl::StatusOr<uint64_t> CommitState(const std::string& actor, const std::string& action,
                                       const std::string& detail);

  Store& store_;
  CalibrationOptions options_;
  Calibrator calibrator_;
  // The store's state this instance's calibrator was taken from or wrote.
  std::string synced_;
};

}  // namespace weir::mgmt
