#include "control_commands.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <tuple>
#include <vector>

#include "weir/common/log.h"
#include "weir/common/text.h"
#include "weir/dns/wire.h"
#include "weir/mgmt/structured_reply.h"

namespace weir::recursor {

using common::Cat;
using common::CatTo;
using common::ToStd;
using mgmt::AddressText;
using mgmt::CellText;
using mgmt::ControlReply;
using mgmt::Json;
using mgmt::StructuredReply;

namespace {

using Scoped = partitions::EcsScopeCache<Answer>::Scoped;

constexpr const char* kLibunboundNote =
    "ordinary names: libunbound's own cache keeps their records until their TTL ends, and answers "
    "the next query from it";

ControlReply ErrorOf(const absl::Status& st) { return ControlReply::Error(std::string(ToStd(st.message()))); }

// A cache key of CacheKey(name, type, class): its name and type.
std::span<const uint8_t> KeyName(const std::string& key) {
  return {reinterpret_cast<const uint8_t*>(key.data()), key.size() - 4};
}
uint16_t KeyType(const std::string& key) {
  return static_cast<uint16_t>((static_cast<uint8_t>(key[key.size() - 4]) << 8) |
                               static_cast<uint8_t>(key[key.size() - 3]));
}
// A zone cut's key is its name.
std::span<const uint8_t> CutName(const std::string& key) {
  return {reinterpret_cast<const uint8_t*>(key.data()), key.size()};
}

// Whether the first `bits` bits of `a` and `b` are equal.
bool SamePrefix(const uint8_t* a, const uint8_t* b, unsigned bits) {
  const unsigned full = bits / 8;
  if (std::memcmp(a, b, full) != 0) return false;
  const unsigned rem = bits % 8;
  if (rem == 0) return true;
  const uint8_t mask = static_cast<uint8_t>(0xff00u >> rem);
  return ((a[full] ^ b[full]) & mask) == 0;
}

// The ECS scope of a stored answer: "common" for scope 0, else the prefix.
std::string ScopeText(const Scoped& x) {
  if (x.scope == 0) return "common";
  return Cat(AddressText(x.address.data(), x.family == dns::kEcsFamilyIpv4 ? 4 : 16), "/", int{x.scope});
}

// The name/type/ECS-scope selection of a flush or a dump.
struct Selection : mgmt::NameSelection {
  // kCommon: the answers without ECS (scope 0, /0 queries, ordinary names,
  // zone cuts); kScoped: every answer with a scope; kPrefix: the answers
  // whose scope overlaps `prefix` (covers it, or lies inside it).
  enum class Scope { kAny, kCommon, kScoped, kPrefix } scope = Scope::kAny;
  common::Cidr prefix;
  // For the caches without ECS.
  bool CommonMatches() const { return scope == Scope::kAny || scope == Scope::kCommon; }
  bool ScopeMatches(const Scoped& x) const {
    switch (scope) {
      case Scope::kAny:
        return true;
      case Scope::kCommon:
        return x.scope == 0;
      case Scope::kScoped:
        return x.scope != 0;
      case Scope::kPrefix:
        break;
    }
    if (x.scope == 0) return false;
    const uint16_t family = prefix.address.family == 4 ? dns::kEcsFamilyIpv4 : dns::kEcsFamilyIpv6;
    if (x.family != family) return false;
    return SamePrefix(x.address.data(), prefix.address.bytes.data(),
                      std::min<unsigned>(x.scope, prefix.prefix));
  }
};

absl::StatusOr<Selection> ParseSelection(const mgmt::ControlArgs& a) {
  Selection s;
  auto names = mgmt::NameSelection::Parse(a);
  if (!names.ok()) return names.status();
  static_cast<mgmt::NameSelection&>(s) = *names;
  const std::string p = a.Get("partition");
  if (p.empty()) return s;
  if (p == "common" || p == "global") {
    s.scope = Selection::Scope::kCommon;
    return s;
  }
  if (p == "subnet") {
    s.scope = Selection::Scope::kScoped;
    return s;
  }
  s.scope = Selection::Scope::kPrefix;
  common::IpAddress ip;
  if (p.find('/') == std::string::npos && common::ParseIp(p, &ip)) {
    s.prefix.address = ip;
    s.prefix.prefix = ip.family == 4 ? 32 : 128;
    return s;
  }
  if (p.find('/') != std::string::npos) {
    auto c = common::Cidr::Parse(p);
    if (!c.ok()) return absl::InvalidArgumentError(Cat("--partition ", p, ": ", ToStd(c.status().message())));
    s.prefix = *c;
    return s;
  }
  return absl::InvalidArgumentError(
      Cat("no partition '", p,
          "': weir-recursor has no city map; give 'common' (answers without ECS), 'subnet' (every ECS-scoped "
          "answer), or an address or prefix (the answers whose ECS scope covers it or lies inside it)"));
}

const char* KindOf(const Answer& a, uint16_t qtype) {
  switch (a.rcode) {
    case 0:
      break;
    case 2:
      return "servfail";
    case 3:
      return "nxdomain";
    default:
      return "error";
  }
  for (const CachedRecord& r : a.answer) {
    if (r.type == qtype || qtype == 255) return "positive";
  }
  return "nodata";
}

// Roughly what an answer holds in memory (its records and weights), not
// counting the hash index.
size_t AnswerBytes(const Answer& a) {
  size_t n = sizeof(Answer) + a.weights.size();
  for (const auto* list : {&a.answer, &a.authority}) {
    for (const CachedRecord& r : *list) n += sizeof(CachedRecord) + r.owner.size() + r.rdata.size();
  }
  return n;
}

}  // namespace

ControlReply ControlCommands::Handle(const mgmt::ControlRequest& r) {
  auto no_args = [&]() -> std::optional<ControlReply> {
    if (r.args.empty()) return std::nullopt;
    return ControlReply::Error(Cat("'", r.verb, "' takes no arguments"));
  };
  if (r.verb == "cache-flush") return Flush(r);
  if (r.verb == "cache-dump") return Dump(r);
  if (r.verb == "cache-stats") return no_args().value_or(CacheStats());
  if (r.verb == "stats") {
    if (auto e = no_args()) return *e;
    auto samples = d_.metric_samples();
    if (!samples.ok()) return ErrorOf(samples.status());
    return mgmt::MetricsReply(*samples).Render();
  }
  if (r.verb == "reload") {
    if (auto e = no_args()) return *e;
    const absl::StatusOr<std::string> what = d_.reload();
    // A refused reload is an error in the log as in weirctl's reply.
    if (!what.ok()) {
      common::LogError("control", "reload by ", r.actor, ": ", ToStd(what.status().message()));
      return ErrorOf(what.status());
    }
    common::LogInfo("control", "reload by ", r.actor, ": reloaded ", *what);
    return StructuredReply(Json{{"reloaded", true}, {"what", *what}})
        .Text(Cat("reloaded ", *what, "\n"))
        .Render();
  }
  if (r.verb == "upstreams") return no_args().value_or(Upstreams());
  if (r.verb == "partitions") return no_args().value_or(Partitions());
  return ControlReply::Error(
      Cat("unknown command '", r.verb,
          "' (weir-recursor: cache-flush, cache-dump, cache-stats, stats, reload, upstreams, partitions)"));
}

ControlReply ControlCommands::Flush(const mgmt::ControlRequest& r) {
  auto a = mgmt::ControlArgs::Parse(r.args, {"name", "suffix", "partition", "type"});
  if (!a.ok()) return ErrorOf(a.status());
  if (!a->Has("name") && !a->Has("partition") && !a->Has("type")) {
    return ControlReply::Error(
        "flush what? give a NAME, --partition or --type ('. --suffix' flushes everything)");
  }
  auto sel = ParseSelection(*a);
  if (!sel.ok()) return ErrorOf(sel.status());
  const Control::Parts& p = *d_.parts;
  size_t tagged = 0;
  p.tagged->scoped_cache().EraseMatching([&](auto& e) {
    if (!sel->NameMatches(KeyName(e.key)) || !sel->TypeMatches(KeyType(e.key))) return false;
    tagged += e.value.EraseIf(
        [&](std::span<const uint8_t>, uint16_t, const Scoped& x) { return sel->ScopeMatches(x); });
    return e.value.name_count() == 0;
  });
  tagged_answers_flushed_ += tagged;
  size_t zero_source = 0, ordinary = 0, cuts = 0;
  if (sel->CommonMatches()) {
    auto plain = [&](const auto& e) {
      return sel->NameMatches(KeyName(e.key)) && sel->TypeMatches(KeyType(e.key));
    };
    zero_source = p.tagged->zero_source_cache().EraseMatching(plain);
    ordinary = p.ordinary->cache().EraseMatching(plain);
    if (sel->TypeMatches(dns::type::kNs)) {
      cuts = p.cuts->cache().EraseMatching([&](const auto& e) { return sel->NameMatches(CutName(e.key)); });
    }
  }
  const size_t n = tagged + zero_source + ordinary + cuts;
  std::string what = sel->has_name ? Cat(sel->suffix ? "under " : "", dns::NameKeyToText(sel->name.span()))
                                   : std::string("every name");
  if (sel->qtype != 0) CatTo(what, " type ", dns::TypeToText(sel->qtype));
  if (a->Has("partition")) CatTo(what, " partition ", a->Get("partition"));
  common::LogInfo("control", "cache flush of ", what, " by ", r.actor, ": ", n, " entries (tagged ", tagged,
                  ", /0 ", zero_source, ", ordinary ", ordinary, ", zone cuts ", cuts, ")");
  StructuredReply reply(Json{{"flushed", n},
                             {"tagged", tagged},
                             {"zero_source", zero_source},
                             {"ordinary", ordinary},
                             {"zone_cuts", cuts},
                             {"libunbound_keeps_ordinary", ordinary > 0 || cuts > 0}});
  reply.Block([what](const Json& d) {
    std::string text =
        Cat("flushed ", CellText(d, "flushed"), " entries (", what, "): tagged answers ",
            CellText(d, "tagged"), ", /0 answers ", CellText(d, "zero_source"), ", ordinary answers ",
            CellText(d, "ordinary"), ", zone cuts ", CellText(d, "zone_cuts"), "\n");
    if (d["libunbound_keeps_ordinary"].get<bool>()) CatTo(text, "note: ", kLibunboundNote, "\n");
    return text;
  });
  return reply.Render();
}

ControlReply ControlCommands::Dump(const mgmt::ControlRequest& r) {
  auto a = mgmt::ControlArgs::Parse(r.args, {"name", "suffix", "partition", "type", "limit"});
  if (!a.ok()) return ErrorOf(a.status());
  auto limit = a->Number("limit", 1000, 1, 100000);
  if (!limit.ok()) return ErrorOf(limit.status());
  auto sel = ParseSelection(*a);
  if (!sel.ok()) return ErrorOf(sel.status());
  const Control::Parts& p = *d_.parts;
  const uint32_t now = d_.clock->NowSeconds();
  const partitions::TagTable& tags = **d_.tags;

  struct Row {
    std::string name, type, scope, cache, kind, origin;
    std::string ttl;  // "-" for a zone cut
    uint32_t ttl_seconds = 0;
    int64_t left = 0;  // negative: stale for that long
    bool weighted = false;
    std::vector<std::string> addresses;
    std::vector<int> weights;  // -1: none
  };
  std::vector<Row> rows;
  bool truncated = false;
  auto full = [&] {
    if (rows.size() < *limit) return false;
    truncated = true;
    return true;
  };
  auto answer_row = [&](std::span<const uint8_t> qname, uint16_t qtype, const std::string& scope,
                        const char* cache, const Answer& ans, bool tagged) {
    Row row;
    row.name = dns::NameKeyToText(qname);
    row.type = dns::TypeToText(qtype);
    row.scope = scope;
    row.cache = cache;
    row.kind = KindOf(ans, qtype);
    row.ttl = Cat(ans.ttl);
    row.ttl_seconds = ans.ttl;
    row.left = static_cast<int64_t>(ans.fresh_until) - static_cast<int64_t>(now);
    // A tagged answer for a name no tag covers: the front marked it (with
    // ECS) or a CNAME chain led from an ordinary name into a tagged suffix.
    const partitions::Tag* tag = tagged ? tags.Lookup(qname) : nullptr;
    row.origin = row.left <= 0              ? "stale"
                 : tagged && tag == nullptr ? "learned"
                 : tagged                   ? "fetched (last hop)"
                                            : "fetched (libunbound)";
    row.weighted = ans.weighted;
    size_t i = 0;
    for (const CachedRecord& rec : ans.answer) {
      const bool v4 = rec.type == dns::type::kA && rec.rdata.size() == 4;
      const bool v6 = rec.type == dns::type::kAaaa && rec.rdata.size() == 16;
      if (!v4 && !v6) continue;
      row.addresses.push_back(AddressText(rec.rdata.data(), rec.rdata.size()));
      row.weights.push_back(ans.weighted && i < ans.weights.size() ? ans.weights[i] : -1);
      ++i;
    }
    rows.push_back(std::move(row));
  };
  p.tagged->scoped_cache().ForEach([&](const auto& e) {
    if (!sel->NameMatches(KeyName(e.key)) || !sel->TypeMatches(KeyType(e.key))) return true;
    e.value.ForEach([&](std::span<const uint8_t> qname, uint16_t qtype, const Scoped& x) {
      if (!sel->ScopeMatches(x) || full()) return;
      answer_row(qname, qtype, ScopeText(x), "tagged", x.value, true);
    });
    return !truncated;
  });
  if (sel->CommonMatches()) {
    auto plain = [&](const char* cache, bool tagged) {
      return [&, cache, tagged](const auto& e) {
        if (!sel->NameMatches(KeyName(e.key)) || !sel->TypeMatches(KeyType(e.key))) return true;
        if (full()) return false;
        answer_row(KeyName(e.key), KeyType(e.key), tagged ? "/0" : "common", cache, e.value.a, tagged);
        return true;
      };
    };
    if (!truncated) p.tagged->zero_source_cache().ForEach(plain("tagged", true));
    if (!truncated) p.ordinary->cache().ForEach(plain("ordinary", false));
    if (!truncated && sel->TypeMatches(dns::type::kNs)) {
      p.cuts->cache().ForEach([&](const auto& e) {
        if (!sel->NameMatches(CutName(e.key))) return true;
        if (full()) return false;
        Row row;
        row.name = dns::NameKeyToText(CutName(e.key));
        row.type = "NS";
        row.scope = "common";
        row.cache = "zone-cut";
        row.kind = "servers";
        row.ttl = "-";
        row.left = static_cast<int64_t>(e.value.expires) - static_cast<int64_t>(now);
        row.origin = row.left <= 0 ? "stale" : "fetched (libunbound)";
        for (const common::SocketAddress& s : e.value.servers) {
          row.addresses.push_back(s.ToString());
          row.weights.push_back(-1);
        }
        rows.push_back(std::move(row));
        return true;
      });
    }
  }
  std::sort(rows.begin(), rows.end(), [](const Row& x, const Row& y) {
    return std::tie(x.name, x.type, x.cache, x.scope) < std::tie(y.name, y.type, y.cache, y.scope);
  });

  StructuredReply reply;
  Json& entries = reply.json()["entries"] = Json::array();
  for (const Row& row : rows) {
    Json& e = entries.emplace_back(Json{{"name", row.name},
                                        {"type", row.type},
                                        {"scope", row.scope},
                                        {"cache", row.cache},
                                        {"kind", row.kind},
                                        {"ttl", row.ttl == "-" ? Json(nullptr) : Json(row.ttl_seconds)},
                                        {"ttl_left", std::max<int64_t>(row.left, 0)},
                                        {"stale_for", std::max<int64_t>(-row.left, 0)},
                                        {"origin", row.origin},
                                        {"weighted", row.weighted},
                                        {"addresses", Json::array()}});
    for (size_t i = 0; i < row.addresses.size(); ++i) {
      Json& a = e["addresses"].emplace_back(Json{{"address", row.addresses[i]}});
      if (row.weights[i] >= 0) a["weight"] = row.weights[i];
    }
  }
  reply.json()["count"] = rows.size();
  reply.json()["truncated"] = truncated;
  reply.json()["clock"] = now;
  mgmt::CacheDumpHeading(reply,
                         "LEFT: seconds of TTL left, or how long the answer has been stale (RFC 8767)");
  reply.Table("/entries", {StructuredReply::Field("NAME", "name"), StructuredReply::Field("TYPE", "type"),
                           StructuredReply::Field("SCOPE", "scope"), StructuredReply::Field("CACHE", "cache"),
                           StructuredReply::Field("KIND", "kind"), StructuredReply::Field("TTL", "ttl"),
                           mgmt::TtlLeftColumn(), StructuredReply::Field("ORIGIN", "origin")});
  reply.Block([](const Json& d) {
    std::string details;
    for (const Json& e : d["entries"]) {
      if (e["addresses"].empty()) continue;
      CatTo(details, CellText(e, "name"), " ", CellText(e, "type"), " ", CellText(e, "scope"),
            e["cache"] == "zone-cut"    ? " (zone cut servers)"
            : e["weighted"].get<bool>() ? " (weights from upstream)"
                                        : " (no weights: equal)",
            "\n");
      for (const Json& a : e["addresses"]) {
        CatTo(details, "  ", CellText(a, "address"),
              a.contains("weight") ? Cat(" weight ", CellText(a, "weight")) : "", "\n");
      }
    }
    return details.empty() ? details : "\n" + details;
  });
  return mgmt::CacheDumpLimitHint(reply, truncated, *limit).Render();
}

ControlReply ControlCommands::CacheStats() const {
  const Control::Parts& p = *d_.parts;
  struct Line {
    const char* name;
    size_t entries, answers, bytes, capacity;
    uint64_t inserts, evictions, flushed;
  };
  std::vector<Line> lines;
  {
    size_t answers = 0, bytes = 0;
    p.tagged->scoped_cache().ForEach([&](const auto& e) {
      answers += e.value.answer_count();
      bytes += e.key.size() + sizeof(e);
      e.value.ForEach([&](std::span<const uint8_t> qname, uint16_t, const Scoped& x) {
        bytes += qname.size() + sizeof(Scoped) + AnswerBytes(x.value);
      });
      return true;
    });
    const auto& c = p.tagged->scoped_cache();
    lines.push_back({"tagged", c.size(), answers, bytes, c.capacity(), c.inserts(), c.evictions(),
                     tagged_answers_flushed_});
  }
  auto plain = [&](const char* name, const auto& c) {
    size_t bytes = 0;
    c.ForEach([&](const auto& e) {
      bytes += e.key.size() + sizeof(e) + AnswerBytes(e.value.a);
      return true;
    });
    lines.push_back({name, c.size(), c.size(), bytes, c.capacity(), c.inserts(), c.evictions(), c.flushed()});
  };
  plain("tagged /0", p.tagged->zero_source_cache());
  plain("ordinary", p.ordinary->cache());
  {
    size_t bytes = 0;
    const auto& c = p.cuts->cache();
    c.ForEach([&](const auto& e) {
      bytes += e.key.size() + sizeof(e) + e.value.servers.size() * sizeof(common::SocketAddress);
      return true;
    });
    lines.push_back(
        {"zone cuts", c.size(), c.size(), bytes, c.capacity(), c.inserts(), c.evictions(), c.flushed()});
  }
  StructuredReply reply(Json{{"caches", Json::array()}});
  for (const Line& l : lines) {
    reply.json()["caches"].push_back(Json{{"cache", l.name},
                                          {"entries", l.entries},
                                          {"answers", l.answers},
                                          {"bytes", l.bytes},
                                          {"capacity", l.capacity},
                                          {"inserts", l.inserts},
                                          {"evictions", l.evictions},
                                          {"flushed", l.flushed}});
  }
  reply.Table(
      "/caches",
      {StructuredReply::Field("CACHE", "cache"), StructuredReply::Field("ENTRIES", "entries"),
       StructuredReply::Field("ANSWERS", "answers"), StructuredReply::Field("BYTES", "bytes"),
       StructuredReply::Field("CAPACITY", "capacity"), StructuredReply::Field("INSERTS", "inserts"),
       StructuredReply::Field("EVICTIONS", "evictions"), StructuredReply::Field("FLUSHED", "flushed")});
  reply.Text(
      "\nENTRIES: names (tagged: per name and type, with ANSWERS answers by ECS scope); BYTES: records and "
      "keys, "
      "roughly (not the hash index); CAPACITY: entries ([cache] max_entries, max_tagged_names, "
      "max_zero_source_entries, max_zone_cuts); INSERTS: new entries; FLUSHED: by weirctl (tagged: answers)\n"
      "libunbound's own caches (ordinary names, the NS records behind the zone cuts) are not in this "
      "table\n");
  return reply.Render();
}

ControlReply ControlCommands::Upstreams() const {
  const Control::Parts& p = *d_.parts;
  const RecursorConfig& cfg = *d_.cfg;
  StructuredReply reply(Json{{"upstreams", Json::array()}});
  auto add = [&](const std::string& group, const std::string& upstream, const std::string& state,
                 const std::string& detail) {
    reply.json()["upstreams"].push_back(
        Json{{"group", group}, {"upstream", upstream}, {"state", state}, {"detail", detail}});
  };
  for (const common::SocketAddress& f : cfg.forwarders)
    add("libunbound forwarder", f.ToString(), "-", "libunbound keeps no per-server counters weir can read");
  if (cfg.forwarders.empty() && !cfg.root_hints.empty())
    add("libunbound", "root hints " + cfg.root_hints, "-", "iterates from the root");
  for (const partitions::Tag& t : (*d_.tags)->tags()) {
    if (t.policy != partitions::Policy::kForward) continue;
    for (const partitions::ForwardTarget& f : t.targets) {
      const std::string addr = f.address.family == 4 ? common::IpToString(f.address)
                                                     : Cat("[", common::IpToString(f.address), "]");
      add(Cat("forward tag ", dns::NameKeyToText(t.suffix.span())), Cat(addr, ":", f.port), "-",
          "weir's last hop");
    }
  }
  // Last-hop servers that timed out lately: tried after the others until then.
  const auto steady_now = std::chrono::steady_clock::now();
  size_t avoided = 0;
  p.tagged->server_health().ForEach([&](std::span<const uint8_t> address, uint16_t port,
                                        std::chrono::seconds backoff,
                                        std::chrono::steady_clock::time_point until) {
    if (until <= steady_now) return;
    ++avoided;
    const std::string a = AddressText(address.data(), address.size());
    const auto left = std::chrono::duration_cast<std::chrono::seconds>(until - steady_now).count();
    add("last hop", address.size() == 4 ? Cat(a, ":", port) : Cat("[", a, "]:", port), "tried last",
        Cat("timed out; tried after the others for ", left, "s more (backoff ", backoff.count(), "s)"));
  });
  // The last hop's totals: weir counts them over every authoritative
  // server, not per server (a recursor talks to unboundedly many).
  const TaggedResolver::Stats& t = p.tagged->stats();
  const SocketLastHop::Stats& l = p.last_hop->stats();
  UpstreamLatency::Buckets buckets{};
  double sum_seconds = 0;
  p.last_hop->latency().AddTo(buckets, &sum_seconds);
  uint64_t count = 0;
  for (uint64_t b : buckets) count += b;
  std::string p99 = "-";
  if (const size_t b = common::QuantileBucket(buckets, 0.99); b < buckets.size()) {
    char bound[32];
    std::snprintf(bound, sizeof(bound), "%gms",
                  b < UpstreamLatency::kBounds.size() ? UpstreamLatency::kBounds[b] * 1000 : 5000.0);
    p99 = Cat(b < UpstreamLatency::kBounds.size() ? "<=" : ">", bound);
  }
  const OrdinaryResolver::Stats& o = p.ordinary->stats();
  const ZoneCutFinder::Stats& z = p.cuts->stats();
  reply.json()["last_hop"] =
      Json{{"queries", t.upstream_queries},
           {"timeouts", t.upstream_timeouts},
           {"tcp", l.upstream_tcp},
           {"latency_count", count},
           {"latency_mean_seconds", count > 0 ? sum_seconds / static_cast<double>(count) : 0.0},
           {"servers_tried_last", avoided}};
  reply.json()["libunbound_resolutions"] = o.resolver_queries + z.resolver_queries;
  reply.Table("/upstreams",
              {StructuredReply::Field("GROUP", "group"), StructuredReply::Field("UPSTREAM", "upstream"),
               StructuredReply::Field("STATE", "state"), StructuredReply::Field("DETAIL", "detail")});
  // The p99 and what is in flight are the text's alone.
  reply.Block([p99, ordinary_in_flight = p.ordinary->in_flight(),
               tagged_in_flight = p.tagged->in_flight()](const Json& d) {
    const Json& h = d["last_hop"];
    char mean[32] = "-";
    if (h["latency_count"].get<uint64_t>() > 0)
      std::snprintf(mean, sizeof(mean), "%.2fms", h["latency_mean_seconds"].get<double>() * 1000.0);
    return Cat("\nlast hop (weir's own queries for tagged names, every server together):\n", "  queries ",
               CellText(h, "queries"), ", timeouts ", CellText(h, "timeouts"), ", over TCP ",
               CellText(h, "tcp"), ", answers timed ", CellText(h, "latency_count"), ", mean latency ", mean,
               ", p99 ", p99, "\n", "  servers tried last now: ", CellText(h, "servers_tried_last"),
               "\nlibunbound (ordinary names and zone cuts): ", CellText(d, "libunbound_resolutions"),
               " resolutions asked, ", ordinary_in_flight, " ordinary and ", tagged_in_flight,
               " tagged in flight\n");
  });
  return reply.Render();
}

ControlReply ControlCommands::Partitions() const {
  // No city map here: the recursor's partitions are the ECS scopes its
  // tagged answers are cached for.
  struct Count {
    size_t answers = 0, names = 0;
  };
  std::map<std::string, Count> scopes;
  d_.parts->tagged->scoped_cache().ForEach([&](const auto& e) {
    std::map<std::string, bool> seen;
    e.value.ForEach([&](std::span<const uint8_t>, uint16_t, const Scoped& x) {
      const std::string s = ScopeText(x);
      ++scopes[s].answers;
      if (!seen[s]) {
        seen[s] = true;
        ++scopes[s].names;
      }
    });
    return true;
  });
  const size_t zero = d_.parts->tagged->zero_source_cache().size();
  StructuredReply reply(Json{{"city_map", false}, {"scopes", Json::array()}});
  for (const auto& [scope, c] : scopes) {
    reply.json()["scopes"].push_back(Json{{"scope", scope}, {"answers", c.answers}, {"names", c.names}});
  }
  if (zero > 0) reply.json()["scopes"].push_back(Json{{"scope", "/0"}, {"answers", zero}, {"names", zero}});
  reply.Text(
      Cat("weir-recursor has no city map (weir-fastpath maps clients to partitions: ask it for hits per "
          "partition).\n"
          "Tagged answers are cached per ECS scope (RFC 7871 7.3); ",
          scopes.size(), " scopes cached (hits are not counted per scope):\n\n"));
  reply.Table("/scopes",
              {StructuredReply::Field("SCOPE", "scope"), StructuredReply::Field("ANSWERS", "answers"),
               StructuredReply::Field("NAMES", "names")});
  return reply.Render();
}

}  // namespace weir::recursor
