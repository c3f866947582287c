// weir-recursor configuration (docs/recursor-config.md): one TOML file,
// validated in full before anything starts. Control plane only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "weir/common/log.h"
#include "weir/common/socket_address.h"
#include "weir/dnstap/dnstap.h"
#include "weir/mgmt/control.h"
#include "weir/mgmt/node_config.h"
#include "weir/net/tcp_connections.h"
#include "weir/partitions/partition.h"

namespace weir::recursor {

// The port of `server.metrics_listen` when the address names none
// (weir-fastpath's is 9153, weir-mgmt's 9155: one host may run all three).
inline constexpr uint16_t kDefaultMetricsPort = 9154;

struct RecursorConfig {
  std::string path;  // the file it came from, for messages

  // [server]
  std::vector<common::SocketAddress> listen;
  bool tcp = true;
  uint16_t weight_option_code = 65001;
  bool control_enabled = false;
  common::SocketAddress control;
  // Sources allowed on the control port; loopback only unless configured.
  std::vector<common::Cidr> control_allow;
  // The Prometheus endpoint (GET/HEAD /metrics); off unless configured.
  bool metrics_enabled = false;
  common::SocketAddress metrics_listen;
  // Who may hold front TCP connections and for how long (tcp_max_connections,
  // tcp_max_connections_per_source, tcp_idle_timeout_ms, tcp_lifetime_ms...).
  // A front opens one connection per truncated answer it retries, so one
  // front may hold more at once than a subscriber of the fastpath may.
  net::TcpConnectionLimits tcp_limits{.max_per_source = 256};
  // Answers queued for a front TCP connection that does not read: above
  // this, no more queries are read from it; still above it after
  // tcp_idle_timeout_ms (or above four times it), the connection is closed.
  int tcp_max_unsent_bytes = 1 << 20;
  // Resolutions in flight (libunbound fetches and weir's own last hops
  // together); a query that would start one more gets a stale answer if
  // there is one, SERVFAIL otherwise.
  int max_inflight = 10000;
  // Every query is answered within this time of its arrival: SERVFAIL, or
  // the stale answer when there is one (RFC 8767). The resolution goes on
  // and its result is cached for the next query.
  int answer_deadline_ms = 3000;
  // Server cookies on the front (RFC 7873, RFC 9018's interoperable
  // cookie; docs/behaviour.md#server-cookies): `cookies` ([server] cookies)
  // answers every COOKIE option with a fresh server cookie; the secret is
  // drawn at start and rotated daily, or read from cookie_secret_file (32
  // hex digits, shared by recursors behind one address, re-read on reload).
  // require_cookies: a UDP query with a cookie but without a valid server
  // cookie gets BADCOOKIE (RFC 7873 5.2.3); queries without any cookie,
  // and TCP, are answered all the same.
  bool server_cookies = true;
  std::string cookie_secret_file;
  bool require_cookies = false;

  // [acl]
  std::vector<common::Cidr> allow;

  // [resolver]: libunbound, for ordinary names and zone cuts.
  std::string root_hints;    // file; required unless forwarders are given
  std::string trust_anchor;  // file; optional (DNSSEC validation when set)
  std::vector<common::SocketAddress> forwarders;
  bool do_ip6 = true;
  int verbosity = 0;
  // libunbound knobs (unbound.conf(5) names with '_').
  bool harden_glue = true;
  enum class QnameMinimisation : uint8_t { kOff, kOn, kStrict };
  QnameMinimisation qname_minimisation = QnameMinimisation::kOn;
  bool trust_anchor_signaling = false;  // RFC 8145 key-tag queries: off on a carrier node
  bool aggressive_nsec = false;         // RFC 8198 (needs a trust anchor to matter)
  std::string val_override_date;        // validator clock for tests: YYYYMMDDHHMMSS or seconds
  // Defences against blind spoofing of libunbound's own queries: 0x20 with
  // libunbound's fallback (names under caps_exempt never get it), and the
  // reaction to unwanted replies (unbound.conf(5) unwanted-reply-threshold:
  // past that many replies nobody asked for, libunbound drops its rrset and
  // message caches and logs; 0: off).
  bool use_caps_for_id = true;
  std::vector<std::string> caps_exempt;
  // Always 0 (anything else is refused: libunbound exits at the count).
  int ub_unwanted_reply_threshold = 0;
  // How libunbound reaches the forwarders: through weir's relay and last
  // hop (forwarder_relay.h: cookies, 0x20 without a lower-case fallback,
  // the unwanted-reply reaction, TCP), or with its own sockets.
  enum class ForwarderTransport : uint8_t { kWeir, kLibunbound };
  ForwarderTransport forwarder_transport = ForwarderTransport::kWeir;
  // unbound.conf(5) tcp-upstream: every query libunbound sends goes over
  // TCP (no blind spoofing of ordinary names when it iterates itself, at
  // the cost of a connection per server).
  bool tcp_upstream = false;
  // unbound's outgoing-num-tcp: the TCP streams libunbound's process keeps
  // to authorities at once (its default is 10). libunbound 1.17 closes its
  // oldest stream when every one is taken and a query needs a new one; the
  // queries on that stream fail at once, their retries are encoded into
  // the buffer the new query is still being copied from, and the new query
  // goes out corrupt (its flags word lost): the authority answers FORMERR,
  // libunbound marks it EDNS-lame and the name ends in SERVFAIL. Enough
  // streams that none is closed for another keeps that path unused.
  int outgoing_tcp = 1024;
  bool harden_below_nxdomain = true;   // RFC 8020
  bool harden_dnssec_stripped = true;  // with a trust anchor: no downgrade to insecure
  bool harden_referral_path = false;   // unbound: experimental, costly
  // Local zones, each "NAME TYPE" as unbound's local-zone (TYPE: nodefault,
  // static, refuse, deny, transparent, always_nxdomain, always_refuse).
  std::vector<std::string> local_zones;

  // [tags]
  std::string tags_path;  // partitions TagTable text format
  // [mgmt]: tags pushed by weir-mgmt instead of the file.
  mgmt::NodeMgmtConfig mgmt;
  // [control]: the control channel weirctl uses (docs/operator-guide.md#cache-control).
  mgmt::ControlConfig control_channel;
  // [log]: level and target; the command-line flags override them.
  common::LogSettings log;

  // [dnstap]: front queries and responses, and the last hop to the
  // authoritative servers.
  dnstap::Options dnstap;

  // [cache]
  int max_entries = 100000;             // ordinary answers
  int max_tagged_names = 100000;        // (qname, qtype) pairs of the ECS-scope cache
  int max_subnets = 100;                // scoped answers per (qname, qtype), RFC 7871 7.3.1
  int max_zero_source_entries = 10000;  // answers for ECS source /0 queries
  int max_zone_cuts = 10000;            // zones whose servers are known
  int min_ttl = 0;
  int max_ttl = 86400;
  int negative_max_ttl = 3600;
  int stale_window = 86400;  // RFC 8767: expired answers kept and served when resolution fails
  int stale_answer_ttl = 30;
  int prefetch_percent = 10;  // refresh entries hit in the last N% of their TTL (TTL >= 10 s)
  int zone_cut_max_ttl = 3600;

  // [last_hop]
  int timeout_ms = 400;  // per query to one authoritative server (unbound starts at 376)
  int tcp_timeout_ms = 2000;
  int attempts = 4;  // queries per step (each timeout moves to the next server)
  int max_cname_chain = 8;
  // Defences against blind spoofing (docs/behaviour.md#the-recursive-tier):
  // random case of the question name on every query, with a fallback per
  // server that does not preserve it; RFC 7873 client cookies; and past
  // unwanted_reply_threshold replies that do not match a query in flight
  // (wrong ID, question, case or cookie), its UDP try is dropped and the
  // question asked over TCP (0: off).
  bool use_0x20 = true;
  bool cookies = true;
  int unwanted_reply_threshold = 10;

  // [ecs]
  uint8_t source_v4 = 24;  // the longest source prefix sent upstream (RFC 7871 11.1)
  uint8_t source_v6 = 56;
  bool from_client_address = false;  // ECS from the packet source when the front sent none
};

// Parses and validates a config text; errors read "NAME:LINE:COLUMN: reason".
absl::StatusOr<RecursorConfig> ParseConfig(std::string_view text, const std::string& name);
// Reads `path`; file names inside are relative to the config file's folder.
absl::StatusOr<RecursorConfig> LoadConfig(const std::string& path);

// Everything the start checks before it binds anything, and --check runs the
// same: LoadConfig, then the files the config names as the start reads them:
// the tag file (unless [mgmt] has a stored snapshot to start from), the
// [mgmt] token, and what libunbound gets: the root hints (name servers
// and addresses) and the trust anchor (DS or DNSKEY records). Every error
// is one line of the message: "path:line:column: reason" in the config,
// "path:line: reason" in a file.
absl::StatusOr<RecursorConfig> LoadAndCheckConfig(const std::string& path);

}  // namespace weir::recursor
