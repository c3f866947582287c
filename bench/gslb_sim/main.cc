// gslb-sim: authoritative test server playing the CDN's GSLB and simple zones.
// Usage and config format: docs/gslb-sim.md.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "config.h"
#include "server.h"
#include "weir/common/process_metrics.h"

int main(int argc, char** argv) {
  weir::gslb_sim::ServerOptions opts;
  CLI::App app{
      "gslb-sim: authoritative DNS test server with ECS views, the weight option and fault injection"};
  app.set_version_flag("--version", weir::common::VersionLine("gslb-sim"),
                       "print the version, commit and build, and exit");
  app.add_option("--config", opts.config_path, "zone file (TOML, see docs/gslb-sim.md)")->required();
  app.add_option("--listen", opts.listen, "address:port for UDP and TCP, repeatable; port 0 picks one")
      ->required();
  app.add_option("--control", opts.control, "address:port of the control listener (stats, log, reset, ...)");
  app.add_option("--weight-option-code", opts.weight_option_code, "EDNS0 code of the weight option")
      ->check(CLI::Range(1, 65535));
  app.add_option("--query-log", opts.query_log_path, "append one JSON line per received query to this file");
  app.add_option("--seed", opts.seed, "seed of the fault-injection random generator");
  app.add_option("--log-size", opts.log_capacity, "queries kept in memory for the `log` command");
  app.add_option("--stats-names", opts.stats_names,
                 "distinct query names `stats` counts one by one (later ones under \"(other names)\")")
      ->check(CLI::Range(1, 10000000));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  absl::StatusOr<weir::gslb_sim::ZoneSet> zones = weir::gslb_sim::LoadConfig(opts.config_path);
  if (!zones.ok()) {
    std::fprintf(stderr, "%s\n", std::string(zones.status().message()).c_str());
    return 2;
  }
  return weir::gslb_sim::RunServer(opts, *std::move(zones));
}
