#include "weir/fastpath/node.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <map>

#include "weir/common/process_metrics.h"
#include "weir/common/text.h"
#include "weir/mgmt/node_client.h"

namespace weir::fastpath {

using common::Cat;
using common::ToStd;

HandlerOptions MakeHandlerOptions(const FastpathConfig& c) {
  HandlerOptions o;
  o.weight_option_code = c.weight_option_code;
  o.allow = c.allow;
  o.trusted_forwarders = c.trusted_forwarders;
  o.rate_limit_qps = c.rate_limit_qps;
  o.rate_limit_burst = c.rate_limit_burst;
  o.stale_answer_ttl = c.stale_answer_ttl;
  o.prefetch_percent = c.prefetch_percent;
  return o;
}

Node::Node(FastpathConfig config, partitions::FakeClock* test_clock)
    : config_(std::move(config)), test_clock_(test_clock) {
  if (test_clock != nullptr) shared_.clock = test_clock;
}

Node::~Node() {
  StopMgmt();
  Stop();
}

absl::Status Node::Prepare(int slots) {
  if (config_.mgmt.enabled) {
    auto n = mgmt::PrepareNode(config_.mgmt, "fastpath");
    if (!n.ok()) return n.status();
    node_start_ = std::make_unique<mgmt::NodeStart>(*std::move(n));
  }
  if (node_start_ && node_start_->stored) {
    // The last snapshot mgmt pushed wins over the files: it is newer.
    const mgmt::Snapshot& snap = *node_start_->stored;
    if (absl::Status st =
            ApplyPartitions(snap.citymap, "stored snapshot citymap", snap.tags, "stored snapshot tags");
        !st.ok()) {
      return st;
    }
    std::fprintf(stderr, "weir-fastpath: starting from stored mgmt snapshot version %llu\n",
                 static_cast<unsigned long long>(snap.version));
  } else if (absl::Status st = LoadPartitions(); !st.ok()) {
    return st;
  }
  std::vector<MissChannel*> channels;
  for (int i = 0; i < slots; ++i) {
    channels_.push_back(std::make_unique<MissChannel>());
    channels.push_back(channels_.back().get());
  }
  forwarder_ = std::make_unique<Forwarder>(config_, std::move(channels), &shared_);
  const HandlerOptions options = MakeHandlerOptions(config_);
  for (int i = 0; i < slots; ++i) {
    cores_.push_back(std::make_unique<WorkerCore>(i, options, &shared_, channels_[i].get(),
                                                  [f = forwarder_.get()] { f->Notify(); }));
  }
  return absl::OkStatus();
}

absl::Status Node::Start() {
  if (absl::Status st = forwarder_->Start(); !st.ok()) return st;
  if (!node_start_) return absl::OkStatus();
  // A push may be applied from here on; everything it touches exists by now.
  mgmt_client_ = std::make_unique<mgmt::NodeClient>(
      mgmt::MakeNodeClientOptions(config_.mgmt, "fastpath", node_start_->token),
      [this](const mgmt::Snapshot& snap) {
        return ApplyPartitions(snap.citymap, "citymap", snap.tags, "tags");
      });
  return node_start_->stored ? mgmt_client_->Start(node_start_->stored->version, node_start_->stored->origin)
                             : mgmt_client_->Start(0, "");
}

void Node::StopMgmt() {
  if (mgmt_client_) mgmt_client_->Stop();
}

void Node::Stop() {
  if (forwarder_) forwarder_->Stop();
}

absl::Status Node::Reload() {
  if (mgmt_client_) {
    return absl::FailedPreconditionError("tags and city map come from weir-mgmt ([mgmt] is configured)");
  }
  return LoadPartitions();
}

absl::Status Node::LoadPartitions() {
  auto read = [](const std::string& path, std::string* out) -> absl::Status {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) return absl::NotFoundError(Cat(path, ": ", strerror(errno)));
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out->append(buf, n);
    std::fclose(f);
    return absl::OkStatus();
  };
  std::string csv;
  if (!config_.citymap_path.empty()) {
    if (absl::Status st = read(config_.citymap_path, &csv); !st.ok()) return st;
  }
  std::string tags_text;
  if (!config_.tags_path.empty()) {
    if (absl::Status st = read(config_.tags_path, &tags_text); !st.ok()) return st;
  }
  return ApplyPartitions(csv, config_.citymap_path, tags_text, config_.tags_path);
}

namespace {

// Cached entries are keyed by city id (partitions::PartitionKey), so an id
// must name the same city for the whole life of the process: a new map
// keeps every known city's id, appends new cities, and keeps a removed
// city's id reserved (no prefixes, so nothing maps to it) so that its
// entries are never served to another city. `names` is the id -> name
// table so far, updated on success.
absl::StatusOr<std::unique_ptr<const partitions::CityMap>> StableCityIds(const partitions::CityMap& parsed,
                                                                         std::vector<std::string>* names) {
  std::vector<std::string> next = *names;
  std::vector<partitions::PartitionId> remap(parsed.city_count());
  for (size_t id = 0; id < parsed.city_count(); ++id) {
    const std::string& name = parsed.city(static_cast<partitions::PartitionId>(id)).name;
    auto it = std::find(next.begin(), next.end(), name);
    if (it == next.end()) it = next.insert(next.end(), name);
    remap[id] = static_cast<partitions::PartitionId>(it - next.begin());
  }
  if (next.size() > partitions::kMaxCities) {
    return absl::InvalidArgumentError(
        Cat("more than ", partitions::kMaxCities,
            " cities since start (removed cities keep their id): restart to compact"));
  }
  std::vector<partitions::City> cities(next.size());
  for (size_t id = 0; id < next.size(); ++id) cities[id].name = next[id];
  for (size_t id = 0; id < parsed.city_count(); ++id) {
    cities[remap[id]] = parsed.city(static_cast<partitions::PartitionId>(id));
  }
  std::vector<partitions::CityPrefix> prefixes = parsed.prefixes();
  for (partitions::CityPrefix& p : prefixes) p.city = remap[p.city];
  auto built =
      partitions::CityMap::Build(std::move(cities), std::move(prefixes), remap[parsed.default_city()]);
  if (built.ok()) *names = std::move(next);
  return built;
}

}  // namespace

absl::Status Node::ApplyPartitions(std::string_view csv, std::string_view csv_name,
                                   std::string_view tags_text, std::string_view tags_name) {
  partitions::CityMapOptions cmo;
  if (!config_.default_city.empty()) cmo.default_city = config_.default_city;
  auto parsed = partitions::CityMap::FromCsv(csv, cmo);
  if (!parsed.ok()) return absl::InvalidArgumentError(Cat(csv_name, ": ", ToStd(parsed.status().message())));
  auto tags = partitions::TagTable::FromText(tags_text);
  if (!tags.ok()) return absl::InvalidArgumentError(Cat(tags_name, ": ", ToStd(tags.status().message())));
  std::lock_guard<std::mutex> l(apply_mu_);
  auto cm = StableCityIds(**parsed, &city_names_);
  if (!cm.ok()) return absl::InvalidArgumentError(Cat(csv_name, ": ", ToStd(cm.status().message())));
  shared_.citymap.Publish(*std::move(cm));
  shared_.tags.Publish(*std::move(tags));
  if (!shared_.cache) {
    partitions::CacheOptions co;
    co.byte_budget = config_.cache_bytes;
    co.stale_window = config_.stale_window;
    shared_.cache = std::make_unique<partitions::Cache>(co, *shared_.clock);
    shared_.limits.min_ttl = config_.min_ttl;
    shared_.limits.max_ttl = config_.max_ttl;
    shared_.limits.max_negative_ttl = config_.negative_max_ttl;
    shared_.limits.servfail_ttl = config_.servfail_ttl;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Node::RenderMetrics() const {
  common::PrometheusWriter w;
  auto sum = [&](auto field) {
    uint64_t t = 0;
    for (const auto& c : cores_) t += field(c->counters());
    t += field(forwarder_->counters());
    return t;
  };
  auto& queries = w.Counter("weir_queries_total", "Queries received, by transport.");
  queries.Add({{"transport", "udp"}}, sum([](const WorkerCounters& c) { return c.queries_udp.Read(); }));
  queries.Add({{"transport", "tcp"}}, sum([](const WorkerCounters& c) { return c.queries_tcp.Read(); }));
  w.Counter("weir_cache_hits_total", "Queries answered from the cache.")
      .Add({}, sum([](const WorkerCounters& c) { return c.hits.Read(); }));
  w.Counter("weir_cache_misses_total", "Queries the cache could not answer.")
      .Add({}, sum([](const WorkerCounters& c) { return c.misses.Read(); }));
  w.Counter("weir_any_minimal_total", "ANY queries over UDP answered with the RFC 8482 HINFO.")
      .Add({}, sum([](const WorkerCounters& c) { return c.any_minimal.Read(); }));
  w.Counter("weir_stale_served_total",
            "Expired entries served because no upstream answered in time (RFC 8767).")
      .Add({}, sum([](const WorkerCounters& c) { return c.stale_served.Read(); }));
  const LearnedTags* learned = shared_.learned.Get();
  if (mgmt_client_) mgmt_client_->RenderMetrics(w);
  w.Gauge("weir_learned_tags", "Names tagged through a CNAME chain into a tagged suffix (DESIGN 3).")
      .Add({}, learned != nullptr ? learned->size() : 0);
  w.Counter("weir_learned_tags_total", "Names that took a tag through a CNAME chain into a tagged suffix.")
      .Add({}, forwarder_->learned());
  w.Counter("weir_learned_tags_overflow_total",
            "CNAME chains into a tagged suffix relayed uncached because the learned names were full.")
      .Add({}, forwarder_->learned_overflow());
  w.Counter("weir_coalesced_total", "Misses that joined an identical question already in flight.")
      .Add({}, forwarder_->coalesced());
  w.Counter("weir_upstream_queries_total", "Queries sent to the recursors.")
      .Add({}, forwarder_->upstream_queries());
  auto& drops = w.Counter("weir_drops_total", "Queries dropped or answered with an error, by reason.");
  for (size_t r = 0; r < static_cast<size_t>(DropReason::kCount); ++r) {
    drops.Add({{"reason", DropReasonName(static_cast<DropReason>(r))}},
              sum([r](const WorkerCounters& c) { return c.drops[r].Read(); }));
  }
  auto& responses =
      w.Counter("weir_responses_total", "Responses sent, by RCODE (its name: NOERROR, SERVFAIL, ...).");
  for (size_t r = 0; r < 24; ++r) {
    const uint64_t v = sum([r](const WorkerCounters& c) { return c.rcodes[r].Read(); });
    if (v != 0) responses.Add({{"rcode", dns::RcodeName(static_cast<unsigned>(r))}}, v);
  }
  // Per-partition hit ratio and weighted answer counts (partition names
  // from the current city map: this thread is an RCU reader).
  const partitions::CityMap* cm = shared_.citymap.Get();
  auto partition_name = [&](size_t slot) -> std::string {
    if (slot == 0) return "common";
    if (slot == QueryHandler::kSubnetSlot) return "subnet";
    const size_t id = slot - 1;
    if (cm != nullptr && id < cm->city_count())
      return cm->city(static_cast<partitions::PartitionId>(id)).name;
    return Cat("city", id);
  };
  auto& lookups_family = w.Counter("weir_partition_lookups_total", "Cache lookups, by partition.");
  auto& hits_family = w.Counter("weir_partition_hits_total", "Cache hits, by partition.");
  for (size_t slot = 0; slot < QueryHandler::kPartitionSlots; ++slot) {
    uint64_t lookups = 0, hits = 0;
    for (const auto& c : cores_) {
      lookups += c->handler().partition_lookups(slot);
      hits += c->handler().partition_hits(slot);
    }
    if (lookups == 0) continue;
    const std::string name = partition_name(slot);
    lookups_family.Add({{"partition", name}}, lookups);
    hits_family.Add({{"partition", name}}, hits);
  }
  {
    // Sum the workers' slots by (name, partition, address).
    std::map<std::array<std::string, 3>, uint64_t> answers;
    uint64_t overflow = 0;
    for (const auto& c : cores_) {
      const AnswerCounters& ac = c->handler().answer_counters();
      overflow += ac.overflow();
      for (size_t i = 0; i < AnswerCounters::kSlots; ++i) {
        const AnswerCounters::Slot& slot_counter = ac.slots()[i];
        if (slot_counter.key.load(std::memory_order_acquire) == 0) continue;
        const AnswerCounters::Labels& sl = ac.labels(i);
        char addr[INET6_ADDRSTRLEN] = {0};
        inet_ntop(sl.addr_len == 4 ? AF_INET : AF_INET6, sl.addr.data(), addr, sizeof(addr));
        const partitions::Partition p = sl.partition;
        const size_t slot = QueryHandler::PartitionSlot(p);
        std::string pname = slot == QueryHandler::kSubnetSlot ? Cat("subnet-", partitions::SubnetBitsOf(p))
                                                              : partition_name(slot);
        answers[{dns::NameKeyToText({sl.qname.data(), sl.qname_len}), std::move(pname), addr}] +=
            slot_counter.count.Read();
      }
    }
    auto& family = w.Counter("weir_answers_total", "Weighted answers by name, partition and address.");
    for (const auto& [labels, v] : answers) {
      family.Add({{"name", labels[0]}, {"partition", labels[1]}, {"address", labels[2]}}, v);
    }
    w.Counter("weir_answers_overflow_total",
              "Weighted answers not counted by address because every answer counter slot was taken.")
        .Add({}, overflow);
  }
  auto& latency =
      w.Histogram("weir_upstream_latency_seconds", "Time for a recursor to answer, per recursor.");
  auto& up = w.Gauge("weir_upstream_up", "1 while the recursor is healthy, 0 while it is marked down.");
  auto& timeouts = w.Counter("weir_upstream_timeouts_total", "Tries that timed out, per recursor.");
  for (int g = 0; g < 2; ++g) {
    for (const auto& u : forwarder_->upstream_stats(g == 1)) {
      const std::array<common::MetricLabel, 2> labels = {
          {{"group", g ? "weighted" : "ordinary"}, {"upstream", u->name}}};
      u->latency.Render(latency, labels);
      up.Add(labels, u->up.load() ? 1 : 0);
      timeouts.Add(labels, u->timeouts.Read());
    }
  }
  common::AddProcessMetrics(w);
  common::AddBuildInfo(w, "weir-fastpath");
  if (backend_metrics_) backend_metrics_(w);
  return w.Render();
}

}  // namespace weir::fastpath
