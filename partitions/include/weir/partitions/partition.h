// Partitions: which copy of a cached answer a client gets (docs/behaviour.md#partitions-and-ecs).
//
// A partition is a 64-bit value computed by PartitionKey(), the one place that
// knows how cache levels map to partitions:
//   level global            -> kCommonPartition (untagged and weight-only names)
//   level city              -> the client's city (CityMap lookup)
//   level subnet            -> the client's own /24 (IPv4) or /56 (IPv6)
//   level adaptive          -> an answer of the name's learned segments
//                              (segments.h); PartitionKey gives the
//                              client's subnet partition, which a miss is
//                              asked and coalesced under
// The top three bits keep the spaces (and the two families of subnets)
// disjoint, so a city-level key can never equal a subnet-level key, nor a
// subnet key an adaptive one.
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
#include "weir/common/ip.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"

namespace weir::partitions {

// A city's index in the CityMap's city table.
using PartitionId = uint16_t;
// City ids fit in 15 bits (the v4 table uses the top bit).
inline constexpr size_t kMaxCities = 0x7fff;

// Cache granularity of a tagged name (docs/behaviour.md#domain-tags).
enum class CacheLevel : uint8_t { kGlobal = 0, kCity = 1, kSubnet = 2, kAdaptive = 3 };

using Partition = uint64_t;
inline constexpr Partition kCommonPartition = 0;

// The partition a client's query is cached in. `city` is the CityMap result
// for the client (or for the ECS address a trusted forwarder sent), `client`
// that same address. Branch-light, inline: it runs per packet.
inline Partition PartitionKey(CacheLevel level, PartitionId city, const common::IpAddress& client) {
  switch (level) {
    case CacheLevel::kGlobal:
      return kCommonPartition;
    case CacheLevel::kCity:
      return (uint64_t{1} << 62) | city;
    case CacheLevel::kSubnet:
    case CacheLevel::kAdaptive:
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
         : (p >> 61) == 5      ? CacheLevel::kAdaptive
                               : CacheLevel::kSubnet;
}

// The partition of an adaptive-level answer: its number (SegmentTable
// gives each distinct answer of a name one, never reused) in the space
// 0b101 (subnet partitions never set bit 61).
inline constexpr uint64_t kMaxAnswerId = (uint64_t{1} << 61) - 1;
inline constexpr Partition AnswerPartition(uint64_t answer_id) {
  return (uint64_t{5} << 61) | (answer_id & kMaxAnswerId);
}
inline constexpr uint64_t AnswerIdOf(Partition p) { return p & kMaxAnswerId; }
inline PartitionId CityOf(Partition p) { return static_cast<PartitionId>(p & 0x7fff); }
inline uint64_t SubnetBitsOf(Partition p) { return p & ((uint64_t{1} << 62) - 1); }

// The ECS source a subnet-level query sends upstream: the client's own /24
// or /56 (docs/behaviour.md#partitions-and-ecs).
inline dns::ClientSubnet SubnetEcs(const common::IpAddress& client) {
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

// The ECS source of a subnet partition (the inverse of SubnetEcs through
// PartitionKey): the /24 or /56 it names. Only for subnet-level partitions.
inline dns::ClientSubnet SubnetEcsOf(Partition p) {
  dns::ClientSubnet s;
  const uint64_t bits = SubnetBitsOf(p);
  if ((p >> 62) == 2) {
    s.family = dns::kEcsFamilyIpv4;
    s.source_prefix = 24;
    for (int i = 0; i < 3; ++i) s.address[i] = static_cast<uint8_t>(bits >> (8 * (2 - i)));
  } else {
    s.family = dns::kEcsFamilyIpv6;
    s.source_prefix = 56;
    for (int i = 0; i < 7; ++i) s.address[i] = static_cast<uint8_t>(bits >> (8 * (6 - i)));
  }
  return s;
}

}  // namespace weir::partitions
