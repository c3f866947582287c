// The learned segments against the city map (weirctl segments diff): which
// cities the GSLB treats as several segments, which cities it treats as one,
// and a city map that follows the GSLB (docs/operator-guide.md#cache-control).
//
// Every IPv4 /24 of the city map's prefixes gets a signature: for each name
// studied, the answer of the segment that holds it (its last learned one,
// past its TTL or not). /24s with one signature are answered alike by the
// GSLB for every name studied: a cell. A city with several cells is split
// by the GSLB; cities whose /24s form one cell with the same signature are
// treated as one. The proposal is a city map of the cells: each cell's /24s
// as the fewest prefixes, named after their city (city.2, city.3, ... when
// it is split; "a_b" when cities are one), with the cell's first /24 as its
// ECS source, so that one question per cell asks the GSLB for an address it
// answers the cell with. /24s no segment covers stay with their city's
// largest cell. The map's IPv6 lines and IPv4 lines longer than /24 are
// carried into the proposal unchanged (the comparison is per IPv4 /24).
//
// Control plane only: it allocates, and costs one longest-prefix match per
// (/24, name).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "weir/dns/message.h"
#include "weir/partitions/citymap.h"
#include "weir/partitions/segments.h"

namespace weir::partitions {

struct SegmentDiff {
  struct City {
    PartitionId city = 0;
    uint64_t slash24s = 0;  // /24s of the city map that are the city's
    uint64_t learned = 0;   // of those, covered by some segment learned
    uint64_t cells = 0;     // groups of them the GSLB answers alike (learned ones)
  };
  struct Line {
    std::string cidr;  // "10.1.0.0/20"
    std::string city;  // the proposed city's name
    std::string ecs;   // "10.1.0.0/24"
  };
  uint64_t names = 0;  // names studied
  std::vector<City> cities;
  // Cities the GSLB answers as one (two or more each).
  std::vector<std::vector<PartitionId>> alike;
  std::vector<Line> proposal;
};

struct SegmentDiffOptions {
  // The names to study (canonical keys; all types learned for them); empty:
  // the `max_names` names with the most segments.
  std::vector<dns::NameKey> names;
  size_t max_names = 100;
  // The most /24s the city map may hold for a diff (a /8 is 65,536).
  size_t max_slash24s = size_t{1} << 20;
};

// Fails when the city map's IPv4 prefixes hold more than max_slash24s /24s.
absl::StatusOr<SegmentDiff> DiffSegments(const SegmentTable& table, const CityMap& citymap,
                                         const SegmentDiffOptions& options);

}  // namespace weir::partitions
