#include "report_writer.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "weir/common/text.h"

namespace weir::bench {
namespace {

// `v` to 6 significant digits, a whole number as an integer; JSON has no
// NaN or infinity: 0 for those.
nlohmann::ordered_json Num(double v) {
  if (!(v == v) || v > 1e300 || v < -1e300) return 0;
  const double rounded = std::strtod(fmt::format("{:.6g}", v).c_str(), nullptr);
  if (rounded == std::trunc(rounded) && std::fabs(rounded) < 9007199254740992.0)
    return static_cast<int64_t>(rounded);
  return rounded;
}

// "DoT", "DoH (POST /dns-query)", "DoH JSON (GET /resolve)".
std::string TransportTitle(const Report& r) {
  if (r.transport == "dot") return "DoT";
  if (r.transport == "doh") return fmt::format("DoH ({})", r.connections.detail);
  if (r.transport == "doh-json") return fmt::format("DoH JSON ({})", r.connections.detail);
  return r.transport;
}

// The connections' and handshakes' lines of a DoT or DoH run.
std::string StreamText(const Report& r) {
  const StreamFigures& f = r.connections;
  std::string s;
  s += fmt::format(
      "  connections {:>12}  opened ({} per connection), {} connect failures, {} errors, {} closed by "
      "the server{}\n",
      f.opened,
      f.queries_per_connection == 0
          ? std::string("no query limit")
          : fmt::format("{} quer{}", f.queries_per_connection, f.queries_per_connection == 1 ? "y" : "ies"),
      f.connect_failures, f.connection_errors, f.server_closes,
      f.skipped > 0 ? fmt::format(", {} not opened (--connections open)", f.skipped) : "");
  s += fmt::format("  handshakes  {:>12}  ({} full, {} resumed{}), {:.1f}/s, {} failed\n", f.handshakes(),
                   f.handshakes_full, f.handshakes_resumed, f.tls_resume ? "" : ", --no-tls-resume",
                   r.handshakes_per_s(), f.handshake_failures);
  if (f.handshake.count() > 0) {
    s += fmt::format("  handshake us  p50 {:.1f}  p90 {:.1f}  p99 {:.1f}  max {:.1f}  mean {:.1f}\n",
                     f.handshake.QuantileUs(0.5), f.handshake.QuantileUs(0.9), f.handshake.QuantileUs(0.99),
                     static_cast<double>(f.handshake.max_ns()) / 1000.0, f.handshake.MeanUs());
  }
  if (r.transport != "dot") {
    s += "  http status";
    for (const auto& [status, n] : f.http_status) s += fmt::format(" {} {}", status, n);
    s += fmt::format("  ({} not a DNS answer, {} streams reset)\n", f.http_errors, f.stream_resets);
  }
  if (!f.first_error.empty()) s += fmt::format("  first error: {}\n", f.first_error);
  return s;
}

}  // namespace

std::string ReportText(const Report& r, const std::vector<std::string>& notes) {
  std::string s;
  s += fmt::format("weir-bench: {}{}, {}, {} thread{}, {:.2f} s\n", r.server,
                   r.stream ? " over " + TransportTitle(r) : "", r.mode, r.threads, r.threads == 1 ? "" : "s",
                   r.duration_s);
  for (const std::string& n : notes) s += fmt::format("  note: {}\n", n);
  if (r.stream) {
    s += fmt::format("  sent        {:>12}  (over {})\n", r.sent, TransportTitle(r));
  } else {
    s += fmt::format("  sent        {:>12}  ({} over TCP)\n", r.sent, r.sent_tcp);
  }
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
  if (r.stream) s += StreamText(r);
  if (r.segments_check) {
    s += fmt::format("segments: {}\n", r.segments_model);
    s += fmt::format("  checked     {:>12}  (answers to the model's names, by their subscriber /24)\n",
                     r.segments_checked);
    s += fmt::format(
        "  misscheduled {:>11}  ({:.2f} per 10,000 checked: an address the model does not give the /24)\n",
        r.segments_misscheduled, r.misscheduled_per_10k());
    s += fmt::format("  unanswered  {:>12}  (no A record: SERVFAIL, NXDOMAIN, NODATA)\n",
                     r.segments_unanswered);
  }
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
  using Json = nlohmann::ordered_json;
  Json rcodes = Json::object();
  for (const auto& [name, n] : r.rcodes) rcodes[name] = n;
  Json histogram = Json::array();
  for (const auto& [upper, n] : r.latency.Buckets()) histogram.push_back(Json::array({Num(upper), n}));
  Json timeline = Json::array();
  for (const TimelinePoint& p : r.timeline) {
    timeline.push_back(Json{{"t", Num(p.t)},
                            {"sent", p.sent},
                            {"answered", p.answered},
                            {"timeouts", p.timeouts},
                            {"p99_us", Num(p.p99_us)},
                            {"worst_pp", Num(p.worst_pp)}});
  }
  Json shares = Json::array();
  for (const NameCityShare& row : r.shares) {
    Json addresses = Json::array();
    for (const AddressShare& a : row.addresses) {
      addresses.push_back(Json{{"address", a.address},
                               {"answers", a.answers},
                               {"observed_pct", Num(a.observed_pct)},
                               {"weight", a.weight},
                               {"expected_pct", Num(a.expected_pct)}});
    }
    shares.push_back(Json{{"name", row.name},
                          {"city", row.city},
                          {"weights_from", row.weights_from},
                          {"answers", row.answers},
                          {"max_deviation_pp", Num(row.max_deviation_pp)},
                          {"longest_run", row.longest_run},
                          {"longest_run_address", row.longest_run_address},
                          {"leaked_answers", row.leaked_answers},
                          {"addresses", std::move(addresses)}});
  }
  Json doc{{"server", r.server},
           {"transport", r.transport},
           {"mode", r.mode},
           {"threads", r.threads},
           {"duration_s", Num(r.duration_s)},
           {"notes", notes},
           {"sent", r.sent},
           {"sent_tcp", r.sent_tcp},
           {"answered", r.answered},
           {"timeouts", r.timeouts},
           {"mismatched", r.mismatched},
           {"truncated", r.truncated},
           {"send_errors", r.send_errors},
           {"tcp_errors", r.tcp_errors},
           {"qps_sent", Num(r.qps_sent())},
           {"qps_answered", Num(r.qps_answered())},
           {"loss_pct", Num(r.loss_pct())},
           {"rcodes", std::move(rcodes)},
           {"latency_us", Json{{"count", r.latency.count()},
                               {"mean", Num(r.latency.MeanUs())},
                               {"p50", Num(r.latency.QuantileUs(0.5))},
                               {"p90", Num(r.latency.QuantileUs(0.9))},
                               {"p99", Num(r.latency.QuantileUs(0.99))},
                               {"p999", Num(r.latency.QuantileUs(0.999))},
                               {"max", Num(static_cast<double>(r.latency.max_ns()) / 1000.0)}}},
           {"latency_histogram_us", std::move(histogram)},
           {"timeline", std::move(timeline)},
           {"worst_deviation_pp", Num(r.worst_deviation_pp)},
           {"leaked_answers", r.leaked_answers},
           {"shares", std::move(shares)}};
  if (r.stream) {
    const StreamFigures& f = r.connections;
    Json status = Json::object();
    for (const auto& [code, n] : f.http_status) status[std::to_string(code)] = n;
    doc["connections"] = Json{{"detail", f.detail},
                              {"queries_per_connection", f.queries_per_connection},
                              {"per_thread", f.connections_per_thread},
                              {"new_per_second", Num(f.new_connections_per_second)},
                              {"opened", f.opened},
                              {"connect_failures", f.connect_failures},
                              {"errors", f.connection_errors},
                              {"closed_by_server", f.server_closes},
                              {"skipped", f.skipped},
                              {"first_error", f.first_error}};
    doc["handshakes"] =
        Json{{"tls_resume", f.tls_resume},
             {"full", f.handshakes_full},
             {"resumed", f.handshakes_resumed},
             {"failed", f.handshake_failures},
             {"per_s", Num(r.handshakes_per_s())},
             {"latency_us", Json{{"count", f.handshake.count()},
                                 {"mean", Num(f.handshake.MeanUs())},
                                 {"p50", Num(f.handshake.QuantileUs(0.5))},
                                 {"p90", Num(f.handshake.QuantileUs(0.9))},
                                 {"p99", Num(f.handshake.QuantileUs(0.99))},
                                 {"max", Num(static_cast<double>(f.handshake.max_ns()) / 1000.0)}}}};
    if (r.transport != "dot") {
      doc["http_status"] = std::move(status);
      doc["http_errors"] = f.http_errors;
      doc["stream_resets"] = f.stream_resets;
    }
  }
  if (r.segments_check) {
    doc["segments"] = Json{{"model", r.segments_model},
                           {"checked", r.segments_checked},
                           {"misscheduled", r.segments_misscheduled},
                           {"misscheduled_per_10k", Num(r.misscheduled_per_10k())},
                           {"unanswered", r.segments_unanswered}};
  }
  // Invalid UTF-8 (a name is bytes) replaced rather than thrown on.
  return doc.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
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
