// Plots of a weir-bench report, drawn by gnuplot: the latency CDF, answered
// QPS with p99 over time, and each (name, city)'s observed shares over time
// against their expected shares.
//
// For each plot, DIR holds NAME.dat (the data, whitespace-separated columns
// with a '#' header), NAME.gp (the gnuplot script, which can be re-run by
// hand from DIR: `gnuplot NAME.gp`), NAME.png and NAME.svg. The plots are:
//   latency_cdf                 when the report has answers
//   qps_p99                     when the timeline is not empty
//   shares_<name>_<city>        per entry of Report::shares, when the
//                               timeline is not empty; the name and city are
//                               reduced to [A-Za-z0-9.-], a suffix "_2",
//                               "_3", ... keeps them apart if they collide.
//
// Control plane only: call it once the run is over, from one thread. It
// runs gnuplot once per plot and waits for it (at most a minute each).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "report.h"

namespace weir::bench {

// Creates DIR (and its parents) if missing and writes the plots into it.
// FILES, when given, receives the paths of every file written (DIR/NAME.dat,
// .gp, .png, .svg per plot, in that order), also when a later plot fails.
// GNUPLOT is the program to run, looked up in PATH when it has no '/'.
// Errors name the plot, gnuplot's exit status and the last line it wrote to
// stderr; a missing gnuplot is an error too.
absl::Status WritePlots(const Report& report, const std::string& dir,
                        std::vector<std::string>* files = nullptr, const std::string& gnuplot = "gnuplot");

}  // namespace weir::bench
