// CityMap: client address -> city partition, longest prefix match
// (docs/behaviour.md#partitions-and-ecs), built from the operator's CSV.
//
// CSV format (docs in partitions/README.md): one mapping per line,
//   cidr,city,ecs_address[/prefix]
// '#' starts a comment, blank lines are ignored, fields are trimmed. The ECS
// field gives the city's ECS source for that address family (default /24 for
// IPv4, /56 for IPv6); it may be left empty on further lines of the same city.
// A bad line rejects the whole file with "line N: reason".
//
// Structures: IPv4 is DIR-24-8 with the 2^24-entry level compressed into
// runs per /16 (one cache line read for prefixes up to /24, a second one
// beyond). IPv6 is a table of disjoint address ranges under a path-
// compressed multibit trie: each node indexes up to 16 bits from where its
// ranges' boundaries first differ, and a bucket's few ranges are searched
// without branches. All tables sit in one allocation on 2 MB pages (about
// 8 MB for 50k + 50k prefixes, where the flat DIR-24 level alone was 32 MB).
//
// Threading: a CityMap is immutable once built; any number of threads may
// look up concurrently. Readers reach the current one through CityMapHolder
// (an common::RcuSnapshot, see rcu.h): a new map is swapped in atomically and is
// seen by each reader from its next Get().
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "absl/status/statusor.h"
#include "weir/common/line_errors.h"
#include "weir/common/rcu.h"
#include "weir/dns/message.h"
#include "weir/partitions/partition.h"

namespace weir::partitions {

struct City {
  std::string name;
  // ECS sources sent upstream for this city's queries; family 0 when the
  // CSV gave none for that family.
  dns::ClientSubnet ecs_v4;
  dns::ClientSubnet ecs_v6;
  // The source for a client of the given family; falls back to the other
  // family's when only one is configured (family 0 when neither is).
  const dns::ClientSubnet& EcsFor(uint8_t client_family) const {
    if (client_family == 4) return ecs_v4.family != 0 ? ecs_v4 : ecs_v6;
    return ecs_v6.family != 0 ? ecs_v6 : ecs_v4;
  }
};

struct CityMapOptions {
  // Clients no prefix covers go to this city. If the CSV never names it, it
  // is added (last id) without ECS sources.
  std::string default_city = "default";
};

struct CityPrefix {
  common::Cidr cidr;
  PartitionId city;
};

class CityMap {
 public:
  // Parses the CSV and builds the map. Nothing is returned on any error;
  // the status names the first bad line ("line N: reason").
  static absl::StatusOr<std::unique_ptr<const CityMap>> FromCsv(std::string_view csv,
                                                                const CityMapOptions& options = {});
  // The same, with every error of the CSV added to `errors` (each bad line
  // is reported and skipped, the rest still read).
  static absl::StatusOr<std::unique_ptr<const CityMap>> FromCsv(std::string_view csv,
                                                                const CityMapOptions& options,
                                                                common::LineErrors* errors);
  // Builds from already-validated parts (tests, mgmt snapshots). Fails on
  // duplicate prefixes, bad city ids or an out-of-range default.
  static absl::StatusOr<std::unique_ptr<const CityMap>> Build(std::vector<City> cities,
                                                              std::vector<CityPrefix> prefixes,
                                                              PartitionId default_city);
  ~CityMap();
  CityMap(const CityMap&) = delete;
  CityMap& operator=(const CityMap&) = delete;

  // Host-order IPv4 address.
  PartitionId LookupV4(uint32_t addr) const {
    const V4Block& b = v4_blocks_[addr >> 16];
    const uint8_t octet = static_cast<uint8_t>(addr >> 8);
    uint16_t e = b.values[RunOf(b.starts, octet)];
    if (b.dense != 0) [[unlikely]]
      e = dense_[(size_t{b.dense - 1} << 8) | octet];
    if (e & kIndirect) [[unlikely]]
      e = tbl8_[(size_t{e & 0x7fffu} << 8) | (addr & 0xffu)];
    return e;
  }
  // Looks up a burst (e.g. the sources of a recvmmsg batch): all first-level
  // loads are issued before any answer is needed, so their cache misses
  // overlap. Same answers as LookupV4.
  void LookupV4Burst(const uint32_t* addrs, PartitionId* out, size_t n) const;
  // 16 bytes, network order.
  PartitionId LookupV6(const uint8_t* addr) const;
  // Either family; v4-mapped IPv6 addresses use the IPv4 table.
  PartitionId Lookup(const common::IpAddress& a) const {
    if (a.family == 4) return LookupV4(a.v4());
    if (a.IsV4Mapped()) return LookupV4(dns::Load32(a.bytes.data() + 12));
    if (a.family == 6) return LookupV6(a.bytes.data());
    return default_city_;
  }

  // Lookup for a burst of either family (e.g. the sources of a recvmmsg
  // batch), staged so that the cache misses of all its lookups overlap.
  // Same answers as Lookup; out[i] is for addrs[i].
  void LookupBurst(const common::IpAddress* addrs, PartitionId* out, size_t n) const;

  const City& city(PartitionId id) const { return cities_[id]; }
  size_t city_count() const { return cities_.size(); }
  PartitionId default_city() const { return default_city_; }
  std::optional<PartitionId> FindCity(std::string_view name) const;
  const std::vector<CityPrefix>& prefixes() const { return prefixes_; }
  // Bytes held by the lookup tables.
  size_t memory_bytes() const;

 private:
  CityMap() = default;
  static constexpr uint16_t kIndirect = 0x8000;

  std::vector<City> cities_;
  std::vector<CityPrefix> prefixes_;  // as given, for listing
  PartitionId default_city_ = 0;

  // IPv4: one 32-byte block per /16 (2 MB in all, so it stays in cache
  // where a flat 32 MB DIR-24 level went to DRAM). A block
  // holds up to 8 runs of equal /24 entries; an entry is a city, or
  // kIndirect | group for a /24 split by longer prefixes, whose 256 entries
  // are in tbl8_. A /16 with more runs keeps all 256 entries in dense_.
  struct V4Block {
    uint8_t starts[8];  // third octet where each run begins; [0] = 0, unused repeat the last
    uint16_t values[8];
    uint32_t dense;  // 0, or 1 + its group of 256 in dense_
    uint32_t unused;
  };
  static_assert(sizeof(V4Block) == 32);
  // The run holding `octet`: starts are ascending, so those <= octet form
  // the low bits of a mask, found with one SIMD compare.
  static unsigned RunOf(const uint8_t* starts, uint8_t octet) {
#if defined(__SSE2__)
    uint64_t s;
    std::memcpy(&s, starts, 8);
    const __m128i v = _mm_cvtsi64_si128(static_cast<long long>(s));
    const __m128i x = _mm_set1_epi8(static_cast<char>(octet));
    const unsigned le = static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_max_epu8(v, x), x)));
    return 31u - static_cast<unsigned>(__builtin_clz(le & 0xffu));  // le & 1: starts[0] == 0
#else
    unsigned run = 0;
    for (unsigned i = 1; i < 8; ++i) run += starts[i] <= octet;
    return run;
#endif
  }
  const V4Block* v4_blocks_ = nullptr;  // 2^16
  const uint16_t* dense_ = nullptr;
  const uint16_t* tbl8_ = nullptr;  // groups of 256

  // IPv6: the address space is cut into disjoint ranges, each mapped to a
  // city, indexed by a trie of nodes. A node covers the addresses matching
  // `base` under `mask` (the bits its ranges' boundaries share, path-
  // compressed from its parent's bucket); the rest of its parent's bucket
  // lies in one range, `below` or `above` it. Inside, bucket i of 2^bits
  // covers the addresses whose `bits` bits at `shift` equal i.
  struct V6Node {
    unsigned __int128 base;
    unsigned __int128 mask;
    uint32_t first;  // its buckets: v6_buckets_[first .. first + 2^bits)
    PartitionId below, above;
    uint8_t shift, bits;  // shift within the half
    bool low;             // the index bits are in the low 64 (else the high 64)
  };
  // count 0: `value` is a child node. Else the bucket meets `count` ranges
  // and its leaf is at v6_leaves_[value]: `count` range starts (the first
  // written as 0), then `count` cities, all in one cache line when they fit.
  struct V6Bucket {
    uint32_t value;
    uint32_t count;
  };
  const V6Node* v6_nodes_ = nullptr;  // [0] is the root
  const V6Bucket* v6_buckets_ = nullptr;
  const unsigned __int128* v6_leaves_ = nullptr;

  // All tables above live in one allocation on 2 MB pages (see Freeze).
  void* arena_ = nullptr;
  size_t arena_bytes_ = 0;
  struct Tables;  // the same as growable vectors, while building
  static uint32_t BuildV6Node(Tables& t, size_t r0, size_t r1);
  static uint32_t AddV6Leaf(Tables& t, size_t r0, size_t r1);
  bool Freeze(const Tables& t);

  friend class CityMapBuilder;
};

using CityMapHolder = common::RcuSnapshot<CityMap>;

}  // namespace weir::partitions
