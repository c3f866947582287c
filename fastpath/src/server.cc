#include "weir/fastpath/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "weir/common/text.h"
#include "weir/fastpath/forwarder.h"
#include "weir/fastpath/handler.h"
#include "weir/mgmt/node_client.h"
#include "weir/net/dns_tcp.h"
#include "weir/net/event_loop.h"
#include "weir/partitions/rcu.h"

namespace weir::fastpath {

using common::Cat;
using common::ToStd;
namespace {

constexpr int kBurst = 32;
constexpr size_t kUdpMax = 4096;  // larger datagrams are not queries we answer

absl::StatusOr<int> BindSocket(const SocketAddress& addr, int type, bool reuseport) {
  const int fd = socket(addr.family(), type | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(Cat("socket(): ", strerror(errno)));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (reuseport) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  if (addr.family() == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  if (bind(fd, addr.sa(), addr.len) != 0) {
    const int e = errno;
    close(fd);
    return absl::UnavailableError(Cat("bind ", addr.ToString(), ": ", strerror(e)));
  }
  return fd;
}

SocketAddress LocalAddress(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  return SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&ss), len);
}

}  // namespace

struct Server::Impl {
  FastpathConfig config;
  partitions::FakeClock* test_clock = nullptr;
  uint32_t NowSeconds() const { return shared.clock->NowSeconds(); }
  std::vector<std::vector<int>> worker_fds;  // [worker][listen address]
  std::vector<int> tcp_fds;
  int metrics_fd = -1;
  std::vector<SocketAddress> bound;
  std::vector<std::unique_ptr<WorkerCounters>> counters;  // workers, then TCP
  std::vector<std::unique_ptr<QueryHandler>> handlers;    // workers, then TCP
  SharedState shared;
  std::unique_ptr<Forwarder> forwarder;
  std::unique_ptr<mgmt::NodeClient> mgmt_client;
  // Serialises ApplyPartitions (SIGHUP thread, mgmt client thread); guards city_names.
  std::mutex apply_mu;
  std::vector<std::string> city_names;  // id -> city for the life of the process
  std::vector<std::thread> threads;
  std::atomic<bool> running{false};

  // TCP
  // One client connection: framing, pipelining, half-close and the bound on
  // unread answers are net::DnsTcpStream's.
  struct Conn {
    std::unique_ptr<net::DnsTcpStream> stream;
    partitions::IpAddress client;
    uint32_t events = 0;  // what epoll watches
  };
  // Past this many unread answer bytes a connection is not read from; past
  // four times it, it is closed.
  static constexpr size_t kTcpOutCap = 256 * 1024;
  std::unordered_map<uint64_t, Conn> conns;
  std::unordered_map<int, uint64_t> conn_by_fd;
  uint64_t next_conn = 1;
  net::EventLoop tcp_loop;  // the TCP thread's

  absl::Status LoadPartitions();
  // Validates both texts, then swaps both in; names are for messages.
  absl::Status ApplyPartitions(std::string_view csv, std::string_view csv_name, std::string_view tags_text,
                               std::string_view tags_name);
  void UdpWorker(int w);
  // Handles the queries the forwarder handed back; sends over UDP or TCP.
  void DrainReturns(int w, QueryHandler& handler, bool read_eventfd);
  void TcpLoop();
  void TcpRead(uint64_t id);
  // False when the connection is gone (closed here or before).
  // Answers one query of the connection (len 0: it is dropped); closes the
  // connection when that fails or it is done. False when it was closed.
  bool TcpAnswer(uint64_t id, const uint8_t* data, size_t len);
  void TcpClose(uint64_t id);
  // The epoll events a connection waits for in its current state.
  void TcpWatch(uint64_t id);
  void MetricsLoop();
  std::string RenderMetrics() const;
};

Server::Server(FastpathConfig config) : impl_(std::make_unique<Impl>()) { impl_->config = std::move(config); }

Server::Server(FastpathConfig config, partitions::FakeClock* test_clock) : Server(std::move(config)) {
  if (test_clock != nullptr) {
    impl_->test_clock = test_clock;
    impl_->shared.clock = test_clock;
  }
}

Server::~Server() { Stop(); }

absl::Status Server::Start() {
  Impl& s = *impl_;
  const int workers = s.config.workers;
  s.worker_fds.assign(workers, {});
  auto fail = [&](absl::Status st) {
    for (auto& v : s.worker_fds)
      for (int fd : v) close(fd);
    for (int fd : s.tcp_fds) close(fd);
    s.worker_fds.clear();
    s.tcp_fds.clear();
    return st;
  };
  for (const SocketAddress& want : s.config.listen) {
    // Port 0 takes the port the kernel gives the first UDP socket; when TCP
    // cannot have the same one (a connection uses it), try another.
    for (int attempt = 0;; ++attempt) {
      SocketAddress addr = want;
      for (int w = 0; w < workers; ++w) {
        auto fd = BindSocket(addr, SOCK_DGRAM, true);
        if (!fd.ok()) return fail(fd.status());
        if (w == 0) addr = LocalAddress(*fd);  // resolves port 0 for the others
        s.worker_fds[w].push_back(*fd);
      }
      if (s.config.tcp) {
        auto fd = BindSocket(addr, SOCK_STREAM, false);
        if (!fd.ok() && want.port() == 0 && attempt < 16) {
          for (auto& v : s.worker_fds) {
            close(v.back());
            v.pop_back();
          }
          continue;
        }
        if (!fd.ok()) return fail(fd.status());
        listen(*fd, 1024);
        fcntl(*fd, F_SETFL, O_NONBLOCK);
        s.tcp_fds.push_back(*fd);
      }
      s.bound.push_back(addr);
      break;
    }
  }
  if (s.config.metrics_enabled) {
    auto fd = BindSocket(s.config.metrics_listen, SOCK_STREAM, false);
    if (!fd.ok()) return fail(fd.status());
    listen(*fd, 64);
    s.metrics_fd = *fd;
    s.config.metrics_listen = LocalAddress(*fd);
  }
  std::optional<mgmt::NodeStart> node;
  if (s.config.mgmt.enabled) {
    auto n = mgmt::PrepareNode(s.config.mgmt, "fastpath");
    if (!n.ok()) return fail(n.status());
    node = *std::move(n);
  }
  if (node && node->stored) {
    // The last snapshot mgmt pushed wins over the files: it is newer.
    const mgmt::Snapshot& snap = *node->stored;
    if (absl::Status st =
            s.ApplyPartitions(snap.citymap, "stored snapshot citymap", snap.tags, "stored snapshot tags");
        !st.ok()) {
      return fail(st);
    }
    std::fprintf(stderr, "weir-fastpath: starting from stored mgmt snapshot version %llu\n",
                 static_cast<unsigned long long>(snap.version));
  } else if (absl::Status st = s.LoadPartitions(); !st.ok()) {
    return fail(st);
  }
  for (int i = 0; i <= workers; ++i) {
    s.counters.push_back(std::make_unique<WorkerCounters>());
    s.handlers.push_back(
        std::make_unique<QueryHandler>(MakeHandlerOptions(s.config), &s.shared, s.counters[i].get()));
  }
  s.forwarder = std::make_unique<Forwarder>(s.config, workers + 1, &s.shared);
  s.forwarder->Start();
  if (node) {
    // Set before the threads start: the metrics thread reads it. A push may
    // be applied from here on; everything it touches exists by now.
    s.mgmt_client = std::make_unique<mgmt::NodeClient>(
        mgmt::MakeNodeClientOptions(s.config.mgmt, "fastpath", node->token),
        [this](const mgmt::Snapshot& snap) {
          return impl_->ApplyPartitions(snap.citymap, "citymap", snap.tags, "tags");
        });
  }
  s.running = true;
  for (int w = 0; w < workers; ++w) s.threads.emplace_back([this, w] { impl_->UdpWorker(w); });
  if (s.config.tcp) s.threads.emplace_back([this] { impl_->TcpLoop(); });
  if (s.metrics_fd >= 0) s.threads.emplace_back([this] { impl_->MetricsLoop(); });
  if (node) {
    absl::Status st = node->stored ? s.mgmt_client->Start(node->stored->version, node->stored->origin)
                                   : s.mgmt_client->Start(0, "");
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

void Server::Stop() {
  Impl& s = *impl_;
  if (!s.running.exchange(false)) return;
  if (s.mgmt_client) s.mgmt_client->Stop();
  for (auto& t : s.threads) t.join();
  s.threads.clear();
  s.forwarder->Stop();
  for (auto& v : s.worker_fds)
    for (int fd : v) close(fd);
  for (int fd : s.tcp_fds) close(fd);
  for (auto& [id, c] : s.conns) close(c.stream->fd());
  if (s.metrics_fd >= 0) close(s.metrics_fd);
}

absl::Status Server::Reload() {
  if (impl_->mgmt_client) {
    return absl::FailedPreconditionError("tags and city map come from weir-mgmt ([mgmt] is configured)");
  }
  return impl_->LoadPartitions();
}

std::string Server::DescribeListeners() const {
  std::string out;
  for (const auto& a : impl_->bound) {
    out += Cat("listening udp ", a.ToString(), impl_->config.tcp ? Cat(" tcp ", a.ToString()) : std::string(),
               "\n");
  }
  if (impl_->metrics_fd >= 0) out += Cat("metrics http ", impl_->config.metrics_listen.ToString(), "\n");
  return out;
}

namespace {

// The client address straight from the kernel's sockaddr (IPv4-mapped IPv6
// sources become IPv4), without building a SocketAddress per packet.
partitions::IpAddress ClientAddress(const sockaddr_storage& ss) {
  partitions::IpAddress a;
  if (ss.ss_family == AF_INET) {
    a.family = 4;
    std::memcpy(a.bytes.data(), &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, 4);
  } else if (ss.ss_family == AF_INET6) {
    const uint8_t* b =
        reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr);
    static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(b, kMapped, 12) == 0) {
      a.family = 4;
      std::memcpy(a.bytes.data(), b + 12, 4);
    } else {
      a.family = 6;
      std::memcpy(a.bytes.data(), b, 16);
    }
  }
  return a;
}

// How long a worker with a single socket blocks in recvmmsg before it looks
// at its return queue when no query arrives (idle only: under load, returns
// are picked up after every burst).
constexpr timeval kIdleWake{0, 2000};

}  // namespace

void Server::Impl::UdpWorker(int w) {
  partitions::RcuThread rcu;
  WorkerCounters* ctr = counters[w].get();
  QueryHandler& handler = *handlers[w];
  const std::vector<int>& fds = worker_fds[w];
  // One socket: block in recvmmsg itself (one syscall per wake-up instead of
  // poll + recvmmsg). Several sockets (IPv4 and IPv6): poll them.
  const bool single = fds.size() == 1;
  std::vector<pollfd> pfds;
  for (int fd : fds) pfds.push_back({fd, POLLIN, 0});
  pfds.push_back({forwarder->return_fd(w), POLLIN, 0});
  if (single) setsockopt(fds[0], SOL_SOCKET, SO_RCVTIMEO, &kIdleWake, sizeof(kIdleWake));

  // Fixed burst arrays and message headers, set up once.
  static thread_local uint8_t rx[kBurst][kUdpMax];
  static thread_local uint8_t tx[kBurst][kUdpMax];
  mmsghdr rmsg[kBurst];
  iovec riov[kBurst];
  sockaddr_storage peers[kBurst];
  mmsghdr smsg[kBurst];
  iovec siov[kBurst];
  for (int i = 0; i < kBurst; ++i) {
    riov[i] = {rx[i], kUdpMax};
    rmsg[i].msg_hdr = {};
    rmsg[i].msg_hdr.msg_name = &peers[i];
    rmsg[i].msg_hdr.msg_namelen = sizeof(peers[i]);
    rmsg[i].msg_hdr.msg_iov = &riov[i];
    rmsg[i].msg_hdr.msg_iovlen = 1;
    smsg[i].msg_hdr = {};
    smsg[i].msg_hdr.msg_iov = &siov[i];
    smsg[i].msg_hdr.msg_iovlen = 1;
  }
  static thread_local MissRequest misses[kBurst];
  QueryHandler::BurstPacket packets[kBurst];

  // Handles one burst from socket `f`; returns the number received.
  auto burst = [&](size_t f, int flags) -> int {
    int n;
    if (flags & MSG_WAITFORONE) {
      partitions::RcuOfflineScope offline;  // blocking: let grace periods pass
      n = recvmmsg(fds[f], rmsg, kBurst, flags, nullptr);
    } else {
      n = recvmmsg(fds[f], rmsg, kBurst, flags, nullptr);
    }
    if (n <= 0) return 0;
    const uint32_t now = NowSeconds();
    // The burst is handled in stages (QueryHandler::HandleBurst); response i
    // is written to tx[i] and sent in order.
    for (int i = 0; i < n; ++i) {
      QueryHandler::BurstPacket& b = packets[i];
      b.pkt = rx[i];
      b.len = rmsg[i].msg_len;
      b.client = ClientInfo{ClientAddress(peers[i]), false};
      b.out = tx[i];
      b.out_cap = kUdpMax;
      b.miss = &misses[i];
    }
    handler.HandleBurst(packets, static_cast<size_t>(n), now);
    int nsend = 0;
    bool submitted = false;
    for (int i = 0; i < n; ++i) {
      const Verdict v = packets[i].verdict;
      if (v == Verdict::kReply || v == Verdict::kReplyAndPrefetch) {
        siov[nsend] = {tx[i], packets[i].out_len};
        smsg[nsend].msg_hdr.msg_name = &peers[i];
        smsg[nsend].msg_hdr.msg_namelen = rmsg[i].msg_hdr.msg_namelen;
        ++nsend;
      }
      if (v == Verdict::kReplyAndPrefetch || v == Verdict::kMiss) {
        PendingClient pc;
        pc.miss = misses[i];
        if (v == Verdict::kMiss) {
          pc.worker = w;
          pc.route.udp_fd = fds[f];
          pc.route.peer = SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&peers[i]),
                                                      rmsg[i].msg_hdr.msg_namelen);
          pc.query.assign(rx[i], rx[i] + rmsg[i].msg_len);
        }  // else a refresh only: the client has its answer
        if (forwarder->Submit(w, std::move(pc))) {
          submitted = true;
        } else if (v == Verdict::kMiss) {
          ctr->Drop(DropReason::kMissQueueFull);
        }
      }
    }
    if (nsend > 0) sendmmsg(fds[f], smsg, nsend, 0);
    for (int i = 0; i < n; ++i) rmsg[i].msg_hdr.msg_namelen = sizeof(peers[i]);
    if (submitted) forwarder->Notify();
    rcu.Quiescent();
    return n;
  };

  while (running.load(std::memory_order_relaxed)) {
    if (single) {
      burst(0, MSG_WAITFORONE);
      DrainReturns(w, handler, /*read_eventfd=*/false);
      continue;
    }
    int ready;
    {
      partitions::RcuOfflineScope offline;  // blocking: let grace periods pass
      ready = poll(pfds.data(), pfds.size(), 100);
    }
    if (ready <= 0) continue;
    if (pfds.back().revents & POLLIN) DrainReturns(w, handler, /*read_eventfd=*/true);
    for (size_t f = 0; f < fds.size(); ++f) {
      if (!(pfds[f].revents & POLLIN)) continue;
      while (burst(f, MSG_DONTWAIT) == kBurst) {
      }
    }
  }
}

absl::Status Server::Impl::LoadPartitions() {
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
  if (!config.citymap_path.empty()) {
    if (absl::Status st = read(config.citymap_path, &csv); !st.ok()) return st;
  }
  std::string tags_text;
  if (!config.tags_path.empty()) {
    if (absl::Status st = read(config.tags_path, &tags_text); !st.ok()) return st;
  }
  return ApplyPartitions(csv, config.citymap_path, tags_text, config.tags_path);
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

absl::Status Server::Impl::ApplyPartitions(std::string_view csv, std::string_view csv_name,
                                           std::string_view tags_text, std::string_view tags_name) {
  partitions::CityMapOptions cmo;
  if (!config.default_city.empty()) cmo.default_city = config.default_city;
  auto parsed = partitions::CityMap::FromCsv(csv, cmo);
  if (!parsed.ok()) return absl::InvalidArgumentError(Cat(csv_name, ": ", ToStd(parsed.status().message())));
  auto tags = partitions::TagTable::FromText(tags_text);
  if (!tags.ok()) return absl::InvalidArgumentError(Cat(tags_name, ": ", ToStd(tags.status().message())));
  std::lock_guard<std::mutex> l(apply_mu);
  auto cm = StableCityIds(**parsed, &city_names);
  if (!cm.ok()) return absl::InvalidArgumentError(Cat(csv_name, ": ", ToStd(cm.status().message())));
  shared.citymap.Publish(*std::move(cm));
  shared.tags.Publish(*std::move(tags));
  if (!shared.cache) {
    partitions::CacheOptions co;
    co.byte_budget = config.cache_bytes;
    co.stale_window = config.stale_window;
    shared.cache = std::make_unique<partitions::Cache>(co, *shared.clock);
    shared.limits.min_ttl = config.min_ttl;
    shared.limits.max_ttl = config.max_ttl;
    shared.limits.max_negative_ttl = config.negative_max_ttl;
    shared.limits.servfail_ttl = config.servfail_ttl;
  }
  return absl::OkStatus();
}

void Server::Impl::DrainReturns(int w, QueryHandler& handler, bool read_eventfd) {
  if (read_eventfd) {
    uint64_t v;
    [[maybe_unused]] ssize_t r = read(forwarder->return_fd(w), &v, sizeof(v));
  }
  static thread_local uint8_t out[65535];
  ReturnedQuery q;
  if (!forwarder->TakeReturned(w, &q)) return;  // the common case: nothing
  const uint32_t now = NowSeconds();
  do {
    const PendingClient& c = q.client;
    ClientInfo client{c.route.udp_fd >= 0 ? ToIpAddress(c.route.peer) : partitions::IpAddress{},
                      c.route.udp_fd < 0};
    const uint64_t conn_id = c.route.tcp_conn;
    if (c.route.udp_fd < 0) {
      // TCP: the connection's peer decides the partition as it did first.
      auto it = conns.find(conn_id);
      if (it == conns.end()) continue;
      client.addr = it->second.client;
    }
    size_t out_len = 0;
    MissRequest unused;
    const uint8_t* data = q.fallback.data();
    size_t len = q.fallback.size();
    const Verdict v = handler.Handle(c.query.data(), c.query.size(), client, now, out,
                                     client.tcp ? sizeof(out) : kUdpMax, &out_len, &unused, q.mode);
    if (v == Verdict::kMiss && q.mode == HandleMode::kRetry) {
      // The name became tagged: ask again, as a tagged name.
      PendingClient again = std::move(q.client);
      again.miss = unused;
      if (forwarder->Submit(w, std::move(again))) {
        forwarder->Notify();
        continue;
      }
    }
    if (v == Verdict::kReply || v == Verdict::kReplyAndPrefetch) {
      data = out;
      len = out_len;
    } else if (q.mode == HandleMode::kStaleOk) {
      counters[w]->Drop(DropReason::kUpstreamFailure);
    }
    // Answered (or given up, len 0) here: it does not go upstream again.
    if (client.tcp) {
      TcpAnswer(conn_id, data, len);
    } else if (len != 0) {
      sendto(c.route.udp_fd, data, len, 0, c.route.peer.sa(), c.route.peer.len);
    }
  } while (forwarder->TakeReturned(w, &q));
}

void Server::Impl::TcpLoop() {
  partitions::RcuThread rcu;
  const int tcp_index = config.workers;
  WorkerCounters* ctr = counters[tcp_index].get();
  QueryHandler& handler = *handlers[tcp_index];
  if (!tcp_loop.Init().ok()) {
    std::fprintf(stderr, "weir-fastpath: cannot set up the TCP event loop\n");
    return;
  }
  // Readers are offline while the loop waits: a grace period never waits
  // for an idle TCP thread.
  tcp_loop.SetWaitHooks([&rcu] { rcu.Offline(); }, [&rcu] { rcu.Online(); });
  std::vector<uint8_t> out(65535 + 2);

  auto on_conn = [&](uint64_t id, uint32_t ev) {
    auto it = conns.find(id);
    if (it == conns.end()) return;
    net::DnsTcpStream& stream = *it->second.stream;
    const auto now = std::chrono::steady_clock::now();
    if ((ev & EPOLLOUT) && stream.Flush() != net::DnsTcpStream::Status::kOpen) return TcpClose(id);
    // A reset while answers are still owed after a half-close ends them.
    if ((ev & (EPOLLHUP | EPOLLERR)) && stream.read_closed()) return TcpClose(id);
    if ((ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) && stream.Read(now) != net::DnsTcpStream::Status::kOpen) {
      return TcpClose(id);
    }
    const ClientInfo client{it->second.client, true};
    // Every whole query the stream has. A copy of each: answering one may
    // close the connection, and with it the stream's buffer.
    std::span<const uint8_t> query;
    std::vector<uint8_t> msg;
    bool open = true;
    while (open && (it = conns.find(id)) != conns.end() && it->second.stream->NextQuery(&query, now)) {
      msg.assign(query.begin(), query.end());
      size_t out_len = 0;
      MissRequest miss;
      const Verdict v = handler.Handle(msg.data(), msg.size(), client, NowSeconds(), out.data(), out.size(),
                                       &out_len, &miss);
      bool answered = v != Verdict::kMiss;
      if (v == Verdict::kReplyAndPrefetch || v == Verdict::kMiss) {
        PendingClient pc;
        pc.miss = miss;
        if (v == Verdict::kMiss) {
          pc.worker = tcp_index;
          pc.route.tcp_conn = id;
          pc.query = msg;
        }
        if (forwarder->Submit(tcp_index, std::move(pc))) {
          forwarder->Notify();
        } else if (v == Verdict::kMiss) {
          ctr->Drop(DropReason::kMissQueueFull);
          answered = true;  // given up: nothing is sent
          out_len = 0;
        }
      }
      const bool reply = v == Verdict::kReply || v == Verdict::kReplyAndPrefetch;
      if (answered) open = TcpAnswer(id, out.data(), reply ? out_len : 0);
    }
    // Half-closed with everything owed written (RFC 7766 6.2.4): close.
    if (auto c = conns.find(id); open && c != conns.end()) {
      if (c->second.stream->Done()) {
        TcpClose(id);
      } else {
        TcpWatch(id);
      }
    }
  };

  std::function<void(int)> listen;
  auto on_accept = [&](int lfd) {
    for (;;) {
      const int cfd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (cfd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors: stop listening for a moment instead of
          // spinning on a listener that stays readable.
          tcp_loop.Unwatch(lfd);
          tcp_loop.After(std::chrono::milliseconds(100), [&listen, lfd] { listen(lfd); });
        }
        return;
      }
      if (static_cast<int>(conns.size()) >= config.tcp_max_connections) {
        close(cfd);
        continue;
      }
      const uint64_t id = next_conn++;
      sockaddr_storage ss{};
      socklen_t sl = sizeof(ss);
      getpeername(cfd, reinterpret_cast<sockaddr*>(&ss), &sl);
      conns[id] = Conn{std::make_unique<net::DnsTcpStream>(cfd, kTcpOutCap, std::chrono::steady_clock::now()),
                       ClientAddress(ss), EPOLLIN};
      tcp_loop.Watch(cfd, EPOLLIN, [&on_conn, id](uint32_t ev) { on_conn(id, ev); });
    }
  };
  listen = [&](int lfd) { tcp_loop.Watch(lfd, EPOLLIN, [&on_accept, lfd](uint32_t) { on_accept(lfd); }); };
  for (int lfd : tcp_fds) listen(lfd);
  const int return_fd = forwarder->return_fd(tcp_index);
  tcp_loop.Watch(return_fd, EPOLLIN, [&](uint32_t) { DrainReturns(tcp_index, handler, true); });

  while (running.load(std::memory_order_relaxed)) {
    tcp_loop.RunOnce(std::chrono::milliseconds(100));
    // Idle connections are closed (RFC 7766 6.2.3): idle since the last
    // whole query, with no answer owed.
    const auto now = std::chrono::steady_clock::now();
    for (auto it = conns.begin(); it != conns.end();) {
      const net::DnsTcpStream& st = *it->second.stream;
      if (st.pending() == 0 &&
          now - st.last_activity() > std::chrono::milliseconds(config.tcp_idle_timeout_ms)) {
        tcp_loop.Unwatch(st.fd());
        close(st.fd());
        it = conns.erase(it);
      } else {
        ++it;
      }
    }
    rcu.Quiescent();
  }
  for (int lfd : tcp_fds) tcp_loop.Unwatch(lfd);
  tcp_loop.Unwatch(return_fd);
}

bool Server::Impl::TcpAnswer(uint64_t id, const uint8_t* data, size_t len) {
  auto it = conns.find(id);
  if (it == conns.end()) return false;  // the client went away
  net::DnsTcpStream& stream = *it->second.stream;
  if (stream.Answer({data, len}) != net::DnsTcpStream::Status::kOpen || stream.Done()) {
    TcpClose(id);  // failed, a client that never reads, or everything owed is sent after a half-close
    return false;
  }
  TcpWatch(id);
  return true;
}

void Server::Impl::TcpWatch(uint64_t id) {
  auto it = conns.find(id);
  if (it == conns.end()) return;
  Conn& c = it->second;
  const uint32_t want = c.stream->WantedEvents();
  if (want == c.events) return;
  c.events = want;
  tcp_loop.Modify(c.stream->fd(), want);
}

void Server::Impl::TcpClose(uint64_t id) {
  auto it = conns.find(id);
  if (it == conns.end()) return;
  tcp_loop.Unwatch(it->second.stream->fd());
  close(it->second.stream->fd());
  conns.erase(it);
}

std::string Server::Impl::RenderMetrics() const {
  std::string out;
  auto sum = [&](auto field) {
    uint64_t t = 0;
    for (const auto& c : counters) t += field(*c);
    t += field(forwarder->counters());
    return t;
  };
  out += "# HELP weir_queries_total Queries received.\n# TYPE weir_queries_total counter\n";
  out += Cat("weir_queries_total{transport=\"udp\"} ",
             sum([](const WorkerCounters& c) { return c.queries_udp.Read(); }), "\n");
  out += Cat("weir_queries_total{transport=\"tcp\"} ",
             sum([](const WorkerCounters& c) { return c.queries_tcp.Read(); }), "\n");
  out += "# TYPE weir_cache_hits_total counter\n";
  out += Cat("weir_cache_hits_total ", sum([](const WorkerCounters& c) { return c.hits.Read(); }), "\n");
  out += "# TYPE weir_cache_misses_total counter\n";
  out += Cat("weir_cache_misses_total ", sum([](const WorkerCounters& c) { return c.misses.Read(); }), "\n");
  out += "# TYPE weir_stale_served_total counter\n";
  out += Cat("weir_stale_served_total ", sum([](const WorkerCounters& c) { return c.stale_served.Read(); }),
             "\n");
  const LearnedTags* learned = shared.learned.Get();
  if (mgmt_client) {
    out += "# HELP weir_mgmt_snapshot_version The mgmt snapshot version this node runs.\n";
    out += Cat("# TYPE weir_mgmt_snapshot_version gauge\nweir_mgmt_snapshot_version ",
               mgmt_client->applied_version(), "\n");
    out +=
        Cat("# TYPE weir_mgmt_connected gauge\nweir_mgmt_connected ", mgmt_client->connected() ? 1 : 0, "\n");
    out += Cat("# TYPE weir_mgmt_rejected_total counter\nweir_mgmt_rejected_total ", mgmt_client->rejected(),
               "\n");
  }
  out += "# HELP weir_learned_tags Names tagged through a CNAME chain into a tagged suffix (DESIGN 3).\n";
  out += Cat("# TYPE weir_learned_tags gauge\nweir_learned_tags ", learned != nullptr ? learned->size() : 0,
             "\n");
  out += Cat("# TYPE weir_learned_tags_total counter\nweir_learned_tags_total ", forwarder->learned(), "\n");
  out += Cat("# TYPE weir_learned_tags_overflow_total counter\nweir_learned_tags_overflow_total ",
             forwarder->learned_overflow(), "\n");
  out += "# TYPE weir_coalesced_total counter\n";
  out += Cat("weir_coalesced_total ", forwarder->coalesced(), "\n");
  out += "# TYPE weir_upstream_queries_total counter\n";
  out += Cat("weir_upstream_queries_total ", forwarder->upstream_queries(), "\n");
  out += "# TYPE weir_drops_total counter\n";
  for (size_t r = 0; r < static_cast<size_t>(DropReason::kCount); ++r) {
    out += Cat("weir_drops_total{reason=\"", DropReasonName(static_cast<DropReason>(r)), "\"} ",
               sum([r](const WorkerCounters& c) { return c.drops[r].Read(); }), "\n");
  }
  out += "# TYPE weir_responses_total counter\n";
  for (size_t r = 0; r < 24; ++r) {
    const uint64_t v = sum([r](const WorkerCounters& c) { return c.rcodes[r].Read(); });
    if (v != 0) out += Cat("weir_responses_total{rcode=\"", r, "\"} ", v, "\n");
  }
  // Per-partition hit ratio and weighted answer counts (partition names
  // from the current city map: this thread is an RCU reader).
  const partitions::CityMap* cm = shared.citymap.Get();
  auto partition_name = [&](size_t slot) -> std::string {
    if (slot == 0) return "common";
    if (slot == QueryHandler::kSubnetSlot) return "subnet";
    const size_t id = slot - 1;
    if (cm != nullptr && id < cm->city_count())
      return cm->city(static_cast<partitions::PartitionId>(id)).name;
    return Cat("city", id);
  };
  out += "# TYPE weir_partition_lookups_total counter\n# TYPE weir_partition_hits_total counter\n";
  for (size_t slot = 0; slot < QueryHandler::kPartitionSlots; ++slot) {
    uint64_t lookups = 0, hits = 0;
    for (const auto& h : handlers) {
      lookups += h->partition_lookups(slot);
      hits += h->partition_hits(slot);
    }
    if (lookups == 0) continue;
    const std::string name = partition_name(slot);
    out += Cat("weir_partition_lookups_total{partition=\"", name, "\"} ", lookups, "\n");
    out += Cat("weir_partition_hits_total{partition=\"", name, "\"} ", hits, "\n");
  }
  out += "# HELP weir_answers_total Weighted answers by name, partition and address.\n";
  out += "# TYPE weir_answers_total counter\n";
  {
    // Sum the workers' slots by (name, partition, address).
    std::map<std::string, uint64_t> answers;
    uint64_t overflow = 0;
    for (const auto& h : handlers) {
      const AnswerCounters& ac = h->answer_counters();
      overflow += ac.overflow();
      for (size_t i = 0; i < AnswerCounters::kSlots; ++i) {
        const AnswerCounters::Slot& sl = ac.slots()[i];
        if (sl.key.load(std::memory_order_acquire) == 0) continue;
        char addr[INET6_ADDRSTRLEN] = {0};
        inet_ntop(sl.addr_len == 4 ? AF_INET : AF_INET6, sl.addr.data(), addr, sizeof(addr));
        const partitions::Partition p = sl.partition;
        const size_t slot = p == partitions::kCommonPartition ? 0
                            : (p >> 62) == 1                  ? 1 + (p & 0x7fff)
                                                              : QueryHandler::kSubnetSlot;
        std::string pname = slot == QueryHandler::kSubnetSlot ? Cat("subnet-", p & ((uint64_t{1} << 62) - 1))
                                                              : partition_name(slot);
        const std::string labels = Cat("name=\"", dns::NameKeyToText({sl.qname.data(), sl.qname_len}),
                                       "\",partition=\"", pname, "\",address=\"", addr, "\"");
        answers[labels] += sl.count.Read();
      }
    }
    for (const auto& [labels, v] : answers) out += Cat("weir_answers_total{", labels, "} ", v, "\n");
    out += Cat("weir_answers_overflow_total ", overflow, "\n");
  }
  out += "# TYPE weir_upstream_latency_seconds histogram\n";
  for (int g = 0; g < 2; ++g) {
    for (const auto& u : forwarder->upstream_stats(g == 1)) {
      const std::string labels =
          Cat("group=\"", g ? "weighted" : "ordinary", "\",upstream=\"", u->name, "\"");
      u->latency.Render(&out, "weir_upstream_latency_seconds", labels);
      out += Cat("weir_upstream_up{", labels, "} ", u->up.load() ? 1 : 0, "\n");
      out += Cat("weir_upstream_timeouts_total{", labels, "} ", u->timeouts.Read(), "\n");
    }
  }
  return out;
}

void Server::Impl::MetricsLoop() {
  partitions::RcuThread rcu;  // reads the city map for partition names
  pollfd p{metrics_fd, POLLIN, 0};
  while (running.load(std::memory_order_relaxed)) {
    rcu.Quiescent();
    int ready;
    {
      partitions::RcuOfflineScope offline;
      ready = poll(&p, 1, 100);
    }
    if (ready <= 0) continue;
    const int c = accept4(metrics_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) continue;
    fcntl(c, F_SETFL, 0);  // blocking, bounded by the timeouts below
    timeval tv{1, 0};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    char req[2048];
    ssize_t r;
    {
      partitions::RcuOfflineScope offline;  // a slow client must not stall grace periods
      r = read(c, req, sizeof(req) - 1);
    }
    std::string body;
    std::string status = "200 OK";
    if (r > 0 && std::strncmp(req, "GET /metrics", 12) == 0) {
      body = RenderMetrics();
    } else if (r > 0 && test_clock != nullptr &&
               std::strncmp(req, "GET /test/advance-clock?seconds=", 32) == 0) {
      test_clock->Advance(static_cast<uint32_t>(std::strtoul(req + 32, nullptr, 10)));
      body = Cat("clock ", test_clock->NowSeconds(), "\n");
    } else {
      status = "404 Not Found";
      body = "try /metrics\n";
    }
    const std::string resp = Cat(
        "HTTP/1.1 ", status, "\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: ", body.size(),
        "\r\nConnection: close\r\n\r\n", body);
    {
      // Offline while sending: a scraper that does not read must not stall
      // grace periods. MSG_NOSIGNAL: a reset connection is not a SIGPIPE.
      partitions::RcuOfflineScope offline;
      size_t sent = 0;
      while (sent < resp.size()) {
        const ssize_t w = send(c, resp.data() + sent, resp.size() - sent, MSG_NOSIGNAL);
        if (w <= 0) break;
        sent += static_cast<size_t>(w);
      }
    }
    close(c);
  }
}

}  // namespace weir::fastpath
