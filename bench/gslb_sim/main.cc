// gslb-sim: authoritative test server playing the CDN's GSLB and simple zones.
// Usage and config format: docs/gslb-sim.md.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "config.h"
#include "segments.h"
#include "server.h"
#include "weir/common/process_metrics.h"

int main(int argc, char** argv) {
  weir::gslb_sim::ServerOptions opts;
  CLI::App app{
      "gslb-sim: authoritative DNS test server with ECS views, the weight option and fault injection"};
  app.set_version_flag("--version", weir::common::VersionLine("gslb-sim"),
                       "print the version, commit and build, and exit");
  app.add_option("--config", opts.config_path, "zone file (TOML, see docs/gslb-sim.md)")->required();
  app.add_option("--listen", opts.listen,
                 "address:port for UDP and TCP, repeatable; port 0 picks one (required unless exporting)");
  app.add_option("--control", opts.control, "address:port of the control listener (stats, log, reset, ...)");
  app.add_option("--weight-option-code", opts.weight_option_code, "EDNS0 code of the weight option")
      ->check(CLI::Range(1, 65535));
  app.add_option("--query-log", opts.query_log_path, "append one JSON line per received query to this file");
  app.add_option("--seed", opts.seed, "seed of the fault-injection random generator");
  app.add_option("--log-size", opts.log_capacity, "queries kept in memory for the `log` command");
  app.add_option("--stats-names", opts.stats_names,
                 "distinct query names `stats` counts one by one (later ones under \"(other names)\")")
      ->check(CLI::Range(1, 10000000));
  // Exports of the segment model ([segments]): printed on stdout, no server.
  std::string truth;
  uint64_t truth_epoch = 0;
  bool citymap = false;
  app.add_option("--segments-truth", truth,
                 "print the segment model's ground truth (JSON) for NAME or group=N, and exit");
  app.add_option("--segments-epoch", truth_epoch, "the change epoch of --segments-truth (default 0)")
      ->check(CLI::Range(uint64_t{0}, weir::gslb_sim::kMaxSegmentEpoch));
  app.add_flag("--segments-citymap", citymap,
               "print the segment model's cities as a weir city map CSV, and exit");
  try {
    app.parse(argc, argv);
    if (truth.empty() && !citymap && opts.listen.empty()) throw CLI::RequiredError("--listen");
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  absl::StatusOr<weir::gslb_sim::ZoneSet> zones = weir::gslb_sim::LoadConfig(opts.config_path);
  if (!zones.ok()) {
    std::fprintf(stderr, "%s\n", std::string(zones.status().message()).c_str());
    return 2;
  }
  if (!truth.empty() || citymap) {
    if (!zones->segments) {
      std::fprintf(stderr, "gslb-sim: %s has no [segments]\n", opts.config_path.c_str());
      return 2;
    }
    if (citymap) {
      std::fputs(zones->segments->CityMapCsv().c_str(), stdout);
      return 0;
    }
    absl::StatusOr<std::string> json = weir::gslb_sim::SegmentTruth(*zones->segments, truth, truth_epoch);
    if (!json.ok()) {
      std::fprintf(stderr, "gslb-sim: --segments-truth %s\n", std::string(json.status().message()).c_str());
      return 2;
    }
    std::printf("%s\n", json->c_str());
    return 0;
  }
  return weir::gslb_sim::RunServer(opts, *std::move(zones));
}
