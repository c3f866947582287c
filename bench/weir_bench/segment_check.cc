#include "segment_check.h"

#include <cstring>

#include "weir/common/text.h"
#include "weir/dns/wire.h"

#ifdef WEIR_BENCH_WITH_GSLB_SIM
#include "config.h"
#include "segments.h"
#endif

namespace weir::bench {

#ifdef WEIR_BENCH_WITH_GSLB_SIM
struct SegmentCheck::Model {
  std::shared_ptr<gslb_sim::SegmentModel> model;
};
#else
struct SegmentCheck::Model {};
#endif

SegmentCheck::~SegmentCheck() = default;

absl::StatusOr<std::unique_ptr<const SegmentCheck>> SegmentCheck::Load(
    const std::string& path, uint64_t epoch, const std::vector<Question>& questions) {
#ifdef WEIR_BENCH_WITH_GSLB_SIM
  auto zones = gslb_sim::LoadConfig(path);
  if (!zones.ok())
    return absl::InvalidArgumentError(common::Cat("--segments-truth: ", zones.status().message()));
  if (!zones->segments) {
    return absl::InvalidArgumentError(
        common::Cat("--segments-truth: ", path, " has no [segments] table (docs/gslb-sim.md)"));
  }
  std::unique_ptr<SegmentCheck> c(new SegmentCheck());
  c->model_ = std::make_unique<Model>();
  c->model_->model = zones->segments;
  gslb_sim::SegmentModel& m = *c->model_->model;
  m.SetEpoch(epoch);
  const gslb_sim::SegmentConfig& config = m.config();
  c->segments_ = static_cast<uint32_t>(m.segments().size());
  c->per_answer_ = config.addresses_per_answer;
  c->description_ = common::Cat(path, " (", config.cities, " cities, ", c->segments_, " segments, ",
                                config.name_groups, " name groups, epoch ", m.epoch(), ")");

  // The expected answers, once: a check is then a lookup, whatever the
  // model costs to evaluate.
  const uint32_t rows = c->segments_ + 1;
  c->expected_.resize(size_t{config.name_groups} * rows * c->per_answer_);
  gslb_sim::View view;
  for (uint32_t g = 0; g < config.name_groups; ++g) {
    for (uint32_t s = 0; s < rows; ++s) {
      m.Fill(g, s < c->segments_ ? std::optional<uint32_t>(s) : std::nullopt, &view);
      uint32_t* row = c->expected_.data() + (size_t{g} * rows + s) * c->per_answer_;
      for (uint32_t k = 0; k < c->per_answer_; ++k) {
        const auto& b = view.addresses[k].bytes;
        row[k] = uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | b[3];
      }
    }
  }
  c->group_.assign(questions.size(), kNotCovered);
  for (size_t q = 0; q < questions.size(); ++q) {
    const Question& question = questions[q];
    const std::string_view key(reinterpret_cast<const char*>(question.qname.bytes.data()),
                               question.qname.len);
    if (question.qtype == dns::type::kA && m.Covers(key, config.zone_origin)) c->group_[q] = m.GroupOf(key);
  }
  return std::unique_ptr<const SegmentCheck>(std::move(c));
#else
  (void)path;
  (void)epoch;
  (void)questions;
  return absl::UnimplementedError("--segments-truth: this weir-bench was built without gslb-sim");
#endif
}

SegmentCheck::Verdict SegmentCheck::Check(uint32_t q, uint32_t subnet, const dns::Message& m) const {
#ifdef WEIR_BENCH_WITH_GSLB_SIM
  const std::optional<uint32_t> seg = model_->model->Find(subnet);
  const uint32_t* row =
      expected_.data() + (size_t{group_[q]} * (segments_ + 1) + (seg ? *seg : segments_)) * per_answer_;
  bool any = false;
  Verdict v = Verdict::kRight;
  dns::Message::Iterator it = m.Records(dns::Section::kAnswer);
  dns::RrView rr;
  while (it.Next(&rr)) {
    if (rr.type != dns::type::kA || rr.rdlength != 4) continue;
    any = true;
    const uint32_t a = dns::Load32(m.bytes().data() + rr.rdata_offset);
    bool found = false;
    for (uint32_t k = 0; k < per_answer_ && !found; ++k) found = row[k] == a;
    if (!found) v = Verdict::kMisscheduled;
  }
  return any ? v : Verdict::kUnanswered;
#else
  (void)q;
  (void)subnet;
  (void)m;
  return Verdict::kUnanswered;
#endif
}

}  // namespace weir::bench
