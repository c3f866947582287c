// The subscribers of --subscriber-ecs: every /24 of a city map's IPv4
// prefixes, drawn uniformly (so a prefix is drawn in proportion to its
// size), as the ECS a trusted forwarder would attach for its subscriber.
//
// Threading: immutable after Build; each sender thread draws with its own
// generator.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "weir/dns/message.h"

namespace weir::bench {

class SubscriberSubnets {
 public:
  // From the text of a city-map CSV (`file_name` names it in errors). Fails
  // when the map is invalid or has no IPv4 prefix.
  static absl::StatusOr<SubscriberSubnets> FromCityMap(std::string_view csv, std::string_view file_name);
  // The same, read from a file.
  static absl::StatusOr<SubscriberSubnets> Load(const std::string& path);

  // How many /24s there are to draw from (a prefix longer than /24 is its
  // one /24).
  uint64_t size() const { return cumulative_.empty() ? 0 : cumulative_.back(); }
  // One /24, host order, the low 8 bits zero: a binary search over the
  // prefixes, nothing allocated.
  uint32_t Draw(std::mt19937_64& rng) const;
  // The first /24 of the map's first IPv4 prefix.
  uint32_t first() const { return starts_.front(); }

 private:
  std::vector<uint32_t> starts_;      // each prefix's first /24, host order
  std::vector<uint64_t> cumulative_;  // /24s in prefixes [0, i] (ascending)
};

// The ECS option of subscriber `subnet` (a /24, host order): source /24,
// scope 0.
dns::ClientSubnet SubscriberEcs(uint32_t subnet);

}  // namespace weir::bench
