#include "weir/fastpath/server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>

#include "absl/strings/numbers.h"
#include "weir/common/metrics_http.h"
#include "weir/common/rcu.h"
#include "weir/common/text.h"
#include "weir/fastpath/backend.h"
#include "weir/fastpath/node.h"
#include "weir/mgmt/control.h"
#include "weir/net/socket.h"

namespace weir::fastpath {

using common::Cat;
using net::BindSocket;
using net::LocalAddress;

namespace {

// The metrics server's render callback. Node::RenderMetrics reads the city
// map under RCU, so the server thread that runs it is a registered reader
// (registered on its first scrape, unregistered when the thread ends) that
// is online only while it renders: between requests, and while a slow client
// is read from or written to, it is offline and never holds up a grace period.
absl::StatusOr<std::string> RenderAsRcuReader(const Node& node) {
  thread_local common::RcuThread rcu;  // online once registered
  if (!common::RcuThread::CurrentIsOnline()) rcu.Online();
  absl::StatusOr<std::string> body = node.RenderMetrics();
  rcu.Offline();
  return body;
}

common::HttpReply AdvanceTestClock(common::FakeClock& clock, const common::HttpQueryArgs& args) {
  auto it = args.find("seconds");
  uint32_t seconds = 0;
  if (it == args.end() || !absl::SimpleAtoi(it->second, &seconds)) {
    return {400, "want /test/advance-clock?seconds=N\n"};
  }
  clock.Advance(seconds);
  return {200, Cat("clock ", clock.NowSeconds(), "\n")};
}

// Tests only: GET /test/stall-worker?slot=N&ms=M stops worker slot N's loop
// for M ms at its next turn, as a wedged worker would (the watchdog test).
common::HttpReply StallWorkerForTest(Node& node, const common::HttpQueryArgs& args) {
  auto slot = args.find("slot");
  auto ms = args.find("ms");
  int n = -1;
  uint32_t m = 0;
  if (slot == args.end() || ms == args.end() || !absl::SimpleAtoi(slot->second, &n) ||
      !absl::SimpleAtoi(ms->second, &m) || n < 0 || n >= node.slots() || m == 0 || m > 600000) {
    return {400, "want /test/stall-worker?slot=N&ms=M (1..600000)\n"};
  }
  node.core(n).StallForTest(m);
  return {200, Cat("worker ", n, " stalls for ", m, " ms\n")};
}

}  // namespace

struct Server::Impl {
  FastpathConfig config;
  common::FakeClock* test_clock = nullptr;
  std::unique_ptr<Node> node;
  std::unique_ptr<Backend> backend;  // server.backend: receive and transmit
  int metrics_fd = -1;
  std::unique_ptr<common::MetricsHttpServer> metrics;
  std::unique_ptr<mgmt::ControlServer> control;  // weirctl's channel ([control])
  std::atomic<bool> running{false};

  // The metrics socket and the control channel (the backend binds its own).
  absl::Status Bind();
  void CloseSockets();
};

Server::Server(FastpathConfig config) : impl_(std::make_unique<Impl>()) { impl_->config = std::move(config); }

Server::Server(FastpathConfig config, common::FakeClock* test_clock) : Server(std::move(config)) {
  impl_->test_clock = test_clock;
}

Server::~Server() { Stop(); }

void Server::Impl::CloseSockets() {
  if (metrics_fd >= 0) close(metrics_fd);
  metrics_fd = -1;
}

absl::Status Server::Impl::Bind() {
  if (config.metrics_enabled) {
    auto fd = BindSocket(config.metrics_listen, SOCK_STREAM, {.listen_backlog = 64});
    if (!fd.ok()) return fd.status();
    metrics_fd = *fd;
    config.metrics_listen = LocalAddress(*fd);
  }
  // The control channel's handler reaches the node, created later.
  control = std::make_unique<mgmt::ControlServer>(config.control, [this](const mgmt::ControlRequest& r) {
    return node ? node->Control(r) : mgmt::ControlReply::Error("starting");
  });
  return control->Bind();
}

absl::Status Server::Start() {
  Impl& s = *impl_;
  auto fail = [&](absl::Status st) {
    s.control.reset();
    s.backend.reset();  // its workers use the node's cores
    s.node.reset();
    s.CloseSockets();
    return st;
  };
  auto backend = MakeBackend(s.config);
  if (!backend.ok()) return backend.status();
  s.backend = std::move(*backend);
  if (absl::Status st = s.backend->Init(); !st.ok()) return fail(st);
  if (absl::Status st = s.Bind(); !st.ok()) return fail(st);
  // Slots 0..workers-1 are the backend's workers, slot `workers` its TCP
  // server, slot `workers + 1` its encrypted front when [tls] is set.
  const int workers = s.backend->workers();
  s.node = std::make_unique<Node>(s.config, s.test_clock);
  if (absl::Status st = s.node->Prepare(workers + 1 + (s.backend->serves_tls() ? 1 : 0)); !st.ok())
    return fail(st);
  if (absl::Status st = s.backend->Attach(*s.node); !st.ok()) return fail(st);
  s.node->SetBackendMetrics([&s](common::PrometheusWriter& w) {
    if (s.backend) s.backend->RenderMetrics(w);
  });
  s.node->SetBackendReload(
      [&s](bool apply) { return s.backend ? s.backend->Reload(apply) : absl::OkStatus(); });
  s.running = true;
  // The forwarder, then the mgmt client; nothing else runs yet if they fail.
  if (absl::Status st = s.node->Start(); !st.ok()) {
    s.running = false;
    s.node->StopMgmt();
    return fail(st);
  }
  if (absl::Status st = s.backend->Launch(s.running); !st.ok()) {
    Stop();  // the workers that did start, the forwarder
    return st;
  }
  if (absl::Status st = s.control->StartThread(); !st.ok()) {
    Stop();
    return st;
  }
  if (s.metrics_fd >= 0) {
    s.metrics = std::make_unique<common::MetricsHttpServer>(
        [node = s.node.get()] { return RenderAsRcuReader(*node); });
    if (s.test_clock != nullptr) {
      s.metrics->AddRoute("/test/advance-clock", [clock = s.test_clock](const common::HttpQueryArgs& args) {
        return AdvanceTestClock(*clock, args);
      });
      s.metrics->AddRoute("/test/stall-worker", [node = s.node.get()](const common::HttpQueryArgs& args) {
        return StallWorkerForTest(*node, args);
      });
    }
    if (absl::Status st = s.metrics->Start(s.metrics_fd); !st.ok()) {
      Stop();  // everything above is running
      return absl::Status(st.code(),
                          Cat("metrics_listen ", s.config.metrics_listen.ToString(), ": ", st.message()));
    }
  }
  return absl::OkStatus();
}

void Server::Stop() {
  Impl& s = *impl_;
  if (!s.running.load()) return;
  // Control requests first, while the workers still run: a dump waiting for
  // their SWRR states is answered, not timed out slot by slot.
  s.node->StopMgmt();
  if (s.control) s.control->Stop();  // before the node it controls goes
  s.running.store(false);
  // Wake every worker that waits on a loop (TCP, TLS, a UDP worker with
  // several sockets): each sees `running` false now, not at its next timeout.
  for (int i = 0; i < s.node->slots(); ++i) {
    if (const std::function<void()>& wake = s.node->channel(i).wake_worker) wake();
  }
  if (s.metrics) s.metrics->Stop();  // before the node it renders goes
  s.metrics.reset();
  s.backend->Wait();
  s.node->Stop();     // the forwarder, once no worker hands it anything
  s.backend.reset();  // sockets closed; DPDK: ports closed (the taps go away), EAL cleaned up
  s.CloseSockets();
}

absl::Status Server::Reload() {
  if (!impl_->node) return absl::FailedPreconditionError("not started");
  std::string what;
  absl::Status st = impl_->node->Reload(&what);
  if (st.ok()) common::LogInfo("config", "reloaded ", what);
  return st;
}

std::vector<common::NamedHeart> Server::Hearts() const {
  std::vector<common::NamedHeart> out;
  const Impl& s = *impl_;
  if (!s.node) return out;
  // Slots 0..n-1 are the UDP (or poll-mode) workers, slot n the TCP
  // thread, slot n+1 the encrypted front's.
  const bool tls = s.backend && s.backend->serves_tls();
  const int workers = s.node->slots() - 1 - (tls ? 1 : 0);
  for (int i = 0; i < workers; ++i) out.push_back({Cat("worker ", i), &s.node->core(i).heartbeat()});
  if (s.backend && s.backend->serves_tcp()) out.push_back({"tcp thread", &s.node->core(workers).heartbeat()});
  if (tls) out.push_back({"tls thread", &s.node->core(workers + 1).heartbeat()});
  out.push_back({"forwarder", s.node->forwarder_heartbeat()});
  return out;
}

std::string Server::DescribeListeners() const {
  std::string out;
  if (impl_->backend) out += impl_->backend->Describe();
  if (impl_->control) out += impl_->control->Describe();
  if (impl_->metrics_fd >= 0) out += Cat("metrics http ", impl_->config.metrics_listen.ToString(), "\n");
  return out;
}

}  // namespace weir::fastpath
