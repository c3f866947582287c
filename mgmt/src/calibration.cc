#include "weir/mgmt/calibration.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "absl/strings/numbers.h"
#include "weir/common/ip.h"
#include "weir/common/text.h"
#include "weir/dns/message.h"

namespace weir::mgmt {

using common::Cat;

static_assert(Calibrator::kMaxAddresses == dns::kMaxWeightedAddresses);

absl::Status ValidateCalibrationOptions(const CalibrationOptions& o) {
  auto in = [](double v, double lo, double hi) { return std::isfinite(v) && v >= lo && v <= hi; };
  if (!in(o.gain_p, 0, 2)) return absl::InvalidArgumentError("calibration gain_p must be 0..2");
  if (!in(o.gain_i, 0, 2)) return absl::InvalidArgumentError("calibration gain_i must be 0..2");
  if (!in(o.max_step, 1, 10)) return absl::InvalidArgumentError("calibration max_step must be 1..10");
  if (!in(o.min_factor, 1e-3, 1) || o.min_factor <= 0)
    return absl::InvalidArgumentError("calibration min_factor must be above 0 and at most 1");
  if (!in(o.max_factor, 1, 100)) return absl::InvalidArgumentError("calibration max_factor must be 1..100");
  if (!in(o.dead_band, 0, 0.5)) return absl::InvalidArgumentError("calibration dead_band must be 0..0.5");
  if (!in(o.min_traffic, 0, 1e18))
    return absl::InvalidArgumentError("calibration min_traffic must be 0 or more");
  return absl::OkStatus();
}

absl::Status Calibrator::Observe(const CalibrationKey& key, std::span<const TrafficObservation> sample,
                                 uint32_t window_end, uint32_t now) {
  if (sample.empty()) return absl::InvalidArgumentError(Cat(key.name, " ", key.partition, ": no address"));
  if (sample.size() > kMaxAddresses) {
    return absl::InvalidArgumentError(Cat(key.name, " ", key.partition, ": ", sample.size(),
                                          " addresses, more than an answer set has (", kMaxAddresses, ")"));
  }
  Pending p;
  p.window_end = window_end;
  p.sample.assign(sample.begin(), sample.end());
  std::sort(p.sample.begin(), p.sample.end(),
            [](const TrafficObservation& a, const TrafficObservation& b) { return a.address < b.address; });
  for (size_t i = 0; i < p.sample.size(); ++i) {
    const TrafficObservation& t = p.sample[i];
    if (t.weight == 0) return absl::InvalidArgumentError(Cat(t.address, ": weight 0"));
    if (!std::isfinite(t.traffic) || t.traffic < 0)
      return absl::InvalidArgumentError(Cat(t.address, ": traffic must be a number >= 0"));
    if (i > 0 && p.sample[i - 1].address == t.address)
      return absl::InvalidArgumentError(Cat(t.address, ": listed twice"));
  }
  if (uint64_t{window_end} > uint64_t{now} + kMaxClockSkew) {
    return absl::InvalidArgumentError(
        Cat(key.name, " ", key.partition, ": the window ends ", window_end - now, " s in the future"));
  }
  const auto known = sets_.find(key);
  auto pending = pending_.find(key);
  if ((known != sets_.end() && window_end <= known->second.sample_time) ||
      (pending != pending_.end() && window_end <= pending->second.window_end)) {
    return absl::FailedPreconditionError(
        Cat(key.name, " ", key.partition, ": the window ends no later than the last sample's"));
  }
  pending_[key] = std::move(p);
  return absl::OkStatus();
}

size_t Calibrator::Step(uint32_t now) {
  size_t changed = 0;
  for (auto& [key, p] : pending_) {
    CalibrationSet& set = sets_[key];
    if (now > p.window_end && now - p.window_end > o_.max_feedback_age_s) {
      // Too old to act on: it only dates the set.
      set.sample_time = std::max(set.sample_time, p.window_end);
      continue;
    }
    const std::vector<AddressFactor> before = set.addresses;
    Act(set, p);
    set.stepped_time = now;
    bool moved = before.size() != set.addresses.size();
    for (size_t i = 0; !moved && i < before.size(); ++i) moved = before[i].factor != set.addresses[i].factor;
    changed += moved;
  }
  pending_.clear();
  for (auto& [key, set] : sets_) {
    if (set.stepped_time == now) continue;  // acted on just now
    changed += Decay(set, now);
  }
  return changed;
}

void Calibrator::Act(CalibrationSet& set, const Pending& p) {
  // Another set of addresses (the GSLB changed its answer): start from 1.
  bool same = set.addresses.size() == p.sample.size();
  for (size_t i = 0; same && i < p.sample.size(); ++i) same = set.addresses[i].address == p.sample[i].address;
  if (!same) {
    set.addresses.assign(p.sample.size(), AddressFactor{});
    for (size_t i = 0; i < p.sample.size(); ++i) set.addresses[i].address = p.sample[i].address;
  }
  set.sample_time = p.window_end;
  for (size_t i = 0; i < p.sample.size(); ++i) set.addresses[i].weight = p.sample[i].weight;
  // Each family on its own: the front picks within one RRset (A or AAAA),
  // and the client, not weir, chooses the family; shares across families
  // are not weir's to correct.
  bool acted = false;
  for (const bool v6 : {false, true}) {
    std::vector<size_t> idx;
    for (size_t i = 0; i < p.sample.size(); ++i) {
      if ((p.sample[i].address.find(':') != std::string::npos) == v6) idx.push_back(i);
    }
    if (!idx.empty()) acted = ActFamily(set, p, idx) || acted;
  }
  if (acted) ++set.steps;
}

bool Calibrator::ActFamily(CalibrationSet& set, const Pending& p, const std::vector<size_t>& idx) {
  double weights = 0, traffic = 0;
  for (size_t i : idx) {
    weights += p.sample[i].weight;
    traffic += p.sample[i].traffic;
  }
  if (traffic < o_.min_traffic || traffic <= 0) return false;  // too little to say anything
  const double max_log_step = std::log(o_.max_step);
  // The largest error an address with no traffic at all is given.
  const double max_error = std::log(o_.max_factor / o_.min_factor);
  for (size_t i : idx) {
    AddressFactor& a = set.addresses[i];
    const double wanted = p.sample[i].weight / weights;
    const double observed = p.sample[i].traffic / traffic;
    double e = observed > 0 ? std::log(wanted / observed) : max_error;
    e = std::clamp(e, -max_error, max_error);
    if (std::abs(observed / wanted - 1) <= o_.dead_band) e = 0;
    const double d = std::clamp(o_.gain_p * (e - a.last_error) + o_.gain_i * e, -max_log_step, max_log_step);
    a.last_error = e;
    a.factor *= std::exp(d);
  }
  // Only ratios matter to the picks: rescale so that the effective weights
  // add up to the GSLB's, then hold each within the bounds.
  double effective = 0;
  for (size_t i : idx) effective += set.addresses[i].weight * set.addresses[i].factor;
  for (size_t i : idx) {
    AddressFactor& a = set.addresses[i];
    a.factor = std::clamp(a.factor * weights / effective, o_.min_factor, o_.max_factor);
  }
  return true;
}

bool Calibrator::Decay(CalibrationSet& set, uint32_t now) {
  const uint32_t since = set.stepped_time;
  if (now <= since) return false;  // the clock went back: nothing until it passes the last step
  set.stepped_time = now;
  if (o_.decay_half_life_s == 0 || now <= set.sample_time) return false;
  const uint64_t stale_from = uint64_t{set.sample_time} + o_.max_feedback_age_s + o_.hold_time_s;
  if (now <= stale_from) return false;
  // Only the part of (since, now] past the hold decays.
  const double from = std::max<double>(since, static_cast<double>(stale_from));
  const double keep = std::exp2(-(now - from) / o_.decay_half_life_s);
  bool moved = false;
  for (AddressFactor& a : set.addresses) {
    double next = std::exp(std::log(a.factor) * keep);
    // The tail of the decay is 1 at once: a factor within kDecaySnap of 1
    // changes the picks by less than the weights' own rounding, and the
    // state stops changing (no commit per step for ever).
    if (std::abs(next - 1.0) < kDecaySnap) next = 1.0;
    moved = moved || next != a.factor;
    a.factor = next;
    a.last_error = 0;
  }
  return moved;
}

const CalibrationSet* Calibrator::Find(const CalibrationKey& key) const {
  auto it = sets_.find(key);
  return it == sets_.end() ? nullptr : &it->second;
}

bool ParseCalibrationKey(std::string_view name, std::string_view partition, CalibrationKey* out,
                         std::string* why) {
  dns::NameKey key;
  bool name_ok = dns::NameKeyFromText(name, &key);
  std::string text;
  if (name_ok) text = dns::NameKeyToText(key.span());
  // Host names only (letters, digits, '-', '_'): what the GSLB answers for,
  // and what one word of the state's lines holds exactly.
  for (char c : text) {
    name_ok =
        name_ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.');
  }
  if (!name_ok) {
    *why = Cat("bad name '", name, "'");
    return false;
  }
  bool ok = !partition.empty() && partition.size() <= 64;
  for (char c : partition) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                c == '-' || c == '.');
  }
  if (!ok) {
    *why = Cat("bad partition '", partition, "'");
    return false;
  }
  out->name = std::move(text);
  out->partition = std::string(partition);
  return true;
}

bool ParseCalibrationAddress(std::string_view address, std::string* out, std::string* why) {
  common::IpAddress ip;
  if (!common::ParseIp(address, &ip)) {
    *why = Cat("bad address '", address, "'");
    return false;
  }
  *out = common::IpToString(ip);
  return true;
}

namespace {

std::string Shortest(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

}  // namespace

std::string Calibrator::FormatState() const {
  std::string out;
  for (const auto& [key, set] : sets_) {
    for (const AddressFactor& a : set.addresses) {
      common::CatTo(out, key.name, " ", key.partition, " ", a.address, " ", a.weight, " ", Shortest(a.factor),
                    " ", Shortest(a.last_error), " ", set.sample_time, " ", set.stepped_time, " ", set.steps,
                    "\n");
    }
  }
  return out;
}

absl::Status Calibrator::RestoreState(std::string_view text, common::LineErrors* errors) {
  std::map<CalibrationKey, CalibrationSet> sets;
  std::map<CalibrationKey, int> first_line;
  common::ForEachLine(text, [&](int line_no, std::string_view line) {
    std::vector<std::string_view> f;
    for (std::string_view w : common::Split(line, ' ')) {
      if (!w.empty()) f.push_back(w);
    }
    auto fail = [&](std::string why) {
      errors->Add(line_no, std::move(why));
      return true;
    };
    if (f.size() != 9) {
      return fail(
          Cat("expected 9 fields 'name partition address weight factor last_error sample_time "
              "stepped_time steps', got ",
              f.size()));
    }
    CalibrationKey key;
    AddressFactor a;
    std::string why;
    if (!ParseCalibrationKey(f[0], f[1], &key, &why) || !ParseCalibrationAddress(f[2], &a.address, &why)) {
      return fail(why);
    }
    auto num = [](std::string_view s, auto* v) {
      return absl::SimpleAtoi(absl::string_view(s.data(), s.size()), v);
    };
    auto real = [](std::string_view s, double* v) {
      return absl::SimpleAtod(absl::string_view(s.data(), s.size()), v) && std::isfinite(*v);
    };
    uint32_t sample_time = 0, stepped_time = 0;
    uint64_t steps = 0;
    if (!num(f[3], &a.weight) || a.weight < 1 || a.weight > 65535)
      return fail(Cat("weight '", f[3], "' must be 1..65535"));
    if (!real(f[4], &a.factor) || a.factor < kMinStoredFactor || a.factor > kMaxStoredFactor) {
      return fail(
          Cat("factor '", f[4], "' must be ", Shortest(kMinStoredFactor), "..", Shortest(kMaxStoredFactor)));
    }
    // A range narrowed since the state was made applies at once.
    a.factor = std::clamp(a.factor, o_.min_factor, o_.max_factor);
    if (!real(f[5], &a.last_error)) return fail(Cat("last_error '", f[5], "' must be a number"));
    if (!num(f[6], &sample_time) || !num(f[7], &stepped_time) || !num(f[8], &steps)) {
      return fail("sample_time, stepped_time and steps must be unsigned integers");
    }
    auto [it, inserted] = sets.try_emplace(key);
    CalibrationSet& set = it->second;
    if (inserted) {
      first_line[key] = line_no;
      set.sample_time = sample_time;
      set.stepped_time = stepped_time;
      set.steps = steps;
    } else if (set.sample_time != sample_time || set.stepped_time != stepped_time || set.steps != steps) {
      return fail(Cat("the times and steps differ from the set's first line (", first_line[key], ")"));
    }
    for (const AddressFactor& other : set.addresses) {
      if (other.address == a.address) return fail(Cat("address ", a.address, " listed twice in its set"));
    }
    set.addresses.push_back(std::move(a));
    return true;
  });
  if (!errors->empty()) return errors->First();
  for (auto& [key, set] : sets) {
    std::sort(set.addresses.begin(), set.addresses.end(),
              [](const AddressFactor& a, const AddressFactor& b) { return a.address < b.address; });
  }
  sets_ = std::move(sets);
  pending_.clear();
  return absl::OkStatus();
}

double Calibrator::Factor(const CalibrationKey& key, std::string_view address) const {
  const CalibrationSet* s = Find(key);
  if (s == nullptr) return 1.0;
  for (const AddressFactor& a : s->addresses) {
    if (a.address == address) return a.factor;
  }
  return 1.0;
}

bool NameIsCalibrated(const partitions::TagTable& tags, std::string_view name) {
  dns::NameKey wire;
  const partitions::Tag* tag = dns::NameKeyFromText(name, &wire) ? tags.Lookup(wire.span()) : nullptr;
  return tag != nullptr && tag->calibrate;
}

std::string CalibratedFactorsText(const Calibrator& calibrator, const partitions::TagTable& tags) {
  std::string out;
  std::string_view last_name;
  bool calibrated = false;
  for (const auto& [key, set] : calibrator.sets()) {
    if (key.name != last_name) {
      last_name = key.name;
      calibrated = NameIsCalibrated(tags, key.name);
    }
    if (!calibrated) continue;
    // A set whose factors are all 1 changes no pick; any other goes whole,
    // so that the front knows the addresses the factors were made for.
    bool any = false;
    for (const AddressFactor& a : set.addresses) any = any || a.factor != 1.0;
    if (!any) continue;
    for (const AddressFactor& a : set.addresses)
      common::CatTo(out, key.name, " ", key.partition, " ", a.address, " ", Shortest(a.factor), "\n");
  }
  return out;
}

}  // namespace weir::mgmt
