#include "segments.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "weir/common/hash.h"
#include "weir/common/text.h"
#include "weir/dns/message.h"

namespace weir::gslb_sim {
namespace {

using Json = nlohmann::ordered_json;

// What a hash is drawn for, so the draws of one seed are independent.
enum Draw : uint64_t {
  kLength = 1,
  kRun = 2,
  kCityLevel = 3,
  kRotation = 4,
  kMove = 5,
  kMoveBy = 6,
  kWeight = 7,
};

uint64_t Hash(uint64_t seed, Draw what, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
  uint64_t h = common::Mix64(seed ^ (what * common::kGolden64));
  h = common::Mix64(h ^ a);
  h = common::Mix64(h ^ (b + 0x632be59bd9b4e019ULL));
  return common::Mix64(h ^ (c + 0x8cb92ba72f3d8dd7ULL));
}

// A uniform draw in [0, 1) from a hash.
double Unit(uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }

uint32_t V4(const std::array<uint8_t, 16>& a) {
  return uint32_t{a[0]} << 24 | uint32_t{a[1]} << 16 | uint32_t{a[2]} << 8 | a[3];
}
uint32_t V4(const Prefix& p) { return V4(p.address); }

Prefix V4Prefix(uint32_t start, uint8_t length) {
  Prefix p;
  p.family = 1;
  p.length = length;
  p.address = {static_cast<uint8_t>(start >> 24), static_cast<uint8_t>(start >> 16),
               static_cast<uint8_t>(start >> 8), static_cast<uint8_t>(start)};
  return p;
}

std::string V4Text(uint32_t a) {
  Prefix p = V4Prefix(a, 32);
  const std::string s = p.ToText();
  return s.substr(0, s.find('/'));
}

}  // namespace

absl::StatusOr<SegmentModel> SegmentModel::Build(const SegmentConfig& config) {
  SegmentModel m(config);
  const SegmentConfig& c = m.config_;
  const uint64_t prefix_start = V4(c.prefix);
  const uint64_t prefix_size = uint64_t{1} << (32 - c.prefix.length);
  const uint64_t total = uint64_t{c.cities} * c.segments_per_city;
  m.segments_.reserve(total);
  // Segments are laid one after the other, each at the next address aligned
  // to its size: a drawn length the cursor is not aligned for becomes the
  // longest prefix it is aligned for, so the segments tile without gaps.
  uint64_t cursor = 0;
  for (uint32_t city = 0; city < c.cities; ++city) {
    for (uint32_t i = 0; i < c.segments_per_city; ++i) {
      const uint32_t span = c.max_length - c.min_length + 1u;
      uint32_t length = c.min_length + static_cast<uint32_t>(Hash(c.seed, kLength, city, i) % span);
      if (cursor != 0)
        length = std::max<uint32_t>(length, 32u - static_cast<uint32_t>(std::countr_zero(cursor)));
      const uint64_t size = uint64_t{1} << (32 - length);
      if (cursor + size > prefix_size) {
        return absl::InvalidArgumentError(
            common::Cat(total, " segments of /", int{c.min_length}, "../", int{c.max_length},
                        " do not fit in ", c.prefix.ToText(), ": it is full after ", m.segments_.size(),
                        " (use a shorter prefix, longer segment lengths or fewer segments)"));
      }
      m.segments_.push_back(
          {static_cast<uint32_t>(prefix_start + cursor), static_cast<uint8_t>(length), city});
      cursor += size;
    }
  }
  m.end_ = static_cast<uint32_t>(prefix_start + cursor);  // wraps to 0 at 2^32
  const uint64_t nodes = uint64_t{c.cities} * c.nodes_per_city;
  if (nodes + 1 > (uint64_t{1} << (32 - c.node_prefix.length))) {
    return absl::InvalidArgumentError(common::Cat(c.cities, " cities x ", c.nodes_per_city,
                                                  " nodes do not fit in ", c.node_prefix.ToText()));
  }

  // Runs of neighbouring segments that share an answer, per name group.
  const uint32_t n = static_cast<uint32_t>(m.segments_.size());
  m.run_.resize(size_t{c.name_groups} * n);
  m.run_base_.push_back(0);
  for (uint32_t g = 0; g < c.name_groups; ++g) {
    uint32_t* run = m.run_.data() + size_t{g} * n;
    uint32_t runs = 0;
    for (uint32_t city = 0; city < c.cities; ++city) {
      const uint32_t first = city * c.segments_per_city;
      if (Unit(Hash(c.seed, kCityLevel, g, city)) < c.city_level_fraction) {
        std::fill(run + first, run + first + c.segments_per_city, runs++);
        continue;
      }
      for (uint32_t i = 0; i < c.segments_per_city;) {
        const uint32_t len =
            c.run_min + static_cast<uint32_t>(Hash(c.seed, kRun, g, city, i) % (c.run_max - c.run_min + 1u));
        const uint32_t end = std::min(c.segments_per_city, i + len);
        std::fill(run + first + i, run + first + end, runs++);
        i = end;
      }
    }
    m.run_base_.push_back(m.run_base_.back() + runs);
  }
  m.rotation_.resize(m.run_base_.back());
  for (uint32_t g = 0; g < c.name_groups; ++g) m.InitialRotations(g, m.rotation_.data() + m.run_base_[g]);
  return m;
}

void SegmentModel::InitialRotations(uint32_t group, uint32_t* rot) const {
  for (uint32_t r = 0; r < RunsOf(group); ++r) {
    rot[r] = static_cast<uint32_t>(Hash(config_.seed, kRotation, group, r) % config_.nodes_per_city);
  }
}

void SegmentModel::Step(uint32_t group, uint64_t from_epoch, uint64_t to_epoch, uint32_t* rot) const {
  // Epoch e moves the runs whose draw for e is under the fraction, each to
  // another of its city's rotations (so its answer does change).
  const uint32_t npc = config_.nodes_per_city;
  if (npc < 2 || config_.change_fraction <= 0) return;
  for (uint64_t e = from_epoch + 1; e <= to_epoch; ++e) {
    for (uint32_t r = 0; r < RunsOf(group); ++r) {
      if (Unit(Hash(config_.seed, kMove, group, r, e)) >= config_.change_fraction) continue;
      const uint32_t by = 1 + static_cast<uint32_t>(Hash(config_.seed, kMoveBy, group, r, e) % (npc - 1));
      rot[r] = (rot[r] + by) % npc;
    }
  }
}

void SegmentModel::SetEpoch(uint64_t epoch) {
  epoch = std::min(epoch, kMaxSegmentEpoch);
  if (epoch == epoch_) return;
  for (uint32_t g = 0; g < config_.name_groups; ++g) {
    uint32_t* rot = rotation_.data() + run_base_[g];
    if (epoch > epoch_) {
      Step(g, epoch_, epoch, rot);  // forward: only the epochs after the current one
    } else {
      InitialRotations(g, rot);
      Step(g, 0, epoch, rot);
    }
  }
  epoch_ = epoch;
}

bool SegmentModel::Covers(std::string_view name, std::string_view zone_origin) const {
  return name.size() > config_.suffix.size() && zone_origin == config_.zone_origin &&
         IsSubdomain(name, config_.suffix);
}

uint32_t SegmentModel::GroupOf(std::string_view name) const {
  return static_cast<uint32_t>(common::HashBytes(name.data(), name.size(), config_.seed) %
                               config_.name_groups);
}

std::optional<uint32_t> SegmentModel::Find(uint32_t addr) const {
  if (segments_.empty() || addr < segments_.front().start) return std::nullopt;
  if (end_ != 0 && addr >= end_) return std::nullopt;
  // The last segment starting at or before addr: they are contiguous.
  auto it = std::upper_bound(segments_.begin(), segments_.end(), addr,
                             [](uint32_t a, const Segment& s) { return a < s.start; });
  return static_cast<uint32_t>(it - segments_.begin() - 1);
}

void SegmentModel::AnswerOf(uint32_t city, uint32_t rotation, View* out) const {
  const SegmentConfig& c = config_;
  const uint32_t base = V4(c.node_prefix) + 1 + city * c.nodes_per_city;
  const uint32_t span = c.weight_max - c.weight_min + 1u;
  out->ttl = c.ttl;
  out->addresses.resize(c.addresses_per_answer);
  for (uint32_t k = 0; k < c.addresses_per_answer; ++k) {
    WeightedAddress& a = out->addresses[k];
    const uint32_t addr = base + (rotation + k) % c.nodes_per_city;
    a.family = 1;
    a.bytes = V4Prefix(addr, 32).address;
    a.weight = static_cast<uint16_t>(c.weight_min + Hash(c.seed, kWeight, city, rotation, k) % span);
  }
}

void SegmentModel::Fill(uint32_t group, std::optional<uint32_t> segment, View* out) const {
  if (!segment) {
    // Clients in no segment: scope 0 and city 0's first rotation.
    out->cidr.reset();
    out->scope = 0;
    AnswerOf(0, 0, out);
    return;
  }
  const Segment& s = segments_[*segment];
  const Prefix scope = ScopeOf(group, *segment);
  out->scope = scope.length;
  out->cidr = scope;
  const uint32_t run = run_[size_t{group} * segments_.size() + *segment];
  AnswerOf(s.city, rotation_[run_base_[group] + run], out);
}

Prefix SegmentModel::ScopeOf(uint32_t group, uint32_t segment) const {
  const Segment& s = segments_[segment];
  if (!config_.run_scope) return V4Prefix(s.start, s.length);
  // The run's address range [lo, hi): its segments are neighbours.
  const uint32_t* run = run_.data() + size_t{group} * segments_.size();
  uint32_t first = segment, last = segment;
  while (first > 0 && run[first - 1] == run[segment]) --first;
  while (last + 1 < segments_.size() && run[last + 1] == run[segment]) ++last;
  const uint64_t lo = segments_[first].start;
  const uint64_t hi = uint64_t{segments_[last].start} + segments_[last].Size();
  uint32_t length = s.length;
  while (length > config_.prefix.length) {
    const uint64_t size = uint64_t{1} << (32 - (length - 1));
    const uint64_t start = s.start & ~(size - 1);
    if (start < lo || start + size > hi) break;
    --length;
  }
  const uint32_t mask = length == 0 ? 0 : ~uint32_t{0} << (32 - length);
  return V4Prefix(s.start & mask, static_cast<uint8_t>(length));
}

std::string SegmentModel::TruthJson(uint32_t group, uint64_t epoch, std::string_view name) const {
  epoch = std::min(epoch, kMaxSegmentEpoch);
  std::vector<uint32_t> rot(RunsOf(group));
  InitialRotations(group, rot.data());
  Step(group, 0, epoch, rot.data());
  View v;
  auto answer = [&](Json* o) {
    Json addresses = Json::array(), weights = Json::array();
    for (const WeightedAddress& a : v.addresses) {
      addresses.push_back(V4Text(V4(a.bytes)));
      weights.push_back(a.weight);
    }
    (*o)["addresses"] = std::move(addresses);
    (*o)["weights"] = std::move(weights);
  };
  Json doc;
  if (name.empty()) {
    doc["name"] = nullptr;
  } else {
    doc["name"] = NameText(name);
  }
  doc["group"] = group;
  doc["epoch"] = epoch;
  doc["prefix"] = config_.prefix.ToText();
  doc["ttl"] = config_.ttl;
  AnswerOf(0, 0, &v);
  Json def;
  def["scope"] = 0;
  answer(&def);
  doc["default"] = std::move(def);
  Json segs = Json::array();
  std::vector<Json> seg_answers;
  seg_answers.reserve(segments_.size());
  for (uint32_t i = 0; i < segments_.size(); ++i) {
    const Segment& s = segments_[i];
    const uint32_t run = run_[size_t{group} * segments_.size() + i];
    AnswerOf(s.city, rot[run], &v);
    Json o;
    o["cidr"] = V4Prefix(s.start, s.length).ToText();
    o["city"] = CityName(s.city);
    o["run"] = run;
    o["scope"] = ScopeOf(group, i).length;
    answer(&o);
    seg_answers.push_back(o);
    segs.push_back(std::move(o));
  }
  doc["segments"] = std::move(segs);
  // Every /24 of the prefix (segments are /24 or larger).
  Json subnets = Json::array();
  const uint32_t start = V4(config_.prefix);
  const uint64_t count = uint64_t{1} << (24 - config_.prefix.length);
  for (uint64_t i = 0; i < count; ++i) {
    const uint32_t a = start + static_cast<uint32_t>(i << 8);
    Json o;
    o["subnet"] = V4Prefix(a, 24).ToText();
    const std::optional<uint32_t> seg = Find(a);
    if (seg) {
      const Json& sa = seg_answers[*seg];
      o["segment"] = sa["cidr"];
      o["city"] = sa["city"];
      o["scope"] = sa["scope"];
      o["addresses"] = sa["addresses"];
      o["weights"] = sa["weights"];
    } else {
      o["segment"] = nullptr;
      o["city"] = nullptr;
      o["scope"] = 0;
      o["addresses"] = doc["default"]["addresses"];
      o["weights"] = doc["default"]["weights"];
    }
    subnets.push_back(std::move(o));
  }
  doc["subnets"] = std::move(subnets);
  return doc.dump();
}

std::string SegmentModel::CityMapCsv() const {
  std::string out = common::Cat("# gslb-sim segments: seed ", config_.seed, ", ", config_.cities, " cities, ",
                                segments_.size(), " segments of ", config_.prefix.ToText(),
                                "\n# cidr, city, ecs_address (the city's first /24)\n");
  for (size_t i = 0; i < segments_.size(); ++i) {
    const Segment& s = segments_[i];
    const bool first = i == 0 || segments_[i - 1].city != s.city;
    common::CatTo(out, V4Prefix(s.start, s.length).ToText(), ",", CityName(s.city), ",",
                  first ? V4Prefix(s.start, 24).ToText() : "", "\n");
  }
  return out;
}

absl::StatusOr<std::string> SegmentTruth(const SegmentModel& model, std::string_view which, uint64_t epoch) {
  if (which.starts_with("group=")) {
    const std::string n(which.substr(6));
    char* end = nullptr;
    const unsigned long g = std::strtoul(n.c_str(), &end, 10);
    if (n.empty() || n[0] == '-' || *end != '\0' || g >= model.config().name_groups) {
      return absl::InvalidArgumentError(common::Cat("'", which, "': the group must be a number from 0 to ",
                                                    model.config().name_groups - 1));
    }
    return model.TruthJson(static_cast<uint32_t>(g), epoch, "");
  }
  dns::NameKey key;
  if (!dns::NameKeyFromText(which, &key))
    return absl::InvalidArgumentError(common::Cat("invalid name '", which, "'"));
  const std::string_view k(reinterpret_cast<const char*>(key.bytes.data()), key.len);
  if (!model.Covers(k, model.config().zone_origin)) {
    return absl::InvalidArgumentError(common::Cat("'", NameText(k), "' is not below the segments suffix ",
                                                  NameText(model.config().suffix)));
  }
  return model.TruthJson(model.GroupOf(k), epoch, k);
}

uint64_t SegmentClock::EpochAt(Clock::time_point now) const {
  if (period_s_ == 0 || now <= since_) return base_;
  const auto elapsed = std::chrono::duration_cast<std::chrono::seconds>(now - since_).count();
  return base_ + static_cast<uint64_t>(elapsed) / period_s_;
}

}  // namespace weir::gslb_sim
