#include "weir/mgmt/traffic_feedback.h"

#include <cmath>
#include <map>
#include <string>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "weir/common/text.h"

namespace weir::mgmt {

using common::Cat;

namespace {

constexpr uint32_t kMaxWindowSeconds = 86400;

// RFC 3339 ("2026-12-05T10:00:00Z") or Unix seconds, within 32 bits.
bool ParseTimeField(std::string_view text, uint32_t* out) {
  uint64_t seconds = 0;
  if (absl::SimpleAtoi(absl::string_view(text.data(), text.size()), &seconds)) {
    if (seconds > UINT32_MAX) return false;
    *out = static_cast<uint32_t>(seconds);
    return true;
  }
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, std::string(text), &t, &err)) return false;
  const int64_t unix = absl::ToUnixSeconds(t);
  if (unix < 0 || unix > int64_t{UINT32_MAX}) return false;
  *out = static_cast<uint32_t>(unix);
  return true;
}

// One address of one window, checked; `why` says what is wrong.
struct Row {
  uint32_t window_start = 0, window_end = 0;
  CalibrationKey key;
  TrafficObservation obs;
};

bool CheckRow(std::string_view start, std::string_view end, std::string_view name, std::string_view partition,
              std::string_view address, std::string_view weight_text, double traffic, bool traffic_ok,
              Row* row, std::string* why) {
  if (!ParseTimeField(start, &row->window_start)) {
    *why = Cat("window_start '", start, "' is not RFC 3339 or Unix seconds");
    return false;
  }
  if (!ParseTimeField(end, &row->window_end)) {
    *why = Cat("window_end '", end, "' is not RFC 3339 or Unix seconds");
    return false;
  }
  if (row->window_end <= row->window_start || row->window_end - row->window_start > kMaxWindowSeconds) {
    *why = "the window must end after it starts, within a day";
    return false;
  }
  if (!ParseCalibrationKey(name, partition, &row->key, why) ||
      !ParseCalibrationAddress(address, &row->obs.address, why)) {
    return false;
  }
  uint32_t weight = 0;
  if (!absl::SimpleAtoi(absl::string_view(weight_text.data(), weight_text.size()), &weight) || weight < 1 ||
      weight > 65535) {
    *why = Cat("weight '", weight_text, "' must be 1..65535");
    return false;
  }
  row->obs.weight = weight;
  if (!traffic_ok || !std::isfinite(traffic) || traffic < 0) {
    *why = "traffic must be a number >= 0";
    return false;
  }
  row->obs.traffic = traffic;
  return true;
}

// Groups rows into samples; an address twice in one sample is an error.
class Grouper {
 public:
  // `where` names the row for a duplicate ("line 3", "samples[0].addresses[1]").
  bool Add(Row row, const std::string& where, std::string* why) {
    const auto id = std::make_tuple(row.window_start, row.window_end, row.key.name, row.key.partition);
    auto [it, inserted] = index_.try_emplace(id, samples_.size());
    if (inserted) {
      samples_.push_back(TrafficSample{std::move(row.key), row.window_start, row.window_end, {}});
      wheres_.emplace_back();
    }
    TrafficSample& s = samples_[it->second];
    for (size_t i = 0; i < s.addresses.size(); ++i) {
      if (s.addresses[i].address == row.obs.address) {
        *why = Cat("address ", row.obs.address, " listed twice in one sample (first at ",
                   wheres_[it->second][i], ")");
        return false;
      }
    }
    s.addresses.push_back(std::move(row.obs));
    wheres_[it->second].push_back(where);
    return true;
  }
  std::vector<TrafficSample> Take() { return std::move(samples_); }

 private:
  std::map<std::tuple<uint32_t, uint32_t, std::string, std::string>, size_t> index_;
  std::vector<TrafficSample> samples_;
  std::vector<std::vector<std::string>> wheres_;
};

}  // namespace

absl::StatusOr<std::vector<TrafficSample>> ParseTrafficCsv(std::string_view text,
                                                           common::LineErrors* errors) {
  Grouper g;
  size_t lines = 0;
  common::ForEachLine(text, [&](int line_no, std::string_view line) {
    if (++lines > kMaxTrafficLines) {
      errors->Add(0, Cat("more than ", kMaxTrafficLines, " lines"));
      return false;
    }
    const std::vector<std::string_view> f = common::Split(line, ',');
    if (f.size() != 7) {
      errors->Add(
          line_no,
          Cat("expected 7 fields 'window_start,window_end,name,partition,address,weight,traffic', got ",
              f.size()));
      return true;
    }
    auto t = [&](size_t i) { return common::Trim(f[i]); };
    double traffic = 0;
    const bool traffic_ok = absl::SimpleAtod(absl::string_view(t(6).data(), t(6).size()), &traffic);
    Row row;
    std::string why;
    if (!CheckRow(t(0), t(1), t(2), t(3), t(4), t(5), traffic, traffic_ok, &row, &why) ||
        !g.Add(std::move(row), Cat("line ", line_no), &why)) {
      errors->Add(line_no, why);
    }
    return true;
  });
  if (!errors->empty()) return errors->First();
  return g.Take();
}

absl::StatusOr<std::vector<TrafficSample>> ParseTrafficJson(std::string_view text,
                                                            common::LineErrors* errors) {
  using Json = nlohmann::json;
  const Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    errors->Add(0, "not a JSON document");
    return errors->First();
  }
  if (!doc.is_object() || !doc.contains("samples") || !doc["samples"].is_array()) {
    errors->Add(0, "expected {\"samples\": [...]}");
    return errors->First();
  }
  auto text_of = [](const Json& j, const char* key, std::string* out) {
    if (!j.contains(key)) return false;
    const Json& v = j[key];
    if (v.is_string()) {
      *out = v.get<std::string>();
      return true;
    }
    if (v.is_number_unsigned()) {
      *out = std::to_string(v.get<uint64_t>());
      return true;
    }
    if (v.is_number_integer()) {
      *out = std::to_string(v.get<int64_t>());
      return true;
    }
    return false;
  };
  Grouper g;
  size_t rows = 0;
  const Json& samples = doc["samples"];
  for (size_t i = 0; i < samples.size(); ++i) {
    const std::string at = Cat("samples[", i, "]");
    const Json& s = samples[i];
    std::string start, end, name, partition;
    if (!s.is_object() || !text_of(s, "window_start", &start) || !text_of(s, "window_end", &end) ||
        !s.contains("name") || !s["name"].is_string() || !s.contains("partition") ||
        !s["partition"].is_string() || !s.contains("addresses") || !s["addresses"].is_array() ||
        s["addresses"].empty()) {
      errors->Add(
          0, Cat(at, ": expected window_start, window_end, name, partition and a non-empty addresses array"));
      continue;
    }
    name = s["name"].get<std::string>();
    partition = s["partition"].get<std::string>();
    const Json& addresses = s["addresses"];
    for (size_t j = 0; j < addresses.size(); ++j) {
      const std::string where = Cat(at, ".addresses[", j, "]");
      if (++rows > kMaxTrafficLines) {
        errors->Add(0, Cat("more than ", kMaxTrafficLines, " addresses"));
        return errors->First();
      }
      const Json& a = addresses[j];
      std::string weight;
      if (!a.is_object() || !a.contains("address") || !a["address"].is_string() ||
          !text_of(a, "weight", &weight) || !a.contains("traffic") || !a["traffic"].is_number()) {
        errors->Add(0, Cat(where, ": expected address, weight and traffic"));
        continue;
      }
      Row row;
      std::string why;
      const double traffic = a["traffic"].get<double>();
      if (!CheckRow(start, end, name, partition, a["address"].get<std::string>(), weight, traffic, true, &row,
                    &why) ||
          !g.Add(std::move(row), where, &why)) {
        errors->Add(0, Cat(where, ": ", why));
      }
    }
  }
  if (!errors->empty()) return errors->First();
  return g.Take();
}

}  // namespace weir::mgmt
