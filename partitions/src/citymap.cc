#include "weir/partitions/citymap.h"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstdlib>

#include "absl/container/flat_hash_map.h"
#include "text_util.h"

namespace weir::partitions {
namespace {

using u128 = unsigned __int128;
constexpr size_t kTbl24Entries = size_t{1} << 24;
constexpr size_t kTbl24Bytes = kTbl24Entries * sizeof(uint16_t);
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kMaxTbl8Groups = 0x8000;

inline u128 Load128(const uint8_t* p) {
  uint64_t hi, lo;
  std::memcpy(&hi, p, 8);
  std::memcpy(&lo, p + 8, 8);
  return (u128{__builtin_bswap64(hi)} << 64) | __builtin_bswap64(lo);
}

inline unsigned Clz128(u128 v) {
  uint64_t hi = static_cast<uint64_t>(v >> 64), lo = static_cast<uint64_t>(v);
  if (hi != 0) return static_cast<unsigned>(std::countl_zero(hi));
  if (lo != 0) return 64 + static_cast<unsigned>(std::countl_zero(lo));
  return 128;
}

inline u128 MaskTop(unsigned bits) { return bits == 0 ? u128{0} : ~u128{0} << (128 - bits); }

}  // namespace

CityMap::~CityMap() { std::free(tbl24_); }

size_t CityMap::memory_bytes() const {
  return kTbl24Bytes + tbl8_.size() * sizeof(uint16_t) + starts_.size() * sizeof(u128) +
         range_city_.size() * sizeof(PartitionId) + v6_buckets_.size() * sizeof(V6Bucket);
}

std::optional<PartitionId> CityMap::FindCity(std::string_view name) const {
  for (size_t i = 0; i < cities_.size(); ++i) {
    if (cities_[i].name == name) return static_cast<PartitionId>(i);
  }
  return std::nullopt;
}

void CityMap::LookupV4Burst(const uint32_t* addrs, PartitionId* out, size_t n) const {
  for (size_t i = 0; i < n; ++i) __builtin_prefetch(&tbl24_[addrs[i] >> 8]);
  for (size_t i = 0; i < n; ++i) out[i] = LookupV4(addrs[i]);
}

PartitionId CityMap::LookupV6(const uint8_t* addr) const {
  const u128 a = Load128(addr);
  size_t lo = 0, len = starts_.size();
  if (has_index_ && ((a ^ common_base_) & common_mask_) == 0) {
    const V6Node* node = &v6_nodes_[0];
    for (;;) {
      const size_t i = node->first + (static_cast<uint32_t>(a >> node->shift) & ((1u << node->bits) - 1));
      const V6Bucket& b = v6_buckets_[i];
      if (b.child != 0) {
        node = &v6_nodes_[b.child - 1];
        continue;
      }
      lo = b.lo;
      len = v6_buckets_[i + 1].lo - lo + 1;
      break;
    }
  }
  const u128* s = starts_.data();
  while (len > 1) {
    const size_t half = len / 2;
    lo = s[lo + half] <= a ? lo + half : lo;
    len -= half;
  }
  return range_city_[lo];
}

uint32_t CityMap::BuildV6Node(u128 base, unsigned shift, unsigned bits, size_t hint) {
  constexpr size_t kLeafRanges = 16;
  const uint32_t id = static_cast<uint32_t>(v6_nodes_.size());
  const size_t first = v6_buckets_.size();
  const size_t count = size_t{1} << bits;
  v6_nodes_.push_back(
      {static_cast<uint32_t>(first), static_cast<uint8_t>(shift), static_cast<uint8_t>(bits)});
  v6_buckets_.resize(first + count + 1, V6Bucket{0, 0});
  size_t r = hint;
  for (size_t b = 0; b < count; ++b) {
    const u128 start = base | (u128{b} << shift);
    while (r + 1 < starts_.size() && starts_[r + 1] <= start) ++r;
    v6_buckets_[first + b].lo = static_cast<uint32_t>(r);
  }
  // Sentinel: the last range starting within the node's region.
  const unsigned width = shift + bits;
  const u128 end = width >= 128 ? ~u128{0} : base | ((u128{1} << width) - 1);
  while (r + 1 < starts_.size() && starts_[r + 1] <= end) ++r;
  v6_buckets_[first + count].lo = static_cast<uint32_t>(r);
  for (size_t b = 0; b < count; ++b) {
    const size_t lo = v6_buckets_[first + b].lo, hi = v6_buckets_[first + b + 1].lo;
    if (hi - lo < kLeafRanges || shift == 0) continue;
    const unsigned child_bits = std::min(8u, shift);
    const uint32_t child = BuildV6Node(base | (u128{b} << shift), shift - child_bits, child_bits, lo);
    v6_buckets_[first + b].child = child + 1;
  }
  return id;
}

absl::StatusOr<std::unique_ptr<const CityMap>> CityMap::Build(std::vector<City> cities,
                                                              std::vector<CityPrefix> prefixes,
                                                              PartitionId default_city) {
  if (cities.empty() || cities.size() > kMaxCities) {
    return absl::InvalidArgumentError(
        internal::Cat("city count ", cities.size(), " outside 1..", kMaxCities));
  }
  if (default_city >= cities.size()) return absl::InvalidArgumentError("default city out of range");
  for (const CityPrefix& p : prefixes) {
    if (p.city >= cities.size()) return absl::InvalidArgumentError("prefix maps to an unknown city");
    if (p.cidr.address.family != 4 && p.cidr.address.family != 6) {
      return absl::InvalidArgumentError("prefix without address family");
    }
  }
  std::unique_ptr<CityMap> m(new CityMap());
  m->cities_ = std::move(cities);
  m->default_city_ = default_city;

  // Sort by (family, length, address): duplicates become neighbours and
  // both tables fill shorter prefixes before longer ones.
  std::vector<CityPrefix> sorted = prefixes;
  std::sort(sorted.begin(), sorted.end(), [](const CityPrefix& a, const CityPrefix& b) {
    if (a.cidr.address.family != b.cidr.address.family) return a.cidr.address.family < b.cidr.address.family;
    if (a.cidr.prefix != b.cidr.prefix) return a.cidr.prefix < b.cidr.prefix;
    return a.cidr.address.bytes < b.cidr.address.bytes;
  });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i].cidr.address == sorted[i - 1].cidr.address &&
        sorted[i].cidr.prefix == sorted[i - 1].cidr.prefix) {
      return absl::InvalidArgumentError(
          internal::Cat("duplicate prefix ", IpToString(sorted[i].cidr.address), "/", sorted[i].cidr.prefix));
    }
  }

  // ---- IPv4: DIR-24-8.
  m->tbl24_ = static_cast<uint16_t*>(std::aligned_alloc(kHugePage, kTbl24Bytes));
  if (m->tbl24_ == nullptr) return absl::ResourceExhaustedError("cannot allocate the IPv4 table");
  madvise(m->tbl24_, kTbl24Bytes, MADV_HUGEPAGE);
  std::fill_n(m->tbl24_, kTbl24Entries, default_city);
  for (const CityPrefix& p : sorted) {
    if (p.cidr.address.family != 4) continue;
    const uint32_t addr = p.cidr.address.v4();
    const unsigned len = p.cidr.prefix;
    if (len <= 24) {
      const size_t first = addr >> 8, count = size_t{1} << (24 - len);
      std::fill_n(m->tbl24_ + first, count, p.city);
      continue;
    }
    uint16_t& e = m->tbl24_[addr >> 8];
    if (!(e & kIndirect)) {
      const size_t group = m->tbl8_.size() / 256;
      if (group >= kMaxTbl8Groups) {
        return absl::InvalidArgumentError(
            internal::Cat("too many /24 blocks split by longer prefixes (max ", kMaxTbl8Groups, ")"));
      }
      m->tbl8_.resize(m->tbl8_.size() + 256, e);
      e = static_cast<uint16_t>(kIndirect | group);
    }
    const size_t base = (size_t{e & 0x7fffu} << 8) | (addr & 0xff);
    std::fill_n(m->tbl8_.begin() + base, size_t{1} << (32 - len), p.city);
  }

  // ---- IPv6: disjoint ranges by a sweep over prefixes sorted by start,
  // containing prefixes first; the stack holds the open (nesting) prefixes.
  struct Open {
    u128 end;
    PartitionId city;
  };
  struct Range6 {
    u128 start, end;
    unsigned len;
    PartitionId city;
  };
  std::vector<Range6> v6;
  for (const CityPrefix& p : sorted) {
    if (p.cidr.address.family != 6) continue;
    const u128 start = Load128(p.cidr.address.bytes.data());
    const u128 end = start | ~MaskTop(p.cidr.prefix);
    v6.push_back({start, end, p.cidr.prefix, p.city});
  }
  std::sort(v6.begin(), v6.end(), [](const Range6& a, const Range6& b) {
    return a.start != b.start ? a.start < b.start : a.len < b.len;
  });
  auto emit = [&](u128 s, PartitionId c) {
    if (!m->starts_.empty() && m->starts_.back() == s) {
      m->starts_.pop_back();
      m->range_city_.pop_back();
    }
    if (!m->range_city_.empty() && m->range_city_.back() == c) return;
    m->starts_.push_back(s);
    m->range_city_.push_back(c);
  };
  std::vector<Open> stack = {{~u128{0}, default_city}};
  emit(0, default_city);
  auto pop = [&]() {
    const Open top = stack.back();
    stack.pop_back();
    if (top.end != ~u128{0}) emit(top.end + 1, stack.back().city);
  };
  for (const Range6& r : v6) {
    while (stack.back().end < r.start) pop();
    stack.push_back({r.end, r.city});
    emit(r.start, r.city);
  }
  while (stack.size() > 1) pop();

  if (!v6.empty()) {
    u128 lo = v6.front().start, hi = 0;
    for (const Range6& r : v6) hi = std::max(hi, r.end);
    m->common_bits_ = std::min(Clz128(lo ^ hi), 112u);
    m->common_mask_ = MaskTop(m->common_bits_);
    m->common_base_ = lo & m->common_mask_;
    m->BuildV6Node(m->common_base_, 128 - m->common_bits_ - 16, 16, 0);
    m->has_index_ = true;
  }
  m->prefixes_ = std::move(prefixes);
  return std::unique_ptr<const CityMap>(std::move(m));
}

absl::StatusOr<std::unique_ptr<const CityMap>> CityMap::FromCsv(std::string_view csv,
                                                                const CityMapOptions& options) {
  using internal::Split;
  using internal::Trim;
  if (!internal::ValidName(options.default_city)) {
    return absl::InvalidArgumentError(internal::Cat("bad default city name '", options.default_city, "'"));
  }
  std::vector<City> cities;
  absl::flat_hash_map<std::string, PartitionId> city_ids;
  absl::flat_hash_map<std::string, int> seen_prefix;  // "addr/len" -> line
  std::vector<CityPrefix> prefixes;
  absl::Status status;

  internal::ForEachLine(csv, [&](int line_no, std::string_view line) {
    auto fail = [&](std::string_view why) {
      status = absl::InvalidArgumentError(internal::Cat("line ", line_no, ": ", why));
      return false;
    };
    std::vector<std::string_view> f = Split(line, ',');
    if (f.size() != 3)
      return fail(internal::Cat("expected 3 fields 'cidr,city,ecs_address/prefix', got ", f.size()));
    Cidr cidr;
    if (absl::Status s = ParseCidr(Trim(f[0]), &cidr); !s.ok()) return fail(std::string(s.message()));
    std::string_view name = Trim(f[1]);
    if (!internal::ValidName(name)) return fail(internal::Cat("bad city name '", name, "'"));

    auto [it, inserted] = city_ids.try_emplace(std::string(name), static_cast<PartitionId>(cities.size()));
    if (inserted) {
      if (cities.size() >= kMaxCities) return fail(internal::Cat("more than ", kMaxCities, " cities"));
      cities.push_back(City{std::string(name), {}, {}});
    }
    const PartitionId id = it->second;

    std::string_view ecs_text = Trim(f[2]);
    if (!ecs_text.empty()) {
      std::string_view addr_text = ecs_text, len_text;
      if (size_t slash = ecs_text.find('/'); slash != std::string_view::npos) {
        addr_text = ecs_text.substr(0, slash);
        len_text = ecs_text.substr(slash + 1);
      }
      IpAddress ecs_addr;
      if (!ParseIp(addr_text, &ecs_addr)) return fail(internal::Cat("bad ECS address '", addr_text, "'"));
      unsigned len = ecs_addr.family == 4 ? 24 : 56;
      const unsigned max = ecs_addr.family == 4 ? 32 : 128;
      if (!len_text.empty() || ecs_text.find('/') != std::string_view::npos) {
        auto [ptr, ec] = std::from_chars(len_text.data(), len_text.data() + len_text.size(), len);
        if (len_text.empty() || ec != std::errc() || ptr != len_text.data() + len_text.size() || len > max) {
          return fail(internal::Cat("bad ECS prefix length '", len_text, "'"));
        }
      }
      dns::ClientSubnet s;
      s.family = ecs_addr.family == 4 ? dns::kEcsFamilyIpv4 : dns::kEcsFamilyIpv6;
      s.source_prefix = static_cast<uint8_t>(len);
      for (unsigned bit = 0; bit < len; ++bit) {  // copy the prefix bits only
        s.address[bit / 8] |= ecs_addr.bytes[bit / 8] & (0x80u >> (bit % 8));
      }
      dns::ClientSubnet& slot = ecs_addr.family == 4 ? cities[id].ecs_v4 : cities[id].ecs_v6;
      if (slot.family != 0 && !(slot == s)) {
        return fail(
            internal::Cat("city '", name, "' already has a different IPv", ecs_addr.family, " ECS source"));
      }
      slot = s;
    }

    std::string key = internal::Cat(IpToString(cidr.address), "/", cidr.prefix);
    auto [pit, fresh] = seen_prefix.try_emplace(key, line_no);
    if (!fresh) return fail(internal::Cat("duplicate prefix ", key, " (first on line ", pit->second, ")"));
    prefixes.push_back({cidr, id});
    return true;
  });
  if (!status.ok()) return status;

  PartitionId default_id;
  if (auto it = city_ids.find(options.default_city); it != city_ids.end()) {
    default_id = it->second;
  } else {
    if (cities.size() >= kMaxCities) return absl::InvalidArgumentError("no room for the default city");
    default_id = static_cast<PartitionId>(cities.size());
    cities.push_back(City{options.default_city, {}, {}});
  }
  return Build(std::move(cities), std::move(prefixes), default_id);
}

}  // namespace weir::partitions
