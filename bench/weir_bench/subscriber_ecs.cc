#include "subscriber_ecs.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "weir/common/text.h"
#include "weir/partitions/citymap.h"

namespace weir::bench {

absl::StatusOr<SubscriberSubnets> SubscriberSubnets::FromCityMap(std::string_view csv,
                                                                 std::string_view file_name) {
  auto map = partitions::CityMap::FromCsv(csv);
  if (!map.ok()) return absl::InvalidArgumentError(common::Cat(file_name, ": ", map.status().message()));
  SubscriberSubnets out;
  uint64_t total = 0;
  for (const partitions::CityPrefix& p : (*map)->prefixes()) {
    if (p.cidr.address.family != 4) continue;
    const uint8_t* b = p.cidr.address.bytes.data();
    const uint32_t start = (uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8) & 0xffffff00u;
    total += p.cidr.prefix >= 24 ? 1 : uint64_t{1} << (24 - p.cidr.prefix);
    out.starts_.push_back(start);
    out.cumulative_.push_back(total);
  }
  if (total == 0) {
    return absl::InvalidArgumentError(
        common::Cat(file_name, ": no IPv4 prefix to draw --subscriber-ecs subnets from"));
  }
  return out;
}

absl::StatusOr<SubscriberSubnets> SubscriberSubnets::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(common::Cat("cannot read city map ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return FromCityMap(ss.str(), path);
}

uint32_t SubscriberSubnets::Draw(std::mt19937_64& rng) const {
  // The r-th /24 of all of them: the prefix holding it, then its offset
  // there. A modulo of a 64-bit draw by at most 2^24 is unbiased enough.
  const uint64_t r = rng() % cumulative_.back();
  const size_t i =
      static_cast<size_t>(std::upper_bound(cumulative_.begin(), cumulative_.end(), r) - cumulative_.begin());
  const uint64_t before = i == 0 ? 0 : cumulative_[i - 1];
  return starts_[i] + static_cast<uint32_t>((r - before) << 8);
}

dns::ClientSubnet SubscriberEcs(uint32_t subnet) {
  const uint8_t bytes[4] = {static_cast<uint8_t>(subnet >> 24), static_cast<uint8_t>(subnet >> 16),
                            static_cast<uint8_t>(subnet >> 8), static_cast<uint8_t>(subnet)};
  dns::ClientSubnet ecs;
  dns::MakeClientSubnet(bytes, 24, &ecs);
  return ecs;
}

}  // namespace weir::bench
