#include "options.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string_view>

#include "weir/common/process_metrics.h"

namespace weir::bench {
namespace {

const char kDescription[] = R"(weir-bench: DNS load generator and weight-share meter.

Sends queries from many client addresses per city (from the same city-map CSV
weir uses), open loop at a rate or closed loop with K outstanding, over UDP
(sendmmsg/recvmmsg batches) and optionally TCP, or over DNS over TLS or DNS
over HTTPS (wire or JSON form), and reports QPS, loss, rcodes,
latency quantiles, and for weighted names the observed share of each address
per city against the weights: max deviation in percentage points, the longest
run of one address, and cross-city leaks (a subscriber given an address of
another city's set). See docs/bench.md.

Exit status: 0 run completed; 1 the run could not be done (socket error, no
answer from the server); 2 bad command line or unreadable/invalid input file.)";

// CLI11 validators return an error text or "".
std::string CheckFraction(const std::string& s) {
  try {
    size_t used = 0;
    const double v = std::stod(s, &used);
    if (used != s.size() || !(v >= 0 && v <= 1)) return "must be a number from 0 to 1";
  } catch (...) {
    return "must be a number from 0 to 1";
  }
  return "";
}

}  // namespace

const char* TransportName(Transport t) {
  switch (t) {
    case Transport::kUdp:
      return "udp";
    case Transport::kDot:
      return "dot";
    case Transport::kDoh:
      return "doh";
    case Transport::kDohJson:
      return "doh-json";
  }
  return "udp";
}

std::optional<Options> ParseOptions(int argc, char** argv, int* exit_code) {
  Options o;
  CLI::App app{kDescription, "weir-bench"};
  app.get_formatter()->column_width(34);
  app.set_version_flag("--version", common::VersionLine("weir-bench"),
                       "print the version, commit and build, and exit");
  std::string tagged_fraction, progress = "auto", city_share, transport = "udp", doh_method = "post";
  double rate = 0, new_connections = 0;

  app.add_option("-s,--server", o.server_text,
                 "server to load, ADDR[:PORT] or [IPv6]:PORT (default 127.0.0.1; port 53, 853 for dot, 443 "
                 "for doh and doh-json)")
      ->type_name("ADDR:PORT");

  auto* mix = "Query mix (a file, or generated names)";
  app.add_option("-d,--queries", o.queries_file,
                 "query file in dnsperf's format: one 'name [type]' per line ('#' comments, type default A); "
                 "queries are drawn from it in order, cyclically")
      ->type_name("FILE")
      ->group(mix);
  app.add_flag("--queries-weighted", o.queries_weighted,
               "the query file's names are weighted names: probed per city and their answers counted in "
               "the shares (a file that repeats each name a whole number of weight cycles, in any order, "
               "checks exact shares)")
      ->group(mix);
  app.add_option("--names", o.names,
                 "generated: this many ordinary names n<i>.<zone> (default 1000; 0: none)")
      ->check(CLI::Range(0u, 10000000u))
      ->group(mix);
  app.add_option("--zone", o.zone, "suffix of the generated names (default bench.test.)")
      ->type_name("ZONE")
      ->group(mix);
  app.add_option("--zipf", o.zipf,
                 "Zipf exponent of name popularity over the generated names (default 0: uniform)")
      ->check(CLI::Range(0.0, 10.0))
      ->group(mix);
  app.add_option("--tagged-name", o.tagged_names, "a weighted (tagged) name to query; repeatable")
      ->type_name("NAME")
      ->group(mix);
  app.add_option("--tagged-zone", o.tagged_zone, "generate --tagged-count tagged names t<i>.<zone>")
      ->type_name("ZONE")
      ->group(mix);
  app.add_option("--tagged-count", o.tagged_count,
                 "how many names to generate under --tagged-zone (default 0)")
      ->check(CLI::Range(0u, 1000000u))
      ->group(mix);
  app.add_option("--tagged-fraction", tagged_fraction,
                 "share of queries for the tagged names (default 0.1 with both kinds of names, 1 with tagged "
                 "names only)")
      ->type_name("FRACTION")
      ->check(CheckFraction)
      ->group(mix);
  app.add_option("--miss-fraction", o.miss_fraction,
                 "share of queries for unique names <n>.miss.<zone> that no cache holds (default 0)")
      ->check(CheckFraction)
      ->group(mix);
  app.add_option("--qtype", o.qtype, "type of the generated queries (default A)")
      ->type_name("TYPE")
      ->group(mix);
  app.add_option("--tcp-fraction", o.tcp_fraction, "share of queries sent over TCP (default 0)")
      ->check(CheckFraction)
      ->group(mix);
  app.add_option("--edns-fraction", o.edns_fraction, "share of queries with EDNS (default 0)")
      ->check(CheckFraction)
      ->group(mix);
  app.add_option("--ecs-fraction", o.ecs_fraction,
                 "share of queries with an ECS option (the source's /24 or /56; implies EDNS) (default 0)")
      ->check(CheckFraction)
      ->group(mix);
  app.add_option(
         "--weight-fraction", o.weight_fraction,
         "share of queries with the weight option (implies EDNS); their answers carry every address, so "
         "they are not counted in the shares (default 0)")
      ->check(CheckFraction)
      ->group(mix);
  app.add_option("--edns-size", o.edns_size, "EDNS UDP size of queries with EDNS (default 1232)")
      ->check(CLI::Range(512, 65535))
      ->group(mix);
  app.add_option("--weight-option-code", o.weight_option_code,
                 "EDNS code of the weight option (default 65001)")
      ->check(CLI::Range(1, 65535))
      ->group(mix);

  auto* src = "Sources and weights";
  app.add_option(
         "--citymap", o.citymap_file,
         "city-map CSV (cidr,city,ecs): each city's subscribers are --sources-per-city addresses of its "
         "prefixes (on loopback any 127.x.y.z; elsewhere they must be local addresses)")
      ->type_name("FILE")
      ->check(CLI::ExistingFile)
      ->group(src);
  app.add_option("--city-share", city_share,
                 "share of load per city, CITY=W[,CITY=W...] (default: equal); cities not named get none")
      ->type_name("CITY=W,...")
      ->group(src);
  app.add_option("--sources-per-city", o.sources_per_city, "client addresses per city (default 16)")
      ->check(CLI::Range(1u, 65536u))
      ->group(src);
  app.add_option("--source", o.sources, "without --citymap: a client address to send from; repeatable")
      ->type_name("ADDR")
      ->group(src);
  app.add_option("--weights", o.weights_file,
                 "expected weights, CSV name,city,address,weight (otherwise learned from each city's probe)")
      ->type_name("FILE")
      ->check(CLI::ExistingFile)
      ->group(src);
  app.add_option("--subscriber-ecs", o.subscriber_ecs_file,
                 "city-map CSV whose IPv4 prefixes are the subscribers: every query carries an ECS option "
                 "(source /24, implies EDNS) for a /24 drawn from them, each /24 equally likely; sent from "
                 "the usual sources, which the server must trust as forwarders")
      ->type_name("CITYMAP")
      ->check(CLI::ExistingFile)
      ->group(src);
  bool no_probe = false;
  app.add_flag("--no-probe", no_probe,
               "do not send the weight-option probe per (tagged name, city) before the run")
      ->group(src);
  app.add_flag("--warmup", o.warmup, "query each distinct name once from each city before the measured run")
      ->group(src);

  auto* load = "Load";
  app.add_option("-Q,--rate", rate, "open loop: send this many queries per second in all")
      ->check(CLI::Range(1.0, 1e9))
      ->group(load);
  app.add_option("--ramp", o.ramp_s, "open loop: rise linearly to --rate over this many seconds (default 0)")
      ->check(CLI::Range(0.0, 3600.0))
      ->group(load);
  app.add_option("-q,--outstanding", o.outstanding,
                 "closed loop: queries outstanding per thread (default 100); the default mode")
      ->check(CLI::Range(1u, 1000000u))
      ->group(load);
  app.add_option("-T,--threads", o.threads, "sender threads, each with its own sockets (default 1)")
      ->check(CLI::Range(1u, 256u))
      ->group(load);
  app.add_option("--sockets", o.sockets, "UDP sockets per source and thread (default 1)")
      ->check(CLI::Range(1u, 64u))
      ->group(load);
  app.add_option("--batch", o.batch, "datagrams per sendmmsg/recvmmsg (default 32)")
      ->check(CLI::Range(1u, 1024u))
      ->group(load);
  bool no_gso = false;
  app.add_flag(
         "--no-gso", no_gso,
         "send every datagram with its own sendmmsg entry instead of grouping equal-length queries into "
         "one UDP GSO send (the server receives the same datagrams either way)")
      ->group(load);
  app.add_option("-t,--timeout", o.timeout_ms, "a query unanswered after this many ms is lost (default 2000)")
      ->check(CLI::Range(1u, 600000u))
      ->group(load);
  app.add_option("-l,--duration", o.duration_s, "seconds of measured run (default 10)")
      ->check(CLI::Range(0.1, 86400.0))
      ->group(load);
  app.add_option("-n,--count", o.count, "stop after sending this many queries (default: by --duration)")
      ->group(load);
  app.add_option("--seed", o.seed, "seed of the query mix's random choices (default 1)")->group(load);

  auto* tr = "Transport (DNS over TLS, DNS over HTTPS)";
  app.add_option("--transport", transport,
                 "udp (with --tcp-fraction over TCP), dot (DNS over TLS, RFC 7858), doh (DNS over HTTPS, "
                 "RFC 8484, HTTP/2), doh-json (the JSON form: GET --doh-json-path?name=&type=) (default udp)")
      ->type_name("TRANSPORT")
      ->check(CLI::IsMember({"udp", "dot", "doh", "doh-json"}))
      ->group(tr);
  app.add_option("--queries-per-connection", o.queries_per_connection,
                 "close a connection once it carried this many queries (after their answers) and open "
                 "another; 0: never (default 100; 1 with --new-connections-per-second)")
      ->type_name("N")
      ->check(CLI::Range(0u, 4000000000u))
      ->group(tr);
  app.add_option("--connections", o.connections,
                 "connections per thread, each from a source of one city, queries pipelined (dot) or as "
                 "concurrent streams (doh) (default: one per 100 outstanding queries, one per city at least; "
                 "with --new-connections-per-second: the most open at once, default 1000)")
      ->type_name("C")
      ->check(CLI::Range(1u, 1000000u))
      ->group(tr);
  app.add_option("--new-connections-per-second", new_connections,
                 "open loop of connections: open this many new connections per second in all, each carrying "
                 "--queries-per-connection queries and closed after their answers; reports the TLS "
                 "handshakes completed per second, full and resumed")
      ->type_name("R")
      ->check(CLI::Range(0.1, 1e7))
      ->group(tr);
  app.add_flag("--tls-resume,!--no-tls-resume", o.tls_resume,
               "offer the session ticket of an earlier connection when opening another (SSL_set_session), "
               "and count the handshakes that resumed (default on)")
      ->group(tr);
  app.add_option("--tls-ca", o.tls_ca,
                 "verify the server's certificate chain against the CAs in this PEM file (default: the "
                 "system's CA store)")
      ->type_name("FILE")
      ->check(CLI::ExistingFile)
      ->group(tr);
  app.add_option("--tls-name", o.tls_name,
                 "server name sent as SNI (and as :authority) and required in its certificate (default: "
                 "the certificate must carry the server's IP address)")
      ->type_name("NAME")
      ->group(tr);
  app.add_flag("--tls-insecure", o.tls_insecure,
               "do not verify the server's certificate (a benchmark against a test certificate)")
      ->group(tr);
  app.add_option("--doh-path", o.doh_path, "doh: the path of RFC 8484 queries (default /dns-query)")
      ->type_name("PATH")
      ->group(tr);
  app.add_option("--doh-method", doh_method,
                 "doh: post (the query as an application/dns-message body) or get (?dns=<base64url>) "
                 "(default post)")
      ->type_name("METHOD")
      ->check(CLI::IsMember({"get", "post"}))
      ->group(tr);
  app.add_option("--doh-json-path", o.doh_json_path, "doh-json: the path of JSON queries (default /resolve)")
      ->type_name("PATH")
      ->group(tr);

  auto* seg = "Scheduling check (gslb-sim's segment model)";
  app.add_option("--segments-truth", o.segments_truth_file,
                 "gslb-sim config with a [segments] table: every answer to a name below its suffix asked "
                 "with a --subscriber-ecs /24 is checked against the model's answer for that /24; an A "
                 "address outside it makes the answer mis-scheduled")
      ->type_name("GSLB_SIM_CONFIG")
      ->check(CLI::ExistingFile)
      ->group(seg);
  app.add_option("--segments-epoch", o.segments_epoch,
                 "the model's change epoch the answers are checked at (default 0)")
      ->type_name("N")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1000000}))
      ->group(seg);

  auto* out = "Output";
  app.add_option("--json", o.json_file, "write every figure of the run to this JSON file")
      ->type_name("FILE")
      ->group(out);
  app.add_option("--plot", o.plot_dir,
                 "write PNG and SVG plots here (gnuplot): latency CDF, QPS and p99 over time, each city's "
                 "address shares over time against the weights")
      ->type_name("DIR")
      ->group(out);
  app.add_option("--progress", progress,
                 "live progress line each second: auto (on a terminal), always, never")
      ->type_name("WHEN")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->group(out);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::fputs(app.help().c_str(), stdout);
    *exit_code = 0;
    return std::nullopt;
  } catch (const CLI::CallForVersion& e) {
    std::printf("%s\n", e.what());
    *exit_code = 0;
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "weir-bench: %s\n(see weir-bench --help)\n", e.what());
    *exit_code = 2;
    return std::nullopt;
  }
  auto fail = [&](const std::string& why) -> std::optional<Options> {
    std::fprintf(stderr, "weir-bench: %s\n(see weir-bench --help)\n", why.c_str());
    *exit_code = 2;
    return std::nullopt;
  };

  o.transport = transport == "dot"        ? Transport::kDot
                : transport == "doh"      ? Transport::kDoh
                : transport == "doh-json" ? Transport::kDohJson
                                          : Transport::kUdp;
  o.doh_method = doh_method == "get" ? DohMethod::kGet : DohMethod::kPost;
  const bool stream = o.transport != Transport::kUdp;
  const int default_port = o.transport == Transport::kDot ? 853 : stream ? 443 : 53;
  if (app.count("--server") == 0) o.server_text = "127.0.0.1";
  auto server = common::SocketAddress::Parse(o.server_text, default_port);
  if (!server.ok()) return fail("--server: " + std::string(server.status().message()));
  o.server = *server;
  o.server_text = o.server.ToString();
  if (!stream) {
    for (const char* opt :
         {"--queries-per-connection", "--connections", "--new-connections-per-second", "--tls-resume",
          "--tls-ca", "--tls-name", "--tls-insecure", "--doh-path", "--doh-method", "--doh-json-path"}) {
      if (app.count(opt) > 0) return fail(std::string(opt) + " needs --transport dot, doh or doh-json");
    }
  } else {
    if (o.tcp_fraction > 0)
      return fail("--tcp-fraction is for --transport udp (DoT and DoH are all over TCP)");
    if (o.transport == Transport::kDot) {
      for (const char* opt : {"--doh-path", "--doh-method", "--doh-json-path"}) {
        if (app.count(opt) > 0) return fail(std::string(opt) + " needs --transport doh or doh-json");
      }
    }
    if (o.transport == Transport::kDohJson) {
      if (app.count("--doh-method") > 0)
        return fail("--doh-method is for --transport doh (the JSON form is GET)");
      if (o.edns_fraction > 0 || o.weight_fraction > 0) {
        return fail(
            "--edns-fraction and --weight-fraction need a DNS message: the JSON form (--transport doh-json) "
            "carries no EDNS option but ECS (--ecs-fraction)");
      }
    }
    if (o.tls_insecure && !o.tls_ca.empty()) return fail("--tls-insecure and --tls-ca exclude each other");
    for (const std::string* path : {&o.doh_path, &o.doh_json_path}) {
      if (path->empty() || (*path)[0] != '/' || path->find_first_of("?# ") != std::string::npos)
        return fail("--doh-path and --doh-json-path must be an absolute path without a query: " + *path);
    }
    if (app.count("--new-connections-per-second") > 0) {
      o.new_connections_per_second = new_connections;
      if (app.count("--rate") > 0 || app.count("--outstanding") > 0)
        return fail("--new-connections-per-second sets the load: not with --rate or --outstanding");
      if (app.count("--queries-per-connection") == 0) o.queries_per_connection = 1;
      if (o.queries_per_connection == 0)
        return fail("--new-connections-per-second needs --queries-per-connection of 1 or more");
    }
  }
  o.probe = !no_probe;
  o.gso = !no_gso;
  if (app.count("--rate") > 0) o.rate = rate;
  if (!tagged_fraction.empty()) o.tagged_fraction = std::stod(tagged_fraction);
  o.progress = progress == "always"  ? Progress::kAlways
               : progress == "never" ? Progress::kNever
                                     : Progress::kAuto;
  if (!o.queries_file.empty() &&
      (app.count("--names") || app.count("--zipf") || !o.tagged_names.empty() || !o.tagged_zone.empty())) {
    return fail("--queries cannot be combined with --names, --zipf, --tagged-name or --tagged-zone");
  }
  if (o.queries_weighted && o.queries_file.empty()) return fail("--queries-weighted needs --queries");
  if (o.tagged_count > 0 && o.tagged_zone.empty()) return fail("--tagged-count needs --tagged-zone");
  if (!o.tagged_zone.empty() && o.tagged_count == 0) return fail("--tagged-zone needs --tagged-count");
  if (!o.citymap_file.empty() && !o.sources.empty())
    return fail("--source cannot be combined with --citymap");
  if (!city_share.empty() && o.citymap_file.empty()) return fail("--city-share needs --citymap");
  if (!o.subscriber_ecs_file.empty() && (o.ecs_fraction > 0 || stream)) {
    return fail(
        "--subscriber-ecs sets the ECS of every query: not with --ecs-fraction, and only over --transport "
        "udp");
  }
  if (!o.segments_truth_file.empty() && o.subscriber_ecs_file.empty())
    return fail("--segments-truth checks answers by their subscriber: it needs --subscriber-ecs");
  if (app.count("--segments-epoch") > 0 && o.segments_truth_file.empty())
    return fail("--segments-epoch needs --segments-truth");
  if (!o.weights_file.empty() && o.citymap_file.empty()) return fail("--weights needs --citymap");
  if (o.rate && app.count("--outstanding"))
    return fail("--rate (open loop) and --outstanding (closed loop) exclude each other");
  if (app.count("--ramp") && !o.rate) return fail("--ramp needs --rate");
  if (o.miss_fraction + (o.tagged_fraction.value_or(0)) > 1.0 + 1e-9) {
    return fail("--miss-fraction plus --tagged-fraction exceeds 1");
  }
  // CITY=W[,CITY=W...]
  for (std::string_view rest = city_share; !rest.empty();) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0)
      return fail("--city-share: expected CITY=W, got '" + std::string(item) + "'");
    double w = -1;
    try {
      size_t used = 0;
      const std::string num(item.substr(eq + 1));
      w = std::stod(num, &used);
      if (used != num.size()) w = -1;
    } catch (...) {
    }
    if (!(w >= 0)) return fail("--city-share: '" + std::string(item) + "': the share must be a number >= 0");
    o.city_share.emplace_back(std::string(item.substr(0, eq)), w);
  }
  return o;
}

}  // namespace weir::bench
