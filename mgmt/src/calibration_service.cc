#include "weir/mgmt/calibration_service.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "weir/common/line_errors.h"
#include "weir/common/log.h"
#include "weir/common/text.h"
#include "weir/dns/message.h"
#include "weir/mgmt/traffic_feedback.h"
#include "weir/partitions/tagtable.h"

namespace weir::mgmt {

using common::Cat;
using common::ToStd;

namespace {

// Skipped samples named in a reply; the rest are counted.
constexpr size_t kSkippedShown = 20;

std::unique_ptr<const partitions::TagTable> Tags(const Store& store) {
  auto tags = partitions::TagTable::FromText(store.snapshot().tags);
  // The store only ever holds tags that build.
  return tags.ok() ? *std::move(tags) : nullptr;
}

bool Calibrated(const partitions::TagTable* tags, std::string_view name) {
  return tags != nullptr && NameIsCalibrated(*tags, name);
}

}  // namespace

CalibrationService::CalibrationService(Store& store, CalibrationOptions options)
    : store_(store), options_(options), calibrator_(options) {
  Sync();
}

void CalibrationService::Sync() {
  if (store_.calibration() == synced_) return;
  Reload();
  // A range narrowed since the state was committed held its factors to the
  // new one: the nodes get those, not the committed ones.
  if (calibrator_.FormatState() != store_.calibration()) {
    if (auto v =
            CommitState("weir-mgmt", "calibration range", "factors held to [calibration] min/max_factor");
        !v.ok()) {
      common::LogWarning("calibration",
                         "factors held to the configured range not committed: ", ToStd(v.status().message()));
    }
  }
}

void CalibrationService::Reload() {
  Calibrator next(options_);
  common::LineErrors errors;
  if (absl::Status st = next.RestoreState(store_.calibration(), &errors); !st.ok()) {
    common::LogError("calibration", "the store's calibration state does not read (", ToStd(st.message()),
                     "): starting from factor 1");
    next = Calibrator(options_);
  }
  calibrator_ = std::move(next);
  synced_ = store_.calibration();
}

bool CalibrationService::ForgetUncalibrated() {
  const auto tags = Tags(store_);
  std::vector<CalibrationKey> gone;
  for (const auto& [key, set] : calibrator_.sets()) {
    if (!Calibrated(tags.get(), key.name)) gone.push_back(key);
  }
  for (const CalibrationKey& k : gone) calibrator_.Erase(k);
  return !gone.empty();
}

absl::StatusOr<uint64_t> CalibrationService::CommitState(const std::string& actor, const std::string& action,
                                                         const std::string& detail) {
  std::string state = calibrator_.FormatState();
  if (state == store_.calibration()) return uint64_t{0};
  auto v = store_.SetCalibration(state, actor, action, detail);
  if (!v.ok()) {
    // Nothing was committed: run what the store holds (another instance's
    // state after a conflict), not a state no node will ever see; the
    // same feedback sent again is then taken.
    Reload();
    return v.status();
  }
  synced_ = std::move(state);
  return *v;
}

absl::StatusOr<StructuredReply> CalibrationService::Import(std::string_view text, const std::string& source,
                                                           const std::string& actor, uint32_t now) {
  Sync();
  const size_t first = text.find_first_not_of(" \t\r\n");
  const bool json = first != std::string_view::npos && text[first] == '{';
  common::LineErrors errors;
  auto samples = json ? ParseTrafficJson(text, &errors) : ParseTrafficCsv(text, &errors);
  if (!samples.ok() || !errors.empty()) {
    std::string all;
    for (const std::string& e : errors.Render(source.empty() ? "feedback" : source))
      all += (all.empty() ? "" : "\n") + e;
    if (all.empty()) all = ToStd(samples.status().message());
    return absl::InvalidArgumentError(all);
  }
  const auto tags = Tags(store_);
  Json skipped = Json::array();
  size_t skipped_count = 0, accepted = 0;
  auto skip = [&](const TrafficSample& s, std::string why) {
    if (skipped.size() < kSkippedShown)
      skipped.push_back(
          Json{{"name", s.key.name}, {"partition", s.key.partition}, {"reason", std::move(why)}});
    ++skipped_count;
  };
  for (const TrafficSample& s : *samples) {
    if (!Calibrated(tags.get(), s.key.name)) {
      skip(s, "no tag with calibrate=on covers the name");
      continue;
    }
    absl::Status st = calibrator_.Observe(s.key, s.addresses, s.window_end, now);
    if (!st.ok()) {
      skip(s, std::string(ToStd(st.message())));
      continue;
    }
    ++accepted;
  }
  // Nothing new: no step (the timer's steps decay stale sets), so an
  // input of skipped samples commits nothing.
  const size_t changed = accepted > 0 ? calibrator_.Step(now) : 0;
  const bool forgot = ForgetUncalibrated();
  uint64_t version = 0;
  if (accepted > 0 || forgot) {
    auto v = CommitState(actor, "traffic import",
                         Cat(source.empty() ? "feedback" : source, ": ", accepted, " of ", samples->size(),
                             " samples, ", changed, " sets changed"));
    if (!v.ok()) return v.status();
    version = *v;
  }
  StructuredReply r(Json{{"version", version},
                         {"samples", samples->size()},
                         {"accepted", accepted},
                         {"skipped_count", skipped_count},
                         {"sets_changed", changed},
                         {"skipped", std::move(skipped)}});
  r.Block([](const Json& d) {
    return Cat("traffic imported: ", CellText(d, "accepted"), " of ", CellText(d, "samples"),
               " samples taken, ", CellText(d, "sets_changed"), " sets changed",
               d["version"].get<uint64_t>() != 0 ? Cat(": version ", CellText(d, "version")) : std::string(),
               "\n");
  });
  if (skipped_count > 0) {
    r.Block([](const Json& d) { return Cat("skipped ", CellText(d, "skipped_count"), ":\n"); });
    r.Table("/skipped",
            {StructuredReply::Field("NAME", "name"), StructuredReply::Field("PARTITION", "partition"),
             StructuredReply::Field("REASON", "reason")});
  }
  return r;
}

absl::StatusOr<uint64_t> CalibrationService::Tick(uint32_t now) {
  Sync();
  const size_t changed = calibrator_.Step(now);
  const bool forgot = ForgetUncalibrated();
  if (changed == 0 && !forgot) return uint64_t{0};
  return CommitState("weir-mgmt", "calibration step", Cat(changed, " sets decayed"));
}

StructuredReply CalibrationService::List(std::string_view name) const {
  // The name as the sets keep it (lower case, trailing dot).
  std::string wanted;
  if (dns::NameKey wire; !name.empty() && dns::NameKeyFromText(name, &wire))
    wanted = dns::NameKeyToText(wire.span());
  Json rows = Json::array();
  for (const auto& [key, set] : calibrator_.sets()) {
    if (!name.empty() && key.name != wanted) continue;
    double weights = 0, effective = 0;
    for (const AddressFactor& a : set.addresses) {
      weights += a.weight;
      effective += a.weight * a.factor;
    }
    for (const AddressFactor& a : set.addresses) {
      rows.push_back(Json{{"name", key.name},
                          {"partition", key.partition},
                          {"address", a.address},
                          {"weight", a.weight},
                          {"factor", a.factor},
                          {"wanted_share", weights > 0 ? a.weight / weights : 0},
                          {"effective_share", effective > 0 ? a.weight * a.factor / effective : 0},
                          {"sample_time", set.sample_time},
                          {"steps", set.steps}});
    }
  }
  StructuredReply r(Json{{"version", store_.version()}, {"addresses", std::move(rows)}});
  auto fixed = [](std::string key, int digits) {
    return [key = std::move(key), digits](const Json& row) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.*f", digits, row[key].get<double>());
      return std::string(buf);
    };
  };
  r.Table("/addresses", {StructuredReply::Field("NAME", "name"),
                         StructuredReply::Field("PARTITION", "partition"),
                         StructuredReply::Field("ADDRESS", "address"),
                         StructuredReply::Field("WEIGHT", "weight"),
                         {"FACTOR", fixed("factor", 3)},
                         {"WANTED", fixed("wanted_share", 3)},
                         {"EFFECTIVE", fixed("effective_share", 3)},
                         StructuredReply::Field("STEPS", "steps")});
  return r;
}

}  // namespace weir::mgmt
