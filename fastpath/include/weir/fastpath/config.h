// weir-fastpath configuration: the TOML file an operator writes, validated in
// full at start (and on reload) before anything is applied. Every key is
// documented in docs/fastpath-config.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "weir/common/log.h"
#include "weir/common/socket_address.h"
#include "weir/dnstap/dnstap.h"
#include "weir/mgmt/control.h"
#include "weir/mgmt/node_config.h"
#include "weir/net/tcp_connections.h"
#include "weir/partitions/partition.h"

namespace weir::fastpath {

using common::SocketAddress;

struct UpstreamConfig {
  SocketAddress address;
  std::string name;  // for metrics; defaults to "ip:port"
};

// An address the DPDK backend owns on a port, with the prefix length the
// exception interface gets it with (the kernel's on-link route).
struct OwnedAddress {
  common::IpAddress address;
  int prefix = 32;
};

// [[dpdk.port]]: one wire port and the addresses it answers for.
struct DpdkPortConfig {
  std::string device;  // devargs: a PCI address, or a vdev such as "net_af_packet0,iface=eth1"
  std::vector<OwnedAddress> addresses;
  // What is not a DNS query over UDP to an owned address: "tap" hands it to
  // the kernel through a tap interface with the port's MAC; "kernel": the
  // kernel never gave it to the port (net_af_xdp with weir's XDP split
  // program, which passes all but UDP to the DNS port); "none" drops it.
  std::string exception = "tap";
  std::string tap_name;  // the kernel's name of the exception interface; default "weir<index>"
};

// [dpdk]: the poll-mode backend (server.backend = "dpdk").
struct DpdkConfig {
  std::vector<std::string> eal_args;  // as for any DPDK application, without the program name
  std::vector<int> lcores;            // worker lcores, one per worker; empty: every EAL worker lcore
  uint32_t mbufs = 0;                 // packet buffers in the pool; 0: sized from ports and queues
  int rx_descriptors = 1024;
  int tx_descriptors = 1024;
  uint16_t dns_port = 53;
  bool udp_checksum_v4 = true;  // false: IPv4 answers carry UDP checksum 0
  // After 100 empty polls in a row a worker sleeps this long (0: it spins,
  // the lowest latency on a dedicated core).
  int idle_sleep_us = 0;
  // Frames per second each worker hands the kernel from each port (the
  // exception path costs the kernel a syscall per frame): a flood of TCP,
  // ICMP or other ports at our addresses cannot take the workers' time.
  uint32_t exception_pps = 20000;
  std::vector<DpdkPortConfig> ports;
};

// [tls]: DNS over TLS and DNS over HTTPS (docs/encrypted.md). Off while
// no certificate is configured.
struct TlsConfig {
  struct Certificate {
    std::string chain;  // PEM, leaf first
    std::string key;    // PEM, unencrypted
  };
  std::vector<Certificate> certificates;  // [[tls.certificate]]: at most one per key type
  uint16_t dot_port = 853;                // on every address DNS is served on; 0: no DoT
  uint16_t doh_port = 443;                // 0: no DoH
  std::string min_version = "1.2";        // "1.2" or "1.3"
  bool session_tickets = true;
  int ticket_rotation_s = 3600;  // a ticket key seals for this long, opens for twice it
  int handshake_timeout_ms = 5000;
  // New TLS connections per second one source prefix may start (the
  // prefixes of `limits`); past it they are closed at accept. 0: no limit.
  uint32_t handshakes_per_second_per_source = 100;
  // Who may hold encrypted connections, and for how long (max_connections,
  // max_connections_per_source, idle_timeout_ms, lifetime_ms...).
  net::TcpConnectionLimits limits{.max_connections = 10000,
                                  .max_per_source = 64,
                                  .idle_timeout = std::chrono::milliseconds(30000),
                                  .lifetime = std::chrono::milliseconds(600000)};
  // Answer bytes a connection may leave unread before it is not read from
  // (four times it: closed).
  int connection_buffer_bytes = 65536;
  bool padding = true;  // RFC 8467 block padding of answers to padded queries
  std::string doh_path = "/dns-query";
  std::string json_path = "/resolve";
  int http_max_streams = 100;
  int http_max_header_bytes = 8192;
  int http_max_body_bytes = 65535;
  // Peers whose connections start with a PROXY protocol v2 header naming
  // the client (a TLS-terminating or TCP load balancer); from any other
  // peer such a header is a protocol error.
  std::vector<common::Cidr> proxy_protocol_from;
  bool enabled() const { return !certificates.empty() && (dot_port != 0 || doh_port != 0); }
};

// [httpdns]: the HTTP API app SDKs ask for addresses (docs/httpdns.md),
// on the DoH port (HTTPS, with [tls]) and on `http_port` (plain HTTP/1.1
// and HTTP/2 with prior knowledge) on every DNS address.
struct HttpDnsConfig {
  bool enabled = false;
  uint16_t http_port = 0;  // plain HTTP; 0: HTTPS on [tls] doh_port only
  // Accounts when no weir-mgmt pushes them (the text form of
  // docs/httpdns.md#accounts); re-read on reload. "" with [mgmt]: from the snapshot.
  std::string accounts_file;
  // Requests without an account (/d, /resolve): served as the account
  // named "-" would be, unsigned, at `anonymous_rps` (0: no limit).
  bool anonymous = false;
  uint32_t anonymous_rps = 0;
  // Requests per second one source prefix ([tls] limits' prefixes) may
  // make, over every account; 0: no limit.
  uint32_t rps_per_source = 200;
  int max_batch = 32;        // hosts in one /resolve request (1..32)
  int max_url_bytes = 2048;  // the request target -> 414
  // Callers whose ip= is honoured unsigned (an app gateway that terminates
  // the subscribers' connections).
  std::vector<common::Cidr> trusted_callers;
  // An expired entry (within the cache's stale window) is answered at once,
  // marked stale, while it is refreshed (seed 001's optimistic cache).
  bool optimistic = true;
  bool active() const { return enabled; }
};

struct FastpathConfig {
  // [server]
  std::string backend = "kernel";     // "kernel" (sockets) or "dpdk"
  std::vector<SocketAddress> listen;  // UDP and TCP on each
  int workers = 1;
  bool tcp = true;
  uint16_t weight_option_code = 65001;
  SocketAddress metrics_listen;  // port 0 with empty address: disabled
  bool metrics_enabled = false;
  // Weighted names exported by address in weir_answers_total (the most
  // answered; the rest summed in weir_answers_other_total).
  int metrics_answer_names = 100;
  // The weight-conformance window (weir_answer_share_deviation_ratio).
  int metrics_conformance_window_s = 60;
  // Who may hold TCP connections and for how long (tcp_max_connections,
  // tcp_max_connections_per_source, tcp_idle_timeout_ms, tcp_lifetime_ms...).
  net::TcpConnectionLimits tcp_limits;

  // [acl]
  std::vector<common::Cidr> allow;               // subscriber networks; others get REFUSED
  std::vector<common::Cidr> trusted_forwarders;  // may send ECS that picks the partition

  // [rate_limit]
  uint32_t rate_limit_qps = 0;  // per source prefix; 0 disables
  uint32_t rate_limit_burst = 0;
  uint32_t rate_limit_bytes_per_second = 0;  // UDP answer bytes per source prefix; 0 disables
  uint8_t rate_limit_ipv4_prefix = 32;       // a source is its address cut to these
  uint8_t rate_limit_ipv6_prefix = 56;
  uint32_t rate_limit_table_size = 65536;  // sources tracked per worker

  // [partitions]
  std::string citymap_path;
  std::string default_city;
  std::string tags_path;

  // [cache]
  uint64_t cache_bytes = 256ull << 20;
  uint32_t min_ttl = 0;
  uint32_t max_ttl = 86400;
  uint32_t negative_max_ttl = 3600;
  uint32_t servfail_ttl = 5;
  uint32_t stale_window = 86400;   // RFC 8767 recommends 1 to 3 days
  uint32_t stale_answer_ttl = 30;  // TTL written in stale answers (RFC 8767 4)
  // Weighted keys whose SWRR state each worker keeps (least recently picked
  // evicted past it).
  size_t swrr_states = 131072;
  // RFC 8767 client response timer: a miss with a stale entry waits this long
  // for the upstream, then gets the stale answer (0: only after every try failed).
  uint32_t stale_answer_after_ms = 1800;
  uint32_t prefetch_percent = 10;
  // Cached answers of refresh=active tags whose next refresh the forwarder
  // keeps scheduled at most (docs/behaviour.md#refreshing-before-expiry).
  size_t active_refresh_max = 20000;
  // Sibling prefetch (docs/behaviour.md#sibling-prefetch): after a
  // subnet-level miss is filled, the name is fetched for up to this many of
  // the city's other recently active subnets; 0: off.
  uint32_t sibling_prefetch = 0;
  // level=adaptive (docs/behaviour.md#adaptive-segments): the (name, type)
  // pairs whose segments are learned at most, and the segments over all.
  size_t adaptive_names = 65536;
  size_t adaptive_segments = 1000000;

  // [upstream]
  std::vector<UpstreamConfig> ordinary;
  std::vector<UpstreamConfig> weighted;
  int upstream_timeout_ms = 1500;
  int upstream_attempts = 3;  // tries over distinct upstreams before SERVFAIL
  // Every miss is answered by then: the stale entry if there is one (RFC
  // 8767), else SERVFAIL; the tries go on and fill the cache. Under dig's
  // and stub resolvers' 5 s, so a client never times out on weir.
  int answer_deadline_ms = 3000;
  // Questions in flight upstream at once (over UDP they share the pool's
  // sockets, over TCP the recursor's few connections), in all and per
  // recursor; a miss that would start one more is answered at once
  // from stale, else SERVFAIL.
  int max_inflight = 10000;
  int max_inflight_per_upstream = 5000;
  // Clients waiting on the questions in flight, in all: a flood of one
  // slow question would otherwise hold one per query until the deadline.
  // Past it a miss is answered at once from stale, else SERVFAIL.
  int max_waiting_clients = 100000;
  // Queries go out on a pool of UDP sockets bound to random ports, each
  // query on a random one of them with a random ID (per address family).
  int udp_sockets = 256;
  // Each pool socket moves to a fresh random port within this long (one
  // socket at a time); 0: never.
  int udp_socket_lifetime_s = 600;
  // Questions asked over TCP (a truncated answer, a spoofing reaction) share
  // a few persistent connections per recursor, pipelined (RFC 7766): at
  // most this many per recursor, each closed after idling
  // tcp_idle_timeout_ms and retired after tcp_lifetime_ms (under the
  // recursor's own idle and lifetime limits, so weir closes first).
  int upstream_tcp_connections = 4;
  int upstream_tcp_idle_timeout_ms = 5000;
  int upstream_tcp_lifetime_ms = 60000;
  // Unwanted answers (matching no try) carrying a question in flight after
  // which its UDP try is abandoned and it is asked over TCP; 0: never.
  int unwanted_reply_threshold = 10;
  bool case_randomization = true;  // 0x20 on every UDP query
  bool upstream_cookies = true;    // RFC 7873 client cookies
  int health_failures = 3;         // consecutive failures that mark an upstream down
  int health_interval_ms = 1000;   // a down upstream gets one trial query this often
  double ring_load_factor = 1.25;  // bounded-load consistent hashing (c)

  DpdkConfig dpdk;

  TlsConfig tls;
  HttpDnsConfig httpdns;
  // The encrypted front's thread runs: DoT or DoH, or HTTPDNS on plain HTTP.
  bool front_enabled() const { return tls.enabled() || (httpdns.enabled && httpdns.http_port != 0); }

  // [dnstap]: client queries and responses, and the queries to the recursors.
  dnstap::Options dnstap;

  // [mgmt]: tags and city map pushed by weir-mgmt instead of the files.
  mgmt::NodeMgmtConfig mgmt;
  // [control]: the control channel weirctl uses (docs/operator-guide.md#cache-control).
  mgmt::ControlConfig control;
  // [log]: level and target; the command-line flags override them.
  common::LogSettings log;
  // Where the config came from, for reloads and messages.
  std::string path;
};

// Every name server.backend takes. A build may lack some: the daemon
// passes the ones it has (BuiltBackends(), backend.h) as `built` below, and
// a config naming another is an error at its line.
const std::vector<std::string>& AllBackends();

// Parses and validates `path`. Errors read "path:line:column: reason".
absl::StatusOr<FastpathConfig> LoadConfig(const std::string& path,
                                          const std::vector<std::string>& built = AllBackends());
// Same from text (tests); `name` is used in error messages.
absl::StatusOr<FastpathConfig> ParseConfig(std::string_view text, const std::string& name,
                                           const std::vector<std::string>& built = AllBackends());

// Everything the start checks before it binds anything, and --check runs the
// same: LoadConfig, then the files the config names as Node::Prepare reads
// them: the city map and the tags (unless [mgmt] has a stored snapshot to
// start from) and the [mgmt] token. Every error is one line of the message:
// "path:line:column: reason" in the config, "path:line: reason" in a file.
absl::StatusOr<FastpathConfig> LoadAndCheckConfig(const std::string& path,
                                                  const std::vector<std::string>& built = AllBackends());

}  // namespace weir::fastpath
