#include "report_writer.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "weir/common/text.h"

namespace weir::bench {
namespace {

std::string Num(double v) {
  // JSON has no NaN or infinity.
  if (!(v == v) || v > 1e300 || v < -1e300) return "0";
  return fmt::format("{:.6g}", v);
}

}  // namespace

std::string ReportText(const Report& r, const std::vector<std::string>& notes) {
  std::string s;
  s += fmt::format("weir-bench: {}, {}, {} thread{}, {:.2f} s\n", r.server, r.mode, r.threads,
                   r.threads == 1 ? "" : "s", r.duration_s);
  for (const std::string& n : notes) s += fmt::format("  note: {}\n", n);
  s += fmt::format("  sent        {:>12}  ({} over TCP)\n", r.sent, r.sent_tcp);
  s += fmt::format("  answered    {:>12}  ({:.2f} % of sent)\n", r.answered,
                   r.sent ? 100.0 * static_cast<double>(r.answered) / static_cast<double>(r.sent) : 0.0);
  s += fmt::format("  lost        {:>12}  ({:.3f} %, no answer within the timeout)\n", r.timeouts,
                   r.loss_pct());
  s += fmt::format(
      "  mismatched  {:>12}  (answers matching no outstanding query: late, duplicate or forged)\n",
      r.mismatched);
  s += fmt::format("  truncated   {:>12}\n", r.truncated);
  if (r.send_errors + r.tcp_errors > 0) {
    s += fmt::format("  errors      {:>12} send, {} TCP\n", r.send_errors, r.tcp_errors);
  }
  s += fmt::format("  qps         {:>12.1f} sent, {:.1f} answered\n", r.qps_sent(), r.qps_answered());
  s += fmt::format(
      "  latency us  p50 {:.1f}  p90 {:.1f}  p99 {:.1f}  p99.9 {:.1f}  max {:.1f}  mean {:.1f}\n",
      r.latency.QuantileUs(0.5), r.latency.QuantileUs(0.9), r.latency.QuantileUs(0.99),
      r.latency.QuantileUs(0.999), static_cast<double>(r.latency.max_ns()) / 1000.0, r.latency.MeanUs());
  s += "  rcodes     ";
  for (const auto& [name, n] : r.rcodes) s += fmt::format(" {} {}", name, n);
  s += "\n";
  if (!r.shares.empty()) {
    s += fmt::format("shares: worst deviation {:.2f} pp, {} leaked answers (another city's address)\n",
                     r.worst_deviation_pp, r.leaked_answers);
    for (const NameCityShare& row : r.shares) {
      s += fmt::format(
          "  {} city {}: {} answers, weights from {}, max deviation {:.2f} pp, longest run {} ({}), "
          "leaked {}\n",
          row.name, row.city, row.answers, row.weights_from, row.max_deviation_pp, row.longest_run,
          row.longest_run_address, row.leaked_answers);
      for (const AddressShare& a : row.addresses) {
        if (a.weight != 0) {
          s += fmt::format("    {:<40} {:>10} {:>7.2f} %   weight {:>3} -> {:>6.2f} %\n", a.address,
                           a.answers, a.observed_pct, a.weight, a.expected_pct);
        } else {
          s += fmt::format("    {:<40} {:>10} {:>7.2f} %   not in the city's set\n", a.address, a.answers,
                           a.observed_pct);
        }
      }
    }
  }
  return s;
}

std::string ReportJson(const Report& r, const std::vector<std::string>& notes) {
  using common::JsonString;
  std::string s = "{\n";
  s += fmt::format("  \"server\": {},\n  \"mode\": {},\n  \"threads\": {},\n  \"duration_s\": {},\n",
                   JsonString(r.server), JsonString(r.mode), r.threads, Num(r.duration_s));
  s += "  \"notes\": [";
  for (size_t i = 0; i < notes.size(); ++i) s += (i ? ", " : "") + JsonString(notes[i]);
  s += "],\n";
  s += fmt::format(
      "  \"sent\": {},\n  \"sent_tcp\": {},\n  \"answered\": {},\n  \"timeouts\": {},\n  \"mismatched\": "
      "{},\n"
      "  \"truncated\": {},\n  \"send_errors\": {},\n  \"tcp_errors\": {},\n",
      r.sent, r.sent_tcp, r.answered, r.timeouts, r.mismatched, r.truncated, r.send_errors, r.tcp_errors);
  s += fmt::format("  \"qps_sent\": {},\n  \"qps_answered\": {},\n  \"loss_pct\": {},\n", Num(r.qps_sent()),
                   Num(r.qps_answered()), Num(r.loss_pct()));
  s += "  \"rcodes\": {";
  bool first = true;
  for (const auto& [name, n] : r.rcodes) {
    s += fmt::format("{}{}: {}", first ? "" : ", ", JsonString(name), n);
    first = false;
  }
  s += "},\n";
  s += fmt::format(
      "  \"latency_us\": {{\"count\": {}, \"mean\": {}, \"p50\": {}, \"p90\": {}, \"p99\": {}, \"p999\": {}, "
      "\"max\": {}}},\n",
      r.latency.count(), Num(r.latency.MeanUs()), Num(r.latency.QuantileUs(0.5)),
      Num(r.latency.QuantileUs(0.9)), Num(r.latency.QuantileUs(0.99)), Num(r.latency.QuantileUs(0.999)),
      Num(static_cast<double>(r.latency.max_ns()) / 1000.0));
  s += "  \"latency_histogram_us\": [";
  first = true;
  for (const auto& [upper, n] : r.latency.Buckets()) {
    s += fmt::format("{}[{}, {}]", first ? "" : ", ", Num(upper), n);
    first = false;
  }
  s += "],\n  \"timeline\": [";
  for (size_t i = 0; i < r.timeline.size(); ++i) {
    const TimelinePoint& p = r.timeline[i];
    s += fmt::format(
        "{}\n    {{\"t\": {}, \"sent\": {}, \"answered\": {}, \"timeouts\": {}, \"p99_us\": {}, "
        "\"worst_pp\": {}}}",
        i ? "," : "", Num(p.t), p.sent, p.answered, p.timeouts, Num(p.p99_us), Num(p.worst_pp));
  }
  s += "\n  ],\n";
  s += fmt::format("  \"worst_deviation_pp\": {},\n  \"leaked_answers\": {},\n  \"shares\": [",
                   Num(r.worst_deviation_pp), r.leaked_answers);
  for (size_t i = 0; i < r.shares.size(); ++i) {
    const NameCityShare& row = r.shares[i];
    s += fmt::format(
        "{}\n    {{\"name\": {}, \"city\": {}, \"weights_from\": {}, \"answers\": {}, \"max_deviation_pp\": "
        "{}, "
        "\"longest_run\": {}, \"longest_run_address\": {}, \"leaked_answers\": {}, \"addresses\": [",
        i ? "," : "", JsonString(row.name), JsonString(row.city), JsonString(row.weights_from), row.answers,
        Num(row.max_deviation_pp), row.longest_run, JsonString(row.longest_run_address), row.leaked_answers);
    for (size_t k = 0; k < row.addresses.size(); ++k) {
      const AddressShare& a = row.addresses[k];
      s += fmt::format(
          "{}\n      {{\"address\": {}, \"answers\": {}, \"observed_pct\": {}, \"weight\": {}, "
          "\"expected_pct\": {}}}",
          k ? "," : "", JsonString(a.address), a.answers, Num(a.observed_pct), a.weight, Num(a.expected_pct));
    }
    s += "]}";
  }
  s += "\n  ]\n}\n";
  return s;
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      return absl::InvalidArgumentError(common::Cat("cannot write ", tmp, ": ", std::strerror(errno)));
    out << text;
    out.flush();
    if (!out)
      return absl::InvalidArgumentError(common::Cat("cannot write ", tmp, ": ", std::strerror(errno)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InvalidArgumentError(
        common::Cat("cannot rename ", tmp, " to ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

std::string ProgressLine(const Report& r) {
  const TimelinePoint p = r.timeline.empty() ? TimelinePoint{} : r.timeline.back();
  return fmt::format(
      "{:6.1f} s  sent {:>9}/s  answered {:>9}/s  lost {:.3f} %  p99 {:>8.1f} us  worst {:.2f} pp", p.t,
      p.sent, p.answered, r.loss_pct(), p.p99_us, r.worst_deviation_pp);
}

}  // namespace weir::bench
