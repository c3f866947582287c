// --segments-truth: the scheduling check against gslb-sim's segment model
// (docs/gslb-sim.md "[segments]"). The model is loaded with gslb-sim's own
// config loader, so weir-bench knows exactly what the GSLB answers each
// subscriber /24; an answer to a model name that carries an address the
// GSLB would not give the query's subscriber was scheduled for the wrong
// segment (a cache shared too widely, an ECS scope ignored).
//
// Threading: immutable after Load; Check is called by every sender thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "query_mix.h"
#include "weir/dns/message.h"

namespace weir::bench {

class SegmentCheck {
 public:
  // Loads the [segments] table of the gslb-sim config at `path`, moves the
  // model to change `epoch` and notes which of `questions` are below its
  // suffix. Fails when the config is invalid or has no [segments].
  static absl::StatusOr<std::unique_ptr<const SegmentCheck>> Load(const std::string& path, uint64_t epoch,
                                                                  const std::vector<Question>& questions);
  ~SegmentCheck();
  SegmentCheck(const SegmentCheck&) = delete;
  SegmentCheck& operator=(const SegmentCheck&) = delete;

  // Whether the answers to question `q` are checked (an A query for a name
  // below the model's suffix).
  bool Covers(uint32_t q) const { return q < group_.size() && group_[q] != kNotCovered; }

  enum class Verdict : uint8_t {
    kRight,         // every A address is in the model's answer for the subnet
    kMisscheduled,  // at least one is not
    kUnanswered,    // no A record at all (SERVFAIL, NXDOMAIN, NODATA)
  };
  // Checks answer `m` to covered question `q` asked for subscriber `subnet`
  // (host order): one binary search over the segments and a compare with
  // the few addresses of the expected answer; nothing allocated.
  Verdict Check(uint32_t q, uint32_t subnet, const dns::Message& m) const;

  // What the model was built from, for the report.
  const std::string& description() const { return description_; }

 private:
  static constexpr uint32_t kNotCovered = 0xffffffffu;
  struct Model;
  SegmentCheck() = default;

  std::unique_ptr<Model> model_;
  std::vector<uint32_t> group_;  // per question: its name group, or kNotCovered
  // The expected answer of (group, segment), the default answer as segment
  // `segments`: `per_answer_` addresses (host order) each, so a check
  // reads one short row.
  std::vector<uint32_t> expected_;
  uint32_t segments_ = 0;
  uint32_t per_answer_ = 0;
  std::string description_;
};

}  // namespace weir::bench
