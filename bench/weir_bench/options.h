// weir-bench's command line: every option, its default and its check. The
// help text is the reference (weir-bench --help; docs/bench.md explains the
// method).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "weir/common/socket_address.h"

namespace weir::bench {

enum class Progress : uint8_t { kAuto, kAlways, kNever };

struct Options {
  common::SocketAddress server;
  std::string server_text = "127.0.0.1:53";

  // Query mix: a file, or generated names.
  std::string queries_file;
  bool queries_weighted = false;  // the file's names are weighted names (probed, counted in the shares)
  uint32_t names = 1000;
  std::string zone = "bench.test.";
  double zipf = 0;
  std::vector<std::string> tagged_names;  // explicit tagged names
  std::string tagged_zone;                // generated tagged names t<i>.<zone>
  uint32_t tagged_count = 0;
  std::optional<double> tagged_fraction;  // default: see ResolveDefaults
  double miss_fraction = 0;
  std::string qtype = "A";
  double tcp_fraction = 0;
  double edns_fraction = 0;
  double ecs_fraction = 0;
  double weight_fraction = 0;
  uint16_t edns_size = 1232;
  uint16_t weight_option_code = 65001;

  // Sources.
  std::string citymap_file;
  std::vector<std::pair<std::string, double>> city_share;  // city -> share of load
  uint32_t sources_per_city = 16;
  std::vector<std::string> sources;  // explicit, without a city map
  std::string weights_file;
  bool probe = true;  // learn each (name, city)'s weights from a weight-option query
  bool warmup = false;

  // Load.
  std::optional<double> rate;  // open loop, total qps
  double ramp_s = 0;
  uint32_t outstanding = 100;  // closed loop, per thread
  uint32_t threads = 1;
  uint32_t sockets = 1;  // per source and thread
  uint32_t batch = 32;
  bool gso = true;  // equal-length queries of a batch in one UDP GSO send
  uint32_t timeout_ms = 2000;
  double duration_s = 10;
  uint64_t count = 0;  // stop after this many queries (0: by duration)
  uint64_t seed = 1;

  // Output.
  std::string json_file;
  std::string plot_dir;
  Progress progress = Progress::kAuto;
};

// Parses argv. Returns the options, or nullopt with *exit_code set: 0 after
// --help was printed, 2 for a usage error (printed on stderr).
std::optional<Options> ParseOptions(int argc, char** argv, int* exit_code);

}  // namespace weir::bench
