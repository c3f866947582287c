#include "dpdk/backend.h"

#include <pthread.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_log.h>
#include <rte_mbuf.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "dpdk/kernel_iface.h"
#include "dpdk/port.h"
#include "dpdk/worker.h"
#include "kernel/tcp_front.h"
#include "tls/tls_front.h"
#include "weir/common/text.h"

namespace weir::fastpath::dpdk {

using common::Cat;

namespace {

// While alive, DPDK's log goes to memory, so that a failed EAL start or
// device probe can say why in its error; then back to stderr.
class LogCapture {
 public:
  LogCapture() : stream_(open_memstream(&buf_, &len_)) {
    if (stream_ != nullptr) rte_openlog_stream(stream_);
  }
  ~LogCapture() {
    rte_openlog_stream(stderr);
    if (stream_ != nullptr) std::fclose(stream_);
    std::free(buf_);
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // Writes what was logged to stderr (after a start that worked).
  void Echo() {
    if (stream_ == nullptr) return;
    std::fflush(stream_);
    if (len_ > 0) std::fwrite(buf_, 1, len_, stderr);
  }

  // The last few lines logged, on one line, for an error message.
  std::string Tail() {
    if (stream_ == nullptr) return "";
    std::fflush(stream_);
    std::string text(buf_, len_);
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    size_t start = text.size();
    for (int lines = 0; lines < 4 && start > 0; ++lines) {
      const size_t nl = text.rfind('\n', start - 1);
      start = nl == std::string::npos ? 0 : nl + 1;
      if (nl == std::string::npos) break;
      if (lines < 3) start = nl;
    }
    std::string tail = text.substr(start);
    for (char& ch : tail)
      if (ch == '\n') ch = ' ';
    return tail.empty() ? "" : Cat(" (DPDK: ", tail, ")");
  }

 private:
  char* buf_ = nullptr;
  size_t len_ = 0;
  FILE* stream_;
};

std::string MacText(const rte_ether_addr& a) {
  char s[RTE_ETHER_ADDR_FMT_SIZE];
  rte_ether_format_addr(s, sizeof(s), &a);
  return s;
}

// The ethdev name a devargs string creates: the part before the options.
std::string DeviceName(const std::string& devargs) { return devargs.substr(0, devargs.find(',')); }

std::string Strerror(int e) { return rte_strerror(e < 0 ? -e : e); }

}  // namespace

struct Backend::Impl {
  FastpathConfig config;
  bool eal_up = false;
  kernel::TcpFront tcp;                // DNS over TCP is the kernel's, through the exception interfaces
  std::unique_ptr<tls::TlsFront> tls;  // DoT and DoH too
  std::vector<unsigned> lcores;
  rte_mempool* pool = nullptr;

  struct Port {
    std::string device;
    std::string name;
    uint16_t id = 0;
    bool opened = false;
    std::string mac;
    std::string exception;  // "tap", "kernel", "none"
    std::string tap_name;
    int32_t tap = -1;
    bool tap_opened = false;
    frame::PortAddresses addresses;
    frame::ReplyOptions reply;
    uint64_t flags_v4 = 0;
    uint64_t flags_v6 = 0;
    std::vector<OwnedAddress> owned;
  };
  std::vector<std::unique_ptr<Port>> ports;  // stable: workers point at their addresses
  std::vector<std::unique_ptr<DpdkWorker>> workers;
  struct LaunchArgs {
    DpdkWorker* worker;
    const std::atomic<bool>* running;
  };
  std::vector<LaunchArgs> launch;
  bool launched = false;

  absl::Status Probe(const std::string& devargs, uint16_t* id);
  absl::Status Configure(const std::string& name, uint16_t id, bool checksum_offload, uint64_t* tx_offloads) {
    PortSetup setup;
    setup.queues = static_cast<uint16_t>(lcores.size());
    setup.rx_descriptors = static_cast<uint16_t>(config.dpdk.rx_descriptors);
    setup.tx_descriptors = static_cast<uint16_t>(config.dpdk.tx_descriptors);
    setup.pool = pool;
    setup.checksum_offload = checksum_offload;
    return StartPort(name, id, setup, tx_offloads);
  }
  void ClosePorts();
  absl::Status InitEal();
  absl::Status BindTcp();
  absl::Status OpenPorts(Node& node);
};

absl::Status Backend::Impl::Probe(const std::string& devargs, uint16_t* id) {
  const std::string name = DeviceName(devargs);
  if (rte_eth_dev_get_port_by_name(name.c_str(), id) == 0) return absl::OkStatus();  // probed by the EAL
  LogCapture log;
  const int r = rte_dev_probe(devargs.c_str());
  if (r < 0) {
    return absl::FailedPreconditionError(
        Cat("dpdk port \"", devargs, "\": the device cannot be opened: ", Strerror(r), log.Tail()));
  }
  // A vdev whose probe failed half way can leave no port behind.
  if (rte_eth_dev_get_port_by_name(name.c_str(), id) != 0) {
    return absl::FailedPreconditionError(
        Cat("dpdk port \"", devargs, "\": probed, but no ethernet port named ", name, " exists", log.Tail()));
  }
  return absl::OkStatus();
}

void Backend::Impl::ClosePorts() {
  workers.clear();
  for (auto& p : ports) {
    if (p->tap_opened) {
      rte_eth_dev_stop(static_cast<uint16_t>(p->tap));
      rte_eth_dev_close(static_cast<uint16_t>(p->tap));  // removes the tap interface
    }
    if (p->opened) {
      rte_eth_dev_stop(p->id);
      rte_eth_dev_close(p->id);
    }
  }
  ports.clear();
  if (pool != nullptr) rte_mempool_free(pool);
  pool = nullptr;
}

Backend::Backend(const FastpathConfig& config) : impl_(std::make_unique<Impl>()) { impl_->config = config; }

Backend::~Backend() {
  Wait();
  impl_->ClosePorts();
  if (impl_->eal_up) rte_eal_cleanup();
}

absl::Status Backend::Init() {
  if (absl::Status st = impl_->InitEal(); !st.ok()) return st;
  return impl_->BindTcp();
}

absl::Status Backend::Impl::BindTcp() {
  tls = std::make_unique<tls::TlsFront>(config);
  if (!config.tcp && !tls->enabled()) return absl::OkStatus();
  std::vector<common::IpAddress> bound;  // an address on two ports (anycast) is bound once
  for (const DpdkPortConfig& port : config.dpdk.ports) {
    if (port.exception == "none") continue;  // no kernel path to reach a listener
    for (const OwnedAddress& a : port.addresses) {
      if (std::find(bound.begin(), bound.end(), a.address) != bound.end()) continue;
      bound.push_back(a.address);
      const std::string ip = common::IpToString(a.address);
      auto addr =
          common::SocketAddress::Parse(a.address.family == 6 ? Cat("[", ip, "]") : ip, config.dpdk.dns_port);
      if (!addr.ok()) return addr.status();
      if (config.tcp) {
        if (absl::Status st = tcp.Listen(*addr, /*freebind=*/true); !st.ok()) return st;
      }
      if (tls->enabled()) {
        if (absl::Status st = tls->Listen(*addr, /*freebind=*/true); !st.ok()) return st;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Backend::Impl::InitEal() {
  Impl& s = *this;
  std::vector<std::string> args = {"weir-fastpath"};
  args.insert(args.end(), s.config.dpdk.eal_args.begin(), s.config.dpdk.eal_args.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The EAL pins the calling thread to the main lcore; the control threads
  // started after it (forwarder, TCP, metrics, mgmt) keep the process's
  // CPUs instead.
  cpu_set_t cpus;
  const bool have_cpus = pthread_getaffinity_np(pthread_self(), sizeof(cpus), &cpus) == 0;
  {
    LogCapture log;
    if (rte_eal_init(static_cast<int>(args.size()), argv.data()) < 0) {
      return absl::FailedPreconditionError(
          Cat("dpdk: the EAL did not start (", Strerror(rte_errno), "; [dpdk] eal_args)", log.Tail()));
    }
    log.Echo();  // its warnings (IOMMU, copy mode, ...) still reach the operator
  }
  s.eal_up = true;
  if (have_cpus) pthread_setaffinity_np(pthread_self(), sizeof(cpus), &cpus);
  const unsigned main = rte_get_main_lcore();
  if (s.config.dpdk.lcores.empty()) {
    unsigned l;
    RTE_LCORE_FOREACH_WORKER(l) { s.lcores.push_back(l); }
  } else {
    for (int l : s.config.dpdk.lcores) {
      const unsigned u = static_cast<unsigned>(l);
      if (u >= RTE_MAX_LCORE || !rte_lcore_is_enabled(u)) {
        return absl::FailedPreconditionError(
            Cat("dpdk: lcore ", l, " of [dpdk] lcores is not an EAL lcore (add it to -l or --lcores)"));
      }
      if (u == main) {
        return absl::FailedPreconditionError(Cat("dpdk: lcore ", l,
                                                 " is the EAL main lcore, which runs the control threads; "
                                                 "[dpdk] lcores lists worker lcores only"));
      }
      s.lcores.push_back(u);
    }
  }
  if (s.lcores.empty()) {
    return absl::FailedPreconditionError(
        "dpdk: the EAL has no worker lcore: give -l with at least two lcores in [dpdk] eal_args (the first, "
        "the main lcore, runs the control threads; each other one runs a worker)");
  }
  return absl::OkStatus();
}

int Backend::workers() const { return static_cast<int>(impl_->lcores.size()); }

bool Backend::serves_tcp() const { return impl_->config.tcp; }

bool Backend::serves_tls() const { return impl_->tls && impl_->tls->enabled(); }

absl::Status Backend::Reload(bool apply) { return impl_->tls ? impl_->tls->Reload(apply) : absl::OkStatus(); }

absl::Status Backend::Attach(Node& node) {
  if (absl::Status st = impl_->OpenPorts(node); !st.ok()) return st;
  if (impl_->config.tcp) {
    if (absl::Status st = impl_->tcp.Attach(node, workers()); !st.ok()) return st;
  }
  if (serves_tls()) return impl_->tls->Attach(node, workers() + 1);
  return absl::OkStatus();
}

absl::Status Backend::Impl::OpenPorts(Node& node) {
  Impl& s = *this;
  const DpdkConfig& d = s.config.dpdk;
  const size_t queues = s.lcores.size();
  // Enough buffers for every descriptor of every queue, the per-lcore caches
  // and a burst in flight per queue; a power of two minus one suits the ring.
  constexpr unsigned kCache = 256;
  uint64_t want = d.mbufs;
  if (want == 0) {
    uint64_t per_queue = uint64_t(d.rx_descriptors) + d.tx_descriptors + 2 * DpdkWorker::kBurst;
    uint64_t n = 0;
    for (const auto& p : d.ports) n += per_queue * queues * (p.exception == "tap" ? 2 : 1);
    n += (queues + 1) * kCache + 1024;
    want = 1;
    while (want - 1 < n) want <<= 1;
    want -= 1;
  }
  s.pool = rte_pktmbuf_pool_create("weir_mbufs", static_cast<unsigned>(want),
                                   std::min<unsigned>(kCache, static_cast<unsigned>(want / 2)), 0,
                                   RTE_MBUF_DEFAULT_BUF_SIZE, static_cast<int>(rte_socket_id()));
  if (s.pool == nullptr) {
    return absl::ResourceExhaustedError(Cat("dpdk: no memory for ", want, " packet buffers (",
                                            Strerror(rte_errno),
                                            "; hugepages, -m in eal_args, or [dpdk] mbufs)"));
  }
  auto fail = [&](absl::Status st) {
    s.ClosePorts();
    return st;
  };
  for (size_t i = 0; i < d.ports.size(); ++i) {
    const DpdkPortConfig& pc = d.ports[i];
    auto port = std::make_unique<Impl::Port>();
    Impl::Port& p = *port;
    s.ports.push_back(std::move(port));
    p.device = pc.device;
    p.name = DeviceName(pc.device);
    p.owned = pc.addresses;
    p.exception = pc.exception;
    if (absl::Status st = s.Probe(pc.device, &p.id); !st.ok()) return fail(st);
    for (const auto& other : s.ports) {
      if (other.get() != &p && other->opened && other->id == p.id)
        return fail(absl::InvalidArgumentError(Cat("dpdk port ", p.name, " is configured twice")));
    }
    uint64_t tx_offloads = 0;
    absl::Status st = s.Configure(p.name, p.id, true, &tx_offloads);
    p.opened = true;  // configured or not, it is closed again on failure
    if (!st.ok()) return fail(st);
    rte_ether_addr mac;
    rte_eth_macaddr_get(p.id, &mac);
    p.mac = MacText(mac);
    std::memcpy(p.addresses.mac.data(), mac.addr_bytes, 6);
    p.addresses.dns_port = d.dns_port;
    for (const OwnedAddress& a : pc.addresses) {
      if (a.address.family == 4) {
        std::array<uint8_t, 4> v4;
        std::memcpy(v4.data(), a.address.bytes.data(), 4);
        p.addresses.v4.push_back(v4);
      } else {
        p.addresses.v6.push_back(a.address.bytes);
      }
    }
    p.reply.udp_checksum_v4 = d.udp_checksum_v4;
    p.reply.offload_ip_checksum = (tx_offloads & RTE_ETH_TX_OFFLOAD_IPV4_CKSUM) != 0;
    p.reply.offload_udp_checksum = (tx_offloads & RTE_ETH_TX_OFFLOAD_UDP_CKSUM) != 0;
    if (p.reply.offload_ip_checksum) p.flags_v4 |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM;
    if (p.reply.offload_udp_checksum) {
      if (d.udp_checksum_v4) p.flags_v4 |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_UDP_CKSUM;
      p.flags_v6 |= RTE_MBUF_F_TX_IPV6 | RTE_MBUF_F_TX_UDP_CKSUM;
    }
    if (pc.exception == "tap") {
      p.tap_name = pc.tap_name;
      const std::string tap_devargs = Cat("net_tap_weir", i, ",iface=", pc.tap_name, ",mac=", p.mac);
      uint16_t tap_id = 0;
      if (absl::Status t = s.Probe(tap_devargs, &tap_id); !t.ok()) {
        return fail(absl::FailedPreconditionError(
            Cat(t.message(), " (the exception tap of ", p.name, " needs CAP_NET_ADMIN and /dev/net/tun)")));
      }
      p.tap = tap_id;
      uint64_t unused = 0;
      absl::Status t = s.Configure(Cat(p.name, " exception tap ", pc.tap_name), tap_id, false, &unused);
      p.tap_opened = true;
      if (!t.ok()) return fail(t);
      if (absl::Status a = AddInterfaceAddresses(pc.tap_name, pc.addresses); !a.ok()) return fail(a);
    }
  }
  for (size_t w = 0; w < queues; ++w) {
    std::vector<WorkerPort> wps;
    for (const auto& p : s.ports) {
      WorkerPort wp;
      wp.port = p->id;
      wp.queue = static_cast<uint16_t>(w);
      wp.exception = p->tap;
      wp.addresses = &p->addresses;
      wp.reply = p->reply;
      wp.tx_flags_v4 = p->flags_v4;
      wp.tx_flags_v6 = p->flags_v6;
      wp.exception_pps = d.exception_pps;
      wps.push_back(wp);
    }
    s.workers.push_back(std::make_unique<DpdkWorker>(node.core(static_cast<int>(w)), node.clock(),
                                                     static_cast<int>(w), std::move(wps), s.pool,
                                                     d.idle_sleep_us));
  }
  return absl::OkStatus();
}

absl::Status Backend::Launch(const std::atomic<bool>& running) {
  Impl& s = *impl_;
  s.tcp.Launch(running);
  if (s.tls) s.tls->Launch(running);
  s.launch.clear();
  for (auto& w : s.workers) s.launch.push_back({w.get(), &running});
  for (size_t w = 0; w < s.workers.size(); ++w) {
    const int r = rte_eal_remote_launch(
        [](void* arg) -> int {
          auto* a = static_cast<Impl::LaunchArgs*>(arg);
          a->worker->Run(*a->running);
          return 0;
        },
        &s.launch[w], s.lcores[w]);
    if (r != 0) {
      return absl::InternalError(Cat("dpdk: worker lcore ", s.lcores[w], " did not start: ", Strerror(r)));
    }
    s.launched = true;
  }
  return absl::OkStatus();
}

void Backend::Wait() {
  Impl& s = *impl_;
  s.tcp.Wait();
  if (s.tls) s.tls->Wait();
  if (!s.launched) return;
  for (unsigned l : s.lcores) rte_eal_wait_lcore(l);
  s.launched = false;
}

std::string Backend::Describe() const {
  const Impl& s = *impl_;
  const bool tcp = s.config.tcp;
  std::string out;
  for (const auto& p : s.ports) {
    out += Cat("dpdk port ", p->name, " mac ", p->mac, " queues ", s.lcores.size(), " exception ",
               p->tap >= 0 ? Cat("tap ", p->tap_name) : p->exception, "\n");
    for (const OwnedAddress& a : p->owned) {
      const std::string ip = common::IpToString(a.address);
      const std::string hostport = a.address.family == 6 ? Cat("[", ip, "]:", s.config.dpdk.dns_port)
                                                         : Cat(ip, ":", s.config.dpdk.dns_port);
      // DNS over TCP is the kernel's: there is none without an exception path.
      const bool has_tcp = tcp && p->exception != "none";
      out += Cat("listening udp ", hostport, has_tcp ? Cat(" tcp ", hostport) : std::string(), "\n");
    }
  }
  if (s.tls) out += s.tls->Describe();
  return out;
}

void Backend::RenderMetrics(common::PrometheusWriter& w) const {
  const Impl& s = *impl_;
  s.tcp.RenderMetrics(w);
  if (s.tls) s.tls->RenderMetrics(w);
  struct Family {
    const char* name;
    const char* help;
    const OwnedCounter PortCounters::*field;
  };
  static constexpr Family kFamilies[] = {
      {"weir_dpdk_rx_packets_total", "Frames received.", &PortCounters::rx_packets},
      {"weir_dpdk_rx_bursts_total", "Non-empty receive bursts.", &PortCounters::rx_bursts},
      {"weir_dpdk_empty_polls_total", "Receive polls that found nothing.", &PortCounters::empty_polls},
      {"weir_dpdk_tx_packets_total", "DNS answers sent.", &PortCounters::tx_packets},
      {"weir_dpdk_exception_to_kernel_total", "Frames handed to the kernel's exception interface.",
       &PortCounters::to_kernel},
      {"weir_dpdk_exception_from_kernel_total", "Frames the kernel sent out through the port.",
       &PortCounters::from_kernel},
  };
  for (const Family& f : kFamilies) {
    auto& family = w.Counter(f.name, Cat(f.help, " Per port and worker lcore."));
    for (const auto& worker : s.workers) {
      const std::string lcore = Cat(s.lcores[worker->slot()]);
      for (size_t i = 0; i < worker->ports(); ++i) {
        family.Add({{"port", s.ports[i]->name}, {"lcore", lcore}}, (worker->counters(i).*f.field).Read());
      }
    }
  }
  auto& drops = w.Counter("weir_dpdk_drops_total", "Frames dropped, by reason, per port and worker lcore.");
  for (const auto& worker : s.workers) {
    const std::string lcore = Cat(s.lcores[worker->slot()]);
    for (size_t i = 0; i < worker->ports(); ++i) {
      for (size_t r = 0; r < static_cast<size_t>(FrameDrop::kCount); ++r) {
        drops.Add({{"port", s.ports[i]->name},
                   {"lcore", lcore},
                   {"reason", FrameDropName(static_cast<FrameDrop>(r))}},
                  worker->counters(i).drops[r].Read());
      }
    }
  }
  auto& missed = w.Counter("weir_dpdk_port_rx_missed_total",
                           "Frames the device dropped because its RX queues were full.");
  auto& errors = w.Counter("weir_dpdk_port_errors_total",
                           "Device receive/transmit errors and receive buffer shortages.");
  for (const auto& p : s.ports) {
    rte_eth_stats st{};
    rte_eth_stats_get(p->id, &st);
    missed.Add({{"port", p->name}}, st.imissed);
    errors.Add({{"port", p->name}, {"kind", "rx"}}, st.ierrors);
    errors.Add({{"port", p->name}, {"kind", "tx"}}, st.oerrors);
    errors.Add({{"port", p->name}, {"kind", "rx_nombuf"}}, st.rx_nombuf);
  }
}

}  // namespace weir::fastpath::dpdk
