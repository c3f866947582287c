// Partitions: which copy of a cached answer a client gets (docs/behaviour.md#partitions-and-ecs).
//
// A partition is a 64-bit value computed by PartitionKey(), the one place that
// knows how cache levels map to partitions:
//   level global            -> kCommonPartition (untagged and weight-only names)
//   level city              -> the client's city (CityMap lookup)
//   level subnet            -> the client's own /24 (IPv4) or /56 (IPv6)
// The top two bits keep the three spaces (and the two families of subnets)
// disjoint, so a city-level key can never equal a subnet-level key.
//
// Everything here is header-only, allocation-free and thread-compatible.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"

namespace weir::partitions {

// A city's index in the CityMap's city table.
using PartitionId = uint16_t;
// City ids fit in 15 bits (the v4 table uses the top bit).
inline constexpr size_t kMaxCities = 0x7fff;

// An IPv4 or IPv6 address in network byte order. IPv4 uses bytes[0..3].
struct IpAddress {
  uint8_t family = 0;  // 4 or 6; 0 = unset
  std::array<uint8_t, 16> bytes{};

  static IpAddress V4(uint32_t host_order) {
    IpAddress a;
    a.family = 4;
    dns::Store32(a.bytes.data(), host_order);
    return a;
  }
  static IpAddress V6(const uint8_t* network_order16) {
    IpAddress a;
    a.family = 6;
    std::memcpy(a.bytes.data(), network_order16, 16);
    return a;
  }
  uint32_t v4() const { return dns::Load32(bytes.data()); }
  // ::ffff:a.b.c.d, as dual-stack sockets report IPv4 clients.
  bool IsV4Mapped() const {
    static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return family == 6 && std::memcmp(bytes.data(), kPrefix, 12) == 0;
  }
  friend bool operator==(const IpAddress&, const IpAddress&) = default;
};

// "192.0.2.1" or "2001:db8::1". Returns false for anything else.
bool ParseIp(std::string_view text, IpAddress* out);
std::string IpToString(const IpAddress& a);

struct Cidr {
  IpAddress address;  // host bits are zero
  uint8_t prefix = 0;

  // "10.0.0.0/8", "2001:db8::/32". Host bits beyond the prefix are an error
  // (the operator probably meant a different network).
  static absl::StatusOr<Cidr> Parse(std::string_view text);

  // Whether `a` lies in this network. Another family never does: turn an
  // IPv4-mapped IPv6 client into IPv4 first. Inline: ACLs run it per packet.
  bool Contains(const IpAddress& a) const {
    if (address.family != a.family) return false;
    const unsigned bits = std::min<unsigned>(prefix, a.family == 4 ? 32 : 128);
    const unsigned full = bits / 8;
    if (std::memcmp(a.bytes.data(), address.bytes.data(), full) != 0) return false;
    const unsigned rem = bits % 8;
    if (rem == 0) return true;
    const uint8_t mask = static_cast<uint8_t>(0xff00u >> rem);
    return ((a.bytes[full] ^ address.bytes[full]) & mask) == 0;
  }
};
// Cidr::Parse, writing into `out`.
absl::Status ParseCidr(std::string_view text, Cidr* out);

// Cache granularity of a tagged name (docs/behaviour.md#domain-tags).
enum class CacheLevel : uint8_t { kGlobal = 0, kCity = 1, kSubnet = 2 };

using Partition = uint64_t;
inline constexpr Partition kCommonPartition = 0;

// The partition a client's query is cached in. `city` is the CityMap result
// for the client (or for the ECS address a trusted forwarder sent), `client`
// that same address. Branch-light, inline: it runs per packet.
inline Partition PartitionKey(CacheLevel level, PartitionId city, const IpAddress& client) {
  switch (level) {
    case CacheLevel::kGlobal:
      return kCommonPartition;
    case CacheLevel::kCity:
      return (uint64_t{1} << 62) | city;
    case CacheLevel::kSubnet:
      if (client.family == 4 || client.IsV4Mapped()) {
        const uint8_t* p = client.family == 4 ? client.bytes.data() : client.bytes.data() + 12;
        return (uint64_t{2} << 62) | (dns::Load32(p) >> 8);
      } else {
        uint64_t hi = 0;
        for (int i = 0; i < 7; ++i) hi = (hi << 8) | client.bytes[i];  // the /56
        return (uint64_t{3} << 62) | hi;
      }
  }
  return kCommonPartition;
}

// What PartitionKey encoded: the level, the city of a city partition, the
// prefix bits of a subnet partition.
inline CacheLevel LevelOf(Partition p) {
  return p == kCommonPartition ? CacheLevel::kGlobal
         : (p >> 62) == 1      ? CacheLevel::kCity
                               : CacheLevel::kSubnet;
}
inline PartitionId CityOf(Partition p) { return static_cast<PartitionId>(p & 0x7fff); }
inline uint64_t SubnetBitsOf(Partition p) { return p & ((uint64_t{1} << 62) - 1); }

// The ECS source a subnet-level query sends upstream: the client's own /24
// or /56 (docs/behaviour.md#partitions-and-ecs).
inline dns::ClientSubnet SubnetEcs(const IpAddress& client) {
  dns::ClientSubnet s;
  if (client.family == 4 || client.IsV4Mapped()) {
    s.family = dns::kEcsFamilyIpv4;
    s.source_prefix = 24;
    std::memcpy(s.address.data(), client.bytes.data() + (client.family == 4 ? 0 : 12), 3);
  } else {
    s.family = dns::kEcsFamilyIpv6;
    s.source_prefix = 56;
    std::memcpy(s.address.data(), client.bytes.data(), 7);
  }
  return s;
}

}  // namespace weir::partitions
