#include "plot.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string_view>

#include "weir/common/text.h"

extern char** environ;

namespace weir::bench {
namespace {

using weir::common::Cat;

// Each gnuplot run gets this long; gnuplot reads a file and never waits for
// input, so only a broken installation gets near it.
constexpr auto kGnuplotTimeout = std::chrono::seconds(60);

// A number as a data file or script holds it: shortest round-trip form,
// independent of the locale.
std::string Num(double v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

// A gnuplot single-quoted string literal. Inside single quotes gnuplot
// interprets no backslash escape and expands no macro; '' stands for one
// quote. A line break would end the command, so control characters become
// spaces. Titles are drawn with enhanced text off (see kPngTerminal), so
// '^', '_', '{' and '@' in names stay literal.
std::string Quoted(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\'') {
      out += "''";
    } else if (u < 0x20 || u == 0x7f) {
      out += ' ';
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

// Text for a '#' comment line of a data file.
std::string CommentText(std::string_view s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u == 0x7f) ? ' ' : c;
  }
  return out;
}

// A piece of a file name: letters, digits, '.' and '-' kept, anything else
// (including '/') replaced by '_', at most 80 bytes.
std::string SafeName(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (out.size() == 80) break;
    const bool keep =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
    out += keep ? c : '_';
  }
  return out.empty() ? "_" : out;
}

// Where each plot's script starts: both image terminals with enhanced text
// off, since names are shown as they are. pngcairo draws antialiased lines;
// the libgd png terminal is the fallback of builds without cairo.
constexpr std::string_view kTerminals =
    "png_terminal = (strstrt(' '.GPVAL_TERMINALS.' ', ' pngcairo ') > 0) ? 'pngcairo' : 'png'\n"
    "set encoding utf8\n";
constexpr std::string_view kPngTerminal = "set terminal @png_terminal size 1200,700 noenhanced\n";
constexpr std::string_view kSvgTerminal =
    "set terminal svg size 1200,700 dynamic noenhanced background rgb 'white'\n";

class PlotWriter {
 public:
  PlotWriter(std::string dir, std::string gnuplot, std::vector<std::string>* files)
      : dir_(std::move(dir)), gnuplot_(std::move(gnuplot)), files_(files) {}

  // Writes NAME.dat and NAME.gp and runs gnuplot on it. SETTINGS are the
  // script's commands before the plot command PLOT (one line, without
  // "plot"), which is run once per image.
  absl::Status Plot(const std::string& name, const std::string& data, const std::string& settings,
                    const std::string& plot) {
    if (absl::Status s = WriteFile(name + ".dat", data); !s.ok()) return s;
    std::string script =
        Cat("# weir-bench: ", name, ". To redraw, run gnuplot ", name, ".gp in this directory.\n");
    script += kTerminals;
    script += settings;
    script += kPngTerminal;
    script += Cat("set output '", name, ".png'\nplot ", plot, "\n");
    script += kSvgTerminal;
    script += Cat("set output '", name, ".svg'\nplot ", plot, "\nunset output\n");
    if (absl::Status s = WriteFile(name + ".gp", script); !s.ok()) return s;
    if (absl::Status s = RunGnuplot(name); !s.ok()) return s;
    for (const char* ext : {".png", ".svg"}) {
      const std::string path = Path(name + ext);
      std::error_code ec;
      if (std::filesystem::file_size(path, ec) == 0 || ec) {
        return absl::InternalError(Cat("plot ", name, ": gnuplot exited with status 0 but wrote no ", path));
      }
      if (files_ != nullptr) files_->push_back(path);
    }
    return absl::OkStatus();
  }

 private:
  std::string Path(const std::string& file) const { return Cat(dir_, "/", file); }

  absl::Status WriteFile(const std::string& file, const std::string& text) {
    const std::string path = Path(file);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (out) out.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (out) out.close();
    if (!out) return absl::FailedPreconditionError(Cat("cannot write ", path, ": ", std::strerror(errno)));
    if (files_ != nullptr) files_->push_back(path);
    return absl::OkStatus();
  }

  // Runs `gnuplot NAME.gp` in the plot directory (so the script names only
  // files of its own, whatever characters the directory's path holds), with
  // stdin and stdout on /dev/null and stderr kept for the error message.
  absl::Status RunGnuplot(const std::string& name) {
    const std::string script = name + ".gp";
    std::string program = gnuplot_;
    // The child changes directory before exec: a relative path with a '/'
    // must be made absolute first (a bare name is looked up in PATH).
    if (program.find('/') != std::string::npos && program.front() != '/') {
      program = std::filesystem::absolute(program).string();
    }
    int err_pipe[2];
    if (pipe2(err_pipe, O_CLOEXEC) != 0) {
      return absl::InternalError(Cat("plot ", name, ": pipe: ", std::strerror(errno)));
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addchdir_np(&actions, dir_.c_str());
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
    // The caller may block signals it waits for (SIGINT, SIGTERM); gnuplot
    // starts with none blocked.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
    char* argv[] = {program.data(), const_cast<char*>(script.c_str()), nullptr};
    pid_t pid = -1;
    const int spawn_error = posix_spawnp(&pid, program.c_str(), &actions, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    close(err_pipe[1]);
    if (spawn_error != 0) {
      close(err_pipe[0]);
      const std::string hint = spawn_error == ENOENT ? " (is gnuplot installed? Debian: gnuplot-nox)" : "";
      return absl::FailedPreconditionError(
          Cat("plot ", name, ": cannot run ", gnuplot_, ": ", std::strerror(spawn_error), hint));
    }

    // Read stderr until gnuplot closes it, keeping the tail for the message.
    std::string err_text;
    bool timed_out = false;
    const auto deadline = std::chrono::steady_clock::now() + kGnuplotTimeout;
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        timed_out = true;
        break;
      }
      pollfd p{err_pipe[0], POLLIN, 0};
      const int ready = poll(&p, 1, static_cast<int>(left.count()));
      if (ready == 0 || (ready < 0 && errno == EINTR)) continue;  // the deadline check ends it
      if (ready < 0) break;
      char buf[4096];
      const ssize_t n = read(err_pipe[0], buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      err_text.append(buf, static_cast<size_t>(n));
      if (err_text.size() > 16384) err_text.erase(0, err_text.size() - 8192);
    }
    close(err_pipe[0]);
    if (timed_out) kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (timed_out) {
      return absl::DeadlineExceededError(Cat("plot ", name, ": gnuplot did not finish within ",
                                             kGnuplotTimeout.count(), " s and was killed"));
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
    const std::string how = WIFEXITED(status) ? Cat("exited with status ", WEXITSTATUS(status))
                                              : Cat("was killed by signal ", WTERMSIG(status));
    return absl::InternalError(Cat("plot ", name, ": gnuplot ", how, ": ", LastLine(err_text)));
  }

  static std::string LastLine(std::string_view text) {
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
      text.remove_suffix(1);
    }
    if (text.empty()) return "(nothing on stderr)";
    const size_t nl = text.rfind('\n');
    return std::string(nl == std::string_view::npos ? text : text.substr(nl + 1));
  }

  std::string dir_;
  std::string gnuplot_;
  std::vector<std::string>* files_;
};

absl::Status PlotLatencyCdf(const Report& report, PlotWriter& w) {
  const uint64_t total = report.latency.count();
  std::string data = "# latency_us_upper_bound cumulative_pct answers_in_bucket\n";
  uint64_t seen = 0;
  for (const auto& [upper_us, count] : report.latency.Buckets()) {
    seen += count;
    data += Cat(Num(upper_us), " ", Num(100.0 * static_cast<double>(seen) / static_cast<double>(total)), " ",
                count, "\n");
  }
  const std::string title =
      Cat("weir-bench: latency CDF of ", total, " answers (p50 ", Num(report.latency.QuantileUs(0.5)),
          " us, p99 ", Num(report.latency.QuantileUs(0.99)), " us, p99.9 ",
          Num(report.latency.QuantileUs(0.999)), " us)");
  const std::string settings = Cat("set title ", Quoted(title),
                                   "\n"
                                   "set xlabel 'latency (us, log scale)'\n"
                                   "set ylabel 'answers at or below (%)'\n"
                                   "set logscale x 10\n"
                                   "set yrange [0:100]\n"
                                   "set ytics 10\n"
                                   "set grid xtics mxtics ytics\n"
                                   "set key off\n");
  return w.Plot("latency_cdf", data, settings,
                "'latency_cdf.dat' using 1:2 with linespoints lw 2 pt 7 ps 0.4");
}

absl::Status PlotQpsP99(const Report& report, PlotWriter& w) {
  std::string data = "# t_s answered_qps p99_us sent_qps timeouts\n";
  double prev_t = 0;
  for (const TimelinePoint& p : report.timeline) {
    // Points are nominally a second apart; the last one may be shorter.
    const double span = p.t - prev_t > 0 ? p.t - prev_t : 1.0;
    prev_t = p.t;
    data += Cat(Num(p.t), " ", Num(static_cast<double>(p.answered) / span), " ", Num(p.p99_us), " ",
                Num(static_cast<double>(p.sent) / span), " ", p.timeouts, "\n");
  }
  const std::string settings =
      Cat("set title ", Quoted(Cat("weir-bench: ", report.server, ", ", report.mode)),
          "\n"
          "set xlabel 'time (s)'\n"
          "set ylabel 'answered (queries/s)'\n"
          "set y2label 'p99 latency of the second (us)'\n"
          "set ytics nomirror\n"
          "set y2tics\n"
          "set yrange [0:*]\n"
          "set y2range [0:*]\n"
          "set grid xtics ytics\n"
          "set key below\n");
  return w.Plot("qps_p99", data, settings,
                "'qps_p99.dat' using 1:2 axes x1y1 with linespoints lw 2 pt 7 ps 0.4 title 'answered QPS', "
                "'qps_p99.dat' using 1:3 axes x1y2 with linespoints lw 2 pt 7 ps 0.4 title 'p99 (us)'");
}

absl::Status PlotShare(const Report& report, const NameCityShare& share, const std::string& name,
                       PlotWriter& w) {
  const bool expected_known = share.weights_from != "none";
  std::string data = "# t_s";
  for (const AddressShare& a : share.addresses) data += Cat(" ", CommentText(a.address));
  data += "  (cumulative observed share, %)\n";
  for (size_t i = 0; i < report.timeline.size(); ++i) {
    data += Num(report.timeline[i].t);
    for (const AddressShare& a : share.addresses) {
      // NaN leaves a gap should an address have fewer points than the timeline.
      data += i < a.observed_pct_over_time.size() ? Cat(" ", Num(a.observed_pct_over_time[i])) : " NaN";
    }
    data += "\n";
  }
  std::string plot;
  const std::string file = Quoted(name + ".dat");
  for (size_t i = 0; i < share.addresses.size(); ++i) {
    const AddressShare& a = share.addresses[i];
    const size_t colour = i + 1;  // gnuplot's linetype colours, cycling after 8
    std::string key = a.address;
    if (expected_known) {
      key += a.weight == 0
                 ? " (not in the city's set)"
                 : Cat(" (weight ", a.weight, ", expected ", fmt::format("{:.2f}", a.expected_pct), " %)");
    }
    if (!plot.empty()) plot += ", ";
    plot += Cat(file, " using 1:", i + 2, " with linespoints lw 2 pt 7 ps 0.4 lc ", colour, " title ",
                Quoted(key));
    if (expected_known) {
      plot += Cat(", ", Num(a.expected_pct), " with lines dt 2 lw 1.5 lc ", colour, " notitle");
    }
  }
  // Two title lines: a long name and city would push the rest off the image.
  const std::string title =
      Cat(Quoted(Cat("weir-bench: ", share.name, " in ", share.city)), ".\"\\n\".",
          Quoted(expected_known ? "share of answers per address (dashed: expected)"
                                : "share of answers per address (expected shares unknown)"));
  const std::string settings = Cat("set title ", title,
                                   "\n"
                                   "set xlabel 'time (s)'\n"
                                   "set ylabel 'cumulative share of answers (%)'\n"
                                   "set yrange [0:*]\n"
                                   "set grid xtics ytics\n"
                                   "set key below\n");
  return w.Plot(name, data, settings, plot);
}

}  // namespace

absl::Status WritePlots(const Report& report, const std::string& dir, std::vector<std::string>* files,
                        const std::string& gnuplot) {
  if (dir.empty()) return absl::InvalidArgumentError("no plot directory given");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir, ec)) {
    return absl::FailedPreconditionError(Cat("cannot create plot directory ", dir, ": ",
                                             ec ? ec.message() : "it exists and is not a directory"));
  }
  std::string clean_dir = dir;  // "plots/" names its files "plots/x.png", not "plots//x.png"
  while (clean_dir.size() > 1 && clean_dir.back() == '/') clean_dir.pop_back();
  PlotWriter w(clean_dir, gnuplot, files);
  if (report.latency.count() > 0) {
    if (absl::Status s = PlotLatencyCdf(report, w); !s.ok()) return s;
  }
  if (report.timeline.empty()) return absl::OkStatus();
  if (absl::Status s = PlotQpsP99(report, w); !s.ok()) return s;
  std::set<std::string> used;
  for (const NameCityShare& share : report.shares) {
    if (share.addresses.empty()) continue;
    std::string_view qname = share.name;
    if (qname.size() > 1 && qname.back() == '.') qname.remove_suffix(1);
    const std::string base = Cat("shares_", SafeName(qname), "_", SafeName(share.city));
    std::string name = base;
    for (int n = 2; !used.insert(name).second; ++n) name = Cat(base, "_", n);
    if (absl::Status s = PlotShare(report, share, name, w); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace weir::bench
