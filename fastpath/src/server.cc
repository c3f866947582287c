#include "weir/fastpath/server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>

#include "absl/strings/numbers.h"
#include "kernel/socket_util.h"
#include "kernel/tcp_server.h"
#include "kernel/udp_worker.h"
#include "weir/common/metrics_http.h"
#include "weir/common/text.h"
#include "weir/fastpath/node.h"
#include "weir/mgmt/control.h"
#include "weir/net/socket.h"
#include "weir/partitions/rcu.h"
#ifdef WEIR_HAVE_DPDK
#include "dpdk/backend.h"
#endif

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
  thread_local partitions::RcuThread rcu;  // online once registered
  if (!partitions::RcuThread::CurrentIsOnline()) rcu.Online();
  absl::StatusOr<std::string> body = node.RenderMetrics();
  rcu.Offline();
  return body;
}

common::HttpReply AdvanceTestClock(partitions::FakeClock& clock, const common::HttpQueryArgs& args) {
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
  partitions::FakeClock* test_clock = nullptr;
  std::unique_ptr<Node> node;
  std::vector<std::vector<int>> worker_fds;  // [worker][listen address]
  std::vector<int> tcp_fds;
  int metrics_fd = -1;
  std::vector<SocketAddress> bound;
  std::vector<std::unique_ptr<kernel::UdpWorker>> udp;
  std::unique_ptr<kernel::TcpServer> tcp;
  std::unique_ptr<common::MetricsHttpServer> metrics;
  std::unique_ptr<mgmt::ControlServer> control;  // weirctl's channel ([control])
#ifdef WEIR_HAVE_DPDK
  std::unique_ptr<dpdk::Backend> dpdk;  // backend = "dpdk": the UDP path, in place of `udp`
#endif
  std::vector<std::thread> threads;
  std::atomic<bool> running{false};

  bool poll_mode() const { return config.backend == "dpdk"; }
  absl::Status Bind(int workers);
  // The DPDK backend's DNS over TCP: the kernel's, on the addresses its
  // exception interfaces get (bound before they have them).
  absl::Status BindPollModeTcp();
  void CloseSockets();
};

Server::Server(FastpathConfig config) : impl_(std::make_unique<Impl>()) { impl_->config = std::move(config); }

Server::Server(FastpathConfig config, partitions::FakeClock* test_clock) : Server(std::move(config)) {
  impl_->test_clock = test_clock;
}

Server::~Server() { Stop(); }

void Server::Impl::CloseSockets() {
  for (auto& v : worker_fds)
    for (int fd : v) close(fd);
  for (int fd : tcp_fds) close(fd);
  if (metrics_fd >= 0) close(metrics_fd);
  worker_fds.clear();
  tcp_fds.clear();
  metrics_fd = -1;
}

absl::Status Server::Impl::BindPollModeTcp() {
  if (!config.tcp) return absl::OkStatus();
  std::vector<partitions::IpAddress> bound_addresses;  // an address on two ports (anycast) is bound once
  for (const DpdkPortConfig& port : config.dpdk.ports) {
    if (port.exception == "none") continue;  // no kernel path to reach a listener
    for (const OwnedAddress& a : port.addresses) {
      if (std::find(bound_addresses.begin(), bound_addresses.end(), a.address) != bound_addresses.end())
        continue;
      bound_addresses.push_back(a.address);
      const std::string ip = partitions::IpToString(a.address);
      auto addr = SocketAddress::Parse(a.address.family == 6 ? Cat("[", ip, "]") : ip, config.dpdk.dns_port);
      if (!addr.ok()) return addr.status();
      auto fd =
          BindSocket(*addr, SOCK_STREAM, {.nonblocking = true, .listen_backlog = 1024, .freebind = true});
      if (!fd.ok()) return fd.status();
      tcp_fds.push_back(*fd);
    }
  }
  return absl::OkStatus();
}

absl::Status Server::Impl::Bind(int workers) {
  if (poll_mode()) {
    if (absl::Status st = BindPollModeTcp(); !st.ok()) return st;
    workers = 0;  // no UDP sockets
  }
  worker_fds.assign(workers, {});
  for (const SocketAddress& want : poll_mode() ? std::vector<SocketAddress>{} : config.listen) {
    // Port 0 takes the port the kernel gives the first UDP socket; when TCP
    // cannot have the same one (a connection uses it), try another.
    for (int attempt = 0;; ++attempt) {
      auto group = net::BindUdpGroup(want, workers);
      if (!group.ok()) return group.status();
      const SocketAddress addr = LocalAddress(group->front());  // port 0 resolved
      for (int w = 0; w < workers; ++w) {
        // Room for a burst while the worker is off its CPU: a full queue
        // drops hits and misses alike, so a miss flood would cost hits
        // (the kernel caps it at net.core.rmem_max).
        const int rcvbuf = 4 << 20;
        setsockopt((*group)[w], SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
        worker_fds[w].push_back((*group)[w]);
      }
      if (config.tcp) {
        auto fd = BindSocket(addr, SOCK_STREAM, {.nonblocking = true, .listen_backlog = 1024});
        if (!fd.ok() && want.port() == 0 && attempt < 16) {
          for (auto& v : worker_fds) {
            close(v.back());
            v.pop_back();
          }
          continue;
        }
        if (!fd.ok()) return fd.status();
        tcp_fds.push_back(*fd);
      }
      bound.push_back(addr);
      break;
    }
  }
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
    s.udp.clear();
    s.tcp.reset();
#ifdef WEIR_HAVE_DPDK
    s.dpdk.reset();  // its workers use the node's cores
#endif
    s.node.reset();
    s.CloseSockets();
    return st;
  };
  int workers = s.config.workers;
#ifdef WEIR_HAVE_DPDK
  if (s.poll_mode()) {
    s.dpdk = std::make_unique<dpdk::Backend>(s.config);
    if (absl::Status st = s.dpdk->InitEal(); !st.ok()) return fail(st);
    workers = s.dpdk->workers();
  }
#endif
  if (absl::Status st = s.Bind(workers); !st.ok()) return fail(st);
  // Slots 0..workers-1 are the UDP workers, slot `workers` the TCP thread.
  s.node = std::make_unique<Node>(s.config, s.test_clock);
  if (absl::Status st = s.node->Prepare(workers + 1); !st.ok()) return fail(st);
#ifdef WEIR_HAVE_DPDK
  if (s.dpdk) {
    if (absl::Status st = s.dpdk->OpenPorts(*s.node); !st.ok()) return fail(st);
  }
#endif
  for (int w = 0; w < static_cast<int>(s.worker_fds.size()); ++w)
    s.udp.push_back(std::make_unique<kernel::UdpWorker>(*s.node, w, s.worker_fds[w]));
  if (s.config.tcp) {
    s.tcp = std::make_unique<kernel::TcpServer>(*s.node, workers, s.tcp_fds);
    if (absl::Status st = s.tcp->Init(); !st.ok()) return fail(st);
  }
  // The backends' own families: the TCP server's connections, DPDK's ports.
  s.node->SetBackendMetrics([&s](common::PrometheusWriter& w) {
    if (s.tcp) s.tcp->RenderMetrics(w);
#ifdef WEIR_HAVE_DPDK
    if (s.dpdk) s.dpdk->RenderMetrics(w);
#endif
  });
  s.running = true;
  // The forwarder, then the mgmt client; nothing else runs yet if they fail.
  if (absl::Status st = s.node->Start(); !st.ok()) {
    s.running = false;
    s.node->StopMgmt();
    return fail(st);
  }
  for (auto& u : s.udp) s.threads.emplace_back([&s, w = u.get()] { w->Run(s.running); });
#ifdef WEIR_HAVE_DPDK
  if (s.dpdk) {
    if (absl::Status st = s.dpdk->Launch(s.running); !st.ok()) {
      Stop();  // the workers that did start, the forwarder, the threads
      return st;
    }
  }
#endif
  if (s.tcp) s.threads.emplace_back([&s] { s.tcp->Run(s.running); });
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
  if (s.metrics) s.metrics->Stop();  // before the node it renders goes
  s.metrics.reset();
  for (auto& t : s.threads) t.join();
  s.threads.clear();
#ifdef WEIR_HAVE_DPDK
  if (s.dpdk) s.dpdk->Wait();
#endif
  s.node->Stop();  // the forwarder, once no worker hands it anything
  s.udp.clear();
  s.tcp.reset();
#ifdef WEIR_HAVE_DPDK
  s.dpdk.reset();  // ports closed (the taps go away), EAL cleaned up
#endif
  s.CloseSockets();
}

absl::Status Server::Reload() {
  if (!impl_->node) return absl::FailedPreconditionError("not started");
  return impl_->node->Reload();
}

std::vector<common::NamedHeart> Server::Hearts() const {
  std::vector<common::NamedHeart> out;
  const Impl& s = *impl_;
  if (!s.node) return out;
  // Slots 0..n-1 are the UDP (or poll-mode) workers, slot n the TCP thread.
  const int workers = s.node->slots() - 1;
  for (int i = 0; i < workers; ++i) out.push_back({Cat("worker ", i), &s.node->core(i).heartbeat()});
  if (s.tcp) out.push_back({"tcp thread", &s.node->core(workers).heartbeat()});
  out.push_back({"forwarder", s.node->forwarder_heartbeat()});
  return out;
}

std::string Server::DescribeListeners() const {
  std::string out;
#ifdef WEIR_HAVE_DPDK
  if (impl_->dpdk) out += impl_->dpdk->Describe(impl_->config.tcp);
#endif
  for (const auto& a : impl_->bound) {
    out += Cat("listening udp ", a.ToString(), impl_->config.tcp ? Cat(" tcp ", a.ToString()) : std::string(),
               "\n");
  }
  if (impl_->control) out += impl_->control->Describe();
  if (impl_->metrics_fd >= 0) out += Cat("metrics http ", impl_->config.metrics_listen.ToString(), "\n");
  return out;
}

}  // namespace weir::fastpath
