#include "plot.h"

#include <fmt/format.h>

#include <filesystem>
#include <set>
#include <string_view>

#include "gnuplot_writer.h"
#include "weir/common/text.h"

namespace weir::bench {
namespace {

using weir::common::Cat;

// A gnuplot single-quoted string literal. Inside single quotes gnuplot
// interprets no backslash escape and expands no macro; '' stands for one
// quote. A line break would end the command, so control characters become
// spaces. Titles are drawn with enhanced text off (gnuplot_writer.cc), so
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

absl::Status PlotLatencyCdf(const Report& report, GnuplotWriter& w) {
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

absl::Status PlotQpsP99(const Report& report, GnuplotWriter& w) {
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
                       GnuplotWriter& w) {
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
  GnuplotWriter w(clean_dir, gnuplot, "weir-bench", files);
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
