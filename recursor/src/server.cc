// weir-recursor's composition: the units of the daemon (front.h,
// query_router.h, ordinary_resolver.h, tagged_resolver.h, socket_last_hop.h,
// zone_cuts.h, control.h, control_commands.h) on one event loop, the tag
// table and its reloads
// (file, control port, weir-mgmt), the periodic sweep and the metrics
// endpoint (metrics.h).
#include "weir/recursor/server.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/str_join.h"
#include "control.h"
#include "control_commands.h"
#include "forwarder_relay.h"
#include "front.h"
#include "metrics.h"
#include "ordinary_resolver.h"
#include "query_router.h"
#include "socket_last_hop.h"
#include "unbound_resolver.h"
#include "weir/common/line_errors.h"
#include "weir/common/log.h"
#include "weir/common/metrics_http.h"
#include "weir/common/process_metrics.h"
#include "weir/common/text.h"
#include "weir/mgmt/control.h"
#include "weir/mgmt/node_client.h"
#include "weir/net/event_loop.h"
#include "weir/net/loop_mailbox.h"
#include "weir/net/socket.h"
#include "weir/net/timers.h"
#include "weir/partitions/tagtable.h"
#include "weir/recursor/tagged_resolver.h"
#include "weir/recursor/zone_cuts.h"
#include "zone_check.h"

namespace weir::recursor {

using common::Cat;

namespace {

// How long a scrape waits for the loop thread before it answers 503.
constexpr std::chrono::milliseconds kMetricsLoopTimeout{2000};
// How long a control request from weir-mgmt waits for the loop thread.
constexpr std::chrono::milliseconds kControlLoopTimeout{5000};

const common::Clock& ClockOf(common::FakeClock* test_clock) {
  if (test_clock != nullptr) return *test_clock;
  return common::SystemClock::Instance();
}

}  // namespace

struct Server::Impl {
  RecursorConfig cfg;
  common::FakeClock* test_clock;
  const common::Clock& clock;  // the test clock, or the system clock
  TaggedResolver::Tags tags;
  std::mutex reload_mu;
  TaggedResolver::Tags pending_tags;
  // One config reload at a time (SIGHUP on the main thread, weirctl and the
  // control port on the loop); guards the live [log] and [dnstap] below.
  std::mutex config_mu;
  common::LogSettings log_now;
  dnstap::Options dnstap_now;
  std::optional<mgmt::NodeStart> mgmt_node;
  std::unique_ptr<mgmt::NodeClient> mgmt_client;
  // mgmt_client for the loop thread (stats), set once it exists.
  std::atomic<mgmt::NodeClient*> mgmt_for_loop{nullptr};

  net::EventLoop loop;
  net::LoopTimers timers{loop};
  net::LoopMailbox mailbox{loop};
  int metrics_fd = -1;
  common::SocketAddress metrics_bound;
  std::unique_ptr<common::MetricsHttpServer> metrics;
  std::thread thread;
  std::atomic<bool> running{false};
  common::Heartbeat heartbeat;  // the loop's, for the watchdog
  std::random_device seeds;

  // The loop thread is its one producer; null without [dnstap]. Declared
  // before what taps into it, closed in Stop once the loop has stopped.
  std::unique_ptr<dnstap::Writer> dnstap;
  // The units' own lines (CNAME loops, lame zone cuts): a broken zone must
  // not flood the log.
  common::RateLimitedLog resolve_log{{.component = "resolve"}};
  common::RateLimitedLog zone_cut_log{{.component = "zonecut"}};
  UnboundResolver ub;
  ZoneCutFinder cut_finder;
  InflightLimit inflight;
  Front front;
  FrontReplies replies;
  SocketLastHop last_hop;
  ForwarderRelay relay;
  TaggedResolver tagged;
  SinkByToken last_hop_sinks;
  OrdinaryResolver ordinary;
  QueryRouter router;
  Control control;
  ControlCommands commands;
  // weirctl's channel ([control]); served on `loop`, declared after it.
  std::unique_ptr<mgmt::ControlServer> control_server;

  Impl(RecursorConfig c, common::FakeClock* tc)
      : cfg(std::move(c)),
        test_clock(tc),
        clock(ClockOf(tc)),
        cut_finder(
            ub, clock,
            {cfg.do_ip6, static_cast<uint32_t>(cfg.zone_cut_max_ttl), static_cast<size_t>(cfg.max_zone_cuts)},
            [this](const std::string& line) { zone_cut_log(line); }),
        inflight(static_cast<size_t>(cfg.max_inflight)),
        front(cfg, loop),
        replies(cfg, front),
        last_hop(cfg, loop),
        relay(cfg, loop, last_hop),
        tagged(
            cfg, clock, timers, tags, cut_finder, last_hop, replies, inflight,
            [this](const std::string& line) { resolve_log(line); }, (uint64_t{seeds()} << 32) | seeds()),
        last_hop_sinks(tagged, relay),
        ordinary(cfg, clock, timers, tags, ub, replies, inflight, tagged,
                 (uint64_t{seeds()} << 32) | seeds()),
        router(cfg, tags, replies, ordinary, tagged),
        control({.test_clock = tc,
                 .front = &front,
                 .replies = &replies,
                 .router = &router,
                 .ordinary = &ordinary,
                 .tagged = &tagged,
                 .last_hop = &last_hop,
                 .relay = &relay,
                 .cuts = &cut_finder,
                 .ub = &ub,
                 .log = &common::DefaultLogger(),
                 .dnstap = [this] { return dnstap.get(); },
                 .reload_tags = [this] { return ReloadOnLoop().status(); }}),
        commands({.cfg = &cfg,
                  .clock = &clock,
                  .tags = &tags,
                  .parts = &control.parts(),
                  .metric_samples = [this] { return MetricSamplesOnLoop(); },
                  .reload = [this] { return ReloadOnLoop(); }}) {
    log_now = cfg.log;
    dnstap_now = cfg.dnstap;
    last_hop.SetSink(&last_hop_sinks);
    front.SetHandlers(&router, [this](const std::string& line) { return control.Handle(line); });
  }

  absl::Status Start();
  absl::Status LoadTags(TaggedResolver::Tags* out) const;
  // The config file's [log] and [dnstap] as a reload finds them: the
  // change to apply, or why the whole reload is refused (the config cannot
  // be read, a changed key needs a restart). Under config_mu.
  struct ConfigChange {
    std::optional<RecursorConfig> next;
    dnstap::LiveChange tap;
    // [server] cookie_secret_file read again (a bad file refuses the reload).
    std::optional<CookieSecrets> cookie_secrets;
  };
  ConfigChange PlanConfig(std::vector<std::string>* problems) const;
  // Everything a reload would apply, read and checked: the config change
  // and, standalone, the tag file. Every problem is named at once
  // ("A; B: nothing reloaded"); nothing is applied here.
  struct ReloadPlan {
    ConfigChange change;
    std::optional<TaggedResolver::Tags> tags;  // standalone only
  };
  absl::StatusOr<ReloadPlan> PlanReload() const;
  // Applies it (cannot fail): what changed, "" when nothing did.
  std::string ApplyConfig(const ConfigChange& change);
  std::string TagsText() const {
    return Cat("the tags (", cfg.tags_path.empty() ? "no tag file" : cfg.tags_path, ")");
  }
  // reload-tags on the control port, weirctl reload: the tag file and the
  // config's live keys. What was reloaded, or why nothing was.
  absl::StatusOr<std::string> ReloadOnLoop() {
    std::lock_guard<std::mutex> l(config_mu);
    absl::StatusOr<ReloadPlan> plan = PlanReload();
    absl::StatusOr<std::string> what = std::string();
    if (!plan.ok()) {
      what = plan.status();
    } else if (mgmt_node) {
      ApplyCookieSecret(plan->change);
      what = ApplyConfig(plan->change);
      if (what->empty()) {
        what = absl::FailedPreconditionError(
            "tags come from weir-mgmt ([mgmt] is configured), and [log] and [dnstap] did not change");
      } else {
        what = Cat(*what, " (tags come from weir-mgmt)");
      }
    } else {
      tags = *std::move(plan->tags);
      ApplyCookieSecret(plan->change);
      const std::string changed = ApplyConfig(plan->change);
      what = changed.empty() ? TagsText() : Cat(TagsText(), ", ", changed);
    }
    if (what.ok()) {
      common::LogInfo("config", "reload: reloaded ", *what);
    } else {
      common::LogError("config", "reload: ", common::ToStd(what.status().message()));
    }
    return what;
  }
  // [server] cookie_secret_file as the plan read it (nothing without one).
  // Loop thread.
  void ApplyCookieSecret(const ConfigChange& change) {
    if (!change.cookie_secrets) return;
    router.cookies().ApplyReload(*change.cookie_secrets);
    common::LogInfo("config", "reload: cookie secret ", cfg.cookie_secret_file, " read");
  }
  // Tags from another thread, applied on the loop thread.
  void Publish(TaggedResolver::Tags t) {
    {
      std::lock_guard<std::mutex> l(reload_mu);
      pending_tags = std::move(t);
    }
    loop.Wake();
  }
  void Run() {
    Sweep();
    while (running.load(std::memory_order_relaxed)) {
      heartbeat.Beat();
      loop.RunOnce(std::chrono::milliseconds(200));
    }
  }
  void Sweep();
  // The metrics server's render callback, on its threads.
  absl::StatusOr<std::string> RenderMetrics();
  // The same samples on the loop thread (weirctl stats).
  absl::StatusOr<std::vector<common::MetricSample>> MetricSamplesOnLoop();
  // What the loop thread does not own: the mgmt client's atomics, /proc.
  void WriteOtherMetrics(common::PrometheusWriter& w);
  // A control request from weir-mgmt's stream (weirctl --all), on the
  // NodeClient's thread: run on the loop thread, where the caches are.
  mgmt::ControlReply ControlFromMgmt(const mgmt::ControlRequest& r);
};

// The units' counters are plain integers and their caches plain hash maps,
// all owned by the loop thread. Rather than make every counter an atomic
// (a cost on every query, and the caches' sizes would still be unreadable
// from here), the scrape runs the rendering of weir's families on the loop
// thread, between two events: no counter changes during it, so the scrape
// is one consistent snapshot. A loop that does not take the call within
// kMetricsLoopTimeout is stuck or overloaded; the scrape then gets 503, and
// the call never runs. The mgmt client's counters are atomics and the
// process families read /proc: both stay on this thread.
absl::StatusOr<std::string> Server::Impl::RenderMetrics() {
  common::PrometheusWriter w;
  if (!mailbox.Call([&] { WriteRecursorMetrics(control.parts(), w); }, kMetricsLoopTimeout)) {
    return absl::UnavailableError(
        Cat("the event loop did not take the scrape within ", kMetricsLoopTimeout.count(), " ms"));
  }
  WriteOtherMetrics(w);
  return w.Render();
}

absl::StatusOr<std::vector<common::MetricSample>> Server::Impl::MetricSamplesOnLoop() {
  common::PrometheusWriter w;
  WriteRecursorMetrics(control.parts(), w);
  WriteOtherMetrics(w);
  return w.Samples();
}

void Server::Impl::WriteOtherMetrics(common::PrometheusWriter& w) {
  if (mgmt::NodeClient* c = mgmt_for_loop.load(std::memory_order_acquire)) c->RenderMetrics(w);
  common::AddProcessMetrics(w);
  common::AddBuildInfo(w, "weir-recursor");
}

mgmt::ControlReply Server::Impl::ControlFromMgmt(const mgmt::ControlRequest& r) {
  mgmt::ControlReply reply;
  if (!mailbox.Call([&] { reply = commands.Handle(r); }, kControlLoopTimeout)) {
    return mgmt::ControlReply::Error(Cat("weir-recursor's event loop did not take the request within ",
                                         kControlLoopTimeout.count(), " ms"));
  }
  return reply;
}

Server::Impl::ConfigChange Server::Impl::PlanConfig(std::vector<std::string>* problems) const {
  ConfigChange change;
  if (!cfg.cookie_secret_file.empty()) {
    // A bad secret file refuses the reload: the secrets in use stay.
    auto s = ReadCookieSecretFile(cfg.cookie_secret_file);
    if (s.ok()) {
      change.cookie_secrets = *s;
    } else {
      problems->push_back(std::string(s.status().message()));
    }
  }
  if (cfg.path.empty()) return change;
  auto next = LoadConfig(cfg.path);
  if (!next.ok()) {
    problems->push_back(std::string(next.status().message()));
    return change;
  }
  auto tap =
      dnstap::PlanReload(dnstap ? &dnstap_now : nullptr, next->dnstap.enabled() ? &next->dnstap : nullptr);
  if (!tap.ok()) {
    problems->push_back(std::string(tap.status().message()));
    return change;
  }
  change.next = *std::move(next);
  change.tap = *std::move(tap);
  return change;
}

absl::StatusOr<Server::Impl::ReloadPlan> Server::Impl::PlanReload() const {
  std::vector<std::string> problems;
  ReloadPlan plan;
  plan.change = PlanConfig(&problems);
  if (!mgmt_node) {
    TaggedResolver::Tags t;
    if (absl::Status st = LoadTags(&t); st.ok()) {
      plan.tags = std::move(t);
    } else {
      problems.push_back(std::string(st.message()));
    }
  }
  if (!problems.empty()) {
    return absl::FailedPreconditionError(Cat(absl::StrJoin(problems, "; "), ": nothing reloaded"));
  }
  return plan;
}

std::string Server::Impl::ApplyConfig(const ConfigChange& change) {
  if (!change.next) return "";
  std::string changed = common::ApplyConfigLogSettings(log_now, change.next->log);
  log_now = change.next->log;
  if (dnstap) {
    dnstap->SetLive(change.tap.tapping, change.tap.sample);
    dnstap_now.tapping = change.tap.tapping;
    dnstap_now.sample = change.tap.sample;
  }
  for (const std::string& d : change.tap.described) common::CatTo(changed, changed.empty() ? "" : ", ", d);
  common::LogDebug("config", cfg.path, ": loaded");  // as at start, at the level now in force
  return changed;
}

absl::Status Server::Impl::LoadTags(TaggedResolver::Tags* out) const {
  if (cfg.tags_path.empty()) {
    auto t = partitions::TagTable::FromText("");
    if (!t.ok()) return t.status();
    *out = std::move(*t);
    return absl::OkStatus();
  }
  std::ifstream in(cfg.tags_path, std::ios::binary);
  if (!in) return absl::NotFoundError(Cat(cfg.tags_path, ": cannot open tag file: ", strerror(errno)));
  std::stringstream ss;
  ss << in.rdbuf();
  // Every bad line (up to 10) in one message, as the front node does.
  common::LineErrors errors;
  auto t = partitions::TagTable::FromText(ss.str(), &errors);
  if (!errors.empty())
    return absl::InvalidArgumentError(absl::StrJoin(errors.Render(cfg.tags_path, 10), "; "));
  if (!t.ok())
    return absl::InvalidArgumentError(Cat(cfg.tags_path, ": ", common::ToStd(t.status().message())));
  *out = std::move(*t);
  return absl::OkStatus();
}

absl::Status Server::Impl::Start() {
  absl::Status st;
  if (cfg.mgmt.enabled) {
    auto n = mgmt::PrepareNode(cfg.mgmt, "recursor");
    if (!n.ok()) return n.status();
    mgmt_node = *std::move(n);
  }
  if (mgmt_node && mgmt_node->stored) {
    // The last snapshot mgmt pushed wins over the file: it is newer.
    auto t = partitions::TagTable::FromText(mgmt_node->stored->tags);
    if (!t.ok()) return t.status();
    tags = *std::move(t);
    common::LogInfo("mgmt", "starting from stored mgmt snapshot version ", mgmt_node->stored->version);
  } else {
    st = LoadTags(&tags);
    if (!st.ok()) return st;
  }
  // libunbound forwards to the relay's loopback sockets, the relay to the
  // forwarders through weir's last hop (forwarder_relay.h).
  RecursorConfig ub_cfg = cfg;
  if (!cfg.forwarders.empty() && cfg.forwarder_transport == RecursorConfig::ForwarderTransport::kWeir) {
    st = relay.Bind();
    if (!st.ok()) return st;
    ub_cfg.forwarders = relay.addresses();
  }
  st = ub.Init(ub_cfg);
  if (!st.ok()) return st;
  if (cfg.dnstap.enabled()) {
    auto w = dnstap::Writer::Open(cfg.dnstap, 1);
    if (!w.ok()) return w.status();
    dnstap = *std::move(w);
    if (cfg.dnstap.client) front.SetTap(&dnstap->producer(0));
    if (cfg.dnstap.upstream) last_hop.SetTap(&dnstap->producer(0));
  }

  st = loop.Init();
  if (!st.ok()) return st;
  loop.SetWakeHandler([this] {
    {
      std::lock_guard<std::mutex> l(reload_mu);
      if (pending_tags) tags = std::move(pending_tags);
    }
    mailbox.RunPending();
  });
  ub.SetFdWatcher([this](int fd, bool watch) {
    if (!watch) return loop.Unwatch(fd);
    loop.Watch(fd, EPOLLIN, [this](uint32_t) { ub.Process(); });
  });
  loop.Watch(ub.fd(), EPOLLIN, [this](uint32_t) { ub.Process(); });
  relay.Attach();
  st = router.cookies().Load();
  if (!st.ok()) return st;
  st = front.Listen();
  if (!st.ok()) return st;
  if (cfg.metrics_enabled) {
    auto fd = net::BindSocket(cfg.metrics_listen, SOCK_STREAM, {.listen_backlog = 64});
    if (!fd.ok()) return absl::Status(fd.status().code(), Cat("metrics_listen: ", fd.status().message()));
    metrics_fd = *fd;
    metrics_bound = net::LocalAddress(*fd);
  }
  // weirctl's channel: bound now (before privileges drop), served by the
  // loop thread, which owns the caches its commands read and flush.
  control_server = std::make_unique<mgmt::ControlServer>(
      cfg.control_channel, [this](const mgmt::ControlRequest& r) { return commands.Handle(r); });
  st = control_server->Bind();
  if (!st.ok()) return st;
  control_server->Attach(loop);
  running = true;
  thread = std::thread([this] { Run(); });
  return absl::OkStatus();
}

// Once a second: idle front connections; every 10 s, expired cache entries.
void Server::Impl::Sweep() {
  loop.After(std::chrono::seconds(1), [this] { Sweep(); });
  front.CloseIdle(SteadyClock::now());
  const uint32_t secs = clock.NowSeconds();
  if (secs % 10 == 0) {
    tagged.EraseExpired(secs);
    ordinary.EraseExpired(secs);
    cut_finder.EraseExpired(secs);
  }
}

// ---------------------------------------------------------------- Server

Server::Server(RecursorConfig config, common::FakeClock* test_clock)
    : impl_(std::make_unique<Impl>(std::move(config), test_clock)) {}

Server::~Server() { Stop(); }

absl::Status Server::Start() {
  Impl& s = *impl_;
  absl::Status st = s.Start();
  if (!st.ok()) return st;
  if (s.mgmt_node) {
    const mgmt::NodeStart& node = *s.mgmt_node;
    s.mgmt_client = std::make_unique<mgmt::NodeClient>(
        mgmt::MakeNodeClientOptions(s.cfg.mgmt, "recursor", node.token),
        [this](const mgmt::Snapshot& snap, const mgmt::SnapshotParts& changed) {
          // The recursor takes the tags only.
          if (!changed.tags) return absl::OkStatus();
          auto t = partitions::TagTable::FromText(snap.tags);
          if (!t.ok()) return absl::InvalidArgumentError(Cat("tags: ", common::ToStd(t.status().message())));
          impl_->Publish(*std::move(t));
          return absl::OkStatus();
        });
    s.mgmt_client->SetControlHandler([&s](const mgmt::ControlRequest& r) { return s.ControlFromMgmt(r); });
    // weir-mgmt's check of new tags' zones: the walks run on the loop, the
    // reply goes back when they end, and pushes are taken meanwhile.
    s.mgmt_client->SetAsyncControlHandler(
        std::string(mgmt::kZoneCheckVerb),
        [&s](const mgmt::ControlRequest& r, mgmt::NodeClient::ControlReplyFn reply) {
          auto shared = std::make_shared<mgmt::NodeClient::ControlReplyFn>(std::move(reply));
          if (!s.mailbox.Call([&] { StartZoneCheck(r, s.cut_finder, s.loop, *shared); },
                              kControlLoopTimeout)) {
            (*shared)(mgmt::ControlReply::Error(
                Cat("weir-recursor's event loop did not take the zone check within ",
                    kControlLoopTimeout.count(), " ms")));
          }
        });
    s.mgmt_for_loop.store(s.mgmt_client.get(), std::memory_order_release);
    st = node.stored ? s.mgmt_client->Start(*node.stored) : s.mgmt_client->Start(0, "");
    if (!st.ok()) return st;
  }
  if (s.metrics_fd >= 0) {
    s.metrics = std::make_unique<common::MetricsHttpServer>([&s] { return s.RenderMetrics(); });
    st = s.metrics->Start(s.metrics_fd);
    if (!st.ok()) {
      return absl::Status(st.code(), Cat("metrics_listen ", s.metrics_bound.ToString(), ": ", st.message()));
    }
  }
  return absl::OkStatus();
}

std::vector<common::NamedHeart> Server::Hearts() const { return {{"resolver loop", &impl_->heartbeat}}; }

std::string Server::DescribeListeners() const {
  std::string s;
  for (const std::string& l : impl_->front.describe()) s += l + "\n";
  if (impl_->control_server) s += impl_->control_server->Describe();
  if (impl_->metrics) s += Cat("metrics http ", impl_->metrics_bound.ToString(), "\n");
  return s;
}

absl::Status Server::ReloadTags() {
  std::lock_guard<std::mutex> l(impl_->config_mu);
  absl::StatusOr<Impl::ReloadPlan> plan = impl_->PlanReload();
  if (!plan.ok()) return plan.status();
  const Impl::ConfigChange* change = &plan->change;
  // The cookie secret, on the loop thread that judges cookies, once the
  // rest of the reload is known to work.
  auto apply_secret = [&]() -> absl::Status {
    if (!change->cookie_secrets) return absl::OkStatus();
    if (!impl_->mailbox.Call([&] { impl_->ApplyCookieSecret(*change); }, kControlLoopTimeout)) {
      return absl::DeadlineExceededError(Cat("reload: the event loop did not take the cookie secret within ",
                                             kControlLoopTimeout.count(), " ms: nothing reloaded"));
    }
    return absl::OkStatus();
  };
  if (impl_->mgmt_node) {
    if (absl::Status st = apply_secret(); !st.ok()) return st;
    const std::string changed = impl_->ApplyConfig(*change);
    if (changed.empty()) {
      return absl::FailedPreconditionError(
          "tags come from weir-mgmt ([mgmt] is configured), and [log] and [dnstap] did not change");
    }
    common::LogInfo("config", "reloaded ", changed, " (tags come from weir-mgmt)");
    return absl::OkStatus();
  }
  if (absl::Status st = apply_secret(); !st.ok()) return st;
  impl_->Publish(*std::move(plan->tags));
  const std::string changed = impl_->ApplyConfig(*change);
  common::LogInfo("config", "reloaded ", impl_->TagsText(), changed.empty() ? "" : ", ", changed);
  return absl::OkStatus();
}

void Server::Stop() {
  // The metrics server first: its scrapes wait for the loop, which still runs.
  if (impl_->metrics) impl_->metrics->Stop();
  if (impl_->mgmt_client) impl_->mgmt_client->Stop();
  if (impl_->metrics_fd >= 0) {
    close(impl_->metrics_fd);
    impl_->metrics_fd = -1;
  }
  if (!net::StopLoopThread(impl_->running, impl_->loop, impl_->thread)) return;
  // The loop has stopped: weirctl's channel closes (its socket file goes).
  if (impl_->control_server) impl_->control_server->Stop();
  impl_->relay.CloseAll();
  impl_->last_hop.CloseAll();
  impl_->front.CloseAll();
  impl_->front.SetTap(nullptr);
  impl_->last_hop.SetTap(nullptr);
  impl_->dnstap.reset();  // writes out what is queued and closes the output
}

}  // namespace weir::recursor
