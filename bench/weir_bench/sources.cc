#include "sources.h"

#include <arpa/inet.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "weir/common/text.h"

namespace weir::bench {
namespace {

absl::StatusOr<Source> MakeSource(const common::IpAddress& ip, uint32_t city) {
  Source s;
  s.text = common::IpToString(ip);
  auto addr = common::SocketAddress::Parse(s.text, 0);
  if (!addr.ok()) return addr.status();
  s.address = *addr;
  s.city = city;
  dns::MakeClientSubnet({ip.bytes.data(), ip.family == 4 ? 4u : 16u}, ip.family == 4 ? 24 : 56, &s.ecs);
  return s;
}

// The i-th of n addresses spread over `cidr` (never its first address):
// host offsets 1, 1 + step, ... within the low 32 bits of the host part.
common::IpAddress Spread(const common::Cidr& cidr, uint32_t i, uint32_t n) {
  const unsigned width = cidr.address.family == 4 ? 32 : 128;
  const unsigned host_bits = std::min(width - cidr.prefix, 32u);
  const uint64_t hosts = uint64_t{1} << host_bits;
  const uint64_t step = std::max<uint64_t>(1, (hosts - 1) / std::max<uint32_t>(n, 1));
  const uint64_t offset = (1 + uint64_t{i} * step) % hosts;
  common::IpAddress ip = cidr.address;
  const size_t last = width / 8 - 1;
  uint64_t carry = offset;
  for (size_t b = 0; b < 4 && carry != 0; ++b) {
    const uint64_t v = ip.bytes[last - b] + (carry & 0xff);
    ip.bytes[last - b] = static_cast<uint8_t>(v);
    carry = (carry >> 8) + (v >> 8);
  }
  return ip;
}

}  // namespace

absl::StatusOr<Sources> Sources::Build(const Options& o, int server_family) {
  Sources out;
  const uint8_t family = server_family == AF_INET ? 4 : 6;
  if (o.citymap_file.empty()) {
    out.cities_.push_back(BenchCity{"", 1.0, {}});
    std::vector<std::string> texts = o.sources;
    if (texts.empty()) texts.push_back(family == 4 ? "127.0.0.1" : "::1");
    for (const std::string& t : texts) {
      common::IpAddress ip;
      if (!common::ParseIp(t, &ip))
        return absl::InvalidArgumentError(common::Cat("--source: invalid address '", t, "'"));
      if (ip.family != family) {
        return absl::InvalidArgumentError(common::Cat("--source ", t, ": not the server's address family"));
      }
      auto s = MakeSource(ip, 0);
      if (!s.ok()) return s.status();
      out.cities_[0].sources.push_back(static_cast<uint32_t>(out.sources_.size()));
      out.sources_.push_back(*std::move(s));
    }
    return out;
  }

  std::ifstream in(o.citymap_file, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(common::Cat("cannot read city map ", o.citymap_file));
  std::stringstream ss;
  ss << in.rdbuf();
  auto map = partitions::CityMap::FromCsv(ss.str());
  if (!map.ok()) return absl::InvalidArgumentError(common::Cat(o.citymap_file, ": ", map.status().message()));
  out.map_ = std::shared_ptr<const partitions::CityMap>(std::move(*map));
  const partitions::CityMap& cm = *out.map_;

  std::map<std::string, double> wanted;
  for (const auto& [city, share] : o.city_share) {
    if (!cm.FindCity(city)) {
      return absl::InvalidArgumentError(
          common::Cat("--city-share: no city '", city, "' in ", o.citymap_file));
    }
    wanted[city] = share;
  }
  double total = 0;
  for (partitions::PartitionId id = 0; id < cm.city_count(); ++id) {
    const std::string& name = cm.city(id).name;
    const double share = o.city_share.empty() ? 1.0 : (wanted.count(name) ? wanted[name] : 0.0);
    std::vector<common::Cidr> prefixes;
    for (const partitions::CityPrefix& p : cm.prefixes()) {
      if (p.city == id && p.cidr.address.family == family) prefixes.push_back(p.cidr);
    }
    if (share <= 0 || prefixes.empty()) {
      if (share > 0 && !o.city_share.empty()) {
        return absl::InvalidArgumentError(common::Cat("--city-share: city '", name, "' has no IPv", family,
                                                      " prefix in ", o.citymap_file, " to send from"));
      }
      // A city with no prefix at all is the map's implicit default city:
      // nothing to report.
      const bool has_any_prefix = std::any_of(cm.prefixes().begin(), cm.prefixes().end(),
                                              [id](const partitions::CityPrefix& p) { return p.city == id; });
      if (has_any_prefix) out.skipped_.push_back(name);
      continue;
    }
    BenchCity city{name, share, {}};
    const uint32_t city_index = static_cast<uint32_t>(out.cities_.size());
    // Spread the city's sources over its prefixes, and keep only addresses
    // the map really gives to this city (a longer prefix of another city may
    // sit inside one of its prefixes).
    const uint32_t n = o.sources_per_city;
    const uint32_t per_prefix =
        (n + static_cast<uint32_t>(prefixes.size()) - 1) / static_cast<uint32_t>(prefixes.size());
    for (uint32_t i = 0; i < per_prefix * 4 && city.sources.size() < n; ++i) {
      for (const common::Cidr& c : prefixes) {
        if (city.sources.size() >= n) break;
        const common::IpAddress ip = Spread(c, i, per_prefix * 4);
        if (cm.Lookup(ip) != id || !c.Contains(ip)) continue;
        bool dup = false;
        for (uint32_t s : city.sources) dup = dup || out.sources_[s].text == common::IpToString(ip);
        if (dup) continue;
        auto s = MakeSource(ip, city_index);
        if (!s.ok()) return s.status();
        city.sources.push_back(static_cast<uint32_t>(out.sources_.size()));
        out.sources_.push_back(*std::move(s));
      }
    }
    if (city.sources.empty()) {
      return absl::InvalidArgumentError(
          common::Cat("city '", name, "': no address of its prefixes maps to it in ", o.citymap_file));
    }
    total += share;
    out.cities_.push_back(std::move(city));
  }
  if (out.cities_.empty()) {
    return absl::InvalidArgumentError(common::Cat(o.citymap_file, ": no city has an IPv", family,
                                                  " prefix to send from (and a share above 0)"));
  }
  for (BenchCity& c : out.cities_) c.share /= total;
  return out;
}

}  // namespace weir::bench
