// The weights a run is checked against when they are not learned from the
// answers: a CSV of name,city,address,weight (docs/bench.md), e.g. what the
// CDN configured in its GSLB.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "weir/dns/message.h"
#include "weir/partitions/partition.h"

namespace weir::bench {

struct WeightLine {
  dns::NameKey name;
  std::string city;
  common::IpAddress address;
  uint32_t weight = 0;
};

// One "name,city,address,weight" per line; '#' comments, blank lines and
// spaces around fields ignored. Weights are 1..1000000. A bad line, or an
// address given twice for one (name, city), rejects the file with
// "FILE:LINE: reason".
absl::StatusOr<std::vector<WeightLine>> ParseWeightsFile(std::string_view text, std::string_view file_name);

}  // namespace weir::bench
