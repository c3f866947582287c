// weir-fastpath's control commands (Node::Control): what `weirctl cache ...`,
// `stats`, `reload`, `upstreams` and `partitions` do on a front node.
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "weir/common/histogram.h"
#include "weir/common/log.h"
#include "weir/common/rcu.h"
#include "weir/common/text.h"
#include "weir/dns/message.h"
#include "weir/fastpath/node.h"
#include "weir/mgmt/node_client.h"
#include "weir/mgmt/structured_reply.h"
#include "weir/partitions/segment_report.h"

namespace weir::fastpath {

using common::Cat;
using common::CatTo;
using common::ToStd;
using mgmt::AddressText;
using mgmt::CellText;
using mgmt::ControlArgs;
using mgmt::ControlReply;
using mgmt::ControlRequest;
using mgmt::Json;
using mgmt::StructuredReply;
using partitions::CacheEntry;
using partitions::Partition;

std::string CityName(const partitions::CityMap* cm, size_t id) {
  if (cm != nullptr && id < cm->city_count()) return cm->city(static_cast<partitions::PartitionId>(id)).name;
  return Cat("city", id);
}

std::string StatsGroupName(const partitions::CityMap* cm, size_t group) {
  switch (group) {
    case 0:
      return "common";
    case partitions::kSubnetStatsGroup:
      return "subnet";
    case partitions::kAdaptiveStatsGroup:
      return "segment";
    default:
      return CityName(cm, group - partitions::kCityStatsGroup);
  }
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
  enum class Mode { kAny, kExact, kAllSubnets, kAllSegments } mode = Mode::kAny;
  Partition partition = partitions::kCommonPartition;
  bool Matches(Partition p) const {
    switch (mode) {
      case Mode::kAny:
        return true;
      case Mode::kExact:
        return p == partition;
      case Mode::kAllSubnets:
        return partitions::LevelOf(p) == partitions::CacheLevel::kSubnet;
      case Mode::kAllSegments:
        return partitions::LevelOf(p) == partitions::CacheLevel::kAdaptive;
    }
    return false;
  }
};

// "common" (or "global"), "subnet" (every subnet partition), "segment"
// (every adaptive-level answer), an address or prefix (the subnet
// partition it falls in), or a city of the city map.
absl::StatusOr<PartitionFilter> ParsePartition(std::string_view text, const partitions::CityMap* cm) {
  PartitionFilter f;
  if (text.empty()) return f;
  f.mode = PartitionFilter::Mode::kExact;
  if (text == "common" || text == "global") return f;
  if (text == "subnet") {
    f.mode = PartitionFilter::Mode::kAllSubnets;
    return f;
  }
  if (text == "segment") {
    f.mode = PartitionFilter::Mode::kAllSegments;
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
  return absl::NotFoundError(
      Cat("no partition '", text,
          "': not 'common', 'subnet', 'segment', an address, nor a city of the city map applied"));
}

std::string LevelText(Partition p) {
  switch (partitions::LevelOf(p)) {
    case partitions::CacheLevel::kGlobal:
      return "global";
    case partitions::CacheLevel::kCity:
      return "city";
    case partitions::CacheLevel::kAdaptive:
      return "adaptive";
    case partitions::CacheLevel::kSubnet:
      break;
  }
  return "subnet";
}

// The partition's name: "common", the city, the subnet's prefix, or an
// adaptive-level answer's number ("answer#N", weirctl segments ls shows
// which segments it serves).
std::string PartitionText(const partitions::CityMap* cm, Partition p) {
  switch (partitions::LevelOf(p)) {
    case partitions::CacheLevel::kGlobal:
      return "common";
    case partitions::CacheLevel::kCity:
      return CityName(cm, partitions::CityOf(p));
    case partitions::CacheLevel::kAdaptive:
      return Cat("answer#", partitions::AnswerIdOf(p));
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

// "12.3%", "0.50ms": a number of a row as the text shows it.
std::string Printf(const char* format, double v) {
  char b[32];
  std::snprintf(b, sizeof(b), format, v);
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
      common::PrometheusWriter w;
      WriteMetrics(w);
      auto samples = w.Samples();
      reply = samples.ok() ? mgmt::MetricsReply(*samples).Render()
                           : ControlReply::Error(std::string(ToStd(samples.status().message())));
    }
  } else if (r.verb == "reload") {
    if (no_args()) {
      absl::Status st;
      std::string what;
      {
        common::RcuOfflineScope offline;  // a reload waits for the other readers
        st = Reload(&what);
      }
      // A refused reload is an error in the log as in weirctl's reply.
      if (st.ok()) {
        common::LogInfo("control", "reload by ", r.actor, ": reloaded ", what);
      } else {
        common::LogError("control", "reload by ", r.actor, ": ", ToStd(st.message()));
      }
      reply = st.ok() ? StructuredReply(Json{{"reloaded", true}, {"what", what}})
                            .Text(Cat("reloaded ", what, "\n"))
                            .Render()
                      : ControlReply::Error(std::string(ToStd(st.message())));
    }
  } else if (r.verb == "upstreams") {
    if (no_args()) reply = UpstreamsReply();
  } else if (r.verb == "partitions") {
    if (no_args()) reply = PartitionsReply();
  } else if (r.verb == "segments-ls") {
    reply = SegmentsList(r);
  } else if (r.verb == "segments-diff") {
    reply = SegmentsDiff(r);
  } else {
    reply = ControlReply::Error(Cat("unknown command '", r.verb,
                                    "' (weir-fastpath: cache-flush, cache-dump, cache-stats, stats, reload, "
                                    "upstreams, partitions, segments-ls, segments-diff)"));
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
  StructuredReply reply(Json{{"flushed", n}});
  reply.Block([what](const Json& doc) {
    return Cat("flushed ", CellText(doc, "flushed"), " entries (", what, ")\n");
  });
  return reply.Render();
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
  // A calibrated entry's SWRR sequence is keyed by its fingerprint mixed
  // with its factor set's digest (WriteAnswer): probed as the workers pick.
  const partitions::TagTable* tags = shared_.tags.Get();
  const partitions::BoundWeightFactors* factors = shared_.factors.Get();
  auto pick_fingerprint = [&](const CacheEntry& e) {
    if (factors == nullptr || factors->empty() || tags == nullptr) return e.fingerprint();
    const partitions::Tag* tag = tags->Lookup(e.qname());
    const partitions::FactorSet* f =
        tag != nullptr && tag->calibrate ? factors->Find(e.partition(), e.qname()) : nullptr;
    return f != nullptr ? partitions::MixPickDigest(e.fingerprint(), f->digest()) : e.fingerprint();
  };

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
    uint64_t lineage = 0, fingerprint = 0;
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
      x.lineage = e.lineage();
      x.fingerprint = pick_fingerprint(e);
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
    probe.items.push_back({raws[k].lineage, raws[k].fingerprint, static_cast<uint8_t>(n), false, {}});
  }
  size_t weighted_rows = 0;
  for (const Raw& x : raws) weighted_rows += x.weights.size() >= 2;
  // current[row][worker]: the values, empty when that worker holds none.
  std::vector<std::vector<std::vector<int16_t>>> current(raws.size());
  std::vector<int> workers;           // the slots of the threads that answer (and so hold SWRR states)
  Json thread_names = Json::array();  // their columns: "w0".. the workers, "tcp", "tls"
  // Slots: the workers, then the TCP thread's, then the encrypted front's.
  const int tls_slot = config_.front_enabled() ? slots() - 1 : -1;
  const int tcp_slot = slots() - 1 - (tls_slot >= 0 ? 1 : 0);
  for (int w = 0; w < slots(); ++w) {
    if (w < tcp_slot || (w == tcp_slot && config_.tcp) || w == tls_slot) {
      workers.push_back(w);
      thread_names.push_back(w < tcp_slot    ? Cat("w", w)
                             : w == tcp_slot ? std::string("tcp")
                                             : std::string("tls"));
    }
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

  StructuredReply reply;
  Json& entries = reply.json()["entries"] = Json::array();
  for (size_t k = 0; k < raws.size(); ++k) {
    const Raw& x = raws[k];
    const int64_t left = static_cast<int64_t>(x.expires) - static_cast<int64_t>(now);
    const std::string origin = left <= 0                                                        ? "stale"
                               : learned != nullptr && learned->Lookup(x.qname, now) != nullptr ? "learned"
                                                                                                : "fetched";
    Json& e = entries.emplace_back(Json{{"name", dns::NameKeyToText(x.qname)},
                                        {"type", dns::TypeToText(x.qtype)},
                                        {"partition", PartitionText(cm, x.partition)},
                                        {"level", LevelText(x.partition)},
                                        {"kind", KindText(x.kind)},
                                        {"ttl", x.ttl},
                                        {"ttl_left", std::max<int64_t>(left, 0)},
                                        {"stale_for", std::max<int64_t>(-left, 0)},
                                        {"origin", origin},
                                        {"answers", x.answers},
                                        {"weighted", x.has_weights},
                                        {"addresses", Json::array()}});
    const size_t count = x.address_len == 0 ? 0 : x.addresses.size() / x.address_len;
    for (size_t i = 0; i < count; ++i) {
      Json& a = e["addresses"].emplace_back(
          Json{{"address", AddressText(x.addresses.data() + i * x.address_len, x.address_len)},
               {"weight", i < x.weights.size() ? unsigned{x.weights[i]} : 1u}});
      if (current[k].empty()) continue;
      // Each worker's value, null when that worker holds none.
      Json& swrr = a["swrr_current"] = Json::array();
      for (const std::vector<int16_t>& c : current[k]) swrr.push_back(c.empty() ? Json(nullptr) : Json(c[i]));
    }
  }
  reply.json()["count"] = raws.size();
  reply.json()["truncated"] = truncated;
  reply.json()["clock"] = now;
  // The UDP (or poll-mode) workers; the TCP thread and the encrypted front
  // answer too, so swrr_current has a value for each of swrr_threads.
  reply.json()["workers"] = tcp_slot;
  reply.json()["swrr_threads"] = thread_names;
  reply.json()["swrr_threads_answered"] = probe.items.empty() ? 0 : workers_answered;
  reply.json()["swrr_rows"] = probed.size();

  mgmt::CacheDumpHeading(
      reply,
      "swrr: each answering thread's current value (nginx smooth weighted round-robin; w0..: the "
      "workers, tcp: the TCP thread, tls: the encrypted front; '-': the thread has not answered it)");
  reply.Table("/entries",
              {StructuredReply::Field("NAME", "name"), StructuredReply::Field("TYPE", "type"),
               StructuredReply::Field("PARTITION", "partition"), StructuredReply::Field("LEVEL", "level"),
               StructuredReply::Field("KIND", "kind"), StructuredReply::Field("TTL", "ttl"),
               mgmt::TtlLeftColumn(), StructuredReply::Field("ORIGIN", "origin")});
  // Each entry's addresses, weights and SWRR positions (THREAD=value).
  reply.Block([](const Json& doc) {
    std::string details;
    for (const Json& e : doc["entries"]) {
      if (e["addresses"].empty()) continue;
      CatTo(details, CellText(e, "name"), " ", CellText(e, "type"), " ", CellText(e, "partition"),
            e["weighted"].get<bool>() ? " (weights from upstream)" : " (no weights: equal)", "\n");
      for (const Json& a : e["addresses"]) {
        CatTo(details, "  ", CellText(a, "address"), " weight ", CellText(a, "weight"));
        if (a.contains("swrr_current")) {
          details += " swrr";
          const Json& threads = doc["swrr_threads"];
          size_t t = 0;
          for (const Json& c : a["swrr_current"]) {
            CatTo(details, " ", t < threads.size() ? threads[t].get<std::string>() : Cat("#", t), "=",
                  CellText(c));
            ++t;
          }
        }
        details += "\n";
      }
    }
    return details.empty() ? details : "\n" + details;
  });
  if (weighted_rows > probed.size()) {
    reply.Block([weighted_rows](const Json& doc) {
      return Cat("# SWRR positions shown for the first ", CellText(doc, "swrr_rows"), " of ", weighted_rows,
                 " weighted entries: narrow the dump for the others\n");
    });
  }
  return mgmt::CacheDumpLimitHint(reply, truncated, *limit).Render();
}

ControlReply Node::CacheStatsReply() {
  const partitions::CacheStats s = shared_.cache->stats();
  const std::vector<partitions::PartitionCacheStats> groups = shared_.cache->partition_stats();
  const partitions::CityMap* cm = shared_.citymap.Get();
  StructuredReply reply(Json{{"entries", s.entries},
                             {"bytes", s.bytes},
                             {"budget_bytes", shared_.cache->options().byte_budget},
                             {"index_bytes", s.index_bytes},
                             {"slab_bytes", s.slab_bytes},
                             {"inserts", s.inserts},
                             {"replaces", s.replaces},
                             {"evictions", s.evictions},
                             {"expired_evictions", s.expired_evictions},
                             {"flushed", s.flushed},
                             {"busy", s.busy},
                             {"reclaiming", s.reclaiming},
                             {"partitions", Json::array()}});
  for (size_t g = 0; g < groups.size(); ++g) {
    const partitions::PartitionCacheStats& p = groups[g];
    if (p.inserts == 0) continue;
    reply.json()["partitions"].push_back(Json{{"partition", StatsGroupName(cm, g)},
                                              {"entries", p.entries},
                                              {"bytes", p.bytes},
                                              {"inserts", p.inserts},
                                              {"evictions", p.evictions},
                                              {"expired_evictions", p.expired_evictions},
                                              {"flushed", p.flushed}});
  }
  reply.Block([](const Json& d) {
    return Cat("entries ", CellText(d, "entries"), "\nbytes ", CellText(d, "bytes"), " of ",
               CellText(d, "budget_bytes"), " (index ", CellText(d, "index_bytes"), ")\nslab bytes ",
               CellText(d, "slab_bytes"), "\ninserts ", CellText(d, "inserts"), "\nreplaces ",
               CellText(d, "replaces"), "\nevictions ", CellText(d, "evictions"), "\nexpired evictions ",
               CellText(d, "expired_evictions"), "\nflushed ", CellText(d, "flushed"),
               "\ninserts refused busy ", CellText(d, "busy"), "\ninserts refused reclaiming ",
               CellText(d, "reclaiming"), "\n\n");
  });
  reply.Table(
      "/partitions",
      {StructuredReply::Field("PARTITION", "partition"), StructuredReply::Field("ENTRIES", "entries"),
       StructuredReply::Field("BYTES", "bytes"), StructuredReply::Field("INSERTS", "inserts"),
       StructuredReply::Field("EVICTIONS", "evictions"),
       StructuredReply::Field("EXPIRED", "expired_evictions"), StructuredReply::Field("FLUSHED", "flushed")});
  return reply.Render();
}

ControlReply Node::UpstreamsReply() const {
  StructuredReply reply(Json{{"upstreams", Json::array()}});
  // The p99 (the upper bound of the bucket holding it, ">max" past the
  // last) is the text's alone: by group and upstream.
  std::map<std::pair<std::string, std::string>, std::string> p99s;
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
      const char* group = g ? "weighted" : "ordinary";
      if (count > 0) {
        const size_t b = common::QuantileBucket(buckets, 0.99);
        p99s[{group, u.name}] =
            b < kUpstreamLatencyBounds.size() ? Cat("<=", kUpstreamLatencyBounds[b] * 1000, "ms") : ">max";
      }
      reply.json()["upstreams"].push_back(
          Json{{"group", group},
               {"upstream", u.name},
               {"up", u.up.load(std::memory_order_relaxed)},
               {"ring_share", i < shares.size() ? shares[i] : 0.0},
               {"queries", u.queries.Read()},
               {"answers", u.answers.Read()},
               {"timeouts", u.timeouts.Read()},
               {"latency_count", count},
               {"latency_mean_seconds", count > 0 ? sum / static_cast<double>(count) : 0.0}});
    }
  }
  reply.Table(
      "/upstreams",
      {StructuredReply::Field("GROUP", "group"),
       StructuredReply::Field("UPSTREAM", "upstream"),
       {"STATE", [](const Json& u) { return std::string(u["up"].get<bool>() ? "up" : "down"); }},
       {"RING SHARE", [](const Json& u) { return Printf("%.1f%%", 100.0 * u["ring_share"].get<double>()); }},
       StructuredReply::Field("QUERIES", "queries"),
       StructuredReply::Field("ANSWERS", "answers"),
       StructuredReply::Field("TIMEOUTS", "timeouts"),
       {"MEAN LATENCY",
        [](const Json& u) {
          return u["latency_count"].get<uint64_t>() > 0
                     ? Printf("%.2fms", u["latency_mean_seconds"].get<double>() * 1000.0)
                     : std::string("-");
        }},
       {"P99 LATENCY", [p99s = std::move(p99s)](const Json& u) {
          auto it = p99s.find({u["group"].get<std::string>(), u["upstream"].get<std::string>()});
          return it == p99s.end() ? std::string("-") : it->second;
        }}});
  return reply.Render();
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
  auto entries = [&](size_t group) { return group < groups.size() ? groups[group].entries : 0; };
  StructuredReply reply(Json{{"source", source},
                             {"cities", cities},
                             {"default_city", cm != nullptr ? CityName(cm, cm->default_city()) : ""},
                             {"partitions", Json::array()}});
  auto add = [&](const std::string& name, const std::string& level, size_t slot, size_t group,
                 size_t n_prefixes, const std::string& v4, const std::string& v6) {
    uint64_t lookups = 0, hits = 0;
    for (const auto& c : cores_) {
      lookups += c->handler().partition_lookups(slot);
      hits += c->handler().partition_hits(slot);
    }
    reply.json()["partitions"].push_back(
        Json{{"partition", name},
             {"level", level},
             {"prefixes", n_prefixes},
             {"ecs_v4", v4},
             {"ecs_v6", v6},
             {"lookups", lookups},
             {"hits", hits},
             {"hit_ratio", lookups > 0 ? static_cast<double>(hits) / static_cast<double>(lookups) : 0.0},
             {"entries", entries(group)}});
  };
  add("common", "global", 0, 0, 0, "-", "-");
  for (size_t id = 0; id < cities; ++id) {
    const partitions::City& c = cm->city(static_cast<partitions::PartitionId>(id));
    add(c.name, "city", id + 1, id + partitions::kCityStatsGroup, prefixes[id], EcsText(c.ecs_v4),
        EcsText(c.ecs_v6));
  }
  add("subnet", "subnet", QueryHandler::kSubnetSlot, partitions::kSubnetStatsGroup, 0, "own /24", "own /56");
  add("segment", "adaptive", QueryHandler::kSegmentSlot, partitions::kAdaptiveStatsGroup, 0, "own /24",
      "own /56");
  const size_t all_prefixes = cm != nullptr ? cm->prefixes().size() : 0;
  reply.Block([all_prefixes](const Json& d) {
    const std::string default_city = d["default_city"].get<std::string>();
    return Cat("city map: ", CellText(d, "cities"), " cities, ", all_prefixes, " prefixes, default city ",
               default_city.empty() ? "-" : default_city, "\nsource: ", CellText(d, "source"), "\n\n");
  });
  reply.Table(
      "/partitions",
      {StructuredReply::Field("PARTITION", "partition"),
       {"PREFIXES",
        [](const Json& p) { return p["level"] == "city" ? CellText(p, "prefixes") : std::string("-"); }},
       StructuredReply::Field("ECS V4", "ecs_v4"),
       StructuredReply::Field("ECS V6", "ecs_v6"),
       StructuredReply::Field("LOOKUPS", "lookups"),
       StructuredReply::Field("HITS", "hits"),
       {"HIT RATIO",
        [](const Json& p) {
          const auto lookups = p["lookups"].get<uint64_t>();
          return lookups == 0 ? std::string("-")
                              : Printf("%.4f", static_cast<double>(p["hits"].get<uint64_t>()) /
                                                   static_cast<double>(lookups));
        }},
       StructuredReply::Field("ENTRIES", "entries")});
  return reply.Render();
}

ControlReply Node::SegmentsList(const ControlRequest& r) {
  auto a = ControlArgs::Parse(r.args, {"name", "type", "limit"});
  if (!a.ok()) return ControlReply::Error(std::string(ToStd(a.status().message())));
  auto limit = a->Number("limit", 1000, 1, partitions::SegmentTable::kMaxMaxSegments);
  if (!limit.ok()) return ControlReply::Error(std::string(ToStd(limit.status().message())));
  dns::NameKey name;
  if (a->Get("name").empty() || !dns::NameKeyFromText(a->Get("name"), &name))
    return ControlReply::Error(Cat("segments ls needs a name, got '", a->Get("name"), "'"));
  const uint16_t qtype = dns::TypeFromText(a->Get("type", "A"));
  if (qtype == 0) return ControlReply::Error(Cat("unknown type '", a->Get("type"), "'"));
  const partitions::CityMap* cm = shared_.citymap.Get();
  const uint32_t now = shared_.clock->NowSeconds();
  const partitions::SegmentSet* set = shared_.segments->Find(name.span(), qtype);
  StructuredReply reply(Json{{"name", dns::NameKeyToText(name.span())},
                             {"type", a->Get("type", "A")},
                             {"segments", Json::array()},
                             {"truncated", false}});
  if (set != nullptr) {
    for (const partitions::Segment& s : set->segments()) {
      const uint32_t expires = s.Expires();  // once: a refresh may move it on meanwhile
      if (reply.json()["segments"].size() == *limit) {
        reply.json()["truncated"] = true;
        break;
      }
      // The city of its first address (segments may span cities).
      common::IpAddress first;
      first.family = s.family;
      const int bytes = s.family == 4 ? 4 : 8;
      const uint64_t v = s.family == 4 ? s.bits >> 32 : s.bits;
      for (int i = 0; i < bytes; ++i) first.bytes[i] = static_cast<uint8_t>(v >> (8 * (bytes - 1 - i)));
      // The addresses of its answer, when the entry is cached.
      Json addresses = Json::array();
      partitions::Freshness f;
      if (const CacheEntry* e =
              shared_.cache->Peek({s.answer, name.span(), qtype, dns::klass::kIn}, now, &f)) {
        for (size_t i = 0; i < e->address_count(); ++i) {
          const std::span<const uint8_t> ad = e->address(i);
          std::string text = AddressText(ad.data(), ad.size());
          if (e->has_weights()) text += Cat("*", int{e->weights()[i]});
          addresses.push_back(text);
        }
      }
      reply.json()["segments"].push_back(Json{{"segment", partitions::SegmentText(s)},
                                              {"city", cm != nullptr ? CityName(cm, cm->Lookup(first)) : "-"},
                                              {"answer", PartitionText(cm, s.answer)},
                                              {"addresses", addresses},
                                              {"ttl_left", expires > now ? expires - now : 0},
                                              {"expired", expires <= now},
                                              {"learned_ago", now >= s.Learned() ? now - s.Learned() : 0}});
    }
  }
  reply.Block([](const Json& d) {
    return Cat(CellText(d, "name"), " ", CellText(d, "type"), ": ", d["segments"].size(), " segments",
               d["truncated"].get<bool>() ? " (truncated)" : "", "\n");
  });
  reply.Table("/segments", {StructuredReply::Field("SEGMENT", "segment"),
                            StructuredReply::Field("CITY", "city"),
                            StructuredReply::Field("ANSWER", "answer"),
                            {"ADDRESSES",
                             [](const Json& row) {
                               std::string out;
                               for (const Json& x : row["addresses"])
                                 out += (out.empty() ? "" : ",") + x.get<std::string>();
                               return out.empty() ? std::string("-") : out;
                             }},
                            {"TTL LEFT",
                             [](const Json& row) {
                               return row["expired"].get<bool>() ? std::string("expired")
                                                                 : CellText(row, "ttl_left");
                             }},
                            StructuredReply::Field("LEARNED AGO", "learned_ago")});
  return reply.Render();
}

ControlReply Node::SegmentsDiff(const ControlRequest& r) {
  auto a = ControlArgs::Parse(r.args, {"name", "max_names", "proposal"});
  if (!a.ok()) return ControlReply::Error(std::string(ToStd(a.status().message())));
  auto max_names = a->Number("max_names", 100, 1, 100000);
  if (!max_names.ok()) return ControlReply::Error(std::string(ToStd(max_names.status().message())));
  partitions::SegmentDiffOptions options;
  options.max_names = *max_names;
  if (a->Has("name")) {
    for (std::string_view n : common::Split(a->Get("name"), ',')) {
      dns::NameKey k;
      if (!dns::NameKeyFromText(n, &k)) return ControlReply::Error(Cat("bad name '", n, "'"));
      options.names.push_back(k);
    }
  }
  const partitions::CityMap* cm = shared_.citymap.Get();
  if (cm == nullptr) return ControlReply::Error("no city map applied");
  absl::StatusOr<partitions::SegmentDiff> diff = partitions::DiffSegments(*shared_.segments, *cm, options);
  if (!diff.ok()) return ControlReply::Error(std::string(ToStd(diff.status().message())));
  StructuredReply reply(Json{{"names", diff->names},
                             {"cities", Json::array()},
                             {"alike", Json::array()},
                             {"proposal", Json::array()}});
  for (const partitions::SegmentDiff::City& c : diff->cities) {
    reply.json()["cities"].push_back(Json{{"city", CityName(cm, c.city)},
                                          {"slash24s", c.slash24s},
                                          {"learned", c.learned},
                                          {"cells", c.cells},
                                          {"verdict", c.cells > 1    ? Cat("split in ", c.cells)
                                                      : c.cells == 1 ? std::string("one")
                                                                     : std::string("-")}});
  }
  for (const auto& group : diff->alike) {
    Json names = Json::array();
    for (const partitions::PartitionId id : group) names.push_back(CityName(cm, id));
    reply.json()["alike"].push_back(names);
  }
  const bool proposal = a->Flag("proposal");
  for (const partitions::SegmentDiff::Line& l : diff->proposal) {
    reply.json()["proposal"].push_back(Json{{"cidr", l.cidr}, {"city", l.city}, {"ecs", l.ecs}});
  }
  if (proposal) {
    // The city map CSV itself, ready for weirctl citymap / partitions.citymap.
    reply.Block([](const Json& d) {
      std::string out = Cat("# city map proposed from the segments of ", CellText(d, "names"), " names\n");
      for (const Json& l : d["proposal"])
        out += Cat(l["cidr"].get<std::string>(), ",", l["city"].get<std::string>(), ",",
                   l["ecs"].get<std::string>(), "\n");
      return out;
    });
    return reply.Render();
  }
  reply.Block([](const Json& d) { return Cat("names compared: ", CellText(d, "names"), "\n\n"); });
  reply.Table("/cities",
              {StructuredReply::Field("CITY", "city"), StructuredReply::Field("/24S", "slash24s"),
               StructuredReply::Field("LEARNED", "learned"), StructuredReply::Field("GSLB SEES", "verdict")});
  reply.Block([](const Json& d) {
    std::string out;
    for (const Json& g : d["alike"]) {
      std::string names;
      for (const Json& n : g) names += (names.empty() ? "" : ", ") + n.get<std::string>();
      out += Cat("answered as one city: ", names, "\n");
    }
    return out.empty() ? std::string() : "\n" + out;
  });
  return reply.Render();
}

}  // namespace weir::fastpath
