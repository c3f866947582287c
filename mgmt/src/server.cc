#include "weir/mgmt/server.h"

#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <netinet/tcp.h>
#include <openssl/err.h>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_join.h"
#include "metrics.h"
#include "peer_tls.h"
#include "store_backends.h"
#include "weir/common/config_file.h"
#include "weir/common/log.h"
#include "weir/common/metrics_http.h"
#include "weir/common/process_metrics.h"
#include "weir/common/text.h"
#include "weir/common/toml_checker.h"
#include "weir/mgmt/accounts.h"
#include "weir/mgmt/calibration_service.h"
#include "weir/mgmt/commands.h"
#include "weir/mgmt/etcd_store.h"
#include "weir/mgmt/node_client.h"
#include "weir/mgmt/protocol.h"
#include "weir/mgmt/store.h"
#include "weir/mgmt/structured_reply.h"
#include "weir/net/event_loop.h"
#include "weir/net/loop_mailbox.h"
#include "weir/net/socket.h"
#include "weir/net/tls.h"

namespace weir::mgmt {

using common::Cat;
using common::ToStd;

namespace {
std::string Text(absl::string_view v) { return std::string(v.data(), v.size()); }
}  // namespace

namespace {

// An etcd endpoint: "http://host:port" or "https://host:port".
absl::StatusOr<std::string> ParseEtcdEndpoint(const std::string& e) {
  const bool http = e.rfind("http://", 0) == 0, https = e.rfind("https://", 0) == 0;
  const std::string rest = e.substr(http ? 7 : https ? 8 : 0);
  if ((!http && !https) || rest.empty() || rest.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        Cat("not an etcd endpoint 'http://host:port' or 'https://host:port': '", e, "'"));
  }
  return e;
}

void ParseEtcd(common::TomlChecker& c, const toml::table& root, MgmtConfig& cfg) {
  const toml::table* t = common::SubTable(c, root, "etcd");
  if (cfg.store != "etcd") {
    if (t != nullptr) c.Fail(t->source(), "[etcd] is read only with [mgmt] store = \"etcd\"");
    return;
  }
  if (t == nullptr)
    return c.Fail(root.source(), "[mgmt] store = \"etcd\" needs an [etcd] table with 'endpoints'");
  c.OnlyKeys(*t, "etcd",
             {"endpoints", "prefix", "request_timeout_ms", "connect_timeout_ms", "ca_file", "cert_file",
              "key_file"});
  etcd::ClientOptions& o = cfg.etcd.client;
  c.List(*t, "endpoints", &o.endpoints, ParseEtcdEndpoint);
  c.String(*t, "prefix", &cfg.etcd.prefix);
  int request_ms = static_cast<int>(o.request_timeout.count());
  int connect_ms = static_cast<int>(o.connect_timeout.count());
  c.Int(*t, "request_timeout_ms", &request_ms, 100, 60000);
  c.Int(*t, "connect_timeout_ms", &connect_ms, 50, 60000);
  o.request_timeout = std::chrono::milliseconds(request_ms);
  o.connect_timeout = std::chrono::milliseconds(connect_ms);
  c.String(*t, "ca_file", &o.ca_file);
  c.String(*t, "cert_file", &o.cert_file);
  c.String(*t, "key_file", &o.key_file);
  if (o.endpoints.empty() && c.ok()) c.Fail(t->source(), "[etcd] needs 'endpoints' (at least one member)");
  if (cfg.etcd.prefix.empty() || cfg.etcd.prefix.back() != '/')
    c.Fail(t->source(), "[etcd] prefix must end with '/'");
  if (o.cert_file.empty() != o.key_file.empty())
    c.Fail(t->source(), "[etcd] cert_file and key_file go together");
}

void ParseTls(common::TomlChecker& c, const toml::table& root, MgmtConfig& cfg) {
  const toml::table* t = common::SubTable(c, root, "tls");
  if (t == nullptr) return;
  cfg.tls.enabled = true;
  c.OnlyKeys(*t, "tls", {"cert_file", "key_file", "ca_file"});
  c.String(*t, "cert_file", &cfg.tls.cert_file);
  c.String(*t, "key_file", &cfg.tls.key_file);
  c.String(*t, "ca_file", &cfg.tls.ca_file);
  if (c.ok() && (cfg.tls.cert_file.empty() || cfg.tls.key_file.empty() || cfg.tls.ca_file.empty())) {
    c.Fail(t->source(),
           "[tls] needs 'cert_file', 'key_file' and 'ca_file' (the CA of the nodes' and operators' "
           "certificates)");
  }
}

void ParseCalibration(common::TomlChecker& c, const toml::table& root, MgmtConfig& cfg) {
  const toml::table* t = common::SubTable(c, root, "calibration");
  if (t == nullptr) return;
  MgmtCalibrationConfig& k = cfg.calibration;
  CalibrationOptions& o = k.options;
  c.OnlyKeys(*t, "calibration",
             {"gain_p", "gain_i", "max_step", "min_factor", "max_factor", "dead_band", "min_traffic",
              "max_feedback_age_s", "hold_time_s", "decay_half_life_s", "step_interval_s", "feedback_listen",
              "feedback_token_file", "max_feedback_bytes"});
  c.Double(*t, "gain_p", &o.gain_p, 0, 2);
  c.Double(*t, "gain_i", &o.gain_i, 0, 2);
  c.Double(*t, "max_step", &o.max_step, 1, 10);
  c.Double(*t, "min_factor", &o.min_factor, Calibrator::kMinStoredFactor, 1);
  c.Double(*t, "max_factor", &o.max_factor, 1, Calibrator::kMaxStoredFactor);
  c.Double(*t, "dead_band", &o.dead_band, 0, 0.5);
  c.Double(*t, "min_traffic", &o.min_traffic, 0, 1e18);
  c.Int(*t, "max_feedback_age_s", &o.max_feedback_age_s, 60, 30 * 86400);
  c.Int(*t, "hold_time_s", &o.hold_time_s, 0, 30 * 86400);
  c.Int(*t, "decay_half_life_s", &o.decay_half_life_s, 0, 30 * 86400);
  c.Int(*t, "step_interval_s", &k.step_interval_s, 10, 86400);
  c.Int(*t, "max_feedback_bytes", &k.max_feedback_bytes, 4096, 64 << 20);
  std::string listen;
  c.String(*t, "feedback_listen", &listen);
  const bool token_ok = c.String(*t, "feedback_token_file", &k.feedback_token_file);
  if (!listen.empty()) {
    auto a = common::SocketAddress::Parse(listen, kDefaultFeedbackPort);
    if (!a.ok()) {
      c.Fail(t->get("feedback_listen")->source(), Text(a.status().message()));
    } else {
      k.feedback_listen = *a;
      k.feedback_enabled = true;
    }
    if (token_ok && k.feedback_token_file.empty()) {
      c.Fail(t->source(),
             "[calibration] feedback_listen needs 'feedback_token_file' (the feedback's bearer token)");
    }
  } else if (!k.feedback_token_file.empty()) {
    c.Fail(t->get("feedback_token_file")->source(),
           "[calibration] feedback_token_file without feedback_listen: no endpoint would use it");
  }
  if (c.ok()) {
    if (absl::Status st = ValidateCalibrationOptions(o); !st.ok()) c.Fail(t->source(), Text(st.message()));
  }
}

}  // namespace

absl::StatusOr<MgmtConfig> ParseMgmtConfig(std::string_view text, const std::string& name) {
  auto parsed = common::ParseToml(text, name);
  if (!parsed.ok()) return parsed.status();
  const toml::table& root = *parsed;
  common::TomlChecker c(name);
  c.OnlyKeys(root, "", {"mgmt", "etcd", "tls", "calibration"});
  MgmtConfig cfg;
  cfg.path = name;
  ParseTls(c, root, cfg);
  ParseCalibration(c, root, cfg);
  std::string listen = "127.0.0.1:8054";
  if (const toml::table* m = common::SubTable(c, root, "mgmt")) {
    c.OnlyKeys(*m, "mgmt",
               {"listen", "store", "database", "token_file", "max_connections", "metrics_listen", "instance",
                "push_batch", "push_batch_interval_ms", "zone_check_ms"});
    const bool listen_ok = c.String(*m, "listen", &listen);
    c.String(*m, "store", &cfg.store);
    const bool database_ok = c.String(*m, "database", &cfg.database);
    const bool token_file_ok = c.String(*m, "token_file", &cfg.token_file);
    c.String(*m, "instance", &cfg.instance);
    c.Int(*m, "max_connections", &cfg.max_connections, 4, 1 << 20);
    c.Int(*m, "push_batch", &cfg.push_batch, 1, 1 << 20);
    c.Int(*m, "push_batch_interval_ms", &cfg.push_batch_interval_ms, 0, 1000);
    c.Int(*m, "zone_check_ms", &cfg.zone_check_ms, 0, 5000);
    std::string metrics;
    c.String(*m, "metrics_listen", &metrics);
    if (!metrics.empty()) {
      auto a = common::SocketAddress::Parse(metrics, kDefaultMetricsPort);
      if (!a.ok()) {
        c.Fail(m->get("metrics_listen")->source(), Text(a.status().message()));
      } else {
        cfg.metrics_listen = *a;
        cfg.metrics_enabled = true;
      }
    }
    if (listen_ok) {
      auto a = common::SocketAddress::Parse(listen, 8054);
      if (!a.ok()) {
        c.Fail(m->get("listen") != nullptr ? m->get("listen")->source() : m->source(),
               Text(a.status().message()));
      } else {
        cfg.listen = *a;
      }
    }
    if (cfg.store != "sqlite" && cfg.store != "etcd") {
      c.Fail(m->get("store")->source(),
             Cat("[mgmt] store must be \"sqlite\" or \"etcd\", not \"", cfg.store, "\""));
    } else if (cfg.store == "sqlite" && database_ok && cfg.database.empty()) {
      c.Fail(m->source(), "[mgmt] needs 'database' (the SQLite file)");
    } else if (cfg.store == "etcd" && !cfg.database.empty()) {
      c.Fail(m->get("database")->source(),
             "[mgmt] database is the SQLite store's: not used with store = \"etcd\"");
    }
    if (token_file_ok && cfg.token_file.empty() && !cfg.tls.enabled)
      c.Fail(m->source(), "[mgmt] needs 'token_file' (peers must authenticate), or a [tls] table");
    ParseEtcd(c, root, cfg);
  } else if (c.ok()) {
    return absl::InvalidArgumentError(Cat(name, ": missing [mgmt] table"));
  }
  if (!c.ok()) return absl::InvalidArgumentError(c.error());
  common::ResolveRelativeTo(
      name, {&cfg.database, &cfg.token_file, &cfg.etcd.client.ca_file, &cfg.etcd.client.cert_file,
             &cfg.etcd.client.key_file, &cfg.tls.cert_file, &cfg.tls.key_file, &cfg.tls.ca_file,
             &cfg.calibration.feedback_token_file});
  if (cfg.instance.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    cfg.instance = Cat(host, ":", cfg.listen.port());
  }
  cfg.etcd.instance = cfg.instance;
  return cfg;
}

absl::StatusOr<MgmtConfig> LoadMgmtConfig(const std::string& path) {
  auto text = common::ReadConfigFile(path);
  if (!text.ok()) return text.status();
  return ParseMgmtConfig(*text, path);
}

namespace {

// The store's own failures (SQLite, etcd), as opposed to a change it refused.
bool IsDatabaseFailure(const absl::Status& st) {
  return st.code() == absl::StatusCode::kInternal || st.code() == absl::StatusCode::kDataLoss ||
         st.code() == absl::StatusCode::kUnavailable || st.code() == absl::StatusCode::kUnknown ||
         st.code() == absl::StatusCode::kDeadlineExceeded;
}

// How often an etcd-backed instance asks the store whether another instance
// committed, besides its watch (a watch on a member that hangs without
// closing would otherwise go unnoticed).
constexpr std::chrono::milliseconds kStorePoll{2000};

// How often the [tls] files' modification times are looked at (a renewed
// certificate is taken without a restart).
constexpr std::chrono::milliseconds kTlsFilesPoll{2000};
// How often node-registry changes (ACKs, connections) are written.
constexpr std::chrono::milliseconds kNodeRecordFlush{500};

// The versions kept to make deltas from (docs/mgmt.md#limits-and-notes).
constexpr size_t kHistoryVersions = 8;
constexpr size_t kHistoryBytes = size_t{256} << 20;

enum class Role { kUnknown, kNode, kCtl };

struct Conn {
  int fd = -1;
  uint64_t serial = 0;  // unique for the daemon's life (a descriptor number is reused)
  std::string peer;
  FrameReader reader;
  std::string out;
  Role role = Role::kUnknown;
  std::string node_id;
  std::string kind;     // a node's, from its HELLO
  std::string request;  // a weirctl request's command, for the metrics
  uint64_t sent_version = UINT64_MAX;
  std::string sent_origin;     // the database the node's version counts in
  uint64_t acked_version = 0;  // what the node acknowledged on this connection
  bool delta = false;          // the node takes DELTA (its HELLO said so)
  // The push in flight: a frame shared by every node it goes to (one per
  // version, base and kind), sent after `out` is empty; `out` waits until
  // it is sent. So a connection holds one reference to a shared frame, not
  // a copy of the snapshot.
  std::shared_ptr<const std::string> push;
  size_t push_off = 0;
  bool push_was_delta = false;
  // The version a delta to was refused (the node's base differs): that
  // version goes as a whole snapshot.
  uint64_t full_for = 0;
  // The node runs a newer version than this instance holds (it came from an
  // instance that is ahead): said once in the log, nothing pushed until this
  // instance catches up.
  bool ahead_logged = false;
  bool close_after_write = false;
  // weirctl connections and peers that never said who they are are closed
  // after 30 s; this timer does it.
  net::EventLoop::TimerId deadline = 0;
  // With [tls]: the connection's TLS (its own context, kept across a
  // reload), the handshake still going on, and who its certificate says
  // the peer is.
  SSL* ssl = nullptr;
  std::optional<net::TlsStreamIo> io;
  bool handshaking = false;
  CertRole cert_role = CertRole::kNone;
  std::string cert_cn;
};

// A control request fanned out to the nodes (weirctl --all): one result per
// node, answered to the weirctl connection when every node has replied or
// the timeout has passed.
struct NodeResult {
  std::string kind;
  uint64_t serial = 0;  // the connection the request went out on (0: none)
  bool done = false;
  bool ok = false;
  std::string text, json;
};
struct FanOut {
  int ctl_fd = -1;
  uint64_t ctl_serial = 0;
  std::map<std::string, NodeResult> results;  // by node id
  size_t pending = 0;
  net::EventLoop::TimerId timer = 0;
  // Set: the fan-out is weir-mgmt's own (a zone check), and this replies to
  // the weirctl connection instead of the nodes' results (which it gets).
  // Called once the nodes replied or the time is up, also when weirctl gave
  // up (ctl null): what it logs is logged either way.
  std::function<void(Conn* ctl, const FanOut& f)> done;
};

// The suffixes of `after`'s tag lines (one canonical line each, the suffix
// first) that no line of `before` has, leaving out those with
// policy=forward:... (their queries go to the targets, never to the zone's
// servers).
std::vector<std::string> NewTagSuffixes(std::string_view before, std::string_view after) {
  auto suffixes = [](std::string_view text, bool forwarded) {
    std::set<std::string_view> out;
    for (std::string_view line : common::Split(text, '\n')) {
      const size_t end = line.find_first_of(" \t");
      if (!line.empty() && (forwarded || line.find(" policy=forward:") == std::string_view::npos)) {
        out.insert(line.substr(0, end));
      }
    }
    return out;
  };
  const std::set<std::string_view> old = suffixes(before, true);
  std::vector<std::string> added;
  for (std::string_view s : suffixes(after, false)) {
    if (!old.contains(s)) added.emplace_back(s);
  }
  return added;
}

}  // namespace

struct MgmtServer::Impl {
  MgmtConfig config;
  std::string token;
  std::unique_ptr<Store> store;
  int listen_fd = -1;
  net::EventLoop loop;
  common::SocketAddress bound;
  std::atomic<bool> running{false};
  std::thread thread;
  std::map<int, Conn> conns;
  std::map<uint64_t, FanOut> fanouts;
  uint64_t next_fanout = 1;
  uint64_t next_serial = 1;
  MgmtCounters counters;
  SnapshotSizes sizes;
  net::LoopMailbox mailbox{loop};
  int metrics_fd = -1;
  common::SocketAddress metrics_bound;
  std::unique_ptr<common::MetricsHttpServer> metrics;
  // The weight calibration (loop thread), and its HTTP feedback endpoint.
  std::unique_ptr<CalibrationService> calibration;
  std::string feedback_token;
  int feedback_fd = -1;
  common::SocketAddress feedback_bound;
  std::unique_ptr<common::MetricsHttpServer> feedback;
  // What peers can repeat as fast as they connect: rate-limited.
  common::RateLimitedLog accept_log{{.component = "accept"}};
  common::RateLimitedLog refused_log{{.component = "node"}};
  common::RateLimitedLog nack_log{{.component = "node"}};
  common::RateLimitedLog store_log{{.component = "store"}};
  // Refused feedback: any client of the endpoint can repeat it.
  common::RateLimitedLog feedback_log{{.component = "calibration"}};
  // The versions this instance held last (the current one included), the
  // bases deltas are made from; bounded by kHistoryVersions and
  // kHistoryBytes. The frames made for the current version, by (base
  // version or 0 for the whole snapshot, with the accounts or not).
  std::map<uint64_t, std::shared_ptr<const Snapshot>> history;
  std::string history_origin;
  std::map<std::pair<uint64_t, bool>, std::shared_ptr<const std::string>> frames;
  // The fan-out of the current version: connections still to be pushed
  // (in batches), and when the version came (for the convergence time).
  std::vector<int> fanout_queue;
  bool fanout_scheduled = false;
  uint64_t converging_version = 0;
  std::chrono::steady_clock::time_point converging_since;
  std::mt19937_64 rng{std::random_device{}()};
  // Set by the store's watch (another instance committed); the loop reads
  // the store again when woken.
  std::atomic<bool> store_changed{false};
  // [tls]: the context new connections get; reloaded when a file changes.
  std::unique_ptr<MgmtTlsContext> tls;
  common::RateLimitedLog handshake_log{{.component = "tls"}};

  absl::Status Start();
  // Drives a TLS handshake on; once done, who the peer is.
  void Handshake(Conn& c);
  void CheckTlsFiles();
  ssize_t Send(Conn& c, const void* buf, size_t len) {
    return c.io ? c.io->Send(buf, len) : send(c.fd, buf, len, MSG_NOSIGNAL);
  }
  ssize_t Recv(Conn& c, void* buf, size_t len) {
    return c.io ? c.io->Recv(buf, len) : recv(c.fd, buf, len, 0);
  }
  // Peers refused for what their certificate says.
  absl::Status CheckCertificateRole(Conn& c, const Message& m);
  void Loop();
  void WatchListener();
  void Accept();
  void OnEvents(int fd, uint32_t events);
  void OnReadable(Conn& c);
  void OnWritable(Conn& c);
  void Handle(Conn& c, const Message& m);
  void HandleRequest(Conn& c, const Message& m);
  void ListTags(Conn& c);
  void ListCitymap(Conn& c);
  void Status(Conn& c);
  void ForgetNode(Conn& c, const std::string& actor, const std::string& node);
  void ListNodes(Conn& c);
  void ListAudit(Conn& c, const std::vector<std::string>& args);
  // weirctl --all: sends the control request to every connected node of
  // `kind` ("" all) and replies once each has answered.
  void FanOutControl(Conn& c, const std::string& actor, const std::vector<std::string>& args);
  // The connected nodes of `kind` ("" all) a fan-out goes to, entered in
  // `f`'s results (and its pending count).
  std::vector<int> FanOutTargets(const std::string& kind, FanOut& f);
  // Sends `frame` to `targets` and keeps `f` until every node replied or
  // `timeout` passed, then FinishFanOut.
  void LaunchFanOut(uint64_t id, FanOut f, const std::vector<int>& targets, const std::string& frame,
                    std::chrono::milliseconds timeout);
  // After a tag change that added `added` suffixes (version `version`,
  // reply text `what`): asks every connected recursor whether it finds each
  // suffix's zone (docs/mgmt.md#zone-check) and replies with a warning for
  // each that none finds; replies at once when there is nothing to ask.
  void ReplyAfterZoneCheck(Conn& c, const std::string& actor, uint64_t version, const std::string& what,
                           std::vector<std::string> added);
  void NodeControlReply(Conn& node, const Message& m);
  void FinishFanOut(uint64_t id);
  void Reply(Conn& c, bool ok, std::string text, std::string json);
  // A change the store refused; a conflict (another instance committed
  // first) is its own reply status, so that weirctl can retry it.
  void Refused(Conn& c, const absl::Status& st);
  void Reply(Conn& c, const StructuredReply& r) { Reply(c, true, r.RenderText(), r.RenderJson()); }
  void Fail(Conn& c, std::string reason);
  void MaybePush(Conn& c);
  void PushAll();
  // Pushes the next batch of the fan-out queue; schedules the rest.
  void PushBatch();
  // Keeps the current version in the history (a new one clears the frames
  // and starts its convergence clock).
  void TrackVersion();
  // The frame that brings `c` to the current version: a delta from the
  // version it acknowledged when it can, else the whole snapshot.
  std::shared_ptr<const std::string> PushFrame(Conn& c, bool* delta);
  // After an ACK: every node of this instance runs the converging version.
  void CheckConvergence();
  void Flush(Conn& c);
  // Reads the store again (another instance may have committed) and pushes
  // a newer version to the nodes.
  void RefreshStore();
  void PollStore();
  void FlushNodeRecords();
  // The calibration's timer step; the HTTP feedback endpoint's handler (a
  // server thread: it calls into the loop).
  void CalibrationTick();
  common::HttpReply Feedback(const common::HttpRequest& r);
  std::optional<common::HttpReply> FeedbackAdmit(const common::HttpRequest& head);
  static uint32_t WallSeconds();
  void CloseConn(int fd);
  void Watch(Conn& c);
  // A store call's failure: logged, and counted when the database failed.
  void StoreFailed(const absl::Status& st);
  absl::StatusOr<std::string> RenderMetrics();
};

// The counters, the store and the connections belong to the loop thread, so
// a scrape renders weir-mgmt's families there (see net::LoopMailbox): no
// lock on the serving side, and one consistent snapshot. A loop that does not
// take the scrape within 2 s gets it answered 503.
absl::StatusOr<std::string> MgmtServer::Impl::RenderMetrics() {
  constexpr std::chrono::milliseconds kTimeout{2000};
  common::PrometheusWriter w;
  const bool ran = mailbox.Call(
      [&] {
        MgmtState state;
        state.snapshot = &store->snapshot();
        state.connections = conns.size();
        for (const auto& [fd, c] : conns) {
          if (c.role != Role::kNode) continue;
          ++state.nodes_by_kind[c.kind == "fastpath" || c.kind == "recursor" ? c.kind : "other"];
        }
        if (tls != nullptr) state.tls_cert_not_after = tls->not_after();
        WriteMgmtMetrics(counters, state, sizes, w);
      },
      kTimeout);
  if (!ran)
    return absl::UnavailableError(
        Cat("the event loop did not take the scrape within ", kTimeout.count(), " ms"));
  common::AddProcessMetrics(w);
  common::AddBuildInfo(w, "weir-mgmt");
  return w.Render();
}

void MgmtServer::Impl::StoreFailed(const absl::Status& st) {
  common::LogError("store", ToStd(st.message()));
  if (IsDatabaseFailure(st)) ++counters.persistence_errors;
}

MgmtServer::MgmtServer(MgmtConfig config) : impl_(std::make_unique<Impl>()) {
  impl_->config = std::move(config);
}
MgmtServer::~MgmtServer() { Stop(); }
common::SocketAddress MgmtServer::bound() const { return impl_->bound; }

std::string MgmtServer::DescribeListeners() const {
  std::string s = Cat("listening ", impl_->bound.ToString(), "\n");
  if (impl_->metrics) s += Cat("metrics http ", impl_->metrics_bound.ToString(), "\n");
  if (impl_->feedback) s += Cat("feedback http ", impl_->feedback_bound.ToString(), "\n");
  return s;
}

absl::Status MgmtServer::Start() {
  absl::Status st = impl_->Start();
  if (!st.ok()) return st;
  impl_->running.store(true);
  impl_->thread = std::thread([this] { impl_->Loop(); });
  if (impl_->metrics_fd >= 0) {
    impl_->metrics =
        std::make_unique<common::MetricsHttpServer>([impl = impl_.get()] { return impl->RenderMetrics(); });
    if (absl::Status m = impl_->metrics->Start(impl_->metrics_fd); !m.ok()) {
      Stop();
      return absl::Status(m.code(),
                          Cat("metrics_listen ", impl_->metrics_bound.ToString(), ": ", m.message()));
    }
  }
  if (impl_->feedback_fd >= 0) {
    common::MetricsHttpServer::Options o;
    o.max_body_bytes = static_cast<size_t>(impl_->config.calibration.max_feedback_bytes);
    // No /metrics here: this listener faces the CDN side.
    impl_->feedback = std::make_unique<common::MetricsHttpServer>(
        [] { return absl::StatusOr<std::string>(absl::NotFoundError("metrics are on metrics_listen")); }, o);
    impl_->feedback->AddPostRoute(
        "/v1/traffic", [impl = impl_.get()](const common::HttpRequest& r) { return impl->Feedback(r); },
        [impl = impl_.get()](const common::HttpRequest& head) { return impl->FeedbackAdmit(head); });
    if (absl::Status m = impl_->feedback->Start(impl_->feedback_fd); !m.ok()) {
      Stop();
      return absl::Status(m.code(),
                          Cat("feedback_listen ", impl_->feedback_bound.ToString(), ": ", m.message()));
    }
  }
  return absl::OkStatus();
}

void MgmtServer::Stop() {
  // The HTTP servers first: their requests wait for the loop, which still runs.
  if (impl_->metrics) impl_->metrics->Stop();
  if (impl_->metrics_fd >= 0) {
    close(impl_->metrics_fd);
    impl_->metrics_fd = -1;
  }
  if (impl_->feedback) impl_->feedback->Stop();
  if (impl_->feedback_fd >= 0) {
    close(impl_->feedback_fd);
    impl_->feedback_fd = -1;
  }
  if (!net::StopLoopThread(impl_->running, impl_->loop, impl_->thread)) return;
  for (auto& [fd, c] : impl_->conns) {
    impl_->loop.Unwatch(fd);
    if (c.ssl != nullptr) SSL_free(c.ssl);
    close(fd);
  }
  impl_->conns.clear();
  impl_->loop.Unwatch(impl_->listen_fd);
  close(impl_->listen_fd);
}

absl::Status MgmtServer::ReloadTls() {
  if (impl_->tls == nullptr) return absl::FailedPreconditionError("no [tls] table");
  absl::Status st;
  if (!impl_->mailbox.Call([&] { st = impl_->tls->MaybeReload(true); }, std::chrono::milliseconds(2000)))
    return absl::UnavailableError("the event loop did not take the reload within 2000 ms");
  return st;
}

absl::Status MgmtServer::Impl::Start() {
  // With [tls] the token is optional: the certificates authenticate.
  if (!config.token_file.empty()) {
    auto tok = ReadTokenFile(config.token_file);
    if (!tok.ok()) return tok.status();
    token = *tok;
  }
  if (config.tls.enabled) {
    tls = std::make_unique<MgmtTlsContext>(config.tls);
    if (absl::Status st = tls->Load(); !st.ok()) return st;
  }
  absl::StatusOr<std::unique_ptr<StoreBackend>> backend =
      config.store == "etcd" ? OpenEtcdBackend(config.etcd) : OpenSqliteBackend(config.database);
  if (!backend.ok()) return backend.status();
  auto s = Store::Open(*std::move(backend));
  if (!s.ok()) return s.status();
  store = *std::move(s);
  common::LogInfo("store", store->backend().Describe(), " at version ", store->version(), ", instance ",
                  config.instance);
  calibration = std::make_unique<CalibrationService>(*store, config.calibration.options);
  if (config.calibration.feedback_enabled) {
    auto tok = ReadTokenFile(config.calibration.feedback_token_file);
    if (!tok.ok()) return tok.status();
    feedback_token = *tok;
  }
  listen_fd = socket(config.listen.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd < 0) return absl::InternalError(Cat("socket: ", std::strerror(errno)));
  int one = 1;
  setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(listen_fd, config.listen.sa(), config.listen.len) != 0) {
    return absl::UnavailableError(Cat("cannot bind ", config.listen.ToString(), ": ", std::strerror(errno)));
  }
  if (listen(listen_fd, 128) != 0) return absl::InternalError(Cat("listen: ", std::strerror(errno)));
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len);
  bound = common::SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&ss), len);
  if (absl::Status st = loop.Init(); !st.ok()) return st;
  loop.SetWakeHandler([this] {
    mailbox.RunPending();
    if (store_changed.exchange(false)) RefreshStore();
  });
  loop.After(kNodeRecordFlush, [this] { FlushNodeRecords(); });
  if (config.store == "etcd") {
    store->backend().OnExternalChange([this] {
      store_changed.store(true);
      loop.Wake();
    });
    loop.After(kStorePoll, [this] { PollStore(); });
  }
  if (tls != nullptr) loop.After(kTlsFilesPoll, [this] { CheckTlsFiles(); });
  if (config.metrics_enabled) {
    auto fd = net::BindSocket(config.metrics_listen, SOCK_STREAM, {.listen_backlog = 64});
    if (!fd.ok()) return absl::Status(fd.status().code(), Cat("metrics_listen: ", fd.status().message()));
    metrics_fd = *fd;
    metrics_bound = net::LocalAddress(*fd);
  }
  if (config.calibration.feedback_enabled) {
    auto fd = net::BindSocket(config.calibration.feedback_listen, SOCK_STREAM, {.listen_backlog = 64});
    if (!fd.ok()) return absl::Status(fd.status().code(), Cat("feedback_listen: ", fd.status().message()));
    feedback_fd = *fd;
    feedback_bound = net::LocalAddress(*fd);
  }
  loop.After(std::chrono::seconds(config.calibration.step_interval_s), [this] { CalibrationTick(); });
  WatchListener();
  return absl::OkStatus();
}

void MgmtServer::Impl::Loop() {
  // Stop() wakes the loop; everything else is a descriptor or a timer.
  while (running.load()) loop.RunOnce(std::chrono::seconds(1));
}

void MgmtServer::Impl::RefreshStore() {
  const uint64_t before = store->version();
  auto changed = store->Refresh();
  if (!changed.ok()) {
    if (IsDatabaseFailure(changed.status())) ++counters.persistence_errors;
    store_log("cannot read the store: ", ToStd(changed.status().message()));
    return;
  }
  if (!*changed) return;
  ++counters.store_refreshes;
  common::LogInfo("store", "version ", store->version(), " committed by another instance (had ", before,
                  "): pushing it");
  PushAll();
}

uint32_t MgmtServer::Impl::WallSeconds() { return static_cast<uint32_t>(std::time(nullptr)); }

void MgmtServer::Impl::CalibrationTick() {
  auto v = calibration->Tick(WallSeconds());
  if (!v.ok()) {
    if (IsDatabaseFailure(v.status())) ++counters.persistence_errors;
    store_log("calibration step not committed: ", ToStd(v.status().message()));
  } else if (*v != 0) {
    common::LogInfo("calibration", "factors decayed: version ", *v);
    PushAll();
  }
  if (running.load())
    loop.After(std::chrono::seconds(config.calibration.step_interval_s), [this] { CalibrationTick(); });
}

namespace {

common::HttpReply JsonError(unsigned status, std::string why) {
  common::HttpReply reply;
  reply.status = status;
  reply.content_type = "application/json";
  reply.body = StructuredReply::DumpJson(Json{{"error", std::move(why)}}) + "\n";
  return reply;
}

}  // namespace

// Runs on a server thread with the request's head: the token is checked
// before any body is read or held.
std::optional<common::HttpReply> MgmtServer::Impl::FeedbackAdmit(const common::HttpRequest& head) {
  std::string_view auth;
  if (auto it = head.headers.find("authorization"); it != head.headers.end()) auth = it->second;
  constexpr std::string_view kBearer = "Bearer ";
  if (auth.starts_with(kBearer) && TokenEquals(auth.substr(kBearer.size()), feedback_token))
    return std::nullopt;
  common::HttpReply reply = JsonError(401, "a bearer token is needed (Authorization: Bearer ...)");
  reply.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"weir-mgmt feedback\"");
  feedback_log("feedback from ", head.peer, " refused: bad or missing token");
  return reply;
}

common::HttpReply MgmtServer::Impl::Feedback(const common::HttpRequest& r) {
  auto json_error = [](unsigned status, std::string why) { return JsonError(status, std::move(why)); };
  absl::StatusOr<StructuredReply> result = absl::UnavailableError("not run");
  constexpr std::chrono::milliseconds kTimeout{5000};
  const bool ran = mailbox.Call(
      [&] {
        result = calibration->Import(r.body, Cat("feedback from ", r.peer), Cat("feedback@", r.peer),
                                     WallSeconds());
        if (result.ok() && result->json()["version"].get<uint64_t>() != 0) PushAll();
      },
      kTimeout);
  if (!ran)
    return json_error(503, Cat("weir-mgmt did not take the feedback within ", kTimeout.count(), " ms"));
  if (!result.ok()) {
    const absl::Status& st = result.status();
    common::LogWarning("calibration", "feedback from ", r.peer, " refused: ", ToStd(st.message()));
    if (st.code() == absl::StatusCode::kAborted) return json_error(409, std::string(ToStd(st.message())));
    if (IsDatabaseFailure(st)) return json_error(503, std::string(ToStd(st.message())));
    return json_error(400, std::string(ToStd(st.message())));
  }
  common::LogInfo("calibration", "feedback from ", r.peer, ": ", result->json()["accepted"].get<size_t>(),
                  " samples taken, version ", result->json()["version"].get<uint64_t>());
  common::HttpReply reply;
  reply.content_type = "application/json";
  reply.body = result->RenderJson() + "\n";
  return reply;
}

void MgmtServer::Impl::FlushNodeRecords() {
  store->backend().FlushNodeRecords();
  if (running.load()) loop.After(kNodeRecordFlush, [this] { FlushNodeRecords(); });
}

void MgmtServer::Impl::PollStore() {
  RefreshStore();
  if (running.load()) loop.After(kStorePoll, [this] { PollStore(); });
}

void MgmtServer::Impl::CheckTlsFiles() {
  tls->MaybeReload(false).IgnoreError();  // logged; the previous context stays
  if (running.load()) loop.After(kTlsFilesPoll, [this] { CheckTlsFiles(); });
}

void MgmtServer::Impl::Handshake(Conn& c) {
  ERR_clear_error();
  const int ret = SSL_do_handshake(c.ssl);
  if (ret == 1) {
    c.handshaking = false;
    auto peer = IdentifyPeer(c.ssl);
    if (!peer.ok()) {
      ++counters.tls_handshake_failures;
      handshake_log(c.peer, ": TLS peer refused: ", ToStd(peer.status().message()));
      return CloseConn(c.fd);
    }
    c.cert_role = peer->role;
    c.cert_cn = peer->cn;
    loop.Modify(c.fd, EPOLLIN);
    return OnReadable(c);  // the first frame may have come with the handshake's last flight
  }
  switch (SSL_get_error(c.ssl, ret)) {
    case SSL_ERROR_WANT_READ:
      return loop.Modify(c.fd, EPOLLIN);
    case SSL_ERROR_WANT_WRITE:
      return loop.Modify(c.fd, EPOLLIN | EPOLLOUT);
    default:
      ++counters.tls_handshake_failures;
      handshake_log(c.peer, ": TLS handshake refused: ", net::TlsHandshakeError(c.ssl));
      return CloseConn(c.fd);
  }
}

absl::Status MgmtServer::Impl::CheckCertificateRole(Conn& c, const Message& m) {
  if (m.type == MsgType::kRequest && c.cert_role != CertRole::kOperator) {
    return absl::PermissionDeniedError(
        Cat("certificate '", c.cert_cn, "' is a node's (OU=", kNodeUnit, "): it may not send REQUEST"));
  }
  if (m.type == MsgType::kHello) {
    if (c.cert_role != CertRole::kNode) {
      return absl::PermissionDeniedError(Cat(
          "certificate '", c.cert_cn, "' is an operator's (OU=", kOperatorUnit, "): it may not send HELLO"));
    }
    const std::string said = m.fields.size() > 2 ? m.fields[2] : "";
    if (said != c.cert_cn) {
      return absl::PermissionDeniedError(
          Cat("node certificate is for '", c.cert_cn, "', its HELLO says '", said, "'"));
    }
  }
  return absl::OkStatus();
}

void MgmtServer::Impl::WatchListener() {
  loop.Watch(listen_fd, EPOLLIN, [this](uint32_t) { Accept(); });
}

void MgmtServer::Impl::OnEvents(int fd, uint32_t events) {
  auto it = conns.find(fd);
  if (it == conns.end()) return;
  if (it->second.handshaking) return Handshake(it->second);
  if (events & EPOLLOUT) OnWritable(it->second);
  it = conns.find(fd);
  if (it != conns.end() && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) OnReadable(it->second);
}

void MgmtServer::Impl::Accept() {
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The pending connection stays readable: without a pause the loop would spin.
        accept_log("accept: ", std::strerror(errno), " (pausing accepts for 1 s)");
        loop.Unwatch(listen_fd);
        loop.After(std::chrono::seconds(1), [this] { WatchListener(); });
      }
      return;
    }
    if (static_cast<int>(conns.size()) >= config.max_connections) {
      close(fd);
      ++counters.connections_refused;
      accept_log("connection limit ", config.max_connections, " reached: connection closed");
      continue;
    }
    EnableKeepalive(fd);
    Conn& c = conns[fd];
    c.fd = fd;
    c.serial = next_serial++;
    c.peer = common::SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&ss), len).ToString();
    c.deadline = loop.After(std::chrono::seconds(30), [this, fd] {
      auto it = conns.find(fd);
      if (it == conns.end()) return;
      it->second.deadline = 0;
      if (it->second.role != Role::kNode) CloseConn(fd);
    });
    if (tls != nullptr) {
      c.ssl = tls->NewConnection(fd);
      if (c.ssl == nullptr) {
        accept_log("TLS: ", net::TlsErrors(), ": connection closed");
        CloseConn(fd);
        continue;
      }
      c.io.emplace(c.ssl);
      c.handshaking = true;
    }
    loop.Watch(fd, EPOLLIN, [this, fd](uint32_t events) { OnEvents(fd, events); });
  }
}

void MgmtServer::Impl::CloseConn(int fd) {
  auto it = conns.find(fd);
  if (it == conns.end()) return;
  if (it->second.role == Role::kNode) {
    common::LogInfo("node", "node ", it->second.node_id, " (", it->second.peer, ") disconnected");
    bool again = false;  // the node's newer connection to this instance
    for (const auto& [ofd, other] : conns) {
      again = again || (ofd != fd && other.role == Role::kNode && other.node_id == it->second.node_id);
    }
    if (!again) {
      if (absl::Status st = store->backend().NodeGone(it->second.node_id); !st.ok()) StoreFailed(st);
    }
    std::vector<uint64_t> finished;
    for (auto& [id, f] : fanouts) {
      auto r = f.results.find(it->second.node_id);
      if (r == f.results.end() || r->second.done || r->second.serial != it->second.serial) continue;
      r->second.done = true;
      r->second.text = "disconnected before it replied";
      if (--f.pending == 0) finished.push_back(id);
    }
    for (uint64_t id : finished) FinishFanOut(id);
  }
  if (it->second.deadline != 0) loop.Cancel(it->second.deadline);
  loop.Unwatch(fd);
  if (SSL* ssl = it->second.ssl; ssl != nullptr) {
    // A close_notify, best effort: the peer reads the end of the stream,
    // not a reset.
    if (!it->second.handshaking) SSL_shutdown(ssl);
    ERR_clear_error();
    SSL_free(ssl);
  }
  close(fd);
  conns.erase(it);
}

void MgmtServer::Impl::Watch(Conn& c) {
  const bool idle = c.out.empty() && c.push == nullptr;
  loop.Modify(c.fd, EPOLLIN | (idle ? 0u : static_cast<uint32_t>(EPOLLOUT)));
}

void MgmtServer::Impl::Flush(Conn& c) {
  for (;;) {
    // A push once begun is sent to its end; `out` (replies, errors, control
    // requests) goes first otherwise: frames never interleave.
    const bool pushing = c.push != nullptr && (c.push_off > 0 || c.out.empty());
    const std::string* buf = pushing ? c.push.get() : &c.out;
    const size_t off = pushing ? c.push_off : 0;
    if (buf->size() == off) break;
    ssize_t n = Send(c, buf->data() + off, buf->size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) return CloseConn(c.fd);
    if (!pushing) {
      c.out.erase(0, static_cast<size_t>(n));
    } else if ((c.push_off += static_cast<size_t>(n)) == c.push->size()) {
      c.push.reset();
      c.push_off = 0;
    }
  }
  const bool idle = c.out.empty() && c.push == nullptr;
  if (idle && c.close_after_write) return CloseConn(c.fd);
  if (idle && c.role == Role::kNode && c.sent_version != store->version()) {
    MaybePush(c);  // a change happened while the previous snapshot was in flight
    return;
  }
  Watch(c);
}

void MgmtServer::Impl::OnWritable(Conn& c) { Flush(c); }

void MgmtServer::Impl::OnReadable(Conn& c) {
  char buf[65536];
  const int fd = c.fd;
  for (;;) {
    ssize_t n = Recv(c, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) return CloseConn(fd);
    c.reader.Feed(std::string_view(buf, static_cast<size_t>(n)));
    for (;;) {
      auto m = c.reader.Next();
      if (!m.ok()) {
        ++counters.protocol_errors;
        return Fail(c, Text(m.status().message()));
      }
      if (!m->has_value()) break;
      Handle(c, **m);
      if (conns.find(fd) == conns.end() || c.close_after_write) return;
    }
  }
}

void MgmtServer::Impl::Fail(Conn& c, std::string reason) {
  refused_log(c.peer, c.node_id.empty() ? "" : Cat(" (node ", c.node_id, ")"), ": refused: ", reason);
  c.out += Encode(Message{MsgType::kError, {std::move(reason)}});
  c.close_after_write = true;
  Flush(c);
}

void MgmtServer::Impl::MaybePush(Conn& c) {
  if (c.push != nullptr || c.close_after_write) return;
  // Version 0 is an empty database (new, or the wrong file): it never
  // overwrites what a node runs.
  if (store->version() == 0) return;
  if (c.sent_version == store->version() && c.sent_origin == store->snapshot().origin) return;
  // A node that runs a newer version of this store than this instance holds
  // (it was on an instance that is ahead): never pushed an older one; it
  // gets the next version this instance reads.
  if (c.sent_origin == store->snapshot().origin && c.sent_version > store->version()) {
    if (!c.ahead_logged) {
      common::LogWarning("node", "node ", c.node_id, " runs version ", c.sent_version,
                         ", newer than this instance's ", store->version(),
                         ": nothing pushed until it catches up");
      c.ahead_logged = true;
      store_changed.store(true);
      loop.Wake();
    }
    return;
  }
  TrackVersion();
  c.push = PushFrame(c, &c.push_was_delta);
  c.push_off = 0;
  ++(c.push_was_delta ? counters.deltas_pushed : counters.snapshots_pushed);
  c.sent_version = store->version();
  c.sent_origin = store->snapshot().origin;
  Flush(c);
}

void MgmtServer::Impl::TrackVersion() {
  const Snapshot& now = store->snapshot();
  if (history_origin != now.origin) {
    history.clear();
    history_origin = now.origin;
  }
  if (!history.empty() && history.rbegin()->first == now.version) return;
  history[now.version] = std::make_shared<const Snapshot>(now);
  frames.clear();
  converging_version = now.version;
  converging_since = std::chrono::steady_clock::now();
  // Bounded: the oldest versions go first (a node that runs one of them
  // gets the whole snapshot).
  size_t bytes = 0;
  for (const auto& [v, snap] : history)
    bytes += snap->tags.size() + snap->citymap.size() + snap->accounts.size() + snap->factors.size();
  while (history.size() > kHistoryVersions || (history.size() > 1 && bytes > kHistoryBytes)) {
    const Snapshot& oldest = *history.begin()->second;
    bytes -= oldest.tags.size() + oldest.citymap.size() + oldest.accounts.size() + oldest.factors.size();
    history.erase(history.begin());
  }
}

std::shared_ptr<const std::string> MgmtServer::Impl::PushFrame(Conn& c, bool* delta) {
  const Snapshot& now = store->snapshot();
  // Only weir-fastpath answers HTTPDNS and picks weighted answers: no other
  // node is given the accounts' secrets or the weight factors (its version
  // is the same, without them).
  const bool with_accounts = c.kind == "fastpath" || (now.accounts.empty() && now.factors.empty());
  uint64_t base = 0;
  if (c.delta && c.full_for != now.version && c.sent_origin == now.origin && c.acked_version != 0 &&
      c.acked_version < now.version && history.contains(c.acked_version)) {
    base = c.acked_version;
  }
  *delta = base != 0;
  std::shared_ptr<const std::string>& frame = frames[{base, with_accounts}];
  if (frame != nullptr) return frame;
  if (base != 0) {
    frame = std::make_shared<const std::string>(
        Encode(DeltaMessage(MakeDelta(*history.at(base), now, c.kind == "fastpath"))));
  } else if (with_accounts) {
    frame = std::make_shared<const std::string>(Encode(SnapshotMessage(now)));
  } else {
    Snapshot without = now;
    without.accounts.clear();
    without.factors.clear();
    frame = std::make_shared<const std::string>(Encode(SnapshotMessage(without)));
  }
  return frame;
}

void MgmtServer::Impl::PushAll() {
  TrackVersion();
  // Every node of this instance, in a random order, in batches: a commit to
  // a thousand nodes is written out over a few milliseconds rather than in
  // one burst, and no node is always last.
  fanout_queue.clear();
  for (auto& [fd, c] : conns) {
    if (c.role == Role::kNode) fanout_queue.push_back(fd);
  }
  std::shuffle(fanout_queue.begin(), fanout_queue.end(), rng);
  if (!fanout_scheduled) PushBatch();
}

void MgmtServer::Impl::PushBatch() {
  fanout_scheduled = false;
  const size_t n = std::min(fanout_queue.size(), static_cast<size_t>(config.push_batch));
  std::vector<int> batch(fanout_queue.end() - static_cast<ptrdiff_t>(n), fanout_queue.end());
  fanout_queue.resize(fanout_queue.size() - n);
  for (int fd : batch) {
    auto it = conns.find(fd);
    if (it != conns.end()) MaybePush(it->second);
  }
  if (fanout_queue.empty()) return;
  fanout_scheduled = true;
  loop.After(std::chrono::milliseconds(config.push_batch_interval_ms), [this] { PushBatch(); });
}

void MgmtServer::Impl::CheckConvergence() {
  if (converging_version == 0) return;
  size_t nodes = 0;
  for (const auto& [fd, c] : conns) {
    if (c.role != Role::kNode || c.close_after_write) continue;
    ++nodes;
    if (c.sent_origin != history_origin || c.acked_version < converging_version) return;
  }
  if (nodes == 0) return;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - converging_since).count();
  counters.convergence.Observe(seconds);
  counters.last_convergence_seconds = seconds;
  converging_version = 0;
}

void MgmtServer::Impl::Handle(Conn& c, const Message& m) {
  if (c.role == Role::kUnknown) {
    if (m.type != MsgType::kHello && m.type != MsgType::kRequest) {
      ++counters.protocol_errors;
      return Fail(c, "expected HELLO or REQUEST");
    }
    if (m.fields.size() < 2 || m.fields[0] != kProtocol) {
      ++counters.protocol_errors;
      return Fail(c, Cat("unsupported protocol, expected ", kProtocol));
    }
    if (c.ssl != nullptr) {
      if (absl::Status st = CheckCertificateRole(c, m); !st.ok()) {
        ++counters.certificate_refused;
        return Fail(c, Text(st.message()));
      }
    }
    // With [tls] and no token_file the certificate alone authenticates.
    if ((c.ssl == nullptr || !token.empty()) && !TokenEquals(m.fields[1], token)) {
      ++counters.bad_token;
      return Fail(c, "bad token");
    }
    if (m.type == MsgType::kRequest) {
      c.role = Role::kCtl;
      if (c.ssl != nullptr && m.fields.size() > 2) {
        // The audit names the certificate; what the client says follows it.
        Message request = m;
        request.fields[2] =
            m.fields[2].empty() ? Cat(c.cert_cn, " (cert)") : Cat(c.cert_cn, " (cert) as ", m.fields[2]);
        return HandleRequest(c, request);
      }
      return HandleRequest(c, m);
    }
    if ((m.fields.size() != 6 && m.fields.size() != 7) || m.fields[2].empty() || m.fields[2].size() > 255) {
      ++counters.protocol_errors;
      return Fail(
          c, "HELLO needs protocol, token, node id (1..255 bytes), kind, version, origin[, capabilities]");
    }
    auto have = ParseU64(m.fields[4]);
    if (!have.ok()) {
      ++counters.protocol_errors;
      return Fail(c, "HELLO: bad version");
    }
    // A node that reconnects replaces its old connection.
    for (auto& [fd, other] : conns) {
      if (fd != c.fd && other.role == Role::kNode && other.node_id == m.fields[2]) {
        common::LogInfo("node", "node ", m.fields[2], " connected again from ", c.peer,
                        "; closing its connection from ", other.peer);
        other.out.clear();  // a partly sent snapshot is useless to it now
        Fail(other, Cat("replaced by a newer connection with node_id ", m.fields[2],
                        " (two nodes with one node_id?)"));
        break;
      }
    }
    c.role = Role::kNode;
    c.node_id = m.fields[2];
    c.kind = m.fields[3];
    c.sent_version = *have;
    c.sent_origin = m.fields[5];
    // A version of another database says nothing about what the node runs.
    const uint64_t runs = m.fields[5] == store->snapshot().origin ? *have : 0;
    c.acked_version = runs;
    c.delta = m.fields.size() == 7 && m.fields[6] == kDeltaCapability;
    if (absl::Status st = store->NodeSeen(c.node_id, m.fields[3], c.peer, runs, config.instance); !st.ok())
      StoreFailed(st);
    common::LogInfo("node", "node ", c.node_id, " (", m.fields[3], ", ", c.peer, ") connected at version ",
                    *have, ", current ", store->version());
    return MaybePush(c);
  }
  if (c.role == Role::kNode) {
    if (m.type == MsgType::kAck && m.fields.size() == 1) {
      auto v = ParseU64(m.fields[0]);
      if (v.ok()) {
        ++counters.acks;
        c.acked_version = *v;
        CheckConvergence();
        if (absl::Status st = store->NodeAck(c.node_id, *v); !st.ok()) StoreFailed(st);
      }
    } else if (m.type == MsgType::kControlReply) {
      NodeControlReply(c, m);
    } else if (m.type == MsgType::kNack && (m.fields.size() == 2 || m.fields.size() == 3)) {
      auto v = ParseU64(m.fields[0]);
      if (v.ok()) {
        const bool resend = m.fields.size() == 3 && m.fields[2] == kResendWhole;
        if (resend && c.push_was_delta && *v == c.sent_version && c.full_for != *v) {
          // The node's base differs from what this instance thinks it runs:
          // the whole snapshot of that version goes now.
          c.full_for = *v;
          c.sent_version = 0;
          ++counters.delta_resends;
          MaybePush(c);
          return;
        }
        ++counters.nacks;
        if (absl::Status st = store->NodeNack(c.node_id, *v, m.fields[1]); !st.ok()) StoreFailed(st);
        nack_log("node ", c.node_id, " rejected version ", *v, ": ", m.fields[1]);
      }
    }
    return;
  }
  ++counters.protocol_errors;
  return Fail(c, "one request per connection");
}

void MgmtServer::Impl::Reply(Conn& c, bool ok, std::string text, std::string json) {
  ++counters.requests[{c.request.empty() ? std::string(kInvalidCommand) : c.request, ok}];
  c.out += Encode(Message{MsgType::kReply, {ok ? "ok" : "error", std::move(text), std::move(json)}});
  c.close_after_write = true;
  Flush(c);
}

void MgmtServer::Impl::Refused(Conn& c, const absl::Status& st) {
  if (st.code() != absl::StatusCode::kAborted) return Reply(c, false, Text(st.message()), "");
  ++counters.conflicts;
  ++counters.requests[{c.request, false}];
  c.out += Encode(Message{MsgType::kReply, {"conflict", Text(st.message()), ""}});
  c.close_after_write = true;
  Flush(c);
}

void MgmtServer::Impl::HandleRequest(Conn& c, const Message& m) {
  if (m.fields.size() < 4) return Reply(c, false, "request needs protocol, token, actor, verb", "");
  const std::string& actor = m.fields[2];
  const std::string& verb = m.fields[3];
  const CommandSpec* spec = FindCommand(verb);
  c.request = spec != nullptr ? verb : std::string(kUnknownCommand);
  const std::vector<std::string> args(m.fields.begin() + 4, m.fields.end());
  if (spec == nullptr) return Reply(c, false, Cat("unknown request '", verb, "'"), "");
  if (args.size() < spec->min_args || (spec->max_args != kAnyArgs && args.size() > spec->max_args)) {
    return Reply(c, false,
                 Cat("request '", verb, "' takes ", static_cast<int>(spec->min_args),
                     spec->max_args == kAnyArgs         ? " or more"
                     : spec->max_args != spec->min_args ? Cat(" to ", static_cast<int>(spec->max_args))
                                                        : std::string(),
                     " arguments, got ", args.size()),
                 "");
  }
  // The tags before a change that may add suffixes (their zones are checked).
  std::string tags_before;
  auto changed = [&](const absl::StatusOr<uint64_t>& v, std::string what, bool check_zones = false) {
    if (!v.ok()) {
      if (IsDatabaseFailure(v.status())) ++counters.persistence_errors;
      common::LogWarning("ctl", verb, " by ", actor, " refused: ", ToStd(v.status().message()));
      return Refused(c, v.status());
    }
    common::LogInfo("ctl", what, " by ", actor, ": version ", *v);
    PushAll();
    if (check_zones) {
      return ReplyAfterZoneCheck(c, actor, *v, what, NewTagSuffixes(tags_before, store->snapshot().tags));
    }
    Reply(c, StructuredReply(Json{{"version", *v}}).Block([what](const Json& d) {
      return Cat(what, ": version ", CellText(d, "version"), "\n");
    }));
  };
  switch (spec->id) {
    case Command::kTagAdd:
      tags_before = store->snapshot().tags;
      return changed(store->AddTag(args[0], args.size() == 2 && args[1] == "replace", actor), "tag added",
                     true);
    case Command::kTagRm:
      return changed(store->RemoveTag(args[0], actor), "tag removed");
    case Command::kTagImport:
      tags_before = store->snapshot().tags;
      return changed(store->ImportTags(args[0], actor, args.size() == 2 ? args[1] : ""), "tags imported",
                     true);
    case Command::kCitymapImport:
      return changed(store->ImportCitymap(args[0], actor, args.size() == 2 ? args[1] : ""),
                     "city map imported");
    case Command::kTagEdit:
      return changed(store->EditTag(args[0], std::vector<std::string>(args.begin() + 1, args.end()), actor),
                     "tag edited");
    case Command::kCitymapAdd:
      return changed(store->AddCityMapping(args[0], args.size() == 2 && args[1] == "replace", actor),
                     "city mapping added");
    case Command::kCitymapRm:
      return changed(store->RemoveCityMapping(args[0], actor), "city mapping removed");
    case Command::kNodeControl:
      return FanOutControl(c, actor, args);
    case Command::kTagLs:
      return ListTags(c);
    case Command::kCitymapLs:
      return ListCitymap(c);
    case Command::kStatus:
      return Status(c);
    case Command::kNodeRm:
      return ForgetNode(c, actor, args[0]);
    case Command::kNodes:
      return ListNodes(c);
    case Command::kAudit:
      return ListAudit(c, args);
    case Command::kAccountAdd:
    case Command::kAccountRotate:
    case Command::kAccountRetire:
    case Command::kAccountSet:
    case Command::kAccountRm: {
      // The reply may hold the new secret: it is never logged (nor are
      // the request's arguments, which may hold the operator's).
      auto change = ChangeAccount(*store, spec->id, args, actor);
      if (!change.ok()) {
        if (IsDatabaseFailure(change.status())) ++counters.persistence_errors;
        common::LogWarning("ctl", verb, " by ", actor, " refused: ", ToStd(change.status().message()));
        return Refused(c, change.status());
      }
      common::LogInfo("ctl", change->what, " by ", actor, ": version ", change->version);
      PushAll();
      return Reply(c, change->reply);
    }
    case Command::kAccountLs:
      return Reply(c, ListAccounts(*store));
    case Command::kTrafficImport: {
      auto r = calibration->Import(args[0], args.size() == 2 ? args[1] : "", actor, WallSeconds());
      if (!r.ok()) {
        if (IsDatabaseFailure(r.status())) ++counters.persistence_errors;
        common::LogWarning("ctl", verb, " by ", actor, " refused: ", ToStd(r.status().message()));
        return Refused(c, r.status());
      }
      if (const uint64_t v = r->json()["version"].get<uint64_t>(); v != 0) {
        common::LogInfo("ctl", "traffic imported by ", actor, ": version ", v);
        PushAll();
      }
      return Reply(c, *r);
    }
    case Command::kCalibrationLs:
      calibration->Sync();
      return Reply(c, calibration->List(args.empty() ? "" : args[0]));
  }
  return Reply(c, false, Cat("unknown request '", verb, "'"), "");
}

void MgmtServer::Impl::ListTags(Conn& c) {
  const std::string& text = store->snapshot().tags;
  StructuredReply r(Json{{"version", store->version()}, {"tags", Json::array()}});
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    r.json()["tags"].push_back(text.substr(start, end - start));
    start = end + 1;
  }
  // The tags file: one line per tag.
  r.Block([](const Json& d) {
    std::string out;
    for (const Json& line : d["tags"]) out += line.get<std::string>() + "\n";
    return out;
  });
  return Reply(c, r);
}

void MgmtServer::Impl::ListCitymap(Conn& c) {
  StructuredReply r(Json{{"version", store->version()}, {"citymap", store->snapshot().citymap}});
  r.Block([](const Json& d) { return d["citymap"].get<std::string>(); });
  return Reply(c, r);
}

void MgmtServer::Impl::Status(Conn& c) {
  size_t nodes = 0;
  for (auto& [fd, x] : conns) nodes += x.role == Role::kNode;
  const Snapshot& s = store->snapshot();
  const size_t tags = static_cast<size_t>(std::count(s.tags.begin(), s.tags.end(), '\n'));
  StructuredReply r(Json{{"version", s.version},
                         {"origin", s.origin},
                         {"store", store->backend().Describe()},
                         {"instance", config.instance},
                         {"tags", tags},
                         {"citymap_bytes", s.citymap.size()},
                         {"accounts", store->accounts().size()},
                         {"tags_sha256", ContentDigest(s.tags)},
                         {"citymap_sha256", ContentDigest(s.citymap)},
                         {"accounts_sha256", ContentDigest(s.accounts)},
                         {"nodes_connected", nodes}});
  r.Block([](const Json& d) {
    return Cat("version ", CellText(d, "version"), "\norigin ", CellText(d, "origin"), "\nstore ",
               CellText(d, "store"), "\ninstance ", CellText(d, "instance"), "\ntags ", CellText(d, "tags"),
               "\ncitymap bytes ", CellText(d, "citymap_bytes"), "\naccounts ", CellText(d, "accounts"),
               "\ntags sha256 ", CellText(d, "tags_sha256"), "\ncitymap sha256 ",
               CellText(d, "citymap_sha256"), "\naccounts sha256 ", CellText(d, "accounts_sha256"),
               "\nnodes connected ", CellText(d, "nodes_connected"), "\n");
  });
  return Reply(c, r);
}

void MgmtServer::Impl::ForgetNode(Conn& c, const std::string& actor, const std::string& node) {
  for (auto& [fd, x] : conns) {
    if (x.role == Role::kNode && x.node_id == node && !x.close_after_write) {
      return Reply(c, false, Cat("node '", node, "' is connected: stop it first (or it comes back at once)"),
                   "");
    }
  }
  if (absl::Status st = store->ForgetNode(node); !st.ok()) {
    if (IsDatabaseFailure(st)) StoreFailed(st);
    return Reply(c, false, Text(st.message()), "");
  }
  common::LogInfo("ctl", "node ", node, " forgotten by ", actor);
  return Reply(c, StructuredReply(Json{{"forgotten", node}}).Block([](const Json& d) {
    return Cat("node ", CellText(d, "forgotten"), " forgotten\n");
  }));
}

void MgmtServer::Impl::ListNodes(Conn& c) {
  auto recs = store->Nodes();
  if (!recs.ok()) {
    StoreFailed(recs.status());
    return Reply(c, false, Text(recs.status().message()), "");
  }
  const uint64_t current = store->version();
  StructuredReply r(Json{{"version", current}, {"instance", config.instance}, {"nodes", Json::array()}});
  // How many commits a node is behind: the versions committed after the
  // one it runs (the audit log's), up to this many.
  constexpr int kMaxLag = 1000;
  for (NodeRecord& n : *recs) {
    // This instance's own connections are the freshest word on a node (the
    // registry is written behind them); another instance's are as it wrote them.
    const Conn* live = nullptr;
    for (auto& [fd, x] : conns) {
      if (x.role == Role::kNode && x.node_id == n.node_id && !x.close_after_write) live = &x;
    }
    if (live != nullptr) {
      n.connected = true;
      n.mgmt = config.instance;
      n.acked_version = live->acked_version;
      n.peer = live->peer;
    } else if (n.mgmt.empty() || n.mgmt == config.instance) {
      n.connected = false;
      n.mgmt = n.mgmt.empty() ? config.instance : n.mgmt;
    }
    int64_t behind = 0;
    if (n.acked_version < current) {
      auto after = store->backend().VersionsAfter(n.acked_version, kMaxLag);
      behind = after.ok() ? static_cast<int64_t>(after->size()) : -1;
    }
    r.json()["nodes"].push_back(Json{{"node", n.node_id},
                                     {"kind", n.kind},
                                     {"connected", n.connected},
                                     {"mgmt", n.mgmt},
                                     {"version", n.acked_version},
                                     {"behind", behind},
                                     {"in_sync", n.acked_version == current},
                                     {"nack_version", n.nack_version},
                                     {"nack_reason", n.nack_reason},
                                     {"peer", n.peer},
                                     {"last_seen", n.last_seen}});
  }
  r.Block([](const Json& d) {
    std::string text = Cat("current version ", CellText(d, "version"), "\n");
    for (const Json& n : d["nodes"]) {
      std::string state = n["in_sync"].get<bool>()         ? "in-sync"
                          : n["behind"].get<int64_t>() < 0 ? "behind"
                                                           : Cat("behind:", CellText(n, "behind"));
      if (n["nack_version"].get<uint64_t>() > n["version"].get<uint64_t>())
        state = Cat("rejected ", CellText(n, "nack_version"), ": ", CellText(n, "nack_reason"));
      common::CatTo(text, CellText(n, "node"), " kind=", CellText(n, "kind"),
                    " connected=", CellText(n, "connected"), " mgmt=", CellText(n, "mgmt"),
                    " version=", CellText(n, "version"), " state=", state, " peer=", CellText(n, "peer"),
                    " last_seen=", UtcTimeText(n["last_seen"].get<int64_t>()), "\n");
    }
    return text;
  });
  return Reply(c, r);
}

void MgmtServer::Impl::ListAudit(Conn& c, const std::vector<std::string>& args) {
  int limit = 50;
  if (args.size() == 1) {
    auto l = ParseU64(args[0]);
    if (!l.ok() || *l == 0 || *l > 100000) return Reply(c, false, "audit limit must be 1..100000", "");
    limit = static_cast<int>(*l);
  }
  auto recs = store->Audit(limit);
  if (!recs.ok()) {
    StoreFailed(recs.status());
    return Reply(c, false, Text(recs.status().message()), "");
  }
  StructuredReply r(Json::array());
  for (const AuditRecord& a : *recs) {
    r.json().push_back(Json{{"time", a.time},
                            {"version", a.version},
                            {"actor", a.actor},
                            {"action", a.action},
                            {"detail", a.detail}});
  }
  r.Block([](const Json& d) {
    std::string text;
    for (const Json& a : d) {
      common::CatTo(text, UtcTimeText(a["time"].get<int64_t>()), " v", CellText(a, "version"), " ",
                    CellText(a, "actor"), " ", CellText(a, "action"), ": ", CellText(a, "detail"), "\n");
    }
    return text;
  });
  return Reply(c, r);
}

void MgmtServer::Impl::FanOutControl(Conn& c, const std::string& actor,
                                     const std::vector<std::string>& args) {
  // args: kind ("" for every node), timeout in ms, verb, the verb's args.
  const std::string& kind = args[0];
  auto timeout = ParseU64(args[1]);
  if (!timeout.ok() || *timeout < 100 || *timeout > 25000)
    return Reply(c, false, "node-control: timeout must be 100..25000 ms", "");
  auto known = store->Nodes();
  if (!known.ok()) {
    StoreFailed(known.status());
    return Reply(c, false, Text(known.status().message()), "");
  }
  const uint64_t id = next_fanout++;
  FanOut f;
  f.ctl_fd = c.fd;
  f.ctl_serial = c.serial;
  Message req{MsgType::kControl, {std::to_string(id), actor}};
  req.fields.insert(req.fields.end(), args.begin() + 2, args.end());
  std::vector<int> targets = FanOutTargets(kind, f);
  // Nodes mgmt knows that are not connected now: the request cannot reach them.
  for (const NodeRecord& r : *known) {
    if ((!kind.empty() && r.kind != kind) || f.results.contains(r.node_id)) continue;
    NodeResult& nr = f.results[r.node_id];
    nr.kind = r.kind;
    nr.done = true;
    nr.text = "not connected to weir-mgmt";
  }
  if (f.results.empty()) {
    return Reply(
        c, false,
        kind.empty() ? "no node is known to weir-mgmt" : Cat("no ", kind, " node is known to weir-mgmt"), "");
  }
  common::LogInfo("ctl", "control '", args[2], "' by ", actor, " sent to ", targets.size(), " nodes");
  LaunchFanOut(id, std::move(f), targets, Encode(req), std::chrono::milliseconds(*timeout));
}

std::vector<int> MgmtServer::Impl::FanOutTargets(const std::string& kind, FanOut& f) {
  std::vector<int> targets;
  for (auto& [fd, n] : conns) {
    // A connection being closed (replaced by the node's newer one) is not the node.
    if (n.role != Role::kNode || n.close_after_write || (!kind.empty() && n.kind != kind)) continue;
    if (f.results.contains(n.node_id)) continue;
    f.results[n.node_id].kind = n.kind;
    f.results[n.node_id].serial = n.serial;
    targets.push_back(fd);
  }
  f.pending = targets.size();
  return targets;
}

void MgmtServer::Impl::LaunchFanOut(uint64_t id, FanOut f, const std::vector<int>& targets,
                                    const std::string& frame, std::chrono::milliseconds timeout) {
  f.timer = loop.After(timeout, [this, id] {
    auto it = fanouts.find(id);
    if (it == fanouts.end()) return;
    it->second.timer = 0;
    for (auto& [node, r] : it->second.results) {
      if (!r.done) r.text = "no reply within the timeout";
      r.done = true;
    }
    it->second.pending = 0;
    FinishFanOut(id);
  });
  fanouts[id] = std::move(f);
  if (targets.empty()) return FinishFanOut(id);
  for (int fd : targets) {
    auto it = conns.find(fd);
    if (it == conns.end()) continue;
    it->second.out += frame;
    Flush(it->second);
  }
}

void MgmtServer::Impl::ReplyAfterZoneCheck(Conn& c, const std::string& actor, uint64_t version,
                                           const std::string& what, std::vector<std::string> added) {
  StructuredReply reply(Json{{"version", version}, {"warnings", Json::array()}});
  reply.Block([what](const Json& d) { return Cat(what, ": version ", CellText(d, "version"), "\n"); });
  if (config.zone_check_ms == 0 || added.empty()) return Reply(c, reply);
  const size_t total = added.size();
  if (added.size() > kMaxZoneCheckNames) added.resize(kMaxZoneCheckNames);
  auto warn = [what, actor](Json& d, std::string text) {
    common::LogWarning("ctl", what, " by ", actor, ": ", text);
    d["warnings"].push_back(std::move(text));
  };
  const uint64_t id = next_fanout++;
  FanOut f;
  f.ctl_fd = c.fd;
  f.ctl_serial = c.serial;
  const std::vector<int> targets = FanOutTargets("recursor", f);
  if (targets.empty()) {
    // Nothing to ask. Said only when recursors are known: a fleet whose
    // recursors are not managed by weir-mgmt has nobody to ask.
    auto known = store->Nodes();
    const bool recursors = known.ok() && std::any_of(known->begin(), known->end(), [](const NodeRecord& r) {
                             return r.kind == "recursor";
                           });
    if (recursors) {
      warn(reply.json(), Cat("no recursor node is connected: the zones of ", total,
                             total == 1 ? " new suffix were" : " new suffixes were", " not checked"));
    }
    return Reply(c, reply);
  }
  const int walk_ms = std::max(100, config.zone_check_ms);
  f.done = [this, reply = std::move(reply), names = added, total, walk_ms, warn](Conn* ctl,
                                                                                 const FanOut& done) mutable {
    std::vector<std::optional<std::string>> zone(names.size());
    std::vector<bool> checked(names.size(), false);
    size_t answered = 0;
    for (const auto& [node, r] : done.results) {
      if (!r.ok) continue;
      ++answered;
      const Json j = ParseNodeJson(r.json);
      if (!j.is_object() || !j.contains("names") || !j["names"].is_array()) continue;
      const Json& got = j["names"];
      for (size_t i = 0; i < names.size() && i < got.size(); ++i) {
        const Json& n = got[i];
        if (!n.is_object()) continue;
        if (n.contains("zone") && n["zone"].is_string()) zone[i] = n["zone"].get<std::string>();
        if (n.contains("checked") && n["checked"].is_boolean() && n["checked"].get<bool>()) checked[i] = true;
      }
    }
    Json& d = reply.json();
    Json list = Json::array();
    std::vector<std::string> unchecked;
    for (size_t i = 0; i < names.size(); ++i) {
      list.push_back(Json{{"suffix", names[i]}, {"zone", zone[i] ? Json(*zone[i]) : Json(nullptr)}});
      if (zone[i]) continue;
      if (checked[i]) {
        warn(d, Cat("no recursor node can find the zone of ", names[i],
                    " (no zone cut with server addresses): its tagged queries get SERVFAIL until one can"));
      } else if (answered > 0) {
        unchecked.push_back(names[i]);
      }
    }
    d["zone_check"] = Json{{"nodes_asked", done.results.size()},
                           {"nodes_answered", answered},
                           {"suffixes", total},
                           {"checked", std::move(list)}};
    if (answered == 0) {
      warn(d, Cat("no recursor node answered the zone check within ", walk_ms + 1000, " ms (",
                  done.results.size(), " asked): the zones were not checked"));
    } else if (!unchecked.empty()) {
      warn(d, Cat("the zones of ", unchecked.size(), " new suffixes were not found within ", walk_ms, " ms: ",
                  absl::StrJoin(unchecked.begin(), unchecked.begin() + std::min<size_t>(unchecked.size(), 10),
                                ", "),
                  unchecked.size() > 10 ? ", ..." : ""));
    }
    if (total > names.size()) {
      warn(d, Cat("only the first ", names.size(), " of ", total, " new suffixes had their zone checked"));
    }
    if (ctl != nullptr) Reply(*ctl, reply);
  };
  Message req{MsgType::kControl,
              {std::to_string(id), actor, std::string(kZoneCheckVerb), Cat("timeout_ms=", walk_ms)}};
  for (const std::string& n : added) req.fields.push_back(Cat("name=", n));
  LaunchFanOut(id, std::move(f), targets, Encode(req), std::chrono::milliseconds(walk_ms + 1000));
}

void MgmtServer::Impl::NodeControlReply(Conn& node, const Message& m) {
  if (m.fields.size() != 4) return;
  auto id = ParseU64(m.fields[0]);
  if (!id.ok()) return;
  auto it = fanouts.find(*id);
  if (it == fanouts.end()) return;  // timed out already
  auto r = it->second.results.find(node.node_id);
  if (r == it->second.results.end() || r->second.done || r->second.serial != node.serial) return;
  r->second.done = true;
  r->second.ok = m.fields[1] == "ok";
  r->second.text = m.fields[2];
  r->second.json = m.fields[3];
  if (--it->second.pending == 0) FinishFanOut(*id);
}

void MgmtServer::Impl::FinishFanOut(uint64_t id) {
  auto it = fanouts.find(id);
  if (it == fanouts.end()) return;
  FanOut f = std::move(it->second);
  fanouts.erase(it);
  if (f.timer != 0) loop.Cancel(f.timer);
  auto ctl = conns.find(f.ctl_fd);
  const bool gone = ctl == conns.end() || ctl->second.serial != f.ctl_serial;  // weirctl gave up
  if (f.done) return f.done(gone ? nullptr : &ctl->second, f);
  if (gone) return;
  // The reply must fit one frame: past kMaxControlReplyBytes a node's
  // result is replaced by an error (ask fewer nodes, or narrow the command).
  size_t bytes = 0;
  for (auto& [node, r] : f.results) {
    bytes += r.text.size() + r.json.size();
    if (bytes > kMaxControlReplyBytes) {
      r.ok = false;
      r.text =
          "reply dropped: the nodes' replies together pass the size of one reply (narrow the command, or "
          "--kind)";
      r.json.clear();
    }
  }
  size_t ok = 0;
  StructuredReply reply(Json{{"nodes", Json::array()}});
  // Each node's text as it rendered it (its JSON is the result's).
  std::vector<std::string> texts;
  for (const auto& [node, r] : f.results) {
    ok += r.ok;
    Json n{{"node", node}, {"kind", r.kind}, {"ok", r.ok}};
    if (r.ok) {
      n["result"] = ParseNodeJson(r.json);
    } else {
      n["error"] = r.text;
    }
    reply.json()["nodes"].push_back(std::move(n));
    texts.push_back(r.text);
  }
  reply.json()["ok"] = ok;
  reply.json()["failed"] = f.results.size() - ok;
  reply.Block([texts = std::move(texts)](const Json& d) {
    std::string text;
    size_t i = 0;
    for (const Json& n : d["nodes"]) {
      const std::string& t = texts[i++];
      common::CatTo(text, "== ", CellText(n, "node"), " (", CellText(n, "kind"),
                    "): ", n["ok"].get<bool>() ? "ok" : "error", "\n", t,
                    t.empty() || t.back() == '\n' ? "" : "\n");
    }
    return text;
  });
  // Some nodes failed: weirctl prints every node's result and exits 1.
  ++counters.requests[{"node-control", ok == f.results.size()}];
  Conn& c = ctl->second;
  c.out += Encode(Message{
      MsgType::kReply, {ok == f.results.size() ? "ok" : "partial", reply.RenderText(), reply.RenderJson()}});
  c.close_after_write = true;
  Flush(c);
}

}  // namespace weir::mgmt
