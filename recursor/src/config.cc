#include "weir/recursor/config.h"

#include <fstream>
#include <sstream>

#include "weir/common/config_file.h"
#include "weir/common/text.h"
#include "weir/common/toml_checker.h"
#include "weir/dns/message.h"
#include "weir/mgmt/control.h"
#include "weir/net/tcp_limits_config.h"

namespace weir::recursor {

using common::Cat;
using common::SocketAddress;
using common::SubTable;
using common::TomlChecker;
using common::ToStd;

namespace {

absl::StatusOr<SocketAddress> ParseAddress53(const std::string& text) {
  return SocketAddress::Parse(text, 53);
}

// "NAME TYPE" as unbound's local-zone; the name is made absolute and lower
// case so libunbound and the messages see one spelling.
absl::StatusOr<std::string> ParseLocalZone(const std::string& text) {
  const size_t sp = text.find_first_of(" \t");
  const size_t type_at = sp == std::string::npos ? std::string::npos : text.find_first_not_of(" \t", sp);
  if (type_at == std::string::npos) {
    return absl::InvalidArgumentError(Cat("local zone '", text, "' must be \"NAME TYPE\""));
  }
  std::string zone = text.substr(0, sp);
  const std::string type = text.substr(type_at);
  static constexpr std::string_view kTypes[] = {"nodefault",   "static",          "refuse",       "deny",
                                                "transparent", "always_nxdomain", "always_refuse"};
  bool known = false;
  for (std::string_view t : kTypes) known = known || type == t;
  if (!known) {
    return absl::InvalidArgumentError(Cat("local zone '", text, "': type '", type,
                                          "' is not one of nodefault, static, refuse, deny, transparent, "
                                          "always_nxdomain, always_refuse"));
  }
  for (char& ch : zone) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                    ch == '-' || ch == '_' || ch == '.';
    if (!ok)
      return absl::InvalidArgumentError(Cat("local zone '", text, "': '", zone, "' is not a domain name"));
    if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
  }
  if (zone.find("..") != std::string::npos || (zone.size() > 1 && zone.front() == '.') || zone.size() > 253) {
    return absl::InvalidArgumentError(Cat("local zone '", text, "': '", zone, "' is not a domain name"));
  }
  if (zone.back() != '.') zone.push_back('.');
  return Cat(zone, " ", type);
}

// A domain name for libunbound (caps_exempt): absolute, lower case.
absl::StatusOr<std::string> ParseDomainName(const std::string& text) {
  dns::NameKey key;
  if (text.empty() || !dns::NameKeyFromText(text, &key)) {
    return absl::InvalidArgumentError(Cat("'", text, "' is not a domain name"));
  }
  return dns::NameKeyToText(key.span());
}

}  // namespace

absl::StatusOr<RecursorConfig> ParseConfig(std::string_view text, const std::string& name) {
  auto parsed = common::ParseToml(text, name);
  if (!parsed.ok()) return parsed.status();
  const toml::table& root = *parsed;
  TomlChecker c(name);
  RecursorConfig cfg;
  cfg.path = name;
  for (const char* loopback : {"127.0.0.0/8", "::1/128"})
    cfg.control_allow.push_back(*common::Cidr::Parse(loopback));
  c.OnlyKeys(
      root, "top level",
      {"server", "acl", "resolver", "tags", "cache", "last_hop", "ecs", "mgmt", "control", "dnstap", "log"});
  mgmt::ParseNodeMgmt(c, root, "recursor", &cfg.mgmt);
  mgmt::ParseControlTable(c, root, "recursor", &cfg.control_channel);
  common::ParseLogTable(c, root, &cfg.log);

  if (const toml::table* s = SubTable(c, root, "server")) {
    c.OnlyKeys(*s, "server",
               {"listen", "tcp", "weight_option_code", "control", "control_allow", "tcp_idle_timeout_ms",
                "tcp_max_connections", "tcp_max_connections_per_source", "tcp_source_prefix_v4",
                "tcp_source_prefix_v6", "tcp_lifetime_ms", "tcp_max_unsent_bytes", "max_inflight",
                "answer_deadline_ms", "metrics_listen", "cookies", "cookie_secret_file", "require_cookies"});
    c.List(*s, "listen", &cfg.listen, ParseAddress53);
    c.Bool(*s, "tcp", &cfg.tcp);
    c.Int(*s, "weight_option_code", &cfg.weight_option_code, 1, 65535);
    std::string control;
    c.String(*s, "control", &control);
    if (!control.empty()) {
      auto a = SocketAddress::Parse(control);
      if (!a.ok()) {
        c.Fail(s->get("control")->source(), ToStd(a.status().message()));
      } else {
        cfg.control = *a;
        cfg.control_enabled = true;
      }
    }
    std::string metrics;
    c.String(*s, "metrics_listen", &metrics);
    if (!metrics.empty()) {
      auto m = SocketAddress::Parse(metrics, kDefaultMetricsPort);
      if (!m.ok()) {
        c.Fail(s->get("metrics_listen")->source(), ToStd(m.status().message()));
      } else {
        cfg.metrics_listen = *m;
        cfg.metrics_enabled = true;
      }
    }
    net::ParseTcpLimits(c, *s, &cfg.tcp_limits);
    c.Int(*s, "tcp_max_unsent_bytes", &cfg.tcp_max_unsent_bytes, 65537, 64 << 20);
    c.Int(*s, "max_inflight", &cfg.max_inflight, 1, 1000000);
    c.Int(*s, "answer_deadline_ms", &cfg.answer_deadline_ms, 100, 60000);
    c.Bool(*s, "cookies", &cfg.server_cookies);
    c.String(*s, "cookie_secret_file", &cfg.cookie_secret_file);
    c.Bool(*s, "require_cookies", &cfg.require_cookies);
    if (cfg.require_cookies && !cfg.server_cookies) {
      c.Fail(s->get("require_cookies")->source(), "'require_cookies' needs 'cookies' on");
    }
    if (c.List(*s, "control_allow", &cfg.control_allow, common::Cidr::Parse) && cfg.control_allow.empty()) {
      c.Fail(s->get("control_allow")->source(), "'control_allow' must list at least one prefix");
    }
  }
  if (const toml::table* s = SubTable(c, root, "acl")) {
    c.OnlyKeys(*s, "acl", {"allow"});
    c.List(*s, "allow", &cfg.allow, common::Cidr::Parse);
  }
  if (const toml::table* s = SubTable(c, root, "resolver")) {
    c.OnlyKeys(*s, "resolver",
               {"root_hints",
                "trust_anchor",
                "forwarders",
                "do_ip6",
                "verbosity",
                "harden_glue",
                "qname_minimisation",
                "trust_anchor_signaling",
                "aggressive_nsec",
                "val_override_date",
                "local_zones",
                "use_caps_for_id",
                "caps_exempt",
                "unwanted_reply_threshold",
                "harden_below_nxdomain",
                "harden_dnssec_stripped",
                "harden_referral_path",
                "forwarder_transport",
                "tcp_upstream",
                "outgoing_tcp"});
    c.String(*s, "root_hints", &cfg.root_hints);
    c.String(*s, "trust_anchor", &cfg.trust_anchor);
    c.List(*s, "forwarders", &cfg.forwarders, ParseAddress53);
    c.Bool(*s, "do_ip6", &cfg.do_ip6);
    c.Int(*s, "verbosity", &cfg.verbosity, 0, 5);
    c.Bool(*s, "harden_glue", &cfg.harden_glue);
    c.Bool(*s, "trust_anchor_signaling", &cfg.trust_anchor_signaling);
    c.Bool(*s, "aggressive_nsec", &cfg.aggressive_nsec);
    std::string qmin;
    c.String(*s, "qname_minimisation", &qmin);
    if (qmin == "off") {
      cfg.qname_minimisation = RecursorConfig::QnameMinimisation::kOff;
    } else if (qmin == "strict") {
      cfg.qname_minimisation = RecursorConfig::QnameMinimisation::kStrict;
    } else if (!qmin.empty() && qmin != "on") {
      c.Fail(s->get("qname_minimisation")->source(),
             "'qname_minimisation' must be \"on\", \"off\" or \"strict\"");
    }
    c.String(*s, "val_override_date", &cfg.val_override_date);
    if (!cfg.val_override_date.empty()) {
      const std::string& d = cfg.val_override_date;
      const bool digits = d.find_first_not_of("0123456789") == std::string::npos;
      // unbound takes YYYYMMDDHHMMSS, or seconds since the epoch.
      if (!digits || (d.size() != 14 && d.size() > 11)) {
        c.Fail(s->get("val_override_date")->source(),
               "'val_override_date' must be YYYYMMDDHHMMSS or seconds since 1970");
      }
    }
    c.List(*s, "local_zones", &cfg.local_zones, ParseLocalZone);
    c.Bool(*s, "use_caps_for_id", &cfg.use_caps_for_id);
    c.List(*s, "caps_exempt", &cfg.caps_exempt, ParseDomainName);
    c.Int(*s, "unwanted_reply_threshold", &cfg.ub_unwanted_reply_threshold, 0, 1000000000);
    if (cfg.ub_unwanted_reply_threshold != 0) {
      // libunbound's reaction (clearing its caches) is not among the
      // functions its own pointer whitelist allows in a libunbound context:
      // reaching the count ends libunbound's process (fatal_exit). Refused,
      // not passed on.
      c.Fail(s->get("unwanted_reply_threshold")->source(),
             "'resolver.unwanted_reply_threshold' must be 0: libunbound 1.17 cannot run its reaction to "
             "unwanted replies (it exits when the count is reached); weir's own reaction is "
             "last_hop.unwanted_reply_threshold");
    }
    std::string transport;
    c.String(*s, "forwarder_transport", &transport);
    if (transport == "libunbound") {
      cfg.forwarder_transport = RecursorConfig::ForwarderTransport::kLibunbound;
    } else if (!transport.empty() && transport != "weir") {
      c.Fail(s->get("forwarder_transport")->source(),
             "'forwarder_transport' must be \"weir\" or \"libunbound\"");
    }
    c.Bool(*s, "tcp_upstream", &cfg.tcp_upstream);
    c.Int(*s, "outgoing_tcp", &cfg.outgoing_tcp, 1, 65536);
    c.Bool(*s, "harden_below_nxdomain", &cfg.harden_below_nxdomain);
    c.Bool(*s, "harden_dnssec_stripped", &cfg.harden_dnssec_stripped);
    c.Bool(*s, "harden_referral_path", &cfg.harden_referral_path);
  }
  if (const toml::table* s = SubTable(c, root, "tags")) {
    c.OnlyKeys(*s, "tags", {"file"});
    c.String(*s, "file", &cfg.tags_path);
  }
  if (const toml::table* s = SubTable(c, root, "cache")) {
    c.OnlyKeys(*s, "cache",
               {"max_entries", "max_tagged_names", "max_subnets", "max_zero_source_entries", "max_zone_cuts",
                "min_ttl", "max_ttl", "negative_max_ttl", "stale_window", "stale_answer_ttl",
                "prefetch_percent", "zone_cut_max_ttl"});
    c.Int(*s, "max_entries", &cfg.max_entries, 1, 100000000);
    c.Int(*s, "max_tagged_names", &cfg.max_tagged_names, 1, 100000000);
    c.Int(*s, "max_subnets", &cfg.max_subnets, 1, 10000);
    c.Int(*s, "max_zero_source_entries", &cfg.max_zero_source_entries, 1, 100000000);
    c.Int(*s, "max_zone_cuts", &cfg.max_zone_cuts, 1, 10000000);
    const bool min_ttl_ok = c.Int(*s, "min_ttl", &cfg.min_ttl, 0, 86400);
    const bool max_ttl_ok = c.Int(*s, "max_ttl", &cfg.max_ttl, 1, 7 * 86400);
    c.Int(*s, "negative_max_ttl", &cfg.negative_max_ttl, 0, 86400);
    c.Int(*s, "stale_window", &cfg.stale_window, 0, 7 * 86400);
    c.Int(*s, "stale_answer_ttl", &cfg.stale_answer_ttl, 0, 3600);
    c.Int(*s, "prefetch_percent", &cfg.prefetch_percent, 0, 50);
    c.Int(*s, "zone_cut_max_ttl", &cfg.zone_cut_max_ttl, 1, 86400);
    if (min_ttl_ok && max_ttl_ok && cfg.min_ttl > cfg.max_ttl) {
      c.Fail(s->get("min_ttl") ? s->get("min_ttl")->source() : s->source(), "min_ttl is larger than max_ttl");
    }
  }
  if (const toml::table* s = SubTable(c, root, "last_hop")) {
    c.OnlyKeys(*s, "last_hop",
               {"timeout_ms", "tcp_timeout_ms", "attempts", "max_cname_chain", "use_0x20", "cookies",
                "unwanted_reply_threshold"});
    c.Int(*s, "timeout_ms", &cfg.timeout_ms, 10, 60000);
    c.Int(*s, "tcp_timeout_ms", &cfg.tcp_timeout_ms, 10, 60000);
    c.Int(*s, "attempts", &cfg.attempts, 1, 16);
    c.Int(*s, "max_cname_chain", &cfg.max_cname_chain, 0, 16);
    c.Bool(*s, "use_0x20", &cfg.use_0x20);
    c.Bool(*s, "cookies", &cfg.cookies);
    c.Int(*s, "unwanted_reply_threshold", &cfg.unwanted_reply_threshold, 0, 65536);
  }
  if (const toml::table* s = SubTable(c, root, "ecs")) {
    c.OnlyKeys(*s, "ecs", {"source_v4", "source_v6", "from_client_address"});
    c.Int(*s, "source_v4", &cfg.source_v4, 1, 32);
    c.Int(*s, "source_v6", &cfg.source_v6, 1, 128);
    c.Bool(*s, "from_client_address", &cfg.from_client_address);
  }
  dnstap::ParseConfig(c, root, &cfg.dnstap);

  // Whole-file rules, reported at line 1. A key is "missing" only when the
  // file gives none: one whose value was rejected above is not reported again.
  auto none = [&](std::string_view table, std::string_view key) {
    const toml::node* n = root.at_path(Cat(table, ".", key)).node();
    return n == nullptr || (n->is_array() && n->as_array()->empty()) ||
           (n->is_string() && n->as_string()->get().empty());
  };
  if (none("server", "listen")) c.FailWhole("[server] listen must name at least one address");
  if (none("acl", "allow"))
    c.FailWhole("[acl] allow must list the front nodes (weir is not an open resolver)");
  // libunbound falls back to its compiled-in root hints when given neither;
  // weir never lets it do that silently.
  if (none("resolver", "root_hints") && none("resolver", "forwarders")) {
    c.FailWhole("[resolver] needs root_hints (a file) or forwarders");
  }
  if (!c.ok()) return absl::InvalidArgumentError(c.error());
  return cfg;
}

absl::StatusOr<RecursorConfig> LoadConfig(const std::string& path) {
  auto text = common::ReadConfigFile(path);
  if (!text.ok()) return text.status();
  auto cfg = ParseConfig(*text, path);
  if (!cfg.ok()) return cfg;
  common::ResolveRelativeTo(
      path, {&cfg->root_hints, &cfg->trust_anchor, &cfg->tags_path, &cfg->mgmt.token_file,
             &cfg->mgmt.state_dir, &cfg->mgmt.tls_cert_file, &cfg->mgmt.tls_key_file, &cfg->mgmt.tls_ca_file,
             &cfg->dnstap.socket_path, &cfg->dnstap.file_path, &cfg->control_channel.socket_path,
             &cfg->control_channel.token_file, &cfg->cookie_secret_file});
  return cfg;
}

}  // namespace weir::recursor
