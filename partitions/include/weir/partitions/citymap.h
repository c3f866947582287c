// CityMap: client address -> city partition, longest prefix match
// (DESIGN section 4), built from the operator's CSV.
//
// CSV format (docs in partitions/README.md): one mapping per line,
//   cidr,city,ecs_address[/prefix]
// '#' starts a comment, blank lines are ignored, fields are trimmed. The ECS
// field gives the city's ECS source for that address family (default /24 for
// IPv4, /56 for IPv6); it may be left empty on further lines of the same city.
// A bad line rejects the whole file with "line N: reason".
//
// Structures: IPv4 is a DIR-24-8 table (one 16-bit load for prefixes up to
// /24, two beyond); IPv6 is a sorted table of disjoint address ranges with a
// 2^16-bucket direct index over the bits that follow the table's common
// prefix, then a branch-free binary search inside the bucket.
//
// Threading: a CityMap is immutable once built; any number of threads may
// look up concurrently. Readers reach the current one through CityMapHolder
// (an RcuSnapshot, see rcu.h): a new map is swapped in atomically and is
// seen by each reader from its next Get().
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "weir/dns/message.h"
#include "weir/partitions/partition.h"
#include "weir/partitions/rcu.h"

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
  Cidr cidr;
  PartitionId city;
};

class CityMap {
 public:
  // Parses the CSV and builds the map. Nothing is returned on any error.
  static absl::StatusOr<std::unique_ptr<const CityMap>> FromCsv(std::string_view csv,
                                                                const CityMapOptions& options = {});
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
    uint16_t e = tbl24_[addr >> 8];
    if (e & kIndirect) e = tbl8_[(size_t{e & 0x7fffu} << 8) | (addr & 0xff)];
    return e;
  }
  // Looks up a burst (e.g. 32 packets' sources), prefetching first so the
  // table's cache misses overlap.
  void LookupV4Burst(const uint32_t* addrs, PartitionId* out, size_t n) const;
  // 16 bytes, network order.
  PartitionId LookupV6(const uint8_t* addr) const;
  // Either family; v4-mapped IPv6 addresses use the IPv4 table.
  PartitionId Lookup(const IpAddress& a) const {
    if (a.family == 4) return LookupV4(a.v4());
    if (a.IsV4Mapped()) return LookupV4(dns::Load32(a.bytes.data() + 12));
    if (a.family == 6) return LookupV6(a.bytes.data());
    return default_city_;
  }

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

  // IPv4 DIR-24-8: tbl24_ has 2^24 entries (mmap'ed, huge pages advised).
  uint16_t* tbl24_ = nullptr;
  std::vector<uint16_t> tbl8_;  // groups of 256

  // IPv6 ranges: range i covers [starts_[i], starts_[i+1]) and maps to
  // range_city_[i]. starts_[0] == 0.
  std::vector<unsigned __int128> starts_;
  std::vector<PartitionId> range_city_;
  // Index over the ranges, a trie of direct tables: the root has 2^16
  // buckets over the bits that follow the top `common_bits_` bits shared by
  // all prefixes (`common_base_`); a bucket whose ranges are too many for a
  // short search points to a child of 2^8 buckets over the next bits. A
  // leaf bucket b holds the answer within ranges [lo(b), lo(b + 1)].
  struct V6Node {
    uint32_t first;  // its buckets: v6_buckets_[first .. first + 2^bits]
    uint8_t shift;
    uint8_t bits;
  };
  struct V6Bucket {
    uint32_t lo;     // last range starting at or before the bucket's start
    uint32_t child;  // 0 = leaf, else node index + 1
  };
  uint32_t BuildV6Node(unsigned __int128 base, unsigned shift, unsigned bits, size_t hint);
  bool has_index_ = false;
  unsigned common_bits_ = 0;
  unsigned __int128 common_base_ = 0;
  unsigned __int128 common_mask_ = 0;
  std::vector<V6Node> v6_nodes_;
  std::vector<V6Bucket> v6_buckets_;

  friend class CityMapBuilder;
};

using CityMapHolder = RcuSnapshot<CityMap>;

}  // namespace weir::partitions
