#include "weir/partitions/citymap.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "absl/container/flat_hash_map.h"
#include "text_util.h"
#include "weir/common/text.h"

namespace weir::partitions {
namespace {

using u128 = unsigned __int128;
constexpr size_t kTbl24Entries = size_t{1} << 24;
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

// A bucket meeting more IPv6 ranges than this gets a child node. A node
// has about one boundary per bucket, so most leaves hold one to three.
constexpr size_t kLeafRanges = 8;

// Bytes 8..11 of a v4-mapped IPv6 address (0, 0, 0xff, 0xff), loaded in
// host order.
constexpr uint32_t kV4MappedMid = std::endian::native == std::endian::little ? 0xffff0000u : 0x0000ffffu;

inline u128 MaskTop(unsigned bits) { return bits == 0 ? u128{0} : ~u128{0} << (128 - bits); }

}  // namespace

struct CityMap::Tables {
  std::vector<V4Block> v4_blocks;
  std::vector<uint16_t> dense, tbl8;
  std::vector<u128> starts;  // the IPv6 ranges, see V6Bucket
  std::vector<PartitionId> range_city;
  std::vector<V6Node> v6_nodes;
  std::vector<V6Bucket> v6_buckets;
  std::vector<u128> v6_leaves{0};  // [0] unused: 0 marks "no shared leaf yet"
  std::vector<uint32_t> city_leaf;
};

CityMap::~CityMap() { std::free(arena_); }

// Copies the tables into one allocation on 2 MB pages: the lookups' loads
// are spread over several MB, and in this VM every 4 KB TLB miss is a
// nested page walk.
bool CityMap::Freeze(const Tables& t) {
  size_t bytes = 0;
  auto place = [&](const auto& v) {
    const size_t at = bytes;
    bytes += (v.size() * sizeof(v[0]) + 63) & ~size_t{63};
    return at;
  };
  const size_t blocks = place(t.v4_blocks), nodes = place(t.v6_nodes), buckets = place(t.v6_buckets),
               leaves = place(t.v6_leaves), tbl8 = place(t.tbl8), dense = place(t.dense);
  arena_bytes_ = (bytes + kHugePage - 1) & ~(kHugePage - 1);
  arena_ = std::aligned_alloc(kHugePage, arena_bytes_);
  if (arena_ == nullptr) return false;
  madvise(arena_, arena_bytes_, MADV_HUGEPAGE);
  char* base = static_cast<char*>(arena_);
  auto copy = [&](const auto& v, size_t at) {
    using T = std::remove_cvref_t<decltype(v[0])>;
    if (!v.empty()) std::memcpy(base + at, v.data(), v.size() * sizeof(T));
    return reinterpret_cast<const T*>(base + at);
  };
  v4_blocks_ = copy(t.v4_blocks, blocks);
  v6_nodes_ = copy(t.v6_nodes, nodes);
  v6_buckets_ = copy(t.v6_buckets, buckets);
  v6_leaves_ = copy(t.v6_leaves, leaves);
  tbl8_ = copy(t.tbl8, tbl8);
  dense_ = copy(t.dense, dense);
  return true;
}

size_t CityMap::memory_bytes() const { return arena_bytes_; }

std::optional<PartitionId> CityMap::FindCity(std::string_view name) const {
  for (size_t i = 0; i < cities_.size(); ++i) {
    if (cities_[i].name == name) return static_cast<PartitionId>(i);
  }
  return std::nullopt;
}

void CityMap::LookupV4Burst(const uint32_t* addrs, PartitionId* out, size_t n) const {
  for (size_t i = 0; i < n; ++i) __builtin_prefetch(&v4_blocks_[addrs[i] >> 16]);
  for (size_t i = 0; i < n; ++i) out[i] = LookupV4(addrs[i]);
}

// The city of the last of a leaf's `count` ranges that starts at or before
// `a` (see V6Bucket for the layout). Fixed steps with conditional moves:
// count varies from bucket to bucket, so a loop on it would mispredict.
// Probes are clamped to the leaf so they touch no other cache line.
inline PartitionId SearchLeaf(const u128* leaf, size_t count, u128 a) {
  static_assert(kLeafRanges <= 8);
  const size_t last = count - 1;
  size_t lo = 0, probe;
  probe = std::min<size_t>(4, last);
  lo = leaf[probe] <= a ? probe : lo;
  probe = std::min(lo + 2, last);
  lo = leaf[probe] <= a ? probe : lo;
  probe = std::min(lo + 1, last);
  lo = leaf[probe] <= a ? probe : lo;
  PartitionId city;
  std::memcpy(&city, reinterpret_cast<const char*>(leaf + count) + lo * sizeof(PartitionId), sizeof(city));
  return city;
}

// The bucket of `node` holding address hi:lo. A node's index bits never
// straddle the two 64-bit halves (see BuildV6Node), which saves a 128-bit
// shift per level.
template <class Node>
inline uint32_t BucketOf(const Node& node, uint64_t hi, uint64_t lo) {
  return node.first + static_cast<uint32_t>(((node.low ? lo : hi) >> node.shift) & ((1u << node.bits) - 1));
}

PartitionId CityMap::LookupV6(const uint8_t* addr) const {
  const u128 a = Load128(addr);
  const uint64_t hi = static_cast<uint64_t>(a >> 64), lo = static_cast<uint64_t>(a);
  const V6Node* node = v6_nodes_;
  for (;;) {
    if (((a ^ node->base) & node->mask) != 0) [[unlikely]] {
      return a < node->base ? node->below : node->above;
    }
    const V6Bucket b = v6_buckets_[BucketOf(*node, hi, lo)];
    if (b.count != 0) return SearchLeaf(v6_leaves_ + b.value, b.count, a);
    node = &v6_nodes_[b.value];
  }
}

void CityMap::LookupBurst(const common::IpAddress* addrs, PartitionId* out, size_t n) const {
  // Stages over a chunk, each issuing the next cache misses of all its
  // lookups before any is waited for: IPv4 level 1; IPv6 one trie level per
  // round, then the leaf.
  constexpr size_t kChunk = 32;
  const V6Bucket* buckets = v6_buckets_;
  const u128* leaves = v6_leaves_;
  uint32_t v4[kChunk];     // IPv4 addresses
  u128 key[kChunk];        // IPv6 addresses
  uint32_t at[kChunk];     // IPv6: next bucket, then the leaf
  uint32_t count[kChunk];  // IPv6: the leaf's range count
  uint8_t walk[kChunk], leaf[kChunk], four[kChunk];
  for (size_t done = 0; done < n; done += kChunk) {
    const size_t m = std::min(kChunk, n - done);
    const common::IpAddress* in = addrs + done;
    PartitionId* res = out + done;
    size_t n_walk = 0, n_leaf = 0, n_four = 0;
    // Queues lookup i for a bucket of `node`, or answers it when its address
    // is outside the node's (path-compressed) region.
    auto enter = [&](const V6Node& node, size_t i) {
      const u128 a = key[i];
      if (((a ^ node.base) & node.mask) != 0) [[unlikely]] {
        res[i] = a < node.base ? node.below : node.above;
        return;
      }
      at[i] = BucketOf(node, static_cast<uint64_t>(a >> 64), static_cast<uint64_t>(a));
      __builtin_prefetch(&buckets[at[i]]);
      walk[n_walk++] = static_cast<uint8_t>(i);
    };
    for (size_t i = 0; i < m; ++i) {
      const common::IpAddress& a = in[i];
      uint64_t top;  // IsV4Mapped without its memcmp call, which doubled the cost of this loop
      uint32_t mid;
      std::memcpy(&top, a.bytes.data(), 8);
      std::memcpy(&mid, a.bytes.data() + 8, 4);
      if (a.family == 6 && (top != 0 || mid != kV4MappedMid)) {
        key[i] = Load128(a.bytes.data());
        enter(v6_nodes_[0], i);
      } else if (a.family == 4 || a.family == 6) {
        v4[i] = a.family == 4 ? a.v4() : dns::Load32(a.bytes.data() + 12);
        __builtin_prefetch(&v4_blocks_[v4[i] >> 16]);
        four[n_four++] = static_cast<uint8_t>(i);
      } else {
        res[i] = default_city_;
      }
    }
    for (size_t j = 0; j < n_four; ++j) res[four[j]] = LookupV4(v4[four[j]]);
    while (n_walk > 0) {
      const size_t n_round = n_walk;
      n_walk = 0;
      for (size_t j = 0; j < n_round; ++j) {
        const size_t i = walk[j];
        const V6Bucket b = buckets[at[i]];
        if (b.count == 0) {
          enter(v6_nodes_[b.value], i);  // writes walk[] at or behind j
          continue;
        }
        at[i] = b.value;
        count[i] = b.count;
        __builtin_prefetch(&leaves[b.value]);
        __builtin_prefetch(reinterpret_cast<const char*>(&leaves[b.value + b.count]) + 15);
        leaf[n_leaf++] = static_cast<uint8_t>(i);
      }
    }
    for (size_t j = 0; j < n_leaf; ++j) {
      const size_t i = leaf[j];
      res[i] = SearchLeaf(leaves + at[i], count[i], key[i]);
    }
  }
}

// Appends the leaf for ranges r0..r1 (a single range's leaf is shared by
// every bucket of its city) and returns its index in v6_leaves (Build
// rejects a table whose leaves outgrow 32-bit indexes).
uint32_t CityMap::AddV6Leaf(Tables& t, size_t r0, size_t r1) {
  const size_t count = r1 - r0 + 1;
  if (count == 1) {
    uint32_t& shared = t.city_leaf[t.range_city[r0]];
    if (shared != 0) return shared;
  }
  const size_t units = count + (count * sizeof(PartitionId) + sizeof(u128) - 1) / sizeof(u128);
  size_t at = t.v6_leaves.size();
  // A leaf that fits a cache line does not straddle two.
  if (units <= 4 && at % 4 + units > 4) at = (at + 3) & ~size_t{3};
  t.v6_leaves.resize(at + units, 0);
  u128* leaf = &t.v6_leaves[at];
  for (size_t i = 1; i < count; ++i) leaf[i] = t.starts[r0 + i];  // leaf[0] = 0 <= any address
  std::memcpy(leaf + count, &t.range_city[r0], count * sizeof(PartitionId));
  if (count == 1) t.city_leaf[t.range_city[r0]] = static_cast<uint32_t>(at);
  return static_cast<uint32_t>(at);
}

// Ranges r0..r1 meet the region being indexed, and r0 + 1..r1 start inside
// it (after its first address). Each node's first index bit is the first
// bit where its lowest and highest boundaries differ, so every child holds
// fewer boundaries than its parent and the depth is at most 128.
uint32_t CityMap::BuildV6Node(Tables& t, size_t r0, size_t r1) {
  constexpr unsigned kMaxBits = 16;
  const u128 lo = r1 > r0 ? t.starts[r0 + 1] : 0, hi = t.starts[r1];
  const unsigned common = r1 > r0 ? Clz128(lo ^ hi) : 0;
  const size_t boundaries = r1 - r0;
  unsigned bits = std::min(
      {kMaxBits, 128 - common, boundaries <= 1 ? 0u : static_cast<unsigned>(std::bit_width(boundaries - 1))});
  if (common < 64 && common + bits > 64) bits = 64 - common;  // stay within one half (see BucketOf)
  const uint32_t id = static_cast<uint32_t>(t.v6_nodes.size());
  const size_t first = t.v6_buckets.size();
  const size_t count = size_t{1} << bits;
  const unsigned shift = bits == 0 ? 0 : 128 - common - bits;
  V6Node node;
  node.mask = MaskTop(common);
  node.base = lo & node.mask;
  node.first = static_cast<uint32_t>(first);
  node.below = t.range_city[r0];
  node.above = t.range_city[r1];
  node.shift = static_cast<uint8_t>(shift % 64);
  node.bits = static_cast<uint8_t>(bits);
  node.low = shift < 64;
  t.v6_nodes.push_back(node);
  t.v6_buckets.resize(first + count);
  size_t r = r0;
  for (size_t b = 0; b < count; ++b) {
    const u128 start = node.base | (u128{b} << shift);
    const u128 end = start | (shift == 0 ? u128{0} : ~u128{0} >> (128 - shift));
    while (r < r1 && t.starts[r + 1] <= start) ++r;
    size_t last = r;
    while (last < r1 && t.starts[last + 1] <= end) ++last;
    V6Bucket bucket;
    if (last - r + 1 <= kLeafRanges) {
      bucket = {AddV6Leaf(t, r, last), static_cast<uint32_t>(last - r + 1)};
    } else {
      bucket = {BuildV6Node(t, r, last), 0};
    }
    t.v6_buckets[first + b] = bucket;  // after the recursion: it may have reallocated
    r = last;
  }
  return id;
}

absl::StatusOr<std::unique_ptr<const CityMap>> CityMap::Build(std::vector<City> cities,
                                                              std::vector<CityPrefix> prefixes,
                                                              PartitionId default_city) {
  if (cities.empty() || cities.size() > kMaxCities) {
    return absl::InvalidArgumentError(common::Cat("city count ", cities.size(), " outside 1..", kMaxCities));
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
      return absl::InvalidArgumentError(common::Cat(
          "duplicate prefix ", common::IpToString(sorted[i].cidr.address), "/", sorted[i].cidr.prefix));
    }
  }

  Tables t;
  // ---- IPv4: DIR-24-8 into a temporary flat level, then compressed.
  std::vector<uint16_t> tbl24(kTbl24Entries, default_city);
  for (const CityPrefix& p : sorted) {
    if (p.cidr.address.family != 4) continue;
    const uint32_t addr = p.cidr.address.v4();
    const unsigned len = p.cidr.prefix;
    if (len <= 24) {
      const size_t first = addr >> 8, count = size_t{1} << (24 - len);
      std::fill_n(tbl24.begin() + first, count, p.city);
      continue;
    }
    uint16_t& e = tbl24[addr >> 8];
    if (!(e & kIndirect)) {
      const size_t group = t.tbl8.size() / 256;
      if (group >= kMaxTbl8Groups) {
        return absl::InvalidArgumentError(
            common::Cat("too many /24 blocks split by longer prefixes (max ", kMaxTbl8Groups, ")"));
      }
      t.tbl8.resize(t.tbl8.size() + 256, e);
      e = static_cast<uint16_t>(kIndirect | group);
    }
    const size_t base = (size_t{e & 0x7fffu} << 8) | (addr & 0xff);
    std::fill_n(t.tbl8.begin() + base, size_t{1} << (32 - len), p.city);
  }
  constexpr size_t kBlocks = size_t{1} << 16;
  t.v4_blocks.resize(kBlocks);
  for (size_t blk = 0; blk < kBlocks; ++blk) {
    const uint16_t* e = &tbl24[blk << 8];
    V4Block b{};
    unsigned runs = 0;
    for (unsigned i = 0; i < 256; ++i) {
      if (i != 0 && e[i] == e[i - 1]) continue;
      if (runs == 8) {
        b = V4Block{};
        b.dense = static_cast<uint32_t>(t.dense.size() / 256 + 1);
        t.dense.insert(t.dense.end(), e, e + 256);
        break;
      }
      b.starts[runs] = static_cast<uint8_t>(i);
      b.values[runs] = e[i];
      ++runs;
    }
    for (unsigned i = std::max(runs, 1u); i < 8 && b.dense == 0; ++i) {
      b.starts[i] = b.starts[i - 1];
      b.values[i] = b.values[i - 1];
    }
    t.v4_blocks[blk] = b;
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
    if (!t.starts.empty() && t.starts.back() == s) {
      t.starts.pop_back();
      t.range_city.pop_back();
    }
    if (!t.range_city.empty() && t.range_city.back() == c) return;
    t.starts.push_back(s);
    t.range_city.push_back(c);
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

  t.city_leaf.assign(m->cities_.size(), 0);
  BuildV6Node(t, 0, t.starts.size() - 1);
  if (t.v6_leaves.size() > UINT32_MAX || t.v6_buckets.size() > UINT32_MAX) {
    return absl::InvalidArgumentError("too many IPv6 prefixes");
  }
  if (!m->Freeze(t)) return absl::ResourceExhaustedError("cannot allocate the city map's tables");
  m->prefixes_ = std::move(prefixes);
  return std::unique_ptr<const CityMap>(std::move(m));
}

absl::StatusOr<std::unique_ptr<const CityMap>> CityMap::FromCsv(std::string_view csv,
                                                                const CityMapOptions& options) {
  common::LineErrors errors;
  return FromCsv(csv, options, &errors);
}

absl::StatusOr<std::unique_ptr<const CityMap>> CityMap::FromCsv(std::string_view csv,
                                                                const CityMapOptions& options,
                                                                common::LineErrors* errors) {
  using internal::Trim;
  if (!internal::ValidName(options.default_city)) {
    errors->Add(0, common::Cat("bad default city name '", options.default_city, "'"));
  }
  std::vector<City> cities;
  // The line that gave each city its IPv4 and IPv6 ECS source.
  std::vector<std::array<int, 2>> ecs_lines;
  absl::flat_hash_map<std::string, PartitionId> city_ids;
  absl::flat_hash_map<std::string, int> seen_prefix;  // "addr/len" -> line
  std::vector<CityPrefix> prefixes;

  // A bad line is recorded and skipped: the lines after it are still read,
  // so that every error of the file is reported at once.
  internal::ForEachLine(csv, [&](int line_no, std::string_view line) {
    auto fail = [&](std::string_view why) {
      errors->Add(line_no, std::string(why));
      return true;
    };
    std::vector<std::string_view> f = common::Split(line, ',');
    if (f.size() != 3)
      return fail(common::Cat("expected 3 fields 'cidr,city,ecs_address/prefix', got ", f.size()));
    common::Cidr cidr;
    if (absl::Status s = common::ParseCidr(Trim(f[0]), &cidr); !s.ok()) return fail(std::string(s.message()));
    std::string_view name = Trim(f[1]);
    if (!internal::ValidName(name)) return fail(common::Cat("bad city name '", name, "'"));

    auto [it, inserted] = city_ids.try_emplace(std::string(name), static_cast<PartitionId>(cities.size()));
    if (inserted) {
      if (cities.size() >= kMaxCities) {
        city_ids.erase(it);
        return fail(common::Cat("more than ", kMaxCities, " cities"));
      }
      cities.push_back(City{std::string(name), {}, {}});
      ecs_lines.push_back({0, 0});
    }
    const PartitionId id = it->second;

    std::string_view ecs_text = Trim(f[2]);
    if (!ecs_text.empty()) {
      std::string_view addr_text = ecs_text, len_text;
      if (size_t slash = ecs_text.find('/'); slash != std::string_view::npos) {
        addr_text = ecs_text.substr(0, slash);
        len_text = ecs_text.substr(slash + 1);
      }
      common::IpAddress ecs_addr;
      if (!common::ParseIp(addr_text, &ecs_addr))
        return fail(common::Cat("bad ECS address '", addr_text, "'"));
      unsigned len = ecs_addr.family == 4 ? 24 : 56;
      const unsigned max = ecs_addr.family == 4 ? 32 : 128;
      if (!len_text.empty() || ecs_text.find('/') != std::string_view::npos) {
        auto [ptr, ec] = std::from_chars(len_text.data(), len_text.data() + len_text.size(), len);
        if (len_text.empty() || ec != std::errc() || ptr != len_text.data() + len_text.size() || len > max) {
          return fail(common::Cat("bad ECS prefix length '", len_text, "'"));
        }
      }
      dns::ClientSubnet s;
      s.family = ecs_addr.family == 4 ? dns::kEcsFamilyIpv4 : dns::kEcsFamilyIpv6;
      s.source_prefix = static_cast<uint8_t>(len);
      for (unsigned bit = 0; bit < len; ++bit) {  // copy the prefix bits only
        s.address[bit / 8] |= ecs_addr.bytes[bit / 8] & (0x80u >> (bit % 8));
      }
      dns::ClientSubnet& slot = ecs_addr.family == 4 ? cities[id].ecs_v4 : cities[id].ecs_v6;
      int& first_line = ecs_lines[id][ecs_addr.family == 4 ? 0 : 1];
      if (slot.family != 0 && !(slot == s)) {
        return fail(common::Cat("city '", name, "' already has a different IPv", ecs_addr.family,
                                " ECS source (first on line ", first_line, ")"));
      }
      if (slot.family == 0) first_line = line_no;
      slot = s;
    }

    std::string key = common::Cat(common::IpToString(cidr.address), "/", cidr.prefix);
    auto [pit, fresh] = seen_prefix.try_emplace(key, line_no);
    if (!fresh) return fail(common::Cat("duplicate prefix ", key, " (first on line ", pit->second, ")"));
    prefixes.push_back({cidr, id});
    return true;
  });

  PartitionId default_id = 0;
  if (auto it = city_ids.find(options.default_city); it != city_ids.end()) {
    default_id = it->second;
  } else if (cities.size() >= kMaxCities) {
    errors->Add(0, "no room for the default city");
  } else {
    default_id = static_cast<PartitionId>(cities.size());
    cities.push_back(City{options.default_city, {}, {}});
  }
  if (!errors->empty()) return errors->First();
  auto built = Build(std::move(cities), std::move(prefixes), default_id);
  if (!built.ok()) errors->Add(0, std::string(common::ToStd(built.status().message())));
  return built;
}

}  // namespace weir::partitions
