#include "weir/partitions/weight_factors.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <utility>

#include "text_util.h"
#include "weir/common/hash.h"
#include "weir/common/text.h"

namespace weir::partitions {

namespace {

// The order of a set's addresses: family, then bytes (an IPv4 address's
// bytes beyond the fourth are zero).
bool AddressLess(const common::IpAddress& a, const common::IpAddress& b) {
  if (a.family != b.family) return a.family < b.family;
  return std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()) < 0;
}

// Shortest text that reads back to the same double.
std::string Shortest(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

// Host names only, as tag suffixes (ParseTagLine): no escapes, so every
// name reads back the same from Format.
bool ParseName(std::string_view text, dns::NameKey* key) {
  for (char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.';
    if (!ok) return false;
  }
  return dns::NameKeyFromText(text, key);
}

bool ParseFactor(std::string_view text, double* out) {
  double v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(v)) return false;
  if (v < kMinFactor || v > kMaxFactor) return false;
  *out = v;
  return true;
}

}  // namespace

bool operator<(const FactorSetKey& a, const FactorSetKey& b) {
  const auto x = a.name.span(), y = b.name.span();
  if (std::lexicographical_compare(x.begin(), x.end(), y.begin(), y.end())) return true;
  if (std::lexicographical_compare(y.begin(), y.end(), x.begin(), x.end())) return false;
  return a.partition < b.partition;
}

uint64_t PickWeights(std::span<const uint8_t> weights, std::span<const double> factors, uint8_t* out) {
  const size_t n = weights.size();
  bool scaled = false;
  if (factors.size() == n && n <= dns::kMaxWeightedAddresses) {
    for (size_t i = 0; i < n && !scaled; ++i) scaled = factors[i] != 1.0;
  }
  if (!scaled) {
    std::copy(weights.begin(), weights.end(), out);
    return 0;
  }
  double eff[dns::kMaxWeightedAddresses];
  double max = 0;
  for (size_t i = 0; i < n; ++i) {
    eff[i] = weights[i] * factors[i];
    max = std::max(max, eff[i]);
  }
  // Factors come from FromText (positive, finite) and weights are 1..255,
  // so max > 0; a zero weight would only get the floor.
  const double scale = max > 0 ? 255.0 / max : 0;
  for (size_t i = 0; i < n; ++i) {
    const double w = eff[i] * scale + 0.5;  // round to nearest
    out[i] = w >= 255 ? 255 : w < 1 ? 1 : static_cast<uint8_t>(w);
  }
  if (std::equal(weights.begin(), weights.end(), out)) return 0;
  const uint64_t d = common::HashBytes(out, n, 0x7765696768747321ULL);
  return d == 0 ? 1 : d;
}

double FactorSet::Factor(std::span<const uint8_t> rdata, size_t* known) const {
  common::IpAddress a;
  if (rdata.size() == 4) {
    a.family = 4;
  } else if (rdata.size() == 16) {
    a.family = 6;
  } else {
    return 1.0;
  }
  std::memcpy(a.bytes.data(), rdata.data(), rdata.size());
  auto it = std::lower_bound(
      addresses_.begin(), addresses_.end(), a,
      [](const AddressFactor& x, const common::IpAddress& y) { return AddressLess(x.address, y); });
  if (it == addresses_.end() || !(it->address == a)) return 1.0;
  if (known != nullptr) ++*known;
  return it->factor;
}

uint64_t FactorSet::PickWeights(const CacheEntry& e, uint8_t* out) const {
  const std::span<const uint8_t> weights = e.weights();
  const size_t n = std::min<size_t>(weights.size(), dns::kMaxWeightedAddresses);
  double factors[dns::kMaxWeightedAddresses];
  size_t known = 0;
  for (size_t i = 0; i < n; ++i) {
    factors[i] = Factor(e.address(i), &known);
  }
  // The factors were made for one set of addresses, and each family is
  // corrected on its own: an entry whose addresses of its family are not
  // exactly the set's (the GSLB added or dropped one since) is picked with
  // the GSLB's weights until feedback for the new set arrives.
  size_t family = 0;
  const uint8_t want = n > 0 && e.address(0).size() == 16 ? 6 : 4;
  for (const AddressFactor& a : addresses_) family += a.address.family == want;
  if (known != n || family != n) {
    std::copy(weights.begin(), weights.begin() + static_cast<ptrdiff_t>(n), out);
    return 0;
  }
  return partitions::PickWeights(weights.first(n), {factors, n}, out);
}

absl::StatusOr<WeightFactors> WeightFactors::FromText(std::string_view text) {
  common::LineErrors errors;
  return FromText(text, &errors);
}

absl::StatusOr<WeightFactors> WeightFactors::FromText(std::string_view text, common::LineErrors* errors) {
  WeightFactors out;
  // The line of each address, to name the first one of a duplicate.
  std::map<FactorSetKey, std::vector<int>> lines;
  internal::ForEachLine(text, [&](int line_no, std::string_view line) {
    std::vector<std::string_view> f;
    for (std::string_view w : common::Split(line, ' ')) {
      for (std::string_view x : common::Split(w, '\t')) {
        if (!x.empty()) f.push_back(x);
      }
    }
    auto fail = [&](std::string why) {
      errors->Add(line_no, std::move(why));
      return true;
    };
    if (f.size() != 4)
      return fail(common::Cat("expected 4 fields 'name partition address factor', got ", f.size()));
    FactorSetKey key;
    AddressFactor a;
    if (!ParseName(f[0], &key.name)) return fail(common::Cat("bad name '", f[0], "'"));
    if (!internal::ValidName(f[1])) return fail(common::Cat("bad partition '", f[1], "'"));
    key.partition = std::string(f[1]);
    if (!common::ParseIp(f[2], &a.address)) return fail(common::Cat("bad address '", f[2], "'"));
    if (!ParseFactor(f[3], &a.factor)) {
      return fail(common::Cat("factor '", f[3], "' must be a number in ", Shortest(kMinFactor), "..",
                              Shortest(kMaxFactor)));
    }
    std::vector<AddressFactor>& set = out.sets_[key].addresses_;
    std::vector<int>& set_lines = lines[key];
    for (size_t i = 0; i < set.size(); ++i) {
      if (set[i].address == a.address) {
        return fail(common::Cat("address ", common::IpToString(a.address), " listed twice for ",
                                dns::NameKeyToText(key.name.span()), " ", key.partition, " (first on line ",
                                set_lines[i], ")"));
      }
    }
    if (set.size() == dns::kMaxWeightedAddresses) {
      return fail(common::Cat("more than ", dns::kMaxWeightedAddresses, " addresses for ",
                              dns::NameKeyToText(key.name.span()), " ", key.partition));
    }
    set.push_back(a);
    set_lines.push_back(line_no);
    return true;
  });
  if (!errors->empty()) return errors->First();
  for (auto& [key, set] : out.sets_) {
    std::sort(
        set.addresses_.begin(), set.addresses_.end(),
        [](const AddressFactor& x, const AddressFactor& y) { return AddressLess(x.address, y.address); });
    // The identity of the set's content, mixed into an entry's SWRR
    // fingerprint: other factors, another sequence.
    uint64_t d = 0x63616c6962726174ULL;
    for (const AddressFactor& a : set.addresses_) {
      uint64_t bits;
      std::memcpy(&bits, &a.factor, sizeof bits);
      d = common::Mix64(
          d ^ common::HashBytes(a.address.bytes.data(), a.address.family == 4 ? 4 : 16, a.address.family));
      d = common::Mix64(d ^ bits);
    }
    set.digest_ = d == 0 ? 1 : d;
  }
  return out;
}

std::string WeightFactors::Format() const {
  std::string out;
  for (const auto& [key, set] : sets_) {
    const std::string name = dns::NameKeyToText(key.name.span());
    for (const AddressFactor& a : set.addresses_) {
      common::CatTo(out, name, " ", key.partition, " ", common::IpToString(a.address), " ",
                    Shortest(a.factor), "\n");
    }
  }
  return out;
}

BoundWeightFactors WeightFactors::Bind(
    const std::function<std::optional<Partition>(std::string_view partition_name)>& resolve) const {
  BoundWeightFactors out;
  // One question per partition name: a push names each city for many sets.
  absl::flat_hash_map<std::string, std::optional<Partition>> resolved;
  for (const auto& [key, set] : sets_) {
    std::optional<Partition> p;
    if (key.partition == kCommonPartitionName) {
      p = kCommonPartition;
    } else {
      auto [it, inserted] = resolved.try_emplace(key.partition);
      if (inserted) it->second = resolve(key.partition);
      p = it->second;
    }
    if (!p.has_value()) {
      ++out.unbound_sets_;
      continue;
    }
    const auto name = key.name.span();
    BoundWeightFactors::Key k{*p, std::string(name.begin(), name.end())};
    if (!out.sets_.try_emplace(std::move(k), set).second) ++out.unbound_sets_;
  }
  return out;
}

size_t BoundWeightFactors::KeyHash::operator()(const KeyView& k) const {
  return HashCacheKey({k.partition, k.qname, 0, 0});
}

size_t BoundWeightFactors::KeyHash::operator()(const Key& k) const { return (*this)(KeyEq::View(k)); }

BoundWeightFactors::KeyView BoundWeightFactors::KeyEq::View(const Key& k) {
  return {k.partition, {reinterpret_cast<const uint8_t*>(k.qname.data()), k.qname.size()}};
}

const FactorSet* BoundWeightFactors::Find(Partition p, std::span<const uint8_t> qname) const {
  if (sets_.empty()) return nullptr;
  auto it = sets_.find(KeyView{p, qname});
  return it == sets_.end() ? nullptr : &it->second;
}

}  // namespace weir::partitions
