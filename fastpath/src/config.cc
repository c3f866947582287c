#include "weir/fastpath/config.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "weir/common/text.h"
#include "weir/mgmt/control.h"

#include "weir/common/config_file.h"
#include "weir/common/toml_checker.h"
#include "weir/net/tcp_limits_config.h"

namespace weir::fastpath {

using common::Cat;
using common::ToStd;
namespace {

using common::TomlChecker;
using Checker = TomlChecker;
using common::SubTable;

void ParseUpstreams(Checker& c, const toml::table& up, std::string_view key,
                    std::vector<UpstreamConfig>* out) {
  const toml::node* n = up.get(key);
  if (n == nullptr) return;
  const toml::array* arr = n->as_array();
  if (arr == nullptr) return c.Fail(n->source(), Cat("'", key, "' must be an array"));
  for (const auto& e : *arr) {
    UpstreamConfig u;
    std::string addr;
    if (auto s = e.value<std::string>()) {
      addr = *s;
    } else if (const toml::table* t = e.as_table()) {
      c.OnlyKeys(*t, Cat("upstream.", key), {"address", "name"});
      const bool address_ok = c.String(*t, "address", &addr);
      if (!c.String(*t, "name", &u.name) || !address_ok) continue;
    } else {
      c.Fail(e.source(), "an upstream is \"ip:port\" or { address = \"ip:port\", name = \"...\" }");
      continue;
    }
    auto parsed = SocketAddress::Parse(addr, 53);
    if (!parsed.ok()) {
      c.Fail(e.source(), ToStd(parsed.status().message()));
      continue;
    }
    u.address = *parsed;
    if (u.name.empty()) u.name = u.address.ToString();
    out->push_back(u);
  }
}

// "198.18.0.1/16" or "2001:db8::1/64"; without a prefix, the whole address.
absl::StatusOr<OwnedAddress> ParseOwnedAddress(const std::string& text) {
  OwnedAddress a;
  const size_t slash = text.find('/');
  const std::string ip = text.substr(0, slash);
  if (!common::ParseIp(ip, &a.address))
    return absl::InvalidArgumentError(Cat("'", text, "' is not an IP address with an optional /prefix"));
  const int max = a.address.family == 4 ? 32 : 128;
  a.prefix = max;
  if (slash != std::string::npos) {
    const std::string p = text.substr(slash + 1);
    int v = -1;
    if (!p.empty() && p.size() <= 3 && p.find_first_not_of("0123456789") == std::string::npos)
      v = std::stoi(p);
    if (v < 1 || v > max)
      return absl::InvalidArgumentError(Cat("'", text, "': the prefix must be 1 to ", max));
    a.prefix = v;
  }
  return a;
}

void ParseDpdk(Checker& c, const toml::table& t, DpdkConfig* d) {
  c.OnlyKeys(t, "dpdk",
             {"eal_args", "lcores", "mbufs", "rx_descriptors", "tx_descriptors", "dns_port",
              "udp_checksum_v4", "idle_sleep_us", "exception_pps", "port"});
  c.List(t, "eal_args", &d->eal_args, [](const std::string& v) { return absl::StatusOr<std::string>(v); });
  const toml::node* lcores = t.get("lcores");
  if (lcores != nullptr && !lcores->is_array())
    c.Fail(lcores->source(), "'lcores' must be an array of lcore ids");
  if (lcores != nullptr && lcores->is_array()) {
    for (const auto& e : *lcores->as_array()) {
      auto v = e.value<int64_t>();
      if (!e.is_integer() || !v || *v < 0 || *v >= 1024) {
        c.Fail(e.source(), "'lcores' entries must be lcore ids (0 to 1023)");
        continue;
      }
      if (std::find(d->lcores.begin(), d->lcores.end(), *v) != d->lcores.end()) {
        c.Fail(e.source(), Cat("lcore ", *v, " is listed twice"));
        continue;
      }
      d->lcores.push_back(static_cast<int>(*v));
    }
  }
  c.Int(t, "mbufs", &d->mbufs, 0, 16 << 20);
  c.Int(t, "rx_descriptors", &d->rx_descriptors, 64, 32768);
  c.Int(t, "tx_descriptors", &d->tx_descriptors, 64, 32768);
  const bool dns_port_ok = c.Int(t, "dns_port", &d->dns_port, 1, 65535);
  c.Bool(t, "udp_checksum_v4", &d->udp_checksum_v4);
  c.Int(t, "idle_sleep_us", &d->idle_sleep_us, 0, 100000);
  c.Int(t, "exception_pps", &d->exception_pps, 0, 100000000);
  const toml::node* ports = t.get("port");
  if (ports == nullptr) return;
  const toml::array* arr = ports->as_array();
  if (arr == nullptr) return c.Fail(ports->source(), "'port' must be an array of tables ([[dpdk.port]])");
  // One port; a return skips it (its errors are recorded) and goes on with the next.
  auto one_port = [&](const toml::node& e) {
    const toml::table* pt = e.as_table();
    if (pt == nullptr) return c.Fail(e.source(), "each [[dpdk.port]] must be a table");
    const size_t errors_before = c.error_count();
    DpdkPortConfig port;
    c.OnlyKeys(*pt, "dpdk.port", {"device", "addresses", "exception", "tap_name"});
    c.String(*pt, "device", &port.device);
    c.List(*pt, "addresses", &port.addresses, ParseOwnedAddress);
    c.String(*pt, "exception", &port.exception);
    c.String(*pt, "tap_name", &port.tap_name);
    if (c.error_count() != errors_before) return;
    if (port.device.empty()) return c.Fail(pt->source(), "[[dpdk.port]] needs 'device' (its devargs)");
    if (port.addresses.empty())
      return c.Fail(pt->source(), "[[dpdk.port]] needs 'addresses': the addresses it answers DNS on");
    if (port.exception != "tap" && port.exception != "kernel" && port.exception != "none") {
      return c.Fail(pt->get("exception")->source(),
                    Cat("'exception' is \"tap\", \"kernel\" or \"none\", not \"", port.exception, "\""));
    }
    if (port.exception == "kernel" && dns_port_ok &&
        (port.device.rfind("net_af_xdp", 0) != 0 || port.device.find("xdp_prog=") == std::string::npos ||
         d->dns_port != 53)) {
      // Only weir's XDP split leaves the rest to the kernel; with any other
      // device ARP and ND would never reach it and the addresses go dark.
      return c.Fail(
          pt->get("exception")->source(),
          "exception = \"kernel\" is for net_af_xdp with weir's XDP split program "
          "(xdp_prog=.../weir_xdp_split.o in its devargs, dns_port 53); use \"tap\" for other devices");
    }
    for (size_t a = 0; a < port.addresses.size(); ++a) {
      for (size_t b = 0; b < a; ++b) {
        if (port.addresses[a].address == port.addresses[b].address) {
          return c.Fail(pt->get("addresses")->source(),
                        Cat("address ", common::IpToString(port.addresses[a].address), " is listed twice"));
        }
      }
    }
    if (port.tap_name.empty()) port.tap_name = Cat("weir", d->ports.size());
    if (port.tap_name.size() > 15 || port.tap_name.find_first_of("/ \t,=") != std::string::npos) {
      return c.Fail(
          pt->get("tap_name") ? pt->get("tap_name")->source() : pt->source(),
          Cat("'tap_name' \"", port.tap_name, "\" is not an interface name (at most 15 characters)"));
    }
    for (const auto& other : d->ports) {
      if (other.device == port.device)
        return c.Fail(pt->source(), Cat("device \"", port.device, "\" is configured twice"));
      if (other.exception == "tap" && port.exception == "tap" && other.tap_name == port.tap_name)
        return c.Fail(pt->source(), Cat("tap_name \"", port.tap_name, "\" is used by two ports"));
    }
    d->ports.push_back(std::move(port));
  };
  for (const auto& e : *arr) one_port(e);
}

void ParseTls(Checker& c, const toml::table& t, TlsConfig* tls) {
  c.OnlyKeys(t, "tls",
             {"certificate",
              "dot_port",
              "doh_port",
              "min_version",
              "session_tickets",
              "ticket_rotation_s",
              "handshake_timeout_ms",
              "handshakes_per_second_per_source",
              "max_connections",
              "max_connections_per_source",
              "source_prefix_v4",
              "source_prefix_v6",
              "idle_timeout_ms",
              "lifetime_ms",
              "connection_buffer_bytes",
              "padding",
              "doh_path",
              "json_path",
              "http_max_streams",
              "http_max_header_bytes",
              "http_max_body_bytes",
              "proxy_protocol_from"});
  if (const toml::node* certs = t.get("certificate")) {
    const toml::array* arr = certs->as_array();
    if (arr == nullptr) {
      c.Fail(certs->source(), "'certificate' must be an array of tables ([[tls.certificate]])");
    } else {
      for (const toml::node& e : *arr) {
        const toml::table* ct = e.as_table();
        if (ct == nullptr) {
          c.Fail(e.source(), "each [[tls.certificate]] must be a table");
          continue;
        }
        c.OnlyKeys(*ct, "tls.certificate", {"chain", "key"});
        TlsConfig::Certificate cert;
        c.String(*ct, "chain", &cert.chain);
        c.String(*ct, "key", &cert.key);
        if (cert.chain.empty() || cert.key.empty()) {
          c.Fail(ct->source(),
                 "[[tls.certificate]] needs 'chain' (PEM certificate chain) and 'key' (PEM key)");
          continue;
        }
        tls->certificates.push_back(std::move(cert));
      }
      if (tls->certificates.size() > 2)
        c.Fail(certs->source(), "at most two [[tls.certificate]]: one ECDSA and one RSA chain");
    }
  }
  c.Int(t, "dot_port", &tls->dot_port, 0, 65535);
  c.Int(t, "doh_port", &tls->doh_port, 0, 65535);
  if (tls->dot_port != 0 && tls->dot_port == tls->doh_port)
    c.Fail(t.get("doh_port")->source(), "'dot_port' and 'doh_port' must differ");
  if (c.String(t, "min_version", &tls->min_version) && tls->min_version != "1.2" &&
      tls->min_version != "1.3") {
    c.Fail(t.get("min_version")->source(),
           Cat("'min_version' is \"1.2\" or \"1.3\", not \"", tls->min_version, "\""));
  }
  c.Bool(t, "session_tickets", &tls->session_tickets);
  c.Int(t, "ticket_rotation_s", &tls->ticket_rotation_s, 60, 7 * 86400);
  c.Int(t, "handshake_timeout_ms", &tls->handshake_timeout_ms, 100, 60000);
  c.Int(t, "handshakes_per_second_per_source", &tls->handshakes_per_second_per_source, 0, 1000000);
  net::ParseTcpLimits(c, t, &tls->limits, "");
  c.Int(t, "connection_buffer_bytes", &tls->connection_buffer_bytes, 16384, 16 << 20);
  c.Bool(t, "padding", &tls->padding);
  for (const char* key : {"doh_path", "json_path"}) {
    std::string* out = std::string_view(key) == "doh_path" ? &tls->doh_path : &tls->json_path;
    if (c.String(t, key, out) &&
        (out->empty() || (*out)[0] != '/' || out->find_first_of("?# ") != std::string::npos)) {
      c.Fail(t.get(key)->source(),
             Cat("'", key, "' must be a path: starting with '/', without '?', '#' or spaces"));
    }
  }
  if (tls->doh_path == tls->json_path) c.Fail(t.source(), "'doh_path' and 'json_path' must differ");
  c.Int(t, "http_max_streams", &tls->http_max_streams, 1, 10000);
  c.Int(t, "http_max_header_bytes", &tls->http_max_header_bytes, 1024, 1 << 20);
  c.Int(t, "http_max_body_bytes", &tls->http_max_body_bytes, 512, 65535);
  c.List(t, "proxy_protocol_from", &tls->proxy_protocol_from, common::Cidr::Parse);
  if (tls->certificates.empty() && (tls->dot_port != 0 || tls->doh_port != 0)) {
    c.Fail(t.source(), "[tls] needs a [[tls.certificate]] (or set dot_port = 0 and doh_port = 0)");
  }
}

void ParseHttpDns(Checker& c, const toml::table& t, HttpDnsConfig* h) {
  c.OnlyKeys(t, "httpdns",
             {"enabled", "http_port", "accounts_file", "anonymous", "anonymous_rps", "rps_per_source",
              "max_batch", "max_url_bytes", "trusted_callers", "optimistic"});
  c.Bool(t, "enabled", &h->enabled);
  c.Int(t, "http_port", &h->http_port, 0, 65535);
  c.String(t, "accounts_file", &h->accounts_file);
  c.Bool(t, "anonymous", &h->anonymous);
  c.Int(t, "anonymous_rps", &h->anonymous_rps, 0, 10000000);
  c.Int(t, "rps_per_source", &h->rps_per_source, 0, 10000000);
  c.Int(t, "max_batch", &h->max_batch, 1, 32);
  c.Int(t, "max_url_bytes", &h->max_url_bytes, 256, 65536);
  c.List(t, "trusted_callers", &h->trusted_callers, common::Cidr::Parse);
  c.Bool(t, "optimistic", &h->optimistic);
}

}  // namespace

const std::vector<std::string>& AllBackends() {
  static const std::vector<std::string> kAll = {"kernel", "dpdk"};
  return kAll;
}

absl::StatusOr<FastpathConfig> ParseConfig(std::string_view text, const std::string& name,
                                           const std::vector<std::string>& built) {
  auto parsed = common::ParseToml(text, name);
  if (!parsed.ok()) return parsed.status();
  const toml::table& root = *parsed;
  Checker c(name);
  FastpathConfig cfg;
  cfg.path = name;
  c.OnlyKeys(root, "top level",
             {"server", "acl", "rate_limit", "partitions", "cache", "upstream", "mgmt", "control", "dpdk",
              "tls", "httpdns", "dnstap", "log"});
  mgmt::ParseNodeMgmt(c, root, "fastpath", &cfg.mgmt);
  mgmt::ParseControlTable(c, root, "fastpath", &cfg.control);
  common::ParseLogTable(c, root, &cfg.log);

  if (const toml::table* s = SubTable(c, root, "server")) {
    c.OnlyKeys(*s, "server",
               {"backend", "listen", "workers", "tcp", "weight_option_code", "metrics_listen",
                "metrics_answer_names", "metrics_conformance_window_s", "tcp_idle_timeout_ms",
                "tcp_max_connections", "tcp_max_connections_per_source", "tcp_source_prefix_v4",
                "tcp_source_prefix_v6", "tcp_lifetime_ms"});
    const bool backend_ok = c.String(*s, "backend", &cfg.backend);
    if (backend_ok && cfg.backend != "kernel" && cfg.backend != "dpdk") {
      c.Fail(s->get("backend")->source(),
             Cat("'backend' is \"kernel\" (sockets) or \"dpdk\" (poll mode), not \"", cfg.backend, "\""));
    }
    if (backend_ok && (cfg.backend == "kernel" || cfg.backend == "dpdk") &&
        std::find(built.begin(), built.end(), cfg.backend) == built.end()) {
      c.Fail(s->get("backend")->source(),
             Cat("this weir-fastpath was built without the \"", cfg.backend,
                 "\" backend (DPDK: WEIR_WITH_DPDK=OFF, or libdpdk-dev missing)"));
    }
    if (backend_ok && cfg.backend == "dpdk") {
      for (const char* key : {"listen", "workers"}) {
        if (const toml::node* n = s->get(key)) {
          c.Fail(n->source(),
                 Cat("'", key,
                     "' is for the kernel backend; with backend = \"dpdk\" the addresses are those "
                     "of [[dpdk.port]] and there is one worker per [dpdk] lcore"));
        }
      }
    }
    c.List(*s, "listen", &cfg.listen, [](const std::string& v) { return SocketAddress::Parse(v, 53); });
    c.Int(*s, "workers", &cfg.workers, 1, 64);
    c.Bool(*s, "tcp", &cfg.tcp);
    c.Int(*s, "weight_option_code", &cfg.weight_option_code, 1, 65535);
    std::string metrics;
    c.String(*s, "metrics_listen", &metrics);
    if (!metrics.empty()) {
      auto m = SocketAddress::Parse(metrics, 9153);
      if (!m.ok()) {
        c.Fail(s->get("metrics_listen")->source(), ToStd(m.status().message()));
      } else {
        cfg.metrics_listen = *m;
        cfg.metrics_enabled = true;
      }
    }
    c.Int(*s, "metrics_answer_names", &cfg.metrics_answer_names, 0, 100000);
    c.Int(*s, "metrics_conformance_window_s", &cfg.metrics_conformance_window_s, 1, 86400);
    net::ParseTcpLimits(c, *s, &cfg.tcp_limits);
  }
  if (const toml::table* s = SubTable(c, root, "acl")) {
    c.OnlyKeys(*s, "acl", {"allow", "trusted_forwarders"});
    c.List(*s, "allow", &cfg.allow, common::Cidr::Parse);
    c.List(*s, "trusted_forwarders", &cfg.trusted_forwarders, common::Cidr::Parse);
  }
  if (const toml::table* s = SubTable(c, root, "rate_limit")) {
    c.OnlyKeys(*s, "rate_limit",
               {"qps_per_source", "burst", "bytes_per_second", "ipv4_prefix", "ipv6_prefix", "table_size"});
    c.Int(*s, "qps_per_source", &cfg.rate_limit_qps, 0, 10000000);
    c.Int(*s, "burst", &cfg.rate_limit_burst, 0, 10000000);
    c.Int(*s, "bytes_per_second", &cfg.rate_limit_bytes_per_second, 0, 1000000000);
    c.Int(*s, "ipv4_prefix", &cfg.rate_limit_ipv4_prefix, 8, 32);
    c.Int(*s, "ipv6_prefix", &cfg.rate_limit_ipv6_prefix, 16, 128);
    c.Int(*s, "table_size", &cfg.rate_limit_table_size, 1024, 16777216);
    // Below one full UDP answer, no large answer would ever fit the budget.
    if (cfg.rate_limit_bytes_per_second != 0 && cfg.rate_limit_bytes_per_second < 1232) {
      c.Fail(s->get("bytes_per_second")->source(),
             "'bytes_per_second' must be 0 (off) or at least 1232 (one full UDP answer)");
    }
  }
  if (const toml::table* s = SubTable(c, root, "partitions")) {
    c.OnlyKeys(*s, "partitions", {"citymap", "default_city", "tags"});
    c.String(*s, "citymap", &cfg.citymap_path);
    c.String(*s, "default_city", &cfg.default_city);
    c.String(*s, "tags", &cfg.tags_path);
  }
  if (const toml::table* s = SubTable(c, root, "cache")) {
    c.OnlyKeys(*s, "cache",
               {"bytes", "min_ttl", "max_ttl", "negative_max_ttl", "servfail_ttl", "stale_window",
                "stale_answer_ttl", "stale_answer_after_ms", "prefetch_percent", "swrr_states",
                "active_refresh_max", "sibling_prefetch", "adaptive_names", "adaptive_segments"});
    c.Int(*s, "bytes", &cfg.cache_bytes, 1 << 20, int64_t{1} << 40);
    const bool min_ttl_ok = c.Int(*s, "min_ttl", &cfg.min_ttl, 0, 86400);
    const bool max_ttl_ok = c.Int(*s, "max_ttl", &cfg.max_ttl, 1, 7 * 86400);
    c.Int(*s, "negative_max_ttl", &cfg.negative_max_ttl, 0, 86400);
    c.Int(*s, "servfail_ttl", &cfg.servfail_ttl, 0, 300);
    c.Int(*s, "stale_window", &cfg.stale_window, 0, 7 * 86400);
    c.Int(*s, "stale_answer_ttl", &cfg.stale_answer_ttl, 0, 3600);
    c.Int(*s, "stale_answer_after_ms", &cfg.stale_answer_after_ms, 0, 60000);
    c.Int(*s, "prefetch_percent", &cfg.prefetch_percent, 0, 50);
    c.Int(*s, "swrr_states", &cfg.swrr_states, 1024, 16777216);
    c.Int(*s, "active_refresh_max", &cfg.active_refresh_max, 0, 10000000);
    c.Int(*s, "sibling_prefetch", &cfg.sibling_prefetch, 0, 64);
    c.Int(*s, "adaptive_names", &cfg.adaptive_names, 1, 4194304);
    c.Int(*s, "adaptive_segments", &cfg.adaptive_segments, 1, 100000000);
    if (min_ttl_ok && max_ttl_ok && cfg.min_ttl > cfg.max_ttl)
      c.Fail(s->get("min_ttl") ? s->get("min_ttl")->source() : s->source(), "min_ttl is larger than max_ttl");
  }
  if (const toml::table* s = SubTable(c, root, "upstream")) {
    c.OnlyKeys(
        *s, "upstream",
        {"ordinary", "weighted", "timeout_ms", "attempts", "answer_deadline_ms", "health_failures",
         "health_interval_ms", "load_factor", "max_inflight", "max_inflight_per_upstream",
         "max_waiting_clients", "udp_sockets", "udp_socket_lifetime_s", "unwanted_reply_threshold",
         "case_randomization", "cookies", "tcp_connections", "tcp_idle_timeout_ms", "tcp_lifetime_ms"});
    ParseUpstreams(c, *s, "ordinary", &cfg.ordinary);
    ParseUpstreams(c, *s, "weighted", &cfg.weighted);
    c.Int(*s, "timeout_ms", &cfg.upstream_timeout_ms, 10, 60000);
    c.Int(*s, "attempts", &cfg.upstream_attempts, 1, 10);
    c.Int(*s, "answer_deadline_ms", &cfg.answer_deadline_ms, 100, 60000);
    c.Int(*s, "health_failures", &cfg.health_failures, 1, 100);
    c.Int(*s, "health_interval_ms", &cfg.health_interval_ms, 100, 600000);
    c.Double(*s, "load_factor", &cfg.ring_load_factor, 1.0, 10.0);
    c.Int(*s, "max_inflight", &cfg.max_inflight, 1, 1000000);
    c.Int(*s, "max_inflight_per_upstream", &cfg.max_inflight_per_upstream, 1, 1000000);
    c.Int(*s, "max_waiting_clients", &cfg.max_waiting_clients, 1, 10000000);
    c.Int(*s, "udp_sockets", &cfg.udp_sockets, 1, 4096);
    if (c.Int(*s, "udp_socket_lifetime_s", &cfg.udp_socket_lifetime_s, 0, 86400) &&
        cfg.udp_socket_lifetime_s > 0 && cfg.udp_socket_lifetime_s < 10) {
      c.Fail(s->get("udp_socket_lifetime_s")->source(),
             "'udp_socket_lifetime_s' is 0 (never) or 10 to 86400 seconds");
    }
    c.Int(*s, "unwanted_reply_threshold", &cfg.unwanted_reply_threshold, 0, 65536);
    c.Bool(*s, "case_randomization", &cfg.case_randomization);
    c.Bool(*s, "cookies", &cfg.upstream_cookies);
    c.Int(*s, "tcp_connections", &cfg.upstream_tcp_connections, 1, 64);
    c.Int(*s, "tcp_idle_timeout_ms", &cfg.upstream_tcp_idle_timeout_ms, 100, 600000);
    c.Int(*s, "tcp_lifetime_ms", &cfg.upstream_tcp_lifetime_ms, 1000, 3600000);
  }
  if (const toml::table* s = SubTable(c, root, "dpdk")) ParseDpdk(c, *s, &cfg.dpdk);
  if (const toml::table* s = SubTable(c, root, "tls")) ParseTls(c, *s, &cfg.tls);
  if (const toml::table* s = SubTable(c, root, "httpdns")) ParseHttpDns(c, *s, &cfg.httpdns);
  dnstap::ParseConfig(c, root, &cfg.dnstap);

  // Whole-file rules, reported at line 1 since they involve several keys.
  // A list is "missing" only when the file gives none: one whose entries
  // were all rejected above is not reported again.
  auto none = [&](std::string_view table, std::string_view key) {
    const toml::node* n = root.at_path(Cat(table, ".", key)).node();
    return n == nullptr || (n->is_array() && n->as_array()->empty());
  };
  if (cfg.backend == "dpdk") {
    if (none("dpdk", "port")) c.FailWhole("backend = \"dpdk\" needs at least one [[dpdk.port]]");
  } else if (none("server", "listen")) {
    c.FailWhole("[server] listen must name at least one address");
  }
  if (none("acl", "allow"))
    c.FailWhole("[acl] allow must list the subscriber networks (weir is not an open resolver)");
  if (none("upstream", "ordinary")) c.FailWhole("[upstream] ordinary must list at least one recursor");
  if (cfg.ordinary.size() > 64 || cfg.weighted.size() > 64)
    c.FailWhole("[upstream] takes at most 64 recursors per group");
  if (cfg.weight_option_code < 20) {
    c.FailWhole(
        "[server] weight_option_code collides with IANA-assigned EDNS option codes (use 65001 or another "
        "local code)");
  }
  if (cfg.httpdns.enabled && cfg.httpdns.http_port == 0 && (!cfg.tls.enabled() || cfg.tls.doh_port == 0)) {
    c.FailWhole(
        "[httpdns] is served on [tls] doh_port (HTTPS) and on http_port (plain HTTP): set http_port, or "
        "configure [tls] with a certificate and doh_port");
  }
  if (cfg.httpdns.enabled && cfg.httpdns.http_port != 0 &&
      (cfg.httpdns.http_port == cfg.tls.dot_port || cfg.httpdns.http_port == cfg.tls.doh_port) &&
      cfg.tls.enabled()) {
    c.FailWhole("[httpdns] http_port must differ from [tls] dot_port and doh_port");
  }
  if (!c.ok()) return absl::InvalidArgumentError(c.error());
  if (cfg.weighted.empty()) cfg.weighted = cfg.ordinary;
  return cfg;
}

absl::StatusOr<FastpathConfig> LoadConfig(const std::string& path, const std::vector<std::string>& built) {
  auto text = common::ReadConfigFile(path);
  if (!text.ok()) return text.status();
  auto cfg = ParseConfig(*text, path, built);
  if (!cfg.ok()) return cfg;
  common::ResolveRelativeTo(
      path, {&cfg->citymap_path, &cfg->tags_path, &cfg->httpdns.accounts_file, &cfg->mgmt.token_file,
             &cfg->mgmt.state_dir, &cfg->mgmt.tls_cert_file, &cfg->mgmt.tls_key_file, &cfg->mgmt.tls_ca_file,
             &cfg->dnstap.socket_path, &cfg->dnstap.file_path, &cfg->control.socket_path,
             &cfg->control.token_file});
  for (TlsConfig::Certificate& cert : cfg->tls.certificates) {
    common::ResolveRelativeTo(path, {&cert.chain, &cert.key});
  }
  return cfg;
}

}  // namespace weir::fastpath
