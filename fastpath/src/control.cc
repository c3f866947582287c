// weir-fastpath's control commands (Node::Control): what `weirctl cache ...`,
// `stats`, `reload`, `upstreams` and `partitions` do on a front node.
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "weir/common/histogram.h"
#include "weir/common/log.h"
#include "weir/common/rcu.h"
#include "weir/common/text.h"
#include "weir/dns/message.h"
#include "weir/fastpath/node.h"
#include "weir/mgmt/node_client.h"

namespace weir::fastpath {

using common::Cat;
using common::CatTo;
using common::JsonString;
using common::ToStd;
using mgmt::AddressText;
using mgmt::ControlArgs;
using mgmt::ControlReply;
using mgmt::ControlRequest;
using partitions::CacheEntry;
using partitions::Partition;

std::string CityName(const partitions::CityMap* cm, size_t id) {
  if (cm != nullptr && id < cm->city_count()) return cm->city(static_cast<partitions::PartitionId>(id)).name;
  return Cat("city", id);
}

namespace {

// How long a dump waits for each worker to copy its SWRR states.
constexpr std::chrono::milliseconds kProbeTimeout{1000};
// A dump lists at most this many entries (a reply must fit a frame), and
// asks the workers for the SWRR states of at most the first
// kMaxProbedRows weighted ones (a worker copies them between two bursts).
constexpr uint64_t kMaxDumpRows = 100000;
constexpr size_t kMaxProbedRows = 10000;

// Which partitions a flush or a dump covers.
struct PartitionFilter {
  enum class Mode { kAny, kExact, kAllSubnets } mode = Mode::kAny;
  Partition partition = partitions::kCommonPartition;
  bool Matches(Partition p) const {
    switch (mode) {
      case Mode::kAny:
        return true;
      case Mode::kExact:
        return p == partition;
      case Mode::kAllSubnets:
        return partitions::LevelOf(p) == partitions::CacheLevel::kSubnet;
    }
    return false;
  }
};

// "common" (or "global"), "subnet" (every subnet partition), an address or
// prefix (the subnet partition it falls in), or a city of the city map.
absl::StatusOr<PartitionFilter> ParsePartition(std::string_view text, const partitions::CityMap* cm) {
  PartitionFilter f;
  if (text.empty()) return f;
  f.mode = PartitionFilter::Mode::kExact;
  if (text == "common" || text == "global") return f;
  if (text == "subnet") {
    f.mode = PartitionFilter::Mode::kAllSubnets;
    return f;
  }
  common::IpAddress ip;
  const size_t slash = text.find('/');
  if (common::ParseIp(text.substr(0, slash), &ip)) {
    // A subnet partition is a client's /24 (IPv4) or /56 (IPv6): an address
    // names the one it falls in; a prefix must be exactly one of them.
    if (slash != std::string_view::npos) {
      auto c = common::Cidr::Parse(text);
      const unsigned want = ip.family == 4 ? 24 : 56;
      if (!c.ok() || c->prefix != want) {
        return absl::InvalidArgumentError(Cat("--partition ", text, ": a subnet partition is one /", want,
                                              " (give an address in it, or that prefix)"));
      }
    }
    f.partition = partitions::PartitionKey(partitions::CacheLevel::kSubnet, 0, ip);
    return f;
  }
  if (cm != nullptr) {
    if (auto id = cm->FindCity(text)) {
      f.partition = partitions::PartitionKey(partitions::CacheLevel::kCity, *id, {});
      return f;
    }
  }
  return absl::NotFoundError(Cat(
      "no partition '", text, "': not 'common', 'subnet', an address, nor a city of the city map applied"));
}

std::string LevelText(Partition p) {
  switch (partitions::LevelOf(p)) {
    case partitions::CacheLevel::kGlobal:
      return "global";
    case partitions::CacheLevel::kCity:
      return "city";
    case partitions::CacheLevel::kSubnet:
      break;
  }
  return "subnet";
}

// The partition's name: "common", the city, or the subnet's prefix.
std::string PartitionText(const partitions::CityMap* cm, Partition p) {
  switch (partitions::LevelOf(p)) {
    case partitions::CacheLevel::kGlobal:
      return "common";
    case partitions::CacheLevel::kCity:
      return CityName(cm, partitions::CityOf(p));
    case partitions::CacheLevel::kSubnet:
      break;
  }
  const uint64_t bits = partitions::SubnetBitsOf(p);
  if ((p >> 62) == 2) {  // IPv4: the /24
    const uint8_t b[4] = {static_cast<uint8_t>(bits >> 16), static_cast<uint8_t>(bits >> 8),
                          static_cast<uint8_t>(bits), 0};
    return AddressText(b, 4) + "/24";
  }
  uint8_t b[16] = {};  // IPv6: the /56
  for (int i = 0; i < 7; ++i) b[i] = static_cast<uint8_t>(bits >> (8 * (6 - i)));
  return AddressText(b, 16) + "/56";
}

const char* KindText(partitions::EntryKind k) {
  switch (k) {
    case partitions::EntryKind::kPositive:
      return "positive";
    case partitions::EntryKind::kNxDomain:
      return "nxdomain";
    case partitions::EntryKind::kNoData:
      return "nodata";
    case partitions::EntryKind::kServFail:
      return "servfail";
  }
  return "?";
}

// The name/type/partition selection of a flush or a dump.
struct Selection {
  mgmt::NameSelection names;
  PartitionFilter partition;
  bool Matches(const CacheEntry& e) const {
    return names.TypeMatches(e.qtype()) && partition.Matches(e.partition()) && names.NameMatches(e.qname());
  }
};

absl::StatusOr<Selection> ParseSelection(const ControlArgs& a, const partitions::CityMap* cm) {
  Selection s;
  auto names = mgmt::NameSelection::Parse(a);
  if (!names.ok()) return names.status();
  s.names = *names;
  auto p = ParsePartition(a.Get("partition"), cm);
  if (!p.ok()) return p.status();
  s.partition = *p;
  return s;
}

std::string Ratio(uint64_t hits, uint64_t lookups) {
  if (lookups == 0) return "-";
  char b[32];
  std::snprintf(b, sizeof(b), "%.4f", static_cast<double>(hits) / static_cast<double>(lookups));
  return b;
}

std::string EcsText(const dns::ClientSubnet& s) {
  if (s.family == 0) return "-";
  return Cat(AddressText(s.address.data(), s.family == 1 ? 4 : 16), "/", int{s.source_prefix});
}

}  // namespace

ControlReply Node::Control(const ControlRequest& r) {
  std::lock_guard<std::mutex> lock(control_mu_);
  // The city map and the learned names are read under RCU: this thread is
  // a reader, online only while it serves the request.
  thread_local common::RcuThread rcu;
  if (!common::RcuThread::CurrentIsOnline()) rcu.Online();
  ControlReply reply;
  auto no_args = [&]() -> bool {
    if (r.args.empty()) return true;
    reply = ControlReply::Error(Cat("'", r.verb, "' takes no arguments"));
    return false;
  };
  if (r.verb == "cache-flush") {
    reply = CacheFlush(r);
  } else if (r.verb == "cache-dump") {
    reply = CacheDump(r);
  } else if (r.verb == "cache-stats") {
    if (no_args()) reply = CacheStatsReply();
  } else if (r.verb == "stats") {
    if (no_args()) {
      auto text = RenderMetrics();
      reply = text.ok() ? ControlReply{true, mgmt::MetricsAsTable(*text), mgmt::MetricsAsJson(*text)}
                        : ControlReply::Error(std::string(ToStd(text.status().message())));
    }
  } else if (r.verb == "reload") {
    if (no_args()) {
      absl::Status st;
      {
        common::RcuOfflineScope offline;  // a reload waits for the other readers
        st = Reload();
      }
      common::LogInfo("control", "reload by ", r.actor, st.ok() ? ": done" : Cat(": ", ToStd(st.message())));
      reply = st.ok() ? ControlReply{true, "reloaded the city map and tags\n", "{\"reloaded\":true}"}
                      : ControlReply::Error(std::string(ToStd(st.message())));
    }
  } else if (r.verb == "upstreams") {
    if (no_args()) reply = UpstreamsReply();
  } else if (r.verb == "partitions") {
    if (no_args()) reply = PartitionsReply();
  } else {
    reply = ControlReply::Error(
        Cat("unknown command '", r.verb,
            "' (weir-fastpath: cache-flush, cache-dump, cache-stats, stats, reload, upstreams, partitions)"));
  }
  rcu.Offline();
  return reply;
}

ControlReply Node::CacheFlush(const ControlRequest& r) {
  auto a = ControlArgs::Parse(r.args, {"name", "suffix", "partition", "type"});
  if (!a.ok()) return ControlReply::Error(std::string(ToStd(a.status().message())));
  if (!a->Has("name") && !a->Has("partition") && !a->Has("type")) {
    return ControlReply::Error(
        "flush what? give a NAME, --partition or --type ('. --suffix' flushes everything)");
  }
  auto sel = ParseSelection(*a, shared_.citymap.Get());
  if (!sel.ok()) return ControlReply::Error(std::string(ToStd(sel.status().message())));
  const size_t n = shared_.cache->EraseMatching([&](const CacheEntry& e) { return sel->Matches(e); });
  std::string what = sel->names.has_name
                         ? Cat(sel->names.suffix ? "under " : "", dns::NameKeyToText(sel->names.name.span()))
                         : std::string("every name");
  if (sel->names.qtype != 0) CatTo(what, " type ", dns::TypeToText(sel->names.qtype));
  if (a->Has("partition")) CatTo(what, " partition ", a->Get("partition"));
  common::LogInfo("control", "cache flush of ", what, " by ", r.actor, ": ", n, " entries");
  return {true, Cat("flushed ", n, " entries (", what, ")\n"), Cat("{\"flushed\":", n, "}")};
}

ControlReply Node::CacheDump(const ControlRequest& r) {
  auto a = ControlArgs::Parse(r.args, {"name", "suffix", "partition", "type", "limit"});
  if (!a.ok()) return ControlReply::Error(std::string(ToStd(a.status().message())));
  auto limit = a->Number("limit", 1000, 1, kMaxDumpRows);
  if (!limit.ok()) return ControlReply::Error(std::string(ToStd(limit.status().message())));
  const partitions::CityMap* cm = shared_.citymap.Get();
  auto sel = ParseSelection(*a, cm);
  if (!sel.ok()) return ControlReply::Error(std::string(ToStd(sel.status().message())));
  const uint32_t now = shared_.clock->NowSeconds();
  const LearnedTags* learned = shared_.learned.Get();

  // Under the cache's writer lock only the raw fields are copied; the text
  // is made after (the forwarder's inserts wait for the lock).
  struct Raw {
    std::vector<uint8_t> qname;
    uint16_t qtype = 0, qclass = 0, answers = 0;
    Partition partition = 0;
    partitions::EntryKind kind{};
    uint32_t ttl = 0, expires = 0;
    bool has_weights = false;
    uint8_t address_len = 0;         // 4 or 16; 0: no address RRset
    std::vector<uint8_t> addresses;  // address_len bytes each
    std::vector<uint8_t> weights;
    uint64_t hash = 0, fingerprint = 0;
  };
  std::vector<Raw> raws;
  bool truncated = false;
  shared_.cache->ForEach([&](const CacheEntry& e) {
    if (!sel->Matches(e)) return true;
    if (raws.size() == *limit) {
      truncated = true;
      return false;
    }
    Raw& x = raws.emplace_back();
    x.qname.assign(e.qname().begin(), e.qname().end());
    x.qtype = e.qtype();
    x.qclass = e.qclass();
    x.answers = e.answer_count();
    x.partition = e.partition();
    x.kind = e.kind();
    x.ttl = e.ttl();
    x.expires = e.expires();
    if (e.address_count() > 0) {
      x.has_weights = e.has_weights();
      const size_t size = e.address_record_size();
      x.address_len = static_cast<uint8_t>(size == 16 ? 4 : 16);
      const uint8_t* rec = e.records().data() + e.chain_bytes();
      for (size_t i = 0; i < e.address_count(); ++i) {
        const uint8_t* rdata = rec + i * size + size - x.address_len;
        x.addresses.insert(x.addresses.end(), rdata, rdata + x.address_len);
      }
      x.weights.assign(e.weights().begin(), e.weights().end());
      x.hash = e.hash();
      x.fingerprint = e.fingerprint();
    }
    return true;
  });

  // Each worker's SWRR position for the first kMaxProbedRows weighted rows:
  // one worker at a time, the worker copying them between two bursts.
  std::vector<size_t> probed;  // row index of each probe item
  SwrrProbe probe;
  for (size_t k = 0; k < raws.size() && probed.size() < kMaxProbedRows; ++k) {
    const size_t n = raws[k].weights.size();
    if (n < 2) continue;
    probed.push_back(k);
    probe.items.push_back({{raws[k].partition, raws[k].qname, raws[k].qtype, raws[k].qclass},
                           raws[k].hash,
                           raws[k].fingerprint,
                           static_cast<uint8_t>(n),
                           false,
                           {}});
  }
  size_t weighted_rows = 0;
  for (const Raw& x : raws) weighted_rows += x.weights.size() >= 2;
  // current[row][worker]: the values, empty when that worker holds none.
  std::vector<std::vector<std::vector<int16_t>>> current(raws.size());
  std::vector<int> workers;  // the slots that run a worker
  for (int w = 0; w < slots(); ++w) {
    if (w < slots() - 1 || config_.tcp) workers.push_back(w);  // the last slot is the TCP thread's
  }
  size_t workers_answered = 0;
  if (!probe.items.empty()) {
    // Waiting for a worker is no RCU read: nothing read under RCU is used
    // below but copies.
    common::RcuOfflineScope offline;
    for (size_t k : probed) current[k].resize(workers.size());
    for (size_t wi = 0; wi < workers.size(); ++wi) {
      const int w = workers[wi];
      for (SwrrProbe::Item& it : probe.items) it.found = false;
      if (!cores_[w]->ProbeSwrr(&probe, kProbeTimeout, channels_[w]->wake_worker)) continue;
      ++workers_answered;
      for (size_t i = 0; i < probe.items.size(); ++i) {
        const SwrrProbe::Item& it = probe.items[i];
        if (it.found) current[probed[i]][wi].assign(it.current.begin(), it.current.begin() + it.n);
      }
    }
  }

  auto swrr_text = [&](size_t k, size_t i, bool json) {
    std::string out;
    for (size_t wi = 0; wi < current[k].size(); ++wi) {
      const std::vector<int16_t>& c = current[k][wi];
      if (json) {
        CatTo(out, wi ? "," : "", c.empty() ? std::string("null") : Cat(c[i]));
      } else {
        CatTo(out, wi ? " " : "", "w", workers[wi], "=", c.empty() ? std::string("-") : Cat(c[i]));
      }
    }
    return out;
  };
  std::string text =
      Cat("# ", raws.size(), truncated ? "+" : "", " entries at clock ", now,
          "; swrr: each worker's current value (nginx smooth weighted round-robin; '-': the worker "
          "has not answered it)\n");
  std::vector<std::vector<std::string>> table = {
      {"NAME", "TYPE", "PARTITION", "LEVEL", "KIND", "TTL", "LEFT", "ORIGIN"}};
  std::string json = "{\"entries\":[";
  std::string details;
  for (size_t k = 0; k < raws.size(); ++k) {
    const Raw& x = raws[k];
    const std::string name = dns::NameKeyToText(x.qname);
    const std::string type = dns::TypeToText(x.qtype);
    const std::string partition = PartitionText(cm, x.partition);
    const std::string level = LevelText(x.partition);
    const int64_t left = static_cast<int64_t>(x.expires) - static_cast<int64_t>(now);
    const std::string origin = left <= 0                                                        ? "stale"
                               : learned != nullptr && learned->Lookup(x.qname, now) != nullptr ? "learned"
                                                                                                : "fetched";
    table.push_back({name, type, partition, level, KindText(x.kind), Cat(x.ttl),
                     left > 0 ? Cat(left) : Cat("stale ", -left, "s"), origin});
    CatTo(json, k ? "," : "", "{\"name\":", JsonString(name), ",\"type\":", JsonString(type),
          ",\"partition\":", JsonString(partition), ",\"level\":", JsonString(level),
          ",\"kind\":", JsonString(KindText(x.kind)), ",\"ttl\":", x.ttl,
          ",\"ttl_left\":", std::max<int64_t>(left, 0), ",\"stale_for\":", std::max<int64_t>(-left, 0),
          ",\"origin\":", JsonString(origin), ",\"answers\":", x.answers,
          ",\"weighted\":", x.has_weights ? "true" : "false", ",\"addresses\":[");
    const size_t count = x.address_len == 0 ? 0 : x.addresses.size() / x.address_len;
    if (count > 0) {
      CatTo(details, name, " ", type, " ", partition,
            x.has_weights ? " (weights from upstream)" : " (no weights: equal)", "\n");
    }
    for (size_t i = 0; i < count; ++i) {
      const std::string address = AddressText(x.addresses.data() + i * x.address_len, x.address_len);
      const unsigned weight = i < x.weights.size() ? x.weights[i] : 1;
      CatTo(json, i ? "," : "", "{\"address\":", JsonString(address), ",\"weight\":", weight);
      if (!current[k].empty()) CatTo(json, ",\"swrr_current\":[", swrr_text(k, i, true), "]");
      json += "}";
      CatTo(details, "  ", address, " weight ", weight,
            current[k].empty() ? std::string() : Cat(" swrr ", swrr_text(k, i, false)), "\n");
    }
    json += "]}";
  }
  CatTo(json, "],\"count\":", raws.size(), ",\"truncated\":", truncated ? "true" : "false",
        ",\"clock\":", now, ",\"workers\":", workers.size(),
        ",\"workers_answered\":", probe.items.empty() ? 0 : workers_answered,
        ",\"swrr_rows\":", probed.size(), "}");
  text += mgmt::TextTable(table);
  if (!details.empty()) text += "\n" + details;
  if (weighted_rows > probed.size()) {
    CatTo(text, "# SWRR positions shown for the first ", probed.size(), " of ", weighted_rows,
          " weighted entries: narrow the dump for the others\n");
  }
  if (truncated)
    CatTo(text, "# more entries match: raise --limit (", *limit, ") or narrow with --name/--partition\n");
  return {true, std::move(text), std::move(json)};
}

ControlReply Node::CacheStatsReply() {
  const partitions::CacheStats s = shared_.cache->stats();
  const std::vector<partitions::PartitionCacheStats> groups = shared_.cache->partition_stats();
  const partitions::CityMap* cm = shared_.citymap.Get();
  std::string text = Cat(
      "entries ", s.entries, "\nbytes ", s.bytes, " of ", shared_.cache->options().byte_budget, " (index ",
      s.index_bytes, ")\nslab bytes ", s.slab_bytes, "\ninserts ", s.inserts, "\nreplaces ", s.replaces,
      "\nevictions ", s.evictions, "\nexpired evictions ", s.expired_evictions, "\nflushed ", s.flushed,
      "\ninserts refused busy ", s.busy, "\ninserts refused reclaiming ", s.reclaiming, "\n\n");
  std::vector<std::vector<std::string>> table = {
      {"PARTITION", "ENTRIES", "BYTES", "INSERTS", "EVICTIONS", "EXPIRED", "FLUSHED"}};
  std::string json =
      Cat("{\"entries\":", s.entries, ",\"bytes\":", s.bytes,
          ",\"budget_bytes\":", shared_.cache->options().byte_budget, ",\"index_bytes\":", s.index_bytes,
          ",\"slab_bytes\":", s.slab_bytes, ",\"inserts\":", s.inserts, ",\"replaces\":", s.replaces,
          ",\"evictions\":", s.evictions, ",\"expired_evictions\":", s.expired_evictions,
          ",\"flushed\":", s.flushed, ",\"busy\":", s.busy, ",\"reclaiming\":", s.reclaiming,
          ",\"partitions\":[");
  bool first = true;
  for (size_t g = 0; g < groups.size(); ++g) {
    const partitions::PartitionCacheStats& p = groups[g];
    if (p.inserts == 0) continue;
    const std::string name = g == 0   ? std::string("common")
                             : g == 1 ? std::string("subnet")
                                      : CityName(cm, g - 2);
    table.push_back({name, Cat(p.entries), Cat(p.bytes), Cat(p.inserts), Cat(p.evictions),
                     Cat(p.expired_evictions), Cat(p.flushed)});
    CatTo(json, first ? "" : ",", "{\"partition\":", JsonString(name), ",\"entries\":", p.entries,
          ",\"bytes\":", p.bytes, ",\"inserts\":", p.inserts, ",\"evictions\":", p.evictions,
          ",\"expired_evictions\":", p.expired_evictions, ",\"flushed\":", p.flushed, "}");
    first = false;
  }
  return {true, text + mgmt::TextTable(table), json + "]}"};
}

ControlReply Node::UpstreamsReply() const {
  std::vector<std::vector<std::string>> table = {{"GROUP", "UPSTREAM", "STATE", "RING SHARE", "QUERIES",
                                                  "ANSWERS", "TIMEOUTS", "MEAN LATENCY", "P99 LATENCY"}};
  std::string json = "{\"upstreams\":[";
  bool first = true;
  for (int g = 0; g < 2; ++g) {
    const std::vector<double> shares = forwarder_->RingShares(g == 1);
    const auto& stats = forwarder_->upstream_stats(g == 1);
    for (size_t i = 0; i < stats.size(); ++i) {
      const UpstreamStats& u = *stats[i];
      LatencyHistogram::Buckets buckets{};
      double sum = 0;
      u.latency.AddTo(buckets, &sum);
      uint64_t count = 0;
      for (uint64_t b : buckets) count += b;
      // p99: the upper bound of the bucket holding it (">max" past the last).
      std::string p99 = "-";
      if (count > 0) {
        const size_t b = common::QuantileBucket(buckets, 0.99);
        p99 = b < kUpstreamLatencyBounds.size() ? Cat("<=", kUpstreamLatencyBounds[b] * 1000, "ms") : ">max";
      }
      const double mean_ms = count > 0 ? sum * 1000.0 / static_cast<double>(count) : 0;
      char mean[32], share[32];
      std::snprintf(mean, sizeof(mean), "%.2fms", mean_ms);
      std::snprintf(share, sizeof(share), "%.1f%%", 100.0 * (i < shares.size() ? shares[i] : 0));
      const bool up = u.up.load(std::memory_order_relaxed);
      const char* group = g ? "weighted" : "ordinary";
      table.push_back({group, u.name, up ? "up" : "down", share, Cat(u.queries.Read()), Cat(u.answers.Read()),
                       Cat(u.timeouts.Read()), count > 0 ? std::string(mean) : "-", p99});
      CatTo(json, first ? "" : ",", "{\"group\":", JsonString(group), ",\"upstream\":", JsonString(u.name),
            ",\"up\":", up ? "true" : "false", ",\"ring_share\":", i < shares.size() ? shares[i] : 0,
            ",\"queries\":", u.queries.Read(), ",\"answers\":", u.answers.Read(),
            ",\"timeouts\":", u.timeouts.Read(), ",\"latency_count\":", count,
            ",\"latency_mean_seconds\":", count > 0 ? sum / static_cast<double>(count) : 0, "}");
      first = false;
    }
  }
  return {true, mgmt::TextTable(table), json + "]}"};
}

ControlReply Node::PartitionsReply() const {
  const partitions::CityMap* cm = shared_.citymap.Get();
  std::string source;
  if (mgmt_client_) {
    source = Cat("weir-mgmt snapshot version ", mgmt_client_->applied_version());
  } else {
    source = Cat("files ", config_.citymap_path.empty() ? "(no city map)" : config_.citymap_path, ", ",
                 config_.tags_path.empty() ? "(no tags)" : config_.tags_path);
  }
  const size_t cities = cm != nullptr ? cm->city_count() : 0;
  std::vector<size_t> prefixes(cities, 0);
  if (cm != nullptr) {
    for (const partitions::CityPrefix& p : cm->prefixes()) {
      if (p.city < cities) ++prefixes[p.city];
    }
  }
  const std::vector<partitions::PartitionCacheStats> groups = shared_.cache->partition_stats();
  auto counts = [&](size_t slot, uint64_t* lookups, uint64_t* hits) {
    *lookups = *hits = 0;
    for (const auto& c : cores_) {
      *lookups += c->handler().partition_lookups(slot);
      *hits += c->handler().partition_hits(slot);
    }
  };
  auto entries = [&](size_t group) { return group < groups.size() ? groups[group].entries : 0; };
  std::vector<std::vector<std::string>> table = {
      {"PARTITION", "PREFIXES", "ECS V4", "ECS V6", "LOOKUPS", "HITS", "HIT RATIO", "ENTRIES"}};
  std::string json =
      Cat("{\"source\":", JsonString(source), ",\"cities\":", cities,
          ",\"default_city\":", JsonString(cm != nullptr ? CityName(cm, cm->default_city()) : ""),
          ",\"partitions\":[");
  auto add = [&](const std::string& name, const std::string& level, size_t slot, size_t group,
                 size_t n_prefixes, const std::string& v4, const std::string& v6, bool first) {
    uint64_t lookups, hits;
    counts(slot, &lookups, &hits);
    table.push_back({name, level == "city" ? Cat(n_prefixes) : std::string("-"), v4, v6, Cat(lookups),
                     Cat(hits), Ratio(hits, lookups), Cat(entries(group))});
    CatTo(json, first ? "" : ",", "{\"partition\":", JsonString(name), ",\"level\":", JsonString(level),
          ",\"prefixes\":", n_prefixes, ",\"ecs_v4\":", JsonString(v4), ",\"ecs_v6\":", JsonString(v6),
          ",\"lookups\":", lookups, ",\"hits\":", hits,
          ",\"hit_ratio\":", lookups > 0 ? static_cast<double>(hits) / static_cast<double>(lookups) : 0,
          ",\"entries\":", entries(group), "}");
  };
  add("common", "global", 0, 0, 0, "-", "-", true);
  for (size_t id = 0; id < cities; ++id) {
    const partitions::City& c = cm->city(static_cast<partitions::PartitionId>(id));
    add(c.name, "city", id + 1, id + 2, prefixes[id], EcsText(c.ecs_v4), EcsText(c.ecs_v6), false);
  }
  add("subnet", "subnet", QueryHandler::kSubnetSlot, 1, 0, "own /24", "own /56", false);
  std::string text = Cat("city map: ", cities, " cities, ", cm != nullptr ? cm->prefixes().size() : 0,
                         " prefixes, default city ", cm != nullptr ? CityName(cm, cm->default_city()) : "-",
                         "\nsource: ", source, "\n\n");
  return {true, text + mgmt::TextTable(table), json + "]}"};
}

}  // namespace weir::fastpath
