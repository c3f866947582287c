#include "weir/fastpath/config.h"

#include <fstream>
#include <set>
#include <sstream>

#include "weir/common/text.h"

#include "weir/common/config_file.h"
#include "weir/common/toml_checker.h"

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
      c.String(*t, "address", &addr);
      c.String(*t, "name", &u.name);
    } else {
      return c.Fail(e.source(), "an upstream is \"ip:port\" or { address = \"ip:port\", name = \"...\" }");
    }
    auto parsed = SocketAddress::Parse(addr, 53);
    if (!parsed.ok()) return c.Fail(e.source(), ToStd(parsed.status().message()));
    u.address = *parsed;
    if (u.name.empty()) u.name = u.address.ToString();
    out->push_back(u);
  }
}

}  // namespace

absl::StatusOr<FastpathConfig> ParseConfig(std::string_view text, const std::string& name) {
  auto parsed = common::ParseToml(text, name);
  if (!parsed.ok()) return parsed.status();
  const toml::table& root = *parsed;
  Checker c(name);
  FastpathConfig cfg;
  cfg.path = name;
  c.OnlyKeys(root, "top level", {"server", "acl", "rate_limit", "partitions", "cache", "upstream", "mgmt"});
  mgmt::ParseNodeMgmt(c, root, "fastpath", &cfg.mgmt);

  if (const toml::table* s = SubTable(c, root, "server")) {
    c.OnlyKeys(*s, "server",
               {"listen", "workers", "tcp", "weight_option_code", "metrics_listen", "tcp_idle_timeout_ms",
                "tcp_max_connections"});
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
    c.Int(*s, "tcp_idle_timeout_ms", &cfg.tcp_idle_timeout_ms, 100, 600000);
    c.Int(*s, "tcp_max_connections", &cfg.tcp_max_connections, 1, 1000000);
  }
  if (const toml::table* s = SubTable(c, root, "acl")) {
    c.OnlyKeys(*s, "acl", {"allow", "trusted_forwarders"});
    c.List(*s, "allow", &cfg.allow, partitions::Cidr::Parse);
    c.List(*s, "trusted_forwarders", &cfg.trusted_forwarders, partitions::Cidr::Parse);
  }
  if (const toml::table* s = SubTable(c, root, "rate_limit")) {
    c.OnlyKeys(*s, "rate_limit", {"qps_per_source", "burst"});
    c.Int(*s, "qps_per_source", &cfg.rate_limit_qps, 0, 10000000);
    c.Int(*s, "burst", &cfg.rate_limit_burst, 0, 10000000);
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
                "stale_answer_ttl", "stale_answer_after_ms", "prefetch_percent"});
    c.Int(*s, "bytes", &cfg.cache_bytes, 1 << 20, int64_t{1} << 40);
    c.Int(*s, "min_ttl", &cfg.min_ttl, 0, 86400);
    c.Int(*s, "max_ttl", &cfg.max_ttl, 1, 7 * 86400);
    c.Int(*s, "negative_max_ttl", &cfg.negative_max_ttl, 0, 86400);
    c.Int(*s, "servfail_ttl", &cfg.servfail_ttl, 0, 300);
    c.Int(*s, "stale_window", &cfg.stale_window, 0, 7 * 86400);
    c.Int(*s, "stale_answer_ttl", &cfg.stale_answer_ttl, 0, 3600);
    c.Int(*s, "stale_answer_after_ms", &cfg.stale_answer_after_ms, 0, 60000);
    c.Int(*s, "prefetch_percent", &cfg.prefetch_percent, 0, 50);
    if (c.ok() && cfg.min_ttl > cfg.max_ttl)
      c.Fail(s->get("min_ttl") ? s->get("min_ttl")->source() : s->source(), "min_ttl is larger than max_ttl");
  }
  if (const toml::table* s = SubTable(c, root, "upstream")) {
    c.OnlyKeys(*s, "upstream",
               {"ordinary", "weighted", "timeout_ms", "attempts", "answer_deadline_ms", "health_failures",
                "health_interval_ms", "load_factor", "max_inflight", "max_inflight_per_upstream"});
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
  }
  if (!c.ok()) return absl::InvalidArgumentError(c.error());

  // Whole-file rules, reported at line 1 since they involve several keys.
  auto whole = [&](std::string_view reason) {
    return absl::InvalidArgumentError(Cat(name, ":1:1: ", reason));
  };
  if (cfg.listen.empty()) return whole("[server] listen must name at least one address");
  if (cfg.allow.empty())
    return whole("[acl] allow must list the subscriber networks (weir is not an open resolver)");
  if (cfg.ordinary.empty()) return whole("[upstream] ordinary must list at least one recursor");
  if (cfg.weighted.empty()) cfg.weighted = cfg.ordinary;
  if (cfg.ordinary.size() > 64 || cfg.weighted.size() > 64)
    return whole("[upstream] takes at most 64 recursors per group");
  if (cfg.weight_option_code < 20) {
    return whole(
        "[server] weight_option_code collides with IANA-assigned EDNS option codes (use 65001 or another "
        "local code)");
  }
  return cfg;
}

absl::StatusOr<FastpathConfig> LoadConfig(const std::string& path) {
  auto text = common::ReadConfigFile(path);
  if (!text.ok()) return text.status();
  auto cfg = ParseConfig(*text, path);
  if (!cfg.ok()) return cfg;
  common::ResolveRelativeTo(
      path, {&cfg->citymap_path, &cfg->tags_path, &cfg->mgmt.token_file, &cfg->mgmt.state_dir});
  return cfg;
}

}  // namespace weir::fastpath
