#include "weir/fastpath/forwarder.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>

#include "socket_transport.h"
#include "weir/common/log.h"
#include "weir/common/rcu.h"
#include "weir/net/event_loop.h"
#include "weir/net/timers.h"

namespace weir::fastpath {
namespace {

constexpr int kForwarderNice = 10;  // below the workers: hits first (Run)

UpstreamTcpPool::Options TcpPoolOptions(const FastpathConfig& c) {
  return {.connections = c.upstream_tcp_connections,
          .idle = std::chrono::milliseconds(c.upstream_tcp_idle_timeout_ms),
          .lifetime = std::chrono::milliseconds(c.upstream_tcp_lifetime_ms),
          // A connection that owes answers and sends nothing for two try
          // timeouts (at least 5 s, above weir-recursor's 3 s answer
          // deadline) is lost.
          .stall = std::chrono::milliseconds(std::max(5000, 2 * c.upstream_timeout_ms))};
}

}  // namespace

struct Forwarder::Impl {
  Impl(Forwarder* self, const FastpathConfig& config, std::vector<MissChannel*> channels, SharedState* shared)
      : self(self),
        timers(loop),
        transport(loop, rng, config.udp_sockets, config.udp_socket_lifetime_s,
                  ForwarderCore::LateWindow(config), TcpPoolOptions(config)),
        core(config, std::move(channels), shared, timers, transport, self->stats_) {}

  void Run();

  Forwarder* self;
  net::EventLoop loop;
  net::LoopTimers timers;
  common::SecureRandom rng;
  SocketTransport transport;
  ForwarderCore core;
  bool loop_ready = false;
  std::atomic<bool> running{false};
  std::thread thread;
};

Forwarder::Forwarder(const FastpathConfig& config, std::vector<MissChannel*> channels, SharedState* shared)
    : impl_(std::make_unique<Impl>(this, config, std::move(channels), shared)) {}

Forwarder::~Forwarder() { Stop(); }

void Forwarder::SetTap(dnstap::Producer* tap) { impl_->core.SetTap(tap); }

absl::Status Forwarder::Start() {
  Impl& f = *impl_;
  if (!f.loop_ready) {
    if (absl::Status st = f.loop.Init(); !st.ok()) {
      return absl::Status(st.code(), common::Cat("forwarder: ", st.message()));
    }
    f.loop_ready = true;
  }
  if (absl::Status st = f.core.Open(); !st.ok()) return st;
  f.loop.SetWakeHandler([&f] { f.core.Drain(); });
  f.running = true;
  f.thread = std::thread([&f] { f.Run(); });
  return absl::OkStatus();
}

void Forwarder::Stop() {
  if (!net::StopLoopThread(impl_->running, impl_->loop, impl_->thread)) return;
  impl_->transport.CloseAll();
}

void Forwarder::Notify() {
  if (impl_->loop_ready) impl_->loop.Wake();
}

void Forwarder::Impl::Run() {
  // Cache hits before misses: when the CPUs are short (a miss flood), the
  // workers' threads win over this one, so the hit rate holds and the
  // misses wait (they are answered, stale or SERVFAIL, by their deadline).
  // Linux applies a thread's nice value to that thread alone; lowering
  // one's own priority needs no privilege.
  errno = 0;
  const int nice = getpriority(PRIO_PROCESS, 0);
  if (errno == 0 && nice < kForwarderNice) setpriority(PRIO_PROCESS, 0, kForwarderNice);
  // The forwarder reads and writes the cache: an RCU thread like the
  // workers, offline while its loop waits.
  common::RcuThread rcu;
  loop.SetWaitHooks([&rcu] { rcu.Offline(); }, [&rcu] { rcu.Online(); });
  while (running.load(std::memory_order_relaxed)) {
    self->heartbeat_.Beat();
    // Descriptors (upstream answers, probes), the wake (misses), timers.
    loop.RunOnce(std::chrono::milliseconds(50));
    core.Drain();  // a push may have raced the wake
    core.Tick();   // probes, the pool's upkeep, one wake per worker per turn
    rcu.Quiescent();
  }
  loop.SetWaitHooks(nullptr, nullptr);
}

std::vector<double> Forwarder::RingShares(bool weighted) const { return impl_->core.RingShares(weighted); }

}  // namespace weir::fastpath
