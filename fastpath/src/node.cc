#include "weir/fastpath/node.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "absl/strings/str_join.h"
#include "weir/common/line_errors.h"
#include "weir/common/log.h"
#include "weir/common/process_metrics.h"
#include "weir/common/text.h"
#include "weir/mgmt/node_client.h"

namespace weir::fastpath {

using common::Cat;
using common::ToStd;
using mgmt::AddressText;

HandlerOptions MakeHandlerOptions(const FastpathConfig& c) {
  HandlerOptions o;
  o.weight_option_code = c.weight_option_code;
  o.allow = c.allow;
  o.trusted_forwarders = c.trusted_forwarders;
  o.rate_limit.qps = c.rate_limit_qps;
  o.rate_limit.burst = c.rate_limit_burst;
  o.rate_limit.bytes_per_second = c.rate_limit_bytes_per_second;
  o.rate_limit.ipv4_prefix = c.rate_limit_ipv4_prefix;
  o.rate_limit.ipv6_prefix = c.rate_limit_ipv6_prefix;
  o.rate_limit.table_size = c.rate_limit_table_size;
  o.stale_answer_ttl = c.stale_answer_ttl;
  o.prefetch_percent = c.prefetch_percent;
  o.swrr_states = c.swrr_states;
  return o;
}

Node::Node(FastpathConfig config, common::FakeClock* test_clock)
    : config_(std::move(config)),
      test_clock_(test_clock),
      conformance_(config_.metrics_conformance_window_s) {
  if (test_clock != nullptr) shared_.clock = test_clock;
  log_now_ = config_.log;
  dnstap_now_ = config_.dnstap;
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
  if (config_.mgmt.enabled && config_.httpdns.enabled && !config_.httpdns.accounts_file.empty()) {
    common::LogWarning("httpdns", "[httpdns] accounts_file ", config_.httpdns.accounts_file,
                       " is ignored: with [mgmt] the accounts come from weir-mgmt");
  }
  if (node_start_ && node_start_->stored) {
    // The last snapshot mgmt pushed wins over the files: it is newer.
    const mgmt::Snapshot& snap = *node_start_->stored;
    const AccountsText accounts{snap.accounts, "stored snapshot accounts"};
    const PartText factors{snap.factors, "stored snapshot factors"};
    if (absl::Status st = ApplyPartitions(snap.citymap, "stored snapshot citymap", snap.tags,
                                          "stored snapshot tags", &accounts, {}, &factors);
        !st.ok()) {
      return st;
    }
    common::LogInfo("mgmt", "starting from stored mgmt snapshot version ", snap.version);
  } else if (absl::Status st = LoadPartitions(); !st.ok()) {
    return st;
  }
  if (config_.dnstap.enabled()) {
    auto w = dnstap::Writer::Open(config_.dnstap, static_cast<size_t>(slots) + 1);
    if (!w.ok()) return w.status();
    dnstap_ = *std::move(w);
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
    if (dnstap_ && config_.dnstap.client) cores_.back()->SetTap(&dnstap_->producer(i));
  }
  if (dnstap_ && config_.dnstap.upstream) forwarder_->SetTap(&dnstap_->producer(slots));
  return absl::OkStatus();
}

absl::Status Node::Start() {
  if (absl::Status st = forwarder_->Start(); !st.ok()) return st;
  if (!node_start_) return absl::OkStatus();
  // A push may be applied from here on; everything it touches exists by now.
  mgmt_client_ = std::make_unique<mgmt::NodeClient>(
      mgmt::MakeNodeClientOptions(config_.mgmt, "fastpath", node_start_->token),
      [this](const mgmt::Snapshot& snap, const mgmt::SnapshotParts& changed) {
        const AccountsText accounts{snap.accounts, "accounts"};
        const PartText factors{snap.factors, "factors"};
        return ApplyPartitions(snap.citymap, "citymap", snap.tags, "tags", &accounts, changed, &factors);
      });
  mgmt_client_->SetControlHandler([this](const mgmt::ControlRequest& r) { return Control(r); });
  return node_start_->stored ? mgmt_client_->Start(*node_start_->stored) : mgmt_client_->Start(0, "");
}

void Node::StopMgmt() {
  if (mgmt_client_) mgmt_client_->Stop();
}

void Node::Stop() {
  if (forwarder_) forwarder_->Stop();
  dnstap_.reset();  // nothing taps any more: the rest is written out
}

absl::Status Node::Reload(std::string* what) {
  std::lock_guard<std::mutex> reload_lock(reload_mu_);
  // Everything is read and checked first; the first problem does not stop
  // the checks, so the refusal names every broken file at once. The config
  // file's [log] and [dnstap] apply live, last; a key that needs a restart
  // refuses the whole reload.
  std::vector<std::string> problems;
  std::optional<FastpathConfig> next;
  dnstap::LiveChange tap;
  if (!config_.path.empty()) {
    // Every backend name: server.backend is read at start only (the
    // daemon checked it against this build's backends then).
    auto loaded = LoadConfig(config_.path);
    if (!loaded.ok()) {
      problems.push_back(std::string(loaded.status().message()));
    } else {
      auto planned = dnstap::PlanReload(dnstap_ ? &dnstap_now_ : nullptr,
                                        loaded->dnstap.enabled() ? &loaded->dnstap : nullptr);
      if (!planned.ok()) {
        problems.push_back(std::string(planned.status().message()));
      } else {
        next = *std::move(loaded);
        tap = *std::move(planned);
      }
    }
  }
  // The city map, tags and accounts files (standalone only), held from
  // their check to their swap.
  std::unique_lock<std::mutex> apply_lock(apply_mu_, std::defer_lock);
  std::optional<ParsedPartitions> parsed;
  if (!mgmt_client_) {
    apply_lock.lock();
    PartitionFiles files;
    ReadPartitionFiles(&files, &problems);
    // An unreadable file parses as empty, which is never an error: each
    // problem is named once.
    const AccountsText accounts{files.accounts, config_.httpdns.accounts_file};
    parsed = ParsePartitions(files.csv, config_.citymap_path, files.tags, config_.tags_path,
                             AccountsFromFile() ? &accounts : nullptr, {}, &problems);
  }
  const bool tls = backend_reload_ && config_.tls.enabled();
  if (!problems.empty()) {
    // The certificates are checked too (not swapped), to name them as well.
    if (tls) {
      if (absl::Status st = backend_reload_(false); !st.ok()) problems.push_back(std::string(st.message()));
    }
    return absl::FailedPreconditionError(Cat(absl::StrJoin(problems, "; "), ": nothing reloaded"));
  }
  // Nothing is applied before this point; the certificates swap or fail whole.
  std::string done;
  if (tls) {
    if (absl::Status st = backend_reload_(true); !st.ok()) {
      return absl::Status(st.code(), Cat(ToStd(st.message()), ": nothing reloaded"));
    }
    done = "the TLS certificates";
  }
  // What the config changes, applied last (it cannot fail).
  auto apply_config = [&] {
    if (!next) return std::string();
    std::string changed = common::ApplyConfigLogSettings(log_now_, next->log);
    log_now_ = next->log;
    if (dnstap_) {
      dnstap_->SetLive(tap.tapping, tap.sample);
      dnstap_now_.tapping = tap.tapping;
      dnstap_now_.sample = tap.sample;
    }
    for (const std::string& d : tap.described) common::CatTo(changed, changed.empty() ? "" : ", ", d);
    common::LogDebug("config", config_.path, ": loaded");  // as at start, at the level now in force
    return changed;
  };
  auto with = [](std::string a, const std::string& b) {
    return a.empty() ? b : b.empty() ? a : Cat(a, ", ", b);
  };
  if (mgmt_client_) {
    const std::string changed = apply_config();
    if (done.empty() && changed.empty()) {
      return absl::FailedPreconditionError(
          "tags and city map come from weir-mgmt ([mgmt] is configured), and [log] and [dnstap] did not "
          "change");
    }
    if (what != nullptr) *what = Cat(with(done, changed), " (tags and city map come from weir-mgmt)");
    return absl::OkStatus();
  }
  PublishPartitions(*std::move(parsed));
  apply_lock.unlock();
  const std::string files =
      AccountsFromFile() ? "the city map, tags and HTTPDNS accounts" : "the city map and tags";
  const std::string changed = apply_config();
  if (what != nullptr) *what = with(with(done, files), changed);
  return absl::OkStatus();
}

bool Node::AccountsFromFile() const {
  return !config_.mgmt.enabled && config_.httpdns.enabled && !config_.httpdns.accounts_file.empty();
}

void Node::ReadPartitionFiles(PartitionFiles* out, std::vector<std::string>* problems) const {
  auto read = [&](const std::string& path, std::string* text) {
    if (path.empty()) return;
    FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) {
      problems->push_back(Cat(path, ": ", strerror(errno)));
      return;
    }
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text->append(buf, n);
    if (std::ferror(f) != 0) {
      problems->push_back(Cat(path, ": read error"));
    }
    std::fclose(f);
  };
  read(config_.citymap_path, &out->csv);
  read(config_.tags_path, &out->tags);
  if (AccountsFromFile()) read(config_.httpdns.accounts_file, &out->accounts);
}

absl::Status Node::LoadPartitions() {
  std::vector<std::string> problems;
  PartitionFiles files;
  ReadPartitionFiles(&files, &problems);
  if (!problems.empty()) return absl::NotFoundError(absl::StrJoin(problems, "; "));
  const AccountsText accounts{files.accounts, config_.httpdns.accounts_file};
  return ApplyPartitions(files.csv, config_.citymap_path, files.tags, config_.tags_path,
                         AccountsFromFile() ? &accounts : nullptr);
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
                                   std::string_view tags_text, std::string_view tags_name,
                                   const AccountsText* accounts, const mgmt::SnapshotParts& changed,
                                   const PartText* factors) {
  std::lock_guard<std::mutex> l(apply_mu_);
  std::vector<std::string> problems;
  ParsedPartitions parsed =
      ParsePartitions(csv, csv_name, tags_text, tags_name, accounts, changed, &problems, factors);
  if (!problems.empty()) return absl::InvalidArgumentError(absl::StrJoin(problems, "; "));
  PublishPartitions(std::move(parsed));
  return absl::OkStatus();
}

Node::ParsedPartitions Node::ParsePartitions(std::string_view csv, std::string_view csv_name,
                                             std::string_view tags_text, std::string_view tags_name,
                                             const AccountsText* accounts, const mgmt::SnapshotParts& changed,
                                             std::vector<std::string>* problems,
                                             const PartText* factors) const {
  // At most this many errors per file in one message (a log line); the
  // count of the rest follows them.
  constexpr size_t kErrorsShown = 10;
  auto add = [&](const common::LineErrors& errors, std::string_view name) {
    for (std::string& e : errors.Render(name, kErrorsShown)) problems->push_back(std::move(e));
  };
  // A part that did not change keeps what was built from it (a tag change
  // does not rebuild the city map); before the first apply there is none.
  const bool first = !shared_.cache;
  ParsedPartitions out;
  if (first || changed.citymap) {
    partitions::CityMapOptions cmo;
    if (!config_.default_city.empty()) cmo.default_city = config_.default_city;
    common::LineErrors errors;
    auto cm = partitions::CityMap::FromCsv(csv, cmo, &errors);
    if (!errors.empty() || !cm.ok()) {
      if (errors.empty()) errors.Add(0, std::string(cm.status().message()));
      add(errors, csv_name);
    } else {
      // Ids stay stable across maps (StableCityIds); city_names_ only
      // changes when the map is published.
      out.city_names = city_names_;
      auto stable = StableCityIds(**cm, &out.city_names);
      if (!stable.ok()) {
        problems->push_back(Cat(csv_name, ": ", ToStd(stable.status().message())));
      } else {
        out.citymap = *std::move(stable);
      }
    }
  }
  if (first || changed.tags) {
    common::LineErrors errors;
    auto tags = partitions::TagTable::FromText(tags_text, &errors);
    if (!errors.empty() || !tags.ok()) {
      if (errors.empty()) errors.Add(0, std::string(tags.status().message()));
      add(errors, tags_name);
    } else {
      out.tags = *std::move(tags);
    }
  }
  if (accounts != nullptr && (first || changed.accounts)) {
    // ParseAccounts' errors name the line, never a secret.
    auto a = dns::httpdns::ParseAccounts(accounts->text);
    if (!a.ok()) {
      problems->push_back(Cat(accounts->name, ": ", ToStd(a.status().message())));
    } else {
      out.accounts = std::make_shared<const std::vector<dns::httpdns::Account>>(*std::move(a));
    }
  }
  if (factors != nullptr && (first || changed.factors)) {
    common::LineErrors errors;
    auto f = partitions::WeightFactors::FromText(factors->text, &errors);
    if (!errors.empty() || !f.ok()) {
      if (errors.empty()) errors.Add(0, std::string(f.status().message()));
      add(errors, factors->name);
    } else {
      out.factors = *std::move(f);
    }
  }
  return out;
}

void Node::BindFactors() {
  auto bound = std::make_unique<partitions::BoundWeightFactors>(
      factors_.Bind([this](std::string_view name) -> std::optional<partitions::Partition> {
        // Ids stay stable for the life of the process (StableCityIds), so
        // a name maps to one city partition whatever map is current.
        for (size_t id = 0; id < city_names_.size(); ++id) {
          if (city_names_[id] == name) {
            return partitions::PartitionKey(partitions::CacheLevel::kCity,
                                            static_cast<partitions::PartitionId>(id), common::IpAddress{});
          }
        }
        return std::nullopt;
      }));
  if (bound->unbound_sets() > 0) {
    common::LogWarning("calibration", bound->unbound_sets(),
                       " sets of weight factors name a partition the city map does not have: left out");
  }
  shared_.factors.Publish(std::move(bound));
}

void Node::PublishPartitions(ParsedPartitions parsed) {
  const bool citymap_changed = parsed.citymap != nullptr;
  if (parsed.citymap) {
    city_names_ = std::move(parsed.city_names);
    shared_.citymap.Publish(std::move(parsed.citymap));
  }
  if (parsed.tags) shared_.tags.Publish(std::move(parsed.tags));
  if (parsed.accounts) accounts_.store(std::move(parsed.accounts), std::memory_order_release);
  // The factors name cities: bound again when either changes.
  const bool rebind = parsed.factors.has_value() || (citymap_changed && !factors_.empty());
  if (parsed.factors) factors_ = *std::move(parsed.factors);
  if (rebind) BindFactors();
  if (!shared_.cache) {
    partitions::CacheOptions co;
    co.byte_budget = config_.cache_bytes;
    co.stale_window = config_.stale_window;
    shared_.cache = std::make_unique<partitions::Cache>(co, *shared_.clock);
    shared_.limits.min_ttl = config_.min_ttl;
    shared_.limits.max_ttl = config_.max_ttl;
    shared_.limits.negative_max_ttl = config_.negative_max_ttl;
    shared_.limits.servfail_ttl = config_.servfail_ttl;
  }
  if (!shared_.segments)
    shared_.segments =
        std::make_unique<partitions::SegmentTable>(config_.adaptive_names, config_.adaptive_segments);
}

namespace {

std::string PartitionName(const partitions::CityMap* cm, partitions::Partition p) {
  const size_t slot = QueryHandler::PartitionSlot(p);
  if (slot == 0) return "common";
  if (slot == QueryHandler::kSubnetSlot) return Cat("subnet-", partitions::SubnetBitsOf(p));
  if (slot == QueryHandler::kSegmentSlot) return Cat("answer-", partitions::AnswerIdOf(p));
  return CityName(cm, slot - 1);
}

}  // namespace

void Node::RenderSegments(common::PrometheusWriter& w, const ForwarderStats& fs) const {
  const partitions::SegmentTable& t = *shared_.segments;
  const partitions::SegmentStats& s = t.stats();
  w.Gauge("weir_segment_names", "Names (and types) of level=adaptive tags with learned segments.")
      .Add({}, s.names.load(std::memory_order_relaxed));
  w.Gauge("weir_segments", "Subscriber segments learned for level=adaptive names, over all names.")
      .Add({}, s.segments.load(std::memory_order_relaxed));
  w.Gauge("weir_segment_memory_bytes", "Memory of the learned segments and their index.")
      .Add({}, t.memory_bytes());
  w.Counter("weir_segment_learns_total", "Answers of level=adaptive names whose ECS scope was learned.")
      .Add({}, s.learned.Read());
  w.Counter("weir_segment_refreshes_total",
            "Of the segment learns, those that only moved a segment's time on (the same answer again, "
            "refreshed in place).")
      .Add({}, s.refreshed.Read());
  auto& changes = w.Counter(
      "weir_segment_changes_total",
      "Changes to the learned segments: new (a segment learned), split (learned inside a wider segment "
      "with another answer), merge (two sibling segments with one answer became their parent), absorbed "
      "(replaced by a wider segment the GSLB answered alike), bound_drop (dropped to keep a name within its "
      "max_segments).");
  changes.Add({{"change", "new"}}, s.new_segments.Read());
  changes.Add({{"change", "split"}}, s.splits.Read());
  changes.Add({{"change", "merge"}}, s.merges.Read());
  changes.Add({{"change", "absorbed"}}, s.absorbed.Read());
  changes.Add({{"change", "bound_drop"}}, s.bound_drops.Read());
  w.Counter("weir_segment_overflow_total",
            "Answers of level=adaptive names cached for their subnet only: cache.adaptive_names or "
            "cache.adaptive_segments were full.")
      .Add({}, s.overflow.Read());
  w.Counter("weir_segment_scope_mismatches_total",
            "Answers of level=adaptive names whose ECS did not echo the subnet asked (cached for that "
            "subnet only).")
      .Add({}, fs.segment_mismatches.Read());
  auto& tiers = w.Counter("weir_adaptive_lookups_total",
                          "Lookups of level=adaptive names by what found the subscriber's answer: segment (a "
                          "learned segment), global (the name's scope-0 answer), none (no segment learned "
                          "or served: the subscriber's subnet is asked).");
  static constexpr std::array<const char*, kAdaptiveTiers> kTierNames = {"segment", "global", "none"};
  for (size_t i = 0; i < kAdaptiveTiers; ++i) {
    uint64_t n = 0;
    for (const auto& c : cores_) n += c->handler().adaptive_lookups(i);
    tiers.Add({{"tier", kTierNames[i]}}, n);
  }
}

absl::StatusOr<std::string> Node::RenderMetrics() const {
  common::PrometheusWriter w;
  WriteMetrics(w);
  return w.Render();
}

void Node::WriteMetrics(common::PrometheusWriter& w) const {
  auto sum = [&](auto field) {
    uint64_t t = 0;
    for (const auto& c : cores_) t += field(c->counters());
    return t;
  };
  // Every query is answered once (weir_responses_total) or dropped
  // (weir_drops_total): queries = responses + drops.
  auto& queries = w.Counter("weir_queries_total", "Queries received, by transport.");
  auto& responses =
      w.Counter("weir_responses_total",
                "Responses sent (from the cache, relayed, errors), by transport and RCODE name.");
  for (int tcp = 0; tcp < 2; ++tcp) {
    const char* transport = tcp ? "tcp" : "udp";
    queries.Add({{"transport", transport}},
                sum([tcp](const WorkerCounters& c) { return (tcp ? c.queries_tcp : c.queries_udp).Read(); }));
    for (size_t r = 0; r < 24; ++r) {
      const uint64_t v = sum([tcp, r](const WorkerCounters& c) { return c.responses[tcp][r].Read(); });
      if (v != 0 || r == 0) {
        responses.Add({{"transport", transport}, {"rcode", dns::RcodeName(static_cast<unsigned>(r))}}, v);
      }
    }
  }
  auto& drops = w.Counter("weir_drops_total", "Queries that got no response, by reason.");
  for (size_t r = 0; r < static_cast<size_t>(DropReason::kCount); ++r) {
    drops.Add({{"reason", DropReasonName(static_cast<DropReason>(r))}},
              sum([r](const WorkerCounters& c) { return c.drops[r].Read(); }));
  }
  auto& errors =
      w.Counter("weir_error_responses_total",
                "Responses with an error RCODE weir chose, by reason (also in weir_responses_total).");
  for (size_t r = 0; r < static_cast<size_t>(ErrorReason::kCount); ++r) {
    errors.Add({{"reason", ErrorReasonName(static_cast<ErrorReason>(r))}},
               sum([r](const WorkerCounters& c) { return c.errors[r].Read(); }));
  }
  w.Counter("weir_cache_hits_total", "Queries answered from the cache.")
      .Add({}, sum([](const WorkerCounters& c) { return c.hits.Read(); }));
  w.Counter("weir_cache_misses_total", "Queries the cache could not answer.")
      .Add({}, sum([](const WorkerCounters& c) { return c.misses.Read(); }));
  w.Counter("weir_truncated_total", "Responses sent with TC set (too large for the client's UDP size).")
      .Add({}, sum([](const WorkerCounters& c) { return c.truncated.Read(); }));
  w.Counter("weir_any_minimal_total", "ANY queries over UDP answered with the RFC 8482 HINFO.")
      .Add({}, sum([](const WorkerCounters& c) { return c.any_minimal.Read(); }));
  // Over the per-source limits (docs/fastpath-config.md#rate-limiting): `qps`
  // are dropped (also in weir_drops_total{reason="rate_limited"}), `bytes`
  // answered with TC (also in weir_responses_total and weir_truncated_total).
  auto& limited =
      w.Counter("weir_rate_limited_total", "Queries over their source's rate limit, by which limit.");
  limited.Add({{"reason", "qps"}}, sum([](const WorkerCounters& c) {
                return c.drops[static_cast<size_t>(DropReason::kRateLimited)].Read();
              }));
  limited.Add({{"reason", "bytes"}},
              sum([](const WorkerCounters& c) { return c.rate_limited_bytes.Read(); }));
  {
    uint64_t idle = 0, active = 0, capacity = 0;
    for (const auto& c : cores_) {
      const RateLimiter& l = c->handler().rate_limiter();
      idle += l.evicted_idle();
      active += l.evicted_active();
      capacity += l.capacity();
    }
    w.Gauge("weir_rate_limit_table_capacity",
            "Sources the rate limiter can track, summed over the workers and the TCP server.")
        .Add({}, capacity);
    w.Gauge("weir_rate_limit_table_bytes",
            "Memory of the rate limiter's tables (all workers and the TCP server).")
        .Add({}, capacity * RateLimiter::kEntryBytes);
    auto& evictions = w.Counter(
        "weir_rate_limit_evictions_total",
        "Sources the rate limiter forgot to make room for a new one: idle (its buckets were full) or "
        "active (not yet full: rate_limit.table_size is small for the sources seen).");
    evictions.Add({{"state", "idle"}}, idle);
    evictions.Add({{"state", "active"}}, active);
  }
  w.Counter("weir_stale_served_total",
            "Expired entries served because no upstream answered in time (RFC 8767).")
      .Add({}, sum([](const WorkerCounters& c) { return c.stale_served.Read(); }));
  if (dnstap_) dnstap_->RenderMetrics(w);
  const LearnedTags* learned = shared_.learned.Get();
  if (mgmt_client_) mgmt_client_->RenderMetrics(w);
  w.Gauge("weir_learned_tags", "Names tagged through a CNAME chain into a tagged suffix.")
      .Add({}, learned != nullptr ? learned->size() : 0);
  w.Counter("weir_learned_tags_total", "Names that took a tag through a CNAME chain into a tagged suffix.")
      .Add({}, forwarder_->learned());
  w.Counter("weir_learned_tags_overflow_total",
            "CNAME chains into a tagged suffix relayed uncached because the learned names were full.")
      .Add({}, forwarder_->learned_overflow());
  {
    const ForwarderStats& fs = forwarder_->stats();
    auto& refreshes =
        w.Counter("weir_active_refresh_total",
                  "Active refreshes (refresh=active tags) by result: sent upstream before expiry, or "
                  "not: idle (no client read the answer since it was cached), gone (it left the "
                  "cache), untagged (the tag no longer says refresh=active), overflow (not scheduled: "
                  "cache.active_refresh_max were).");
    refreshes.Add({{"result", "sent"}}, fs.active_refresh_sent.Read());
    refreshes.Add({{"result", "idle"}}, fs.active_refresh_idle.Read());
    refreshes.Add({{"result", "gone"}}, fs.active_refresh_gone.Read());
    refreshes.Add({{"result", "untagged"}}, fs.active_refresh_untagged.Read());
    refreshes.Add({{"result", "overflow"}}, fs.active_refresh_overflow.Read());
    w.Gauge("weir_active_refresh_scheduled", "Cached answers whose active refresh is scheduled.")
        .Add({}, fs.active_refresh_scheduled.load(std::memory_order_relaxed));
    w.Counter("weir_sibling_prefetches_total",
              "Questions sent for a city's other recently active subnets after a subnet-level miss "
              "(cache.sibling_prefetch).")
        .Add({}, fs.sibling_prefetches.Read());
    w.Counter(
         "weir_sibling_prefetch_repeats_total",
         "Subnet-level misses whose siblings were not fetched again: that city and name had them fetched "
         "within the answer's TTL.")
        .Add({}, fs.sibling_repeats.Read());
    RenderSegments(w, fs);
  }
  w.Counter("weir_coalesced_total", "Misses that joined an identical question already in flight.")
      .Add({}, forwarder_->coalesced());
  w.Counter("weir_upstream_queries_total", "Queries sent to the recursors.")
      .Add({}, forwarder_->upstream_queries());
  w.Counter("weir_upstream_inflight_limited_total",
            "Questions answered at once (stale, else SERVFAIL) because every socket upstream.max_inflight "
            "(or max_inflight_per_upstream) allows was in use.")
      .Add({}, forwarder_->inflight_limited());
  w.Counter("weir_upstream_waiting_limited_total",
            "Misses answered at once (stale, else SERVFAIL) because upstream.max_waiting_clients clients "
            "were waiting on questions in flight.")
      .Add({}, forwarder_->waiting_limited());
  w.Gauge("weir_upstream_waiting_clients", "Clients (and prefetches) waiting on the questions in flight.")
      .Add({}, forwarder_->waiting());
  {
    // The bounds of the large allocations as configured (docs/fastpath-config.md#memory):
    // resident memory stays under their sum plus the fixed overhead.
    const uint64_t slots = cores_.size();
    const bool limiting = config_.rate_limit_qps != 0 || config_.rate_limit_bytes_per_second != 0;
    auto& budget =
        w.Gauge("weir_memory_budget_bytes",
                "What each large allocation may hold at most, as configured: the cache (1.25 x "
                "cache.bytes), the SWRR states and rate-limit tables of every worker, the "
                "questions in flight and the clients waiting on them, the scheduled active refreshes.");
    budget.Add({{"part", "cache"}}, shared_.cache->options().byte_budget * 5 / 4);
    budget.Add({{"part", "swrr"}}, slots * config_.swrr_states * partitions::SwrrTable::kStateBytes);
    budget.Add({{"part", "rate_limit"}},
               limiting ? slots * std::bit_ceil(std::max<uint64_t>(config_.rate_limit_table_size, 16)) *
                              RateLimiter::kEntryBytes
                        : 0);
    budget.Add({{"part", "in_flight"}}, uint64_t(config_.max_inflight) * Forwarder::kQuestionBytes);
    budget.Add({{"part", "active_refresh"}}, uint64_t(config_.active_refresh_max) * Forwarder::kRefreshBytes);
    budget.Add({{"part", "segments"}},
               partitions::SegmentTable::MemoryBound(config_.adaptive_names, config_.adaptive_segments));
    // The clients waiting at the forwarder, and per worker those on their way
    // to and from it (their queries, the backend's routes, held returns).
    budget.Add({{"part", "waiting"}},
               Forwarder::MaxWaiting(config_.max_waiting_clients, slots) * Forwarder::kWaiterBytes);
  }
  w.Counter("weir_upstream_spoofed_total",
            "Upstream answers refused: wrong source, socket, ID, question, 0x20 case or cookie (late "
            "answers are counted apart).")
      .Add({}, forwarder_->spoofed());
  w.Counter("weir_upstream_unwanted_replies_total",
            "Upstream answers that matched no query in flight nor one recently ended (a forger's guesses).")
      .Add({}, forwarder_->unwanted());
  w.Counter("weir_upstream_late_answers_total",
            "Upstream answers to queries that had already timed out or been abandoned.")
      .Add({}, forwarder_->late());
  w.Counter("weir_upstream_spoof_reactions_total",
            "Questions asked again over TCP after upstream.unwanted_reply_threshold unwanted answers.")
      .Add({}, forwarder_->spoof_reactions());
  w.Counter("weir_upstream_case_mismatches_total",
            "Upstream answers refused because their question's case differed from the 0x20 query.")
      .Add({}, forwarder_->case_mismatches());
  w.Counter("weir_upstream_0x20_fallbacks_total",
            "Upstreams found not to keep the question's case, then asked without 0x20 for 15 minutes.")
      .Add({}, forwarder_->case_fallbacks());
  w.Counter("weir_upstream_cookie_mismatches_total",
            "Upstream answers refused for a wrong, malformed or missing DNS cookie.")
      .Add({}, forwarder_->cookie_mismatches());
  w.Counter(
       "weir_upstream_cookie_retries_total",
       "Queries sent again over UDP with the server cookie just learnt after a BADCOOKIE (RFC 7873 5.3).")
      .Add({}, forwarder_->stats().cookie_retries.Read());
  w.Counter("weir_upstream_truncated_total", "Questions asked again over TCP after a truncated UDP answer.")
      .Add({}, forwarder_->stats().truncated.Read());
  w.Gauge("weir_upstream_udp_sockets",
          "UDP sockets open towards the recursors (the pool, and retired ones "
          "waiting for answers).")
      .Add({}, forwarder_->udp_sockets());
  {
    const ForwarderStats& f = forwarder_->stats();
    w.Gauge("weir_upstream_tcp_connections",
            "TCP connections open to the recursors (the pool shared by every question asked over TCP).")
        .Add({}, f.tcp_connections.load(std::memory_order_relaxed));
    w.Counter("weir_upstream_tcp_connections_opened_total", "TCP connections to the recursors opened.")
        .Add({}, f.tcp_opened.load(std::memory_order_relaxed));
    w.Counter("weir_upstream_tcp_resent_total",
              "Questions sent again over another TCP connection after the recursor closed theirs "
              "unanswered (RFC 7766 6.2.1).")
        .Add({}, f.tcp_resent.load(std::memory_order_relaxed));
    w.Counter("weir_upstream_tcp_queued_total",
              "Questions that waited for room in the TCP pool (every connection allowed busy).")
        .Add({}, f.tcp_queued.load(std::memory_order_relaxed));
    w.Counter("weir_upstream_tcp_queue_timeouts_total",
              "Questions whose try timed out while waiting in the TCP pool (not counted against the "
              "recursor's health).")
        .Add({}, f.tcp_queue_timeouts.Read());
  }
  w.Gauge("weir_upstream_in_flight", "Distinct questions waiting for a recursor's answer.")
      .Add({}, forwarder_->in_flight());
  auto& response_latency =
      w.Histogram("weir_response_latency_seconds",
                  "From a worker taking a query to its answer written: hit (answered at once: "
                  "cache, errors) or miss (after the recursor's answer).");
  for (int miss = 0; miss < 2; ++miss) {
    // The workers' histograms summed bucket by bucket.
    std::array<uint64_t, kResponseLatencyBounds.size() + 1> buckets{};
    double seconds = 0;
    for (const auto& c : cores_) {
      const ResponseLatencyHistogram& h = miss ? c->counters().miss_latency : c->counters().hit_latency;
      h.AddTo(buckets, &seconds);
    }
    response_latency.Histogram({{"path", miss ? "miss" : "hit"}}, kResponseLatencyBounds, buckets, seconds);
  }
  RenderPartitions(w);
  RenderAnswers(w);
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
}

void Node::RenderPartitions(common::PrometheusWriter& w) const {
  // Partition names from the current city map: this thread is an RCU reader.
  const partitions::CityMap* cm = shared_.citymap.Get();
  auto& lookups_family = w.Counter("weir_partition_lookups_total", "Cache lookups, by partition.");
  auto& hits_family = w.Counter("weir_partition_hits_total", "Cache hits, by partition.");
  for (size_t slot = 0; slot < QueryHandler::kPartitionSlots; ++slot) {
    uint64_t lookups = 0, hits = 0;
    for (const auto& c : cores_) {
      lookups += c->handler().partition_lookups(slot);
      hits += c->handler().partition_hits(slot);
    }
    if (lookups == 0) continue;
    const std::string name = slot == 0                           ? std::string("common")
                             : slot == QueryHandler::kSubnetSlot ? std::string("subnet")
                                                                 : CityName(cm, slot - 1);
    lookups_family.Add({{"partition", name}}, lookups);
    hits_family.Add({{"partition", name}}, hits);
  }
  uint64_t swrr_states = 0, swrr_evictions = 0, swrr_resets = 0;
  for (const auto& c : cores_) {
    const partitions::SwrrTable& t = c->handler().swrr();
    swrr_states += t.size();
    swrr_evictions += t.evictions();
    swrr_resets += t.resets();
  }
  w.Gauge("weir_swrr_states",
          "Weighted keys whose smooth weighted round-robin state the workers keep (all workers).")
      .Add({}, swrr_states);
  w.Gauge("weir_swrr_capacity", "SWRR states each worker can keep (cache.swrr_states).")
      .Add({}, config_.swrr_states);
  w.Gauge("weir_swrr_memory_bytes",
          "Memory of the SWRR states in use (all workers; pages are used as keys arrive).")
      .Add({}, swrr_states * partitions::SwrrTable::kStateBytes);
  w.Counter(
       "weir_swrr_evictions_total",
       "SWRR states taken from the least recently picked key to make room (that key's sequence restarts).")
      .Add({}, swrr_evictions);
  w.Counter("weir_swrr_resets_total",
            "SWRR sequences restarted because a key's cached address or weight set changed.")
      .Add({}, swrr_resets);
  const std::vector<partitions::PartitionCacheStats> groups = shared_.cache->partition_stats();
  auto& entries = w.Gauge("weir_cache_entries", "Entries cached, by partition.");
  auto& bytes = w.Gauge("weir_cache_bytes", "Bytes of the entries cached, by partition.");
  auto& inserts =
      w.Counter("weir_cache_inserts_total", "Entries cached (refreshes not included), by partition.");
  auto& flushed = w.Counter("weir_cache_flushed_total",
                            "Entries removed by an operator's flush (weirctl cache flush), by partition.");
  auto& evictions =
      w.Counter("weir_cache_evictions_total",
                "Entries evicted, by partition and reason (budget: over cache.bytes; expired: past the stale "
                "window).");
  for (size_t g = 0; g < groups.size(); ++g) {
    const partitions::PartitionCacheStats& p = groups[g];
    if (p.inserts == 0) continue;  // never used
    const std::string name = StatsGroupName(cm, g);
    entries.Add({{"partition", name}}, p.entries);
    bytes.Add({{"partition", name}}, p.bytes);
    inserts.Add({{"partition", name}}, p.inserts);
    evictions.Add({{"partition", name}, {"reason", "budget"}}, p.evictions);
    evictions.Add({{"partition", name}, {"reason", "expired"}}, p.expired_evictions);
    flushed.Add({{"partition", name}}, p.flushed);
  }
  const partitions::CacheStats cs = shared_.cache->stats();
  w.Gauge("weir_cache_budget_bytes", "The cache's byte budget (cache.bytes): entries and index.")
      .Add({}, shared_.cache->options().byte_budget);
  w.Gauge("weir_cache_index_bytes", "Bytes of the cache's index (counted in the budget).")
      .Add({}, cs.index_bytes);
  w.Gauge("weir_cache_memory_bytes", "Memory the cache's slab holds for entries (free blocks included).")
      .Add({}, cs.slab_bytes);
  auto& refused = w.Counter("weir_cache_insert_refused_total",
                            "Answers not cached, by reason (busy: another writer held the cache; reclaiming: "
                            "evicted memory still awaited its grace period).");
  refused.Add({{"reason", "busy"}}, cs.busy);
  refused.Add({{"reason", "reclaiming"}}, cs.reclaiming);
  w.Counter("weir_cache_slab_drains_total",
            "Slab chunks emptied to keep the cache's memory within 1.25x the budget when entry sizes shift.")
      .Add({}, cs.slab_drains);
}

void Node::RenderAnswers(common::PrometheusWriter& w) const {
  const partitions::CityMap* cm = shared_.citymap.Get();
  // The workers' slots summed by (name key, partition, address bytes).
  struct RawKey {
    std::string qname;  // the name's key bytes
    partitions::Partition partition;
    std::string address;  // 4 or 16 bytes
    auto operator<=>(const RawKey&) const = default;
  };
  std::map<RawKey, uint64_t> raw;
  uint64_t overflow = 0;
  for (const auto& c : cores_) {
    const AnswerCounters& ac = c->handler().answer_counters();
    overflow += ac.overflow();
    for (size_t i = 0; i < AnswerCounters::kSlots; ++i) {
      const AnswerCounters::Slot& slot = ac.slots()[i];
      if (slot.key.load(std::memory_order_acquire) == 0) continue;
      const AnswerCounters::Labels& l = ac.labels(i);
      raw[{std::string(reinterpret_cast<const char*>(l.qname.data()), l.qname_len), l.partition,
           std::string(reinterpret_cast<const char*>(l.addr.data()), l.addr_len)}] += slot.count.Read();
    }
  }
  // The configured weights: the cached set each answered (name, partition,
  // family) holds now, every address of it (answered yet or not).
  ConformanceWindow::Counts counts;
  ConformanceWindow::Weights weights;        // what the picks follow (weight x factor)
  ConformanceWindow::Weights gslb_weights;   // as the GSLB sent them
  std::map<AnswerSeries, double> factor_of;  // calibrated addresses only
  const partitions::TagTable* tags = shared_.tags.Get();
  const partitions::BoundWeightFactors* factors = shared_.factors.Get();
  std::map<std::string, uint64_t> per_name;  // name text -> answers, for the top-N cut
  const uint32_t now = shared_.clock->NowSeconds();
  std::set<std::tuple<std::string, partitions::Partition, size_t>> looked_up;
  for (const auto& [k, n] : raw) {
    const std::string name =
        dns::NameKeyToText({reinterpret_cast<const uint8_t*>(k.qname.data()), k.qname.size()});
    const std::string partition = PartitionName(cm, k.partition);
    counts[{name, partition,
            AddressText(reinterpret_cast<const uint8_t*>(k.address.data()), k.address.size())}] += n;
    per_name[name] += n;
    if (!looked_up.insert({k.qname, k.partition, k.address.size()}).second) continue;
    const uint16_t qtype = k.address.size() == 4 ? dns::type::kA : dns::type::kAaaa;
    const partitions::CacheKey ck{k.partition,
                                  {reinterpret_cast<const uint8_t*>(k.qname.data()), k.qname.size()},
                                  qtype,
                                  dns::klass::kIn};
    partitions::Freshness fresh;
    // Peek: a scrape is no client's read (active refresh counts those).
    const partitions::CacheEntry* e = shared_.cache->Peek(ck, now, &fresh);
    if (e == nullptr) continue;
    const size_t addr_len = e->address_record_size() - 12;
    const uint8_t* rec = e->records().data() + e->chain_bytes();
    // A calibrated name is picked with weight x factor (rescaled to 1..255):
    // its answers are held to those, and both are exported.
    const partitions::FactorSet* fs = nullptr;
    const partitions::Tag* tag = tags != nullptr ? tags->Lookup(ck.qname) : nullptr;
    if (tag != nullptr && tag->calibrate && factors != nullptr) fs = factors->Find(k.partition, ck.qname);
    uint8_t picking[dns::kMaxWeightedAddresses];
    if (fs != nullptr) fs->PickWeights(*e, picking);
    for (size_t i = 0; i < e->address_count(); ++i) {
      const uint8_t* rdata = rec + i * e->address_record_size() + 12;
      const std::string address = AddressText(rdata, addr_len);
      const uint32_t gslb = e->has_weights() ? e->weights()[i] : 1;
      weights[{name, partition, address}] = fs != nullptr ? picking[i] : gslb;
      gslb_weights[{name, partition, address}] = gslb;
      if (fs != nullptr) factor_of[{name, partition, address}] = fs->Factor({rdata, addr_len});
    }
  }
  // The names exported by address: the metrics_answer_names most answered.
  std::vector<std::pair<uint64_t, std::string>> ranked;
  for (const auto& [name, n] : per_name) ranked.emplace_back(n, name);
  const size_t keep = std::min<size_t>(ranked.size(), config_.metrics_answer_names);
  std::partial_sort(ranked.begin(), ranked.begin() + static_cast<ptrdiff_t>(keep), ranked.end(),
                    [](const auto& a, const auto& b) {
                      return a.first != b.first ? a.first > b.first : a.second < b.second;
                    });
  std::set<std::string> exported;
  for (size_t i = 0; i < keep; ++i) exported.insert(ranked[i].second);

  auto& answers =
      w.Counter("weir_answers_total",
                "Answers to weighted names by the smooth weighted round-robin, by name, partition "
                "and address (the server.metrics_answer_names most answered names).");
  auto& configured = w.Gauge("weir_answer_weight",
                             "The weight of each address in the cached set of an exported weighted name and "
                             "partition, as the GSLB sent it (1 each when it sent none).");
  std::map<std::string, uint64_t> other;  // partition -> answers of names not exported
  for (const auto& [s, n] : counts) {
    if (exported.count(s.name) == 0) {
      other[s.partition] += n;
      continue;
    }
    answers.Add({{"name", s.name}, {"partition", s.partition}, {"address", s.address}}, n);
  }
  // Each gauge by (name, partition, address), for the exported names only.
  auto add_exported = [&](common::PrometheusWriter::Family& family, const auto& series) {
    for (const auto& [s, v] : series) {
      if (exported.count(s.name) != 0)
        family.Add({{"name", s.name}, {"partition", s.partition}, {"address", s.address}}, v);
    }
  };
  add_exported(configured, gslb_weights);
  add_exported(w.Gauge("weir_answer_weight_factor",
                       "The traffic-share calibration's factor of each address of an exported name whose tag "
                       "has calibrate=on (docs/calibration.md); absent: factor 1."),
               factor_of);
  add_exported(
      w.Gauge("weir_answer_effective_weight",
              "The weight the smooth weighted round-robin picks with, per exported name, partition and "
              "address: the GSLB's weight, or for a calibrated name weight x factor rescaled to 1..255."),
      weights);
  auto& other_family =
      w.Counter("weir_answers_other_total",
                "Answers to weighted names beyond server.metrics_answer_names, by partition.");
  for (const auto& [partition, n] : other) other_family.Add({{"partition", partition}}, n);
  w.Counter("weir_answers_overflow_total",
            "Weighted answers not counted by address because every answer counter slot was taken.")
      .Add({}, overflow);
  auto& deviation = w.Gauge("weir_answer_share_deviation_ratio",
                            "Over the last closed conformance window: the largest difference between an "
                            "address's share of the answers and its share of the weights, per name and "
                            "partition (0.005 = 0.5 percentage points).");
  std::lock_guard<std::mutex> lock(conformance_mu_);
  for (const auto& [key, d] : conformance_.Update(now, counts, weights)) {
    if (exported.count(key.first) != 0) deviation.Add({{"name", key.first}, {"partition", key.second}}, d);
  }
}

const common::Heartbeat* Node::forwarder_heartbeat() const {
  return forwarder_ ? &forwarder_->heartbeat() : nullptr;
}

}  // namespace weir::fastpath
