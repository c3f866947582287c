// weir-bench's command line: every option, its default and its check. The
// help text is the reference (weir-bench --help; docs/bench.md explains the
// method).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "weir/common/socket_address.h"

namespace weir::bench {

enum class Progress : uint8_t { kAuto, kAlways, kNever };

// How queries reach the server: plain DNS (UDP, and TCP for --tcp-fraction),
// DNS over TLS (RFC 7858), DNS over HTTPS (RFC 8484, HTTP/2) in wire form,
// or the JSON form of DoH (application/dns-json, Google's schema).
enum class Transport : uint8_t { kUdp, kDot, kDoh, kDohJson };
enum class DohMethod : uint8_t { kGet, kPost };

// "udp", "dot", "doh", "doh-json".
const char* TransportName(Transport t);

struct Options {
  common::SocketAddress server;
  std::string server_text = "127.0.0.1:53";  // the port defaults by transport: 53, 853 (dot), 443 (doh)
  Transport transport = Transport::kUdp;

  // Query mix: a file, or generated names.
  std::string queries_file;
  bool queries_weighted = false;  // the file's names are weighted names (probed, counted in the shares)
  uint32_t names = 1000;
  std::string zone = "bench.test.";
  double zipf = 0;
  std::vector<std::string> tagged_names;  // explicit tagged names
  std::string tagged_zone;                // generated tagged names t<i>.<zone>
  uint32_t tagged_count = 0;
  std::optional<double> tagged_fraction;  // default: see ResolveDefaults
  double miss_fraction = 0;
  std::string qtype = "A";
  double tcp_fraction = 0;
  double edns_fraction = 0;
  double ecs_fraction = 0;
  double weight_fraction = 0;
  uint16_t edns_size = 1232;
  uint16_t weight_option_code = 65001;

  // Sources.
  std::string citymap_file;
  std::vector<std::pair<std::string, double>> city_share;  // city -> share of load
  uint32_t sources_per_city = 16;
  std::vector<std::string> sources;  // explicit, without a city map
  std::string weights_file;
  // A city map whose IPv4 prefixes are the subscribers: every query carries
  // an ECS option for a /24 drawn from them (the sources stay the trusted
  // forwarders that send it).
  std::string subscriber_ecs_file;
  bool probe = true;  // learn each (name, city)'s weights from a weight-option query
  bool warmup = false;

  // Load.
  std::optional<double> rate;  // open loop, total qps
  double ramp_s = 0;
  uint32_t outstanding = 100;  // closed loop, per thread
  uint32_t threads = 1;
  uint32_t sockets = 1;  // per source and thread
  uint32_t batch = 32;
  bool gso = true;  // equal-length queries of a batch in one UDP GSO send
  uint32_t timeout_ms = 2000;
  double duration_s = 10;
  uint64_t count = 0;  // stop after this many queries (0: by duration)
  uint64_t seed = 1;

  // DoT and DoH (stream transports).
  uint32_t queries_per_connection = 100;  // then the connection is closed and another opened; 0: unlimited
  uint32_t connections = 0;               // per thread; 0: enough for --outstanding, one per city at least
  std::optional<double> new_connections_per_second;  // open-loop new-connection mode (handshake rate)
  bool tls_resume = true;                            // offer the last session ticket on reconnects
  std::string tls_ca;                                // CA file to verify the server against
  std::string tls_name;       // SNI and the name the certificate must carry (else its IP address)
  bool tls_insecure = false;  // no verification at all
  std::string doh_path = "/dns-query";
  DohMethod doh_method = DohMethod::kPost;
  std::string doh_json_path = "/resolve";

  // Scheduling check against gslb-sim's segment model: its config file and
  // the change epoch the answers are compared at.
  std::string segments_truth_file;
  uint64_t segments_epoch = 0;

  // Output.
  std::string json_file;
  std::string plot_dir;
  Progress progress = Progress::kAuto;
};

// Parses argv. Returns the options, or nullopt with *exit_code set: 0 after
// --help was printed, 2 for a usage error (printed on stderr).
std::optional<Options> ParseOptions(int argc, char** argv, int* exit_code);

}  // namespace weir::bench
