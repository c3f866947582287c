// What one weir-bench run measured, as plain values: the summary, the
// per-second timeline, the latency histogram and the weight shares per
// (name, city). Built by the engine after the run (and, for the live
// progress line, once a second); read by the text, JSON and plot writers.
//
// Threading: plain values, no synchronisation.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "latency_histogram.h"

namespace weir::bench {

// One second of the run (t = seconds since the measured run started, the
// end of the interval).
struct TimelinePoint {
  double t = 0;
  uint64_t sent = 0;      // in this interval
  uint64_t answered = 0;  // in this interval
  uint64_t timeouts = 0;  // in this interval
  double p99_us = 0;      // of the answers received in this interval
  double worst_pp = 0;    // worst share deviation so far (cumulative counts)
};

// One address of a weighted name in one city.
struct AddressShare {
  std::string address;      // presentation form
  uint64_t answers = 0;     // answers whose picked (first) address was this
  double observed_pct = 0;  // answers / all picks of the (name, city), in %
  uint32_t weight = 0;      // configured weight (0: not in the city's set)
  double expected_pct = 0;  // weight / sum of the city's weights, in %
  // Cumulative observed share at the end of each timeline second, in %
  // (same length as Report::timeline).
  std::vector<double> observed_pct_over_time;
};

// The answers for one weighted name given to one city's subscribers.
struct NameCityShare {
  std::string name;  // "x.cdn.example.net."
  std::string city;
  // Where the expected weights come from: "answer" (the weight option of a
  // probe query from the city), "file" (--weights) or "none" (unknown:
  // only the observed shares are reported).
  std::string weights_from;
  uint64_t answers = 0;         // picks counted
  double max_deviation_pp = 0;  // max over addresses |observed - expected|
  uint64_t longest_run = 0;     // most consecutive picks of one address
  std::string longest_run_address;
  // Picks of an address that is not in this city's set but is in another
  // city's set for the same name: a subscriber given another city's node.
  uint64_t leaked_answers = 0;
  std::vector<AddressShare> addresses;  // the city's set first, then others
};

// DoT and DoH: the connections and TLS handshakes behind the queries.
struct StreamFigures {
  std::string detail;                     // "POST /dns-query", "GET /resolve", "" for DoT
  uint32_t queries_per_connection = 0;    // 0: unlimited
  uint32_t connections_per_thread = 0;    // in new-connection mode: the most open at once
  double new_connections_per_second = 0;  // 0: not the new-connection mode
  bool tls_resume = true;

  uint64_t opened = 0;            // connects started
  uint64_t connect_failures = 0;  // refused, unreachable, not connected within the timeout
  uint64_t handshakes_full = 0;
  uint64_t handshakes_resumed = 0;      // SSL_session_reused
  uint64_t handshake_failures = 0;      // TLS error, verification failure, timeout, no h2 over ALPN
  uint64_t connection_errors = 0;       // reset, failed, or closed by the server with answers owed
  uint64_t server_closes = 0;           // closed by the server with nothing owed
  uint64_t skipped = 0;                 // new-connection mode: due while --connections were open
  LatencyHistogram handshake;           // from connect() to the TLS handshake's end
  std::map<int, uint64_t> http_status;  // DoH: responses per :status
  uint64_t http_errors = 0;             // DoH: responses that were not a DNS answer
  uint64_t stream_resets = 0;           // DoH: streams the server reset
  std::string first_error;              // the first connection or handshake failure, verbatim

  uint64_t handshakes() const { return handshakes_full + handshakes_resumed; }
};

struct Report {
  // The run as configured (shown in the text and JSON output).
  std::string server;
  std::string transport = "udp";  // "udp", "dot", "doh", "doh-json"
  std::string mode;               // "closed loop, 256 outstanding" / "open loop, 20000 qps"
  unsigned threads = 0;
  double duration_s = 0;  // measured run, warm-up and probes excluded

  uint64_t sent = 0;
  uint64_t sent_tcp = 0;
  uint64_t answered = 0;
  uint64_t timeouts = 0;    // no answer within --timeout
  uint64_t mismatched = 0;  // answers that matched no outstanding query
  uint64_t truncated = 0;   // UDP answers with TC=1
  uint64_t send_errors = 0;
  uint64_t tcp_errors = 0;                 // connections refused or reset
  std::map<std::string, uint64_t> rcodes;  // "NOERROR" -> answers

  bool stream = false;  // DoT or DoH: `connections` holds their figures
  StreamFigures connections;
  double handshakes_per_s() const {
    return duration_s > 0 ? static_cast<double>(connections.handshakes()) / duration_s : 0;
  }

  double qps_sent() const { return duration_s > 0 ? sent / duration_s : 0; }
  double qps_answered() const { return duration_s > 0 ? answered / duration_s : 0; }
  double loss_pct() const { return sent > 0 ? 100.0 * timeouts / sent : 0; }

  LatencyHistogram latency;  // every answered query, microseconds
  std::vector<TimelinePoint> timeline;

  // --segments-truth: answers to the segment model's names checked against
  // the model's answer for their subscriber /24.
  bool segments_check = false;
  std::string segments_model;          // the config and model it was built from
  uint64_t segments_checked = 0;       // answers with A records compared
  uint64_t segments_misscheduled = 0;  // ... with an address the model does not give the subnet
  uint64_t segments_unanswered = 0;    // answers without an A record (SERVFAIL, NXDOMAIN, NODATA)
  double misscheduled_per_10k() const {
    return segments_checked > 0
               ? 10000.0 * static_cast<double>(segments_misscheduled) / static_cast<double>(segments_checked)
               : 0;
  }

  std::vector<NameCityShare> shares;
  double worst_deviation_pp = 0;  // max over shares with known weights
  uint64_t leaked_answers = 0;    // sum over shares
};

}  // namespace weir::bench
