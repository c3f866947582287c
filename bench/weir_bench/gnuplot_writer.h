// Plots drawn by gnuplot, for the bench programs (weir-bench's report,
// calibration_sim): each plot is NAME.dat (the data, whitespace-separated
// columns with a '#' header) and NAME.gp (the script, which can be re-run by
// hand from its directory: `gnuplot NAME.gp`), drawn to NAME.png and
// NAME.svg by one gnuplot run (at most a minute).
//
// Control plane only: one thread, once a run is over.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace weir::bench {

// A number as a data file or script holds it: shortest round-trip form,
// independent of the locale.
std::string Num(double v);

class GnuplotWriter {
 public:
  // DIR must exist. GNUPLOT is the program to run, looked up in PATH when it
  // has no '/'. PROGRAM names the writer in each script's first line.
  // FILES, when given, receives the path of every file written.
  GnuplotWriter(std::string dir, std::string gnuplot, std::string program, std::vector<std::string>* files)
      : dir_(std::move(dir)), gnuplot_(std::move(gnuplot)), program_(std::move(program)), files_(files) {}

  // Writes NAME.dat and NAME.gp and runs gnuplot on it. SETTINGS are the
  // script's commands before the plot command PLOT (one line, without
  // "plot"), which is run once per image.
  absl::Status Plot(const std::string& name, const std::string& data, const std::string& settings,
                    const std::string& plot);

 private:
  std::string Path(const std::string& file) const;
  absl::Status WriteFile(const std::string& file, const std::string& text);
  absl::Status RunGnuplot(const std::string& name);

  std::string dir_;
  std::string gnuplot_;
  std::string program_;
  std::vector<std::string>* files_;
};

}  // namespace weir::bench
