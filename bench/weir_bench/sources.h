// Where weir-bench's queries come from: the client addresses of each city,
// taken from the operator's city-map CSV (the file weir itself loads), and
// the share of the load each city gets.
//
// Threading: immutable after Build.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "options.h"
#include "weir/common/socket_address.h"
#include "weir/dns/message.h"
#include "weir/partitions/citymap.h"

namespace weir::bench {

struct Source {
  common::SocketAddress address;  // port 0
  std::string text;
  uint32_t city = 0;      // index into Sources::cities()
  dns::ClientSubnet ecs;  // the address's /24 (IPv4) or /56 (IPv6), for --ecs-fraction
};

struct BenchCity {
  std::string name;
  double share = 0;               // of the load, normalised to sum 1
  std::vector<uint32_t> sources;  // indices into Sources::sources()
};

class Sources {
 public:
  // `server_family`: AF_INET or AF_INET6; every source has that family.
  static absl::StatusOr<Sources> Build(const Options& o, int server_family);

  const std::vector<Source>& sources() const { return sources_; }
  const std::vector<BenchCity>& cities() const { return cities_; }
  // The city map the sources came from (null without --citymap).
  const partitions::CityMap* city_map() const { return map_.get(); }
  // Cities of the map that got no source (no prefix of the server's family,
  // or a share of 0), for the report.
  const std::vector<std::string>& skipped_cities() const { return skipped_; }

 private:
  std::vector<Source> sources_;
  std::vector<BenchCity> cities_;
  std::vector<std::string> skipped_;
  std::shared_ptr<const partitions::CityMap> map_;
};

}  // namespace weir::bench
