// weir-bench: DNS load generator and weight-share meter (docs/bench.md).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "engine.h"
#include "options.h"
#include "plot.h"
#include "query_mix.h"
#include "report_writer.h"
#include "segment_check.h"
#include "sources.h"
#include "weights_file.h"
#include "weir/common/text.h"

namespace weir::bench {
namespace {

int Fail(int code, const absl::Status& st) {
  std::fprintf(stderr, "weir-bench: %s\n", std::string(st.message()).c_str());
  return code;
}

// Attaches the --weights lines to (question, city) pairs of this run.
absl::Status LoadWeights(const Options& o, const QueryMix& mix, const Sources& sources,
                         ExpectedWeights* out) {
  std::ifstream in(o.weights_file, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(common::Cat("cannot read weights file ", o.weights_file));
  std::stringstream ss;
  ss << in.rdbuf();
  auto lines = ParseWeightsFile(ss.str(), o.weights_file);
  if (!lines.ok()) return lines.status();
  for (const WeightLine& w : *lines) {
    if (!sources.city_map()->FindCity(w.city)) {
      return absl::InvalidArgumentError(
          common::Cat(o.weights_file, ": city '", w.city, "' is not in ", o.citymap_file));
    }
    uint32_t city = 0;
    while (city < sources.cities().size() && sources.cities()[city].name != w.city) ++city;
    if (city == sources.cities().size()) continue;  // a city this run sends nothing from
    bool found = false;
    for (uint32_t q = 0; q < mix.questions().size(); ++q) {
      const Question& question = mix.questions()[q];
      const bool type_fits = question.qtype == (w.address.family == 4 ? dns::type::kA : dns::type::kAaaa);
      if (!(question.qname == w.name) || !type_fits) continue;
      found = true;
      ExpectedSet set;
      if (const ExpectedSet* have = out->Find(q, city)) set = *have;
      set.from = "file";
      set.weights.emplace_back(w.address, w.weight);
      out->Set(q, city, std::move(set));
    }
    if (!found) {
      return absl::InvalidArgumentError(common::Cat(o.weights_file, ": ", dns::NameKeyToText(w.name.span()),
                                                    " is not queried with that address's type in this run"));
    }
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  int code = 0;
  std::optional<Options> parsed = ParseOptions(argc, argv, &code);
  if (!parsed) return code;
  const Options& o = *parsed;

  auto mix = QueryMix::Build(o);
  if (!mix.ok()) return Fail(2, mix.status());
  auto sources = Sources::Build(o, o.server.family());
  if (!sources.ok()) return Fail(2, sources.status());
  std::vector<std::string> notes;
  if (!sources->skipped_cities().empty()) {
    std::string list;
    for (const std::string& c : sources->skipped_cities()) list += (list.empty() ? "" : ", ") + c;
    notes.push_back(
        common::Cat("cities without sources (no prefix of the server's family, or no share): ", list));
  }
  if (o.transport != Transport::kUdp && !o.new_connections_per_second && o.connections != 0 &&
      o.connections < sources->cities().size()) {
    return Fail(
        2, absl::InvalidArgumentError(common::Cat(
               "--connections ", o.connections, " cannot carry the load of ", sources->cities().size(),
               " cities: each connection is bound to one city's address; give ", sources->cities().size(),
               " or more")));
  }
  ExpectedWeights expected;
  if (!o.weights_file.empty()) {
    if (absl::Status st = LoadWeights(o, *mix, *sources, &expected); !st.ok()) return Fail(2, st);
  }

  std::unique_ptr<const SegmentCheck> segment_check;
  if (!o.segments_truth_file.empty()) {
    auto check = SegmentCheck::Load(o.segments_truth_file, o.segments_epoch, mix->questions());
    if (!check.ok()) return Fail(2, check.status());
    segment_check = *std::move(check);
  }

  Engine engine(o, *mix, *sources);
  engine.set_segment_check(segment_check.get());
  if (absl::Status st = engine.Preflight(); !st.ok()) return Fail(1, st);
  if (o.probe && mix->has_tagged()) {
    if (absl::Status st = engine.Probe(&expected); !st.ok()) return Fail(1, st);
  }
  if (o.warmup) {
    if (absl::Status st = engine.Warmup(); !st.ok()) return Fail(1, st);
  }

  const bool tty = isatty(STDERR_FILENO) == 1;
  const bool live = o.progress == Progress::kAlways || (o.progress == Progress::kAuto && tty);
  auto progress = [&](const Report& r) {
    if (!live) return;
    if (tty) {
      std::fprintf(stderr, "\r\033[K%s", ProgressLine(r).c_str());
    } else {
      std::fprintf(stderr, "%s\n", ProgressLine(r).c_str());
    }
    std::fflush(stderr);
  };
  auto report = engine.Run(expected, progress);
  if (live && tty) std::fputs("\r\033[K", stderr);
  if (!report.ok()) return Fail(1, report.status());

  std::fputs(ReportText(*report, notes).c_str(), stdout);
  std::fflush(stdout);
  int exit_code = 0;
  if (!o.json_file.empty()) {
    if (absl::Status st = WriteFile(o.json_file, ReportJson(*report, notes)); !st.ok())
      exit_code = Fail(1, st);
  }
  if (!o.plot_dir.empty()) {
    std::vector<std::string> files;
    if (absl::Status st = WritePlots(*report, o.plot_dir, &files); !st.ok()) {
      exit_code = Fail(1, st);
    } else {
      std::printf("plots: %zu files in %s\n", files.size(), o.plot_dir.c_str());
    }
  }
  if (report->answered == 0) {
    std::fprintf(stderr, "weir-bench: no query was answered\n");
    return 1;
  }
  return exit_code;
}

}  // namespace
}  // namespace weir::bench

int main(int argc, char** argv) { return weir::bench::Main(argc, argv); }
