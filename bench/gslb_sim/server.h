// gslb-sim's network side: one net::EventLoop serving DNS over UDP and TCP on
// every listen address, the control listener (docs/gslb-sim.md, "Control
// protocol"), delayed responses for injected latency, and the query log.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config.h"

namespace weir::gslb_sim {

struct ServerOptions {
  std::string config_path;          // re-read by `reload`
  std::vector<std::string> listen;  // "127.0.0.1:5300", "[::1]:5300"; port 0 = pick one
  std::string control;              // "127.0.0.1:0"; empty = no control listener
  uint16_t weight_option_code = 65001;
  std::string query_log_path;  // empty = no file
  uint64_t seed = 1;
  size_t log_capacity = 10000;  // queries kept for `log`
  size_t stats_names = 10000;   // names counted one by one in `stats`
};

// Binds everything, prints the "listening ..." lines, "control ..." and
// "ready" on stdout, then serves until SIGINT or SIGTERM. Runs on the calling
// thread. Returns the process exit code (0, or 1 when a socket cannot be set up).
int RunServer(const ServerOptions& opts, ZoneSet zones);

}  // namespace weir::gslb_sim
