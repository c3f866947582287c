#include "weir/recursor/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <queue>
#include <random>
#include <span>
#include <sstream>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "unbound_resolver.h"
#include "weir/common/text.h"
#include "weir/dns/writer.h"
#include "weir/mgmt/node_client.h"
#include "weir/net/dns_tcp.h"
#include "weir/net/event_loop.h"
#include "weir/partitions/ecs_scope_cache.h"
#include "weir/partitions/tagtable.h"
#include "weir/recursor/answer.h"
#include "weir/recursor/bounded_cache.h"
#include "weir/recursor/last_hop_policy.h"
#include "weir/recursor/zone_cuts.h"

namespace weir::recursor {

using common::Cat;
using common::SocketAddress;

namespace {

using Steady = std::chrono::steady_clock;
constexpr size_t kMaxMessage = 65535;
constexpr size_t kMaxControlLine = 4096;
constexpr int kMaxStepsPerName = 20;  // cut changes (follows, referrals) per resolution
// Out of descriptors at accept: the listener is not polled for this long, so
// a full process table does not turn the loop into a busy spin.
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);

enum class FdKind : uint8_t { kUnbound, kUdpListen, kTcpListen, kControlListen, kConn, kLastHop };

struct FdInfo {
  FdKind kind;
  uint64_t id = 0;
};

// Where a response to the front goes.
struct FrontRef {
  bool tcp = false;
  int udp_fd = -1;
  SocketAddress peer;
  uint64_t conn = 0;
};

struct Waiter {
  FrontRef to;
  std::vector<uint8_t> pkt;
  dns::Query q;
  Steady::time_point deadline;  // answered by then, whatever the resolution does
  bool HasFront() const { return to.tcp || to.udp_fd >= 0; }
};

// A front's DNS-over-TCP connection (net::DnsTcpStream: framing,
// pipelining, half-close, unsent-bytes bound) or a control connection (one
// line in, one reply out).
struct Conn {
  int fd = -1;
  bool control = false;
  bool dispatching = false;                 // DispatchFrames is running for it: not closed under its feet
  uint32_t events = EPOLLIN;                // what epoll watches
  std::optional<net::DnsTcpStream> stream;  // DNS connections
  // Control connections.
  bool closing = false;  // close once `out` is flushed
  std::vector<uint8_t> in;
  std::vector<uint8_t> out;
  Steady::time_point last;
};

// A tagged name being resolved with weir's own last hop.
struct Resolution {
  uint64_t id = 0;
  std::string key;
  dns::NameKey qname;
  uint16_t qtype = 0;
  EcsChoice ecs;
  std::vector<Waiter> waiters;
  bool has_stale = false;
  Answer stale;
  // The chain so far.
  dns::NameKey cur;
  std::vector<CachedRecord> chain;
  int cnames_left = 8;
  int steps_left = kMaxStepsPerName;
  uint8_t scope = 0;
  // The current step: the zone cut of `cur` and its servers.
  dns::NameKey cut;
  std::vector<SocketAddress> servers;
  size_t next_server = 0;
  int attempts_left = 0;
  bool ecs_now = false;
  bool retried_without_ecs = false;
  // The query on the wire.
  int fd = -1;
  bool tcp = false;
  size_t tcp_sent = 0;
  net::DnsTcpReader tcp_in;
  uint16_t qid = 0;
  std::vector<uint8_t> query;
  SocketAddress server;
  uint64_t generation = 0;
};

struct OrdinaryFetch {
  std::vector<Waiter> waiters;
  bool has_stale = false;
  Answer stale;
  dns::NameKey qname;
  uint16_t qtype = 0;
  uint16_t qclass = 0;
};

// Last-hop servers that stopped answering: after a timeout a server is
// tried after the others for a while (doubling per timeout, up to 120 s); an
// answer clears it. Bounded: a full table forgets everything (it is a hint).
class ServerHealth {
 public:
  bool Avoid(const SocketAddress& a, Steady::time_point now) const {
    auto it = servers_.find(Key(a));
    return it != servers_.end() && it->second.until > now;
  }
  void TimedOut(const SocketAddress& a, Steady::time_point now) {
    if (servers_.size() >= kMaxServers) servers_.clear();
    Entry& e = servers_[Key(a)];
    e.backoff = std::min(e.backoff == std::chrono::seconds(0) ? std::chrono::seconds(5) : 2 * e.backoff,
                         std::chrono::seconds(120));
    e.until = now + e.backoff;
  }
  void Answered(const SocketAddress& a) { servers_.erase(Key(a)); }

 private:
  static constexpr size_t kMaxServers = 100000;
  struct Entry {
    std::chrono::seconds backoff{0};
    Steady::time_point until;
  };
  static std::string Key(const SocketAddress& a) {
    return std::string(reinterpret_cast<const char*>(a.addr_bytes()), a.addr_len()) +
           static_cast<char>(a.port() >> 8) + static_cast<char>(a.port() & 0xff);
  }
  absl::flat_hash_map<std::string, Entry> servers_;
};

struct PlainEntry {
  Answer a;
  uint32_t stale_until = 0;
};

struct Stats {
  uint64_t queries = 0, udp = 0, tcp = 0, refused_acl = 0, formerr = 0, dropped = 0, notimp = 0;
  uint64_t ordinary_hits = 0, ordinary_misses = 0, tagged_hits = 0, tagged_misses = 0, coalesced = 0;
  uint64_t stale_served = 0, prefetches = 0, servfail = 0, learned_tagged = 0;
  uint64_t ub_queries = 0;  // ordinary names (the zone-cut finder counts its own)
  uint64_t upstream_queries = 0, upstream_tcp = 0, upstream_timeouts = 0, ecs_sent = 0;
  uint64_t ecs_retry_without = 0, ecs_forged = 0, ecs_unsolicited = 0, spoofed_dropped = 0;
  uint64_t malformed_replies = 0, out_of_bailiwick = 0, truncated = 0, weights_invalid = 0, referrals = 0;
  uint64_t inflight_limited = 0, control_refused = 0, accept_paused = 0, tcp_unsent_closed = 0;
  uint64_t tcp_reads_paused = 0;
  uint64_t cname_loops = 0, cname_chain_too_long = 0, deadline_servfail = 0, deadline_stale = 0;
  uint64_t negative_uncached = 0, log_suppressed = 0;
};

std::string KeyOf(const dns::NameKey& name, uint16_t qtype, uint16_t qclass) {
  std::string k(reinterpret_cast<const char*>(name.bytes.data()), name.len);
  k.push_back(static_cast<char>(qtype >> 8));
  k.push_back(static_cast<char>(qtype));
  k.push_back(static_cast<char>(qclass >> 8));
  k.push_back(static_cast<char>(qclass));
  return k;
}

std::string NameText(const dns::NameKey& k) { return dns::NameKeyToText(k.span()); }

// The peer as an IpAddress for the ACLs (an IPv4-mapped IPv6 peer stays
// IPv6, as the recursor has always matched it).
partitions::IpAddress IpOf(const SocketAddress& a) {
  partitions::IpAddress ip;
  ip.family = a.family() == AF_INET ? 4 : 6;
  if (a.len != 0) std::memcpy(ip.bytes.data(), a.addr_bytes(), a.addr_len());
  return ip;
}

SocketAddress FromIp(const partitions::IpAddress& ip, uint16_t port) {
  SocketAddress s;
  if (ip.family == 4) {
    auto* in = reinterpret_cast<sockaddr_in*>(&s.storage);
    in->sin_family = AF_INET;
    std::memcpy(&in->sin_addr, ip.bytes.data(), 4);
    s.len = sizeof(sockaddr_in);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&s.storage);
    in6->sin6_family = AF_INET6;
    std::memcpy(&in6->sin6_addr, ip.bytes.data(), 16);
    s.len = sizeof(sockaddr_in6);
  }
  s.set_port(port);
  return s;
}

uint32_t MinTtl(const Answer& a) {
  uint32_t t = UINT32_MAX;
  for (const CachedRecord& r : a.answer) t = std::min(t, r.ttl);
  return t;
}

bool TargetOf(const CachedRecord& cname, dns::NameKey* target) {
  size_t end = 0;
  return dns::ReadName(cname.rdata, 0, &end, target) == dns::ParseError::kOk;
}

bool OwnerIs(const CachedRecord& r, const dns::NameKey& k) {
  return r.owner.size() == k.len && std::equal(r.owner.begin(), r.owner.end(), k.bytes.begin());
}

}  // namespace

struct Server::Impl {
  RecursorConfig cfg;
  partitions::FakeClock* test_clock = nullptr;
  const partitions::Clock* clock = nullptr;  // the test clock, or the system clock
  EcsSettings ecs_settings;
  dns::ParseOptions parse_options;
  std::unique_ptr<const partitions::TagTable> tags;
  std::mutex reload_mu;
  std::unique_ptr<const partitions::TagTable> pending_tags;
  std::optional<mgmt::NodeStart> mgmt_node;
  std::unique_ptr<mgmt::NodeClient> mgmt_client;

  net::EventLoop loop;
  std::vector<int> listen_fds;
  std::vector<std::string> describe;
  std::thread thread;
  std::atomic<bool> running{false};

  UnboundResolver ub;
  // Every cache is bounded (config [cache]); a full one evicts by sampling.
  // Entries expire at the end of their stale window.
  BoundedCache<std::string, PlainEntry> plain;
  // Per (qname, qtype): the scoped answers of that name (RFC 7871 7.3).
  BoundedCache<std::string, partitions::EcsScopeCache<Answer>> scoped;
  BoundedCache<std::string, PlainEntry> zero_source;  // answers for /0 queries only
  ZoneCutFinder cut_finder;
  ServerHealth server_health;

  absl::flat_hash_map<std::string, std::unique_ptr<OrdinaryFetch>> ordinary;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Resolution>> resolutions;
  absl::flat_hash_map<std::string, uint64_t> resolution_by_key;
  absl::flat_hash_map<uint64_t, Conn> conns;
  uint64_t next_id = 1;
  uint64_t next_generation = 1;
  // Log lines per second are bounded: a broken zone must not flood the log.
  Steady::time_point log_window;
  int log_lines = 0;
  Stats stats;
  std::mt19937_64 rng{std::random_device{}()};
  uint8_t buf[kMaxMessage];
  uint8_t out[kMaxMessage + 2];
  // The query being handled; a Waiter copies it only when it has to wait
  // (a miss), so a cache hit allocates nothing for it.
  std::span<const uint8_t> current_pkt;

  Impl(RecursorConfig c, partitions::FakeClock* tc)
      : cfg(std::move(c)),
        test_clock(tc),
        clock(tc != nullptr ? static_cast<const partitions::Clock*>(tc)
                            : &partitions::SystemClock::Instance()),
        plain(static_cast<size_t>(cfg.max_entries), std::random_device{}()),
        scoped(static_cast<size_t>(cfg.max_tagged_names), std::random_device{}()),
        zero_source(static_cast<size_t>(cfg.max_zero_source_entries), std::random_device{}()),
        cut_finder(
            ub, *clock,
            {cfg.do_ip6, static_cast<uint32_t>(cfg.zone_cut_max_ttl), static_cast<size_t>(cfg.max_zone_cuts)},
            [this](const std::string& line) { Log(line); }) {}

  absl::Status Start();
  absl::Status LoadTags(std::unique_ptr<const partitions::TagTable>* out);
  void Run();
  void Watch(int fd, uint32_t events, FdInfo info) {
    loop.Watch(fd, events, [this, fd, info](uint32_t ev) { Dispatch(fd, info, ev); });
  }
  void Unwatch(int fd) { loop.Unwatch(fd); }
  void Dispatch(int fd, FdInfo info, uint32_t events);
  void Sweep();

  // Front side.
  void OnUdpListen(int fd);
  void OnTcpListen(int fd, bool control);
  void OnConn(uint64_t id, uint32_t events);
  void CloseConn(uint64_t id);
  void WatchConn(uint64_t id, Conn& c);
  bool CloseIfDone(uint64_t id, Conn& c);
  void DispatchFrames(uint64_t id);
  void HandleQuery(std::span<const uint8_t> pkt, const FrontRef& to);
  void Send(const FrontRef& to, const uint8_t* data, size_t len);
  void ReplyAnswer(const Waiter& w, const Answer& a, uint32_t age, int64_t fixed_ttl);
  void ReplyError(const Waiter& w, dns::Rcode rcode);
  void Own(Waiter& w) {
    if (w.pkt.empty()) w.pkt.assign(current_pkt.begin(), current_pkt.end());
  }
  std::span<const uint8_t> PacketOf(const Waiter& w) const {
    return w.pkt.empty() ? current_pkt : std::span<const uint8_t>(w.pkt);
  }
  void HandleControl(uint64_t id, const std::string& line);
  std::string StatsJson();

  // Ordinary names.
  void Ordinary(Waiter w);
  void OnOrdinary(const std::string& key, const ResolverResult& result);

  // Deadlines: every waiter is answered by its deadline (SERVFAIL or stale).
  void WatchDeadline(const Waiter& w, uint64_t resolution, const std::string& key) {
    if (!w.HasFront()) return;
    const Steady::time_point at = w.deadline;
    if (resolution != 0) {
      loop.At(at, [this, resolution] { OnDeadline(resolution, {}); });
    } else {
      loop.At(at, [this, key] { OnDeadline(0, key); });
    }
  }
  // A waiter's deadline has come: the due waiters of the ordinary fetch
  // `key` (resolution 0) or of the tagged resolution are answered.
  void OnDeadline(uint64_t resolution, const std::string& key);
  // Answers and removes the waiters whose deadline has passed.
  void ExpireWaiters(std::vector<Waiter>& waiters, const Answer* stale, Steady::time_point now);
  // The negative TTL of a negative answer (RFC 2308 5): min(SOA TTL, SOA
  // MINIMUM, negative_max_ttl), also written into the SOA record; 0 when the
  // answer has no SOA (then it is not cached).
  uint32_t NegativeTtlOf(Answer& a) const;
  void Log(const std::string& line);

  // Tagged names.
  void Tagged(Waiter w, const partitions::Tag* tag, std::vector<CachedRecord> prefix = {});
  void StartTagged(const dns::NameKey& qname, uint16_t qtype, const EcsChoice& ecs, Waiter* w,
                   const Answer* stale, std::vector<CachedRecord> prefix = {});
  bool EcsTagCovers(const dns::NameKey& name) const {
    const partitions::Tag* t = tags->Lookup(name.span());
    return t != nullptr && t->ecs;
  }
  void StartStep(Resolution* r, bool force_iterate);
  void StartCut(Resolution* r);
  void BeginQueries(Resolution* r);
  void SendQuery(Resolution* r, bool same_server);
  void CloseQuery(Resolution* r);
  void OnLastHop(uint64_t id, uint32_t events);
  void OnLastHopTimeout(Resolution* r);
  // The current query's timeout; a newer query (generation) makes it moot.
  void ArmTimeout(Resolution* r, int ms) {
    loop.After(std::chrono::milliseconds(ms), [this, id = r->id, gen = r->generation] {
      auto it = resolutions.find(id);
      if (it != resolutions.end() && it->second->generation == gen && it->second->fd >= 0) {
        OnLastHopTimeout(it->second.get());
      }
    });
  }
  void ProcessReply(Resolution* r, const dns::Message& m);
  void Complete(Resolution* r, uint16_t rcode, std::vector<CachedRecord> rrset,
                std::vector<CachedRecord> authority, bool weighted, std::vector<uint8_t> weights);
  void Fail(Resolution* r);
  void Erase(Resolution* r);

  size_t InFlight() const { return resolutions.size() + ordinary.size(); }
  bool AtInflightLimit() const { return InFlight() >= static_cast<size_t>(cfg.max_inflight); }
  // A query that would start a resolution beyond max_inflight: the stale
  // answer when there is one, SERVFAIL otherwise, at once.
  void Overloaded(const Waiter& w, const Answer* stale) {
    ++stats.inflight_limited;
    if (stale != nullptr) {
      ++stats.stale_served;
      return ReplyAnswer(w, *stale, 0, cfg.stale_answer_ttl);
    }
    ReplyError(w, dns::Rcode::kServFail);
  }

  uint32_t ClampTtl(uint32_t ttl) const {
    return std::clamp<uint32_t>(ttl, static_cast<uint32_t>(cfg.min_ttl), static_cast<uint32_t>(cfg.max_ttl));
  }
  bool WantsPrefetch(const Answer& a, uint32_t now) const {
    if (cfg.prefetch_percent == 0 || a.ttl < 10 || a.fresh_until <= now) return false;
    return uint64_t{a.fresh_until - now} * 100 <=
           uint64_t{a.ttl} * static_cast<uint64_t>(cfg.prefetch_percent);
  }
};

// ---------------------------------------------------------------- setup

absl::Status Server::Impl::LoadTags(std::unique_ptr<const partitions::TagTable>* out) {
  if (cfg.tags_path.empty()) {
    auto t = partitions::TagTable::FromText("");
    if (!t.ok()) return t.status();
    *out = std::move(*t);
    return absl::OkStatus();
  }
  std::ifstream in(cfg.tags_path, std::ios::binary);
  if (!in) return absl::NotFoundError(Cat(cfg.tags_path, ": cannot open tag file"));
  std::stringstream ss;
  ss << in.rdbuf();
  auto t = partitions::TagTable::FromText(ss.str());
  if (!t.ok())
    return absl::InvalidArgumentError(Cat(cfg.tags_path, ": ", common::ToStd(t.status().message())));
  *out = std::move(*t);
  return absl::OkStatus();
}

absl::Status Server::Impl::Start() {
  ecs_settings.source_v4 = cfg.source_v4;
  ecs_settings.source_v6 = cfg.source_v6;
  ecs_settings.from_client_address = cfg.from_client_address;
  parse_options.weight_option_code = cfg.weight_option_code;
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
    std::fprintf(stderr, "weir-recursor: starting from stored mgmt snapshot version %llu\n",
                 static_cast<unsigned long long>(mgmt_node->stored->version));
  } else {
    st = LoadTags(&tags);
    if (!st.ok()) return st;
  }
  st = ub.Init(cfg);
  if (!st.ok()) return st;

  st = loop.Init();
  if (!st.ok()) return st;
  loop.SetWakeHandler([this] {
    std::lock_guard<std::mutex> l(reload_mu);
    if (pending_tags) tags = std::move(pending_tags);
  });
  Watch(ub.fd(), EPOLLIN, {FdKind::kUnbound});

  auto bind_socket = [&](const SocketAddress& a, int type) -> absl::StatusOr<int> {
    const int fd = socket(a.family(), type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::InternalError(Cat("socket: ", std::strerror(errno)));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (a.family() == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, a.sa(), a.len) != 0) {
      const int e = errno;
      close(fd);
      return absl::InternalError(Cat("bind ", a.ToString(), ": ", std::strerror(e)));
    }
    if (type == SOCK_STREAM && listen(fd, 256) != 0) {
      close(fd);
      return absl::InternalError(Cat("listen ", a.ToString(), ": ", std::strerror(errno)));
    }
    return fd;
  };
  auto local = [](int fd) {
    sockaddr_storage ss{};
    socklen_t l = sizeof(ss);
    getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &l);
    return SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&ss), l);
  };
  for (const SocketAddress& want : cfg.listen) {
    // Port 0: TCP takes the port UDP got; when that TCP port is taken, both
    // try another one.
    for (int attempt = 0;; ++attempt) {
      auto u = bind_socket(want, SOCK_DGRAM);
      if (!u.ok()) return u.status();
      const SocketAddress bound = local(*u);
      std::optional<int> tcp_fd;
      if (cfg.tcp) {
        SocketAddress same = want;
        same.set_port(bound.port());
        auto t = bind_socket(same, SOCK_STREAM);
        if (!t.ok()) {
          close(*u);
          if (want.port() == 0 && attempt < 16) continue;
          return t.status();
        }
        tcp_fd = *t;
      }
      int rcvbuf = 4 << 20;
      setsockopt(*u, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
      listen_fds.push_back(*u);
      Watch(*u, EPOLLIN, {FdKind::kUdpListen});
      std::string line = Cat("listening udp ", bound.ToString());
      if (tcp_fd) {
        listen_fds.push_back(*tcp_fd);
        Watch(*tcp_fd, EPOLLIN, {FdKind::kTcpListen});
        line += Cat(" tcp ", local(*tcp_fd).ToString());
      }
      describe.push_back(line);
      break;
    }
  }
  if (cfg.control_enabled) {
    auto c = bind_socket(cfg.control, SOCK_STREAM);
    if (!c.ok()) return c.status();
    listen_fds.push_back(*c);
    Watch(*c, EPOLLIN, {FdKind::kControlListen});
    describe.push_back(Cat("control ", local(*c).ToString()));
  }
  running = true;
  thread = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void Server::Impl::Run() {
  Sweep();
  while (running.load(std::memory_order_relaxed)) loop.RunOnce(std::chrono::milliseconds(200));
}

void Server::Impl::Dispatch(int fd, FdInfo info, uint32_t events) {
  switch (info.kind) {
    case FdKind::kUnbound:
      return ub.Process();
    case FdKind::kUdpListen:
      return OnUdpListen(fd);
    case FdKind::kTcpListen:
      return OnTcpListen(fd, false);
    case FdKind::kControlListen:
      return OnTcpListen(fd, true);
    case FdKind::kConn:
      return OnConn(info.id, events);
    case FdKind::kLastHop:
      return OnLastHop(info.id, events);
  }
}

// Once a second: idle front connections; every 10 s, expired cache entries.
void Server::Impl::Sweep() {
  loop.After(std::chrono::seconds(1), [this] { Sweep(); });
  const auto now = Steady::now();
  const auto idle = std::chrono::milliseconds(cfg.tcp_idle_timeout_ms);
  std::vector<uint64_t> old;
  for (auto& [id, c] : conns) {
    if (!c.stream) {
      if (now - c.last > idle) old.push_back(id);
      continue;
    }
    // Idle counts from the last whole query (trickling bytes do not reset
    // it); a front that reads nothing while its answers pile up is closed
    // after the idle timeout too.
    const bool stuck = c.stream->paused() && now - c.stream->paused_since() > idle;
    if (stuck) ++stats.tcp_unsent_closed;
    if ((now - c.stream->last_activity() > idle && c.stream->pending() == 0) || stuck) old.push_back(id);
  }
  for (uint64_t id : old) CloseConn(id);
  const uint32_t secs = clock->NowSeconds();
  if (secs % 10 == 0) {
    scoped.EraseIf([&](auto& e) {
      e.value.Expire(secs);
      return e.value.name_count() == 0;
    });
    plain.EraseExpired(secs);
    zero_source.EraseExpired(secs);
    cut_finder.EraseExpired(secs);
  }
}

// ---------------------------------------------------------------- front side

void Server::Impl::OnUdpListen(int fd) {
  for (int i = 0; i < 64; ++i) {
    sockaddr_storage from{};
    socklen_t fl = sizeof(from);
    const ssize_t n = recvfrom(fd, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &fl);
    if (n < 0) return;
    FrontRef to;
    to.udp_fd = fd;
    to.peer = SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&from), fl);
    ++stats.udp;
    HandleQuery({buf, static_cast<size_t>(n)}, to);
  }
}

void Server::Impl::OnTcpListen(int fd, bool control) {
  for (;;) {
    sockaddr_storage ss{};
    socklen_t sl = sizeof(ss);
    const int c = accept4(fd, reinterpret_cast<sockaddr*>(&ss), &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The connection stays in the backlog and the listener stays
        // readable: polling it now would spin. Look again after a pause.
        ++stats.accept_paused;
        Unwatch(fd);
        const FdKind kind = control ? FdKind::kControlListen : FdKind::kTcpListen;
        loop.After(kAcceptBackoff, [this, fd, kind] { Watch(fd, EPOLLIN, {kind}); });
      }
      return;
    }
    if (control) {
      const SocketAddress peer = SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&ss), sl);
      bool allowed = false;
      for (const partitions::Cidr& a : cfg.control_allow) allowed = allowed || a.Contains(IpOf(peer));
      if (!allowed) {
        ++stats.control_refused;
        close(c);
        continue;
      }
    } else if (static_cast<int>(conns.size()) >= cfg.tcp_max_connections) {
      close(c);
      continue;
    }
    const uint64_t id = next_id++;
    Conn& conn = conns[id];
    conn.fd = c;
    conn.control = control;
    conn.last = Steady::now();
    if (!control) conn.stream.emplace(c, static_cast<size_t>(cfg.tcp_max_unsent_bytes), conn.last);
    Watch(c, EPOLLIN, {FdKind::kConn, id});
  }
}

void Server::Impl::CloseConn(uint64_t id) {
  auto it = conns.find(id);
  if (it == conns.end()) return;
  Unwatch(it->second.fd);
  close(it->second.fd);
  conns.erase(it);
}

void Server::Impl::WatchConn(uint64_t id, Conn& c) {
  uint32_t want = 0;
  if (c.stream) {
    want = c.stream->WantedEvents();
  } else {
    if (!c.closing) want |= EPOLLIN;
    if (!c.out.empty()) want |= EPOLLOUT;
  }
  if (want == c.events) return;
  c.events = want;
  Watch(c.fd, want, {FdKind::kConn, id});
}

bool Server::Impl::CloseIfDone(uint64_t id, Conn& c) {
  if (c.dispatching) return false;
  const bool done = c.stream ? c.stream->Done() : c.closing && c.out.empty();
  if (!done) return false;
  CloseConn(id);
  return true;
}

void Server::Impl::OnConn(uint64_t id, uint32_t events) {
  auto it = conns.find(id);
  if (it == conns.end()) return;
  Conn* c = &it->second;
  if (events & EPOLLERR) return CloseConn(id);
  if (!c->control) {
    net::DnsTcpStream& s = *c->stream;
    if ((events & EPOLLOUT) && s.Flush() != net::DnsTcpStream::Status::kOpen) return CloseConn(id);
    // EPOLLHUP without a readable half: the front is gone (reset), nothing
    // more can be delivered.
    if ((events & EPOLLHUP) && (s.read_closed() || s.paused())) return CloseConn(id);
    if ((events & (EPOLLIN | EPOLLHUP)) && s.Read(Steady::now()) != net::DnsTcpStream::Status::kOpen) {
      return CloseConn(id);
    }
    DispatchFrames(id);
    it = conns.find(id);  // a handler may have closed it
    if (it == conns.end()) return;
    if (CloseIfDone(id, it->second)) return;
    return WatchConn(id, it->second);
  }
  c->last = Steady::now();
  if (events & EPOLLOUT) {
    while (!c->out.empty()) {
      const ssize_t n = send(c->fd, c->out.data(), c->out.size(), MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return CloseConn(id);
      if (n <= 0) break;
      c->out.erase(c->out.begin(), c->out.begin() + n);
    }
    if (CloseIfDone(id, *c)) return;
  }
  bool peer_closed = false;
  if ((events & (EPOLLIN | EPOLLHUP)) && !c->closing) {
    for (;;) {
      const ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
      if (n == 0) {
        peer_closed = true;
        break;
      }
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EINTR) continue;
        return CloseConn(id);
      }
      c->in.insert(c->in.end(), buf, buf + n);
      if (c->in.size() > kMaxControlLine) return CloseConn(id);
    }
  }
  const auto nl = std::find(c->in.begin(), c->in.end(), '\n');
  if (nl != c->in.end()) {
    std::string line(c->in.begin(), nl);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    c->in.clear();
    return HandleControl(id, line);
  }
  if (peer_closed) return CloseConn(id);
  WatchConn(id, *c);
}

// RFC 7766: queries may be pipelined; each is answered when ready. The
// stream hands out no more while the answers queued for the front are over
// the limit.
void Server::Impl::DispatchFrames(uint64_t id) {
  auto it = conns.find(id);
  if (it == conns.end()) return;
  Conn* c = &it->second;
  c->dispatching = true;
  std::span<const uint8_t> query;
  std::vector<uint8_t> frame;
  while (c->stream->NextQuery(&query, Steady::now())) {
    // A copy: the handler may close the connection, and with it the stream.
    frame.assign(query.begin(), query.end());
    FrontRef to;
    to.tcp = true;
    to.conn = id;
    ++stats.tcp;
    HandleQuery(frame, to);
    it = conns.find(id);  // the handler may have closed it
    if (it == conns.end()) return;
    c = &it->second;
  }
  c->dispatching = false;
}

void Server::Impl::Send(const FrontRef& to, const uint8_t* data, size_t len) {
  if (!to.tcp) {
    if (len != 0) sendto(to.udp_fd, data, len, 0, to.peer.sa(), to.peer.len);
    return;
  }
  auto it = conns.find(to.conn);
  if (it == conns.end() || !it->second.stream) return;
  Conn& c = it->second;
  // Every TCP query gets one Send, len 0 when it is dropped.
  const bool was_paused = c.stream->paused();
  switch (c.stream->Answer({data, len})) {
    case net::DnsTcpStream::Status::kOverflow:
      ++stats.tcp_unsent_closed;  // a front that lets that much pile up is cut off
      return CloseConn(to.conn);
    case net::DnsTcpStream::Status::kClose:
      return CloseConn(to.conn);
    case net::DnsTcpStream::Status::kOpen:
      break;
  }
  if (!was_paused && c.stream->paused()) ++stats.tcp_reads_paused;
  if (CloseIfDone(to.conn, c)) return;
  WatchConn(to.conn, c);
}

void Server::Impl::ReplyAnswer(const Waiter& w, const Answer& a, uint32_t age, int64_t fixed_ttl) {
  ReplyContext ctx{PacketOf(w), &w.q, w.to.tcp, cfg.weight_option_code};
  Send(w.to, out, WriteAnswer(ctx, a, age, fixed_ttl, out, kMaxMessage));
}

void Server::Impl::ReplyError(const Waiter& w, dns::Rcode rcode) {
  if (rcode == dns::Rcode::kServFail) ++stats.servfail;
  ReplyContext ctx{PacketOf(w), &w.q, w.to.tcp, cfg.weight_option_code};
  Send(w.to, out, WriteError(ctx, rcode, out, kMaxMessage));
}

void Server::Impl::HandleQuery(std::span<const uint8_t> pkt, const FrontRef& to) {
  ++stats.queries;
  current_pkt = pkt;
  Waiter w;
  w.to = to;
  w.deadline = Steady::now() + std::chrono::milliseconds(cfg.answer_deadline_ms);
  const dns::ParseError err = dns::ParseQuery(pkt, parse_options, &w.q);
  bool allowed = false;
  if (to.tcp) {
    auto it = conns.find(to.conn);
    sockaddr_storage ss{};
    socklen_t l = sizeof(ss);
    if (it != conns.end() && getpeername(it->second.fd, reinterpret_cast<sockaddr*>(&ss), &l) == 0) {
      w.to.peer = SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&ss), l);
    }
  }
  const partitions::IpAddress source = IpOf(w.to.peer);
  for (const partitions::Cidr& c : cfg.allow) allowed = allowed || c.Contains(source);
  if (err != dns::ParseError::kOk) {
    if (err == dns::ParseError::kBadEdnsVersion) {
      // The ACL comes first: a source that is not a front learns nothing,
      // not even which EDNS versions weir speaks.
      dns::ResponseWriter rw(out, kMaxMessage);
      rw.BeginResponse(pkt, w.q, allowed ? dns::Rcode::kNoError : dns::Rcode::kRefused);
      if (allowed) {
        rw.BeginOpt(1232, false, 1);  // BADVERS (RFC 6891 6.1.3)
      } else {
        ++stats.refused_acl;
      }
      Send(to, out, rw.Finish(to.tcp ? 65535 : 512));
      return;
    }
    // A bare FORMERR header for anything that looks like a query from a
    // front; garbage, and anything from others, is dropped.
    if (pkt.size() < dns::kHeaderSize || (pkt[2] & 0x80) || !allowed) {
      ++stats.dropped;
      Send(to, out, 0);  // a TCP front's query is done with
      return;
    }
    ++stats.formerr;
    std::memset(out, 0, dns::kHeaderSize);
    std::memcpy(out, pkt.data(), 2);
    out[2] = static_cast<uint8_t>(0x80 | (pkt[2] & 0x79));
    out[3] = static_cast<uint8_t>(dns::Rcode::kFormErr);
    Send(to, out, dns::kHeaderSize);
    return;
  }
  if (!allowed) {
    ++stats.refused_acl;
    return ReplyError(w, dns::Rcode::kRefused);
  }
  if (w.q.opcode() != 0) {
    ++stats.notimp;
    return ReplyError(w, dns::Rcode::kNotImp);
  }
  if (w.q.qclass != dns::klass::kIn) return ReplyError(w, dns::Rcode::kRefused);
  // Only a tag decides: a name no tag covers is resolved by libunbound and
  // never sends ECS anywhere, whatever the query carried (a subscriber's
  // subnet goes only where the operator sent it). A forward tag sends its
  // names to its targets even without weight or ecs.
  const partitions::Tag* tag = tags->Lookup(w.q.qname.span());
  const bool tagged =
      tag != nullptr &&
      (tag->weight || tag->ecs || (tag->policy == partitions::Policy::kForward && !tag->targets.empty()));
  if (tagged) return Tagged(std::move(w), tag);
  Ordinary(std::move(w));
}

// ---------------------------------------------------------------- ordinary names

void Server::Impl::Ordinary(Waiter w) {
  const uint32_t now = clock->NowSeconds();
  const std::string key = KeyOf(w.q.qname, w.q.qtype, w.q.qclass);
  const PlainEntry* hit = nullptr;
  if (auto* e = plain.Find(key); e != nullptr && e->value.stale_until > now) hit = &e->value;
  if (hit != nullptr && hit->a.fresh_until > now) {
    ++stats.ordinary_hits;
    ReplyAnswer(w, hit->a, now - (hit->a.fresh_until - hit->a.ttl), -1);
    if (!WantsPrefetch(hit->a, now) || ordinary.contains(key) || AtInflightLimit()) return;
    ++stats.prefetches;
    w.to = FrontRef{};
    w.to.udp_fd = -1;
    auto f = std::make_unique<OrdinaryFetch>();
    f->qname = w.q.qname;
    f->qtype = w.q.qtype;
    f->qclass = w.q.qclass;
    ordinary.emplace(key, std::move(f));
  } else {
    ++stats.ordinary_misses;
    Own(w);
    if (auto it = ordinary.find(key); it != ordinary.end()) {
      ++stats.coalesced;
      WatchDeadline(w, 0, key);
      it->second->waiters.push_back(std::move(w));
      return;
    }
    if (AtInflightLimit()) return Overloaded(w, hit != nullptr ? &hit->a : nullptr);
    auto f = std::make_unique<OrdinaryFetch>();
    f->qname = w.q.qname;
    f->qtype = w.q.qtype;
    f->qclass = w.q.qclass;
    if (hit != nullptr) {
      f->has_stale = true;
      f->stale = hit->a;
    }
    WatchDeadline(w, 0, key);
    f->waiters.push_back(std::move(w));
    ordinary.emplace(key, std::move(f));
  }
  const OrdinaryFetch& f = *ordinary[key];
  ++stats.ub_queries;
  if (!ub.Resolve(NameText(f.qname), f.qtype, f.qclass,
                  [this, key](const ResolverResult& r) { OnOrdinary(key, r); })) {
    OnOrdinary(key, ResolverResult{-1, {}, false, false});
  }
}

void Server::Impl::OnOrdinary(const std::string& key, const ResolverResult& result) {
  auto it = ordinary.find(key);
  if (it == ordinary.end()) return;
  std::unique_ptr<OrdinaryFetch> f = std::move(it->second);
  ordinary.erase(it);
  const uint32_t now = clock->NowSeconds();
  dns::Message m;
  const bool ok = result.err == 0 && !result.packet.empty() && !result.bogus &&
                  m.Parse(result.packet, parse_options) == dns::ParseError::kOk &&
                  (m.rcode() == 0 || m.rcode() == 3 || m.rcode() == 5);
  if (ok && m.rcode() == 5) {
    // REFUSED from libunbound is a local zone's answer (type refuse): the
    // operator's policy, relayed as it is and never cached.
    for (Waiter& w : f->waiters) {
      if (w.HasFront()) ReplyError(w, dns::Rcode::kRefused);
    }
    return;
  }
  if (!ok) {
    for (Waiter& w : f->waiters) {
      if (f->has_stale) {
        ++stats.stale_served;
        ReplyAnswer(w, f->stale, 0, cfg.stale_answer_ttl);
      } else {
        ReplyError(w, dns::Rcode::kServFail);
      }
    }
    return;
  }
  Answer a;
  a.rcode = m.rcode();
  a.ad = result.secure;
  dns::RrView rr;
  for (auto sec : {dns::Section::kAnswer, dns::Section::kAuthority}) {
    auto rit = m.Records(sec);
    while (rit.Next(&rr)) {
      CachedRecord r;
      if (rr.type == dns::type::kOpt || !ReadCachedRecord(m, rr, &r)) continue;
      r.ttl = std::min(r.ttl, static_cast<uint32_t>(cfg.max_ttl));
      (sec == dns::Section::kAnswer ? a.answer : a.authority).push_back(std::move(r));
    }
  }
  // DESIGN 3: a chain entering a tagged suffix makes the name tagged. The
  // chain up to the tagged name is the customer's (resolved here, without
  // ECS); the tagged rest is resolved by weir's last hop from that name,
  // which needs no zone cut of the customer's zone (a flat forwarder may
  // not give one).
  const partitions::Tag* learned = nullptr;
  std::vector<CachedRecord> prefix;
  dns::NameKey cur = f->qname;
  for (int hops = 0; hops < cfg.max_cname_chain && learned == nullptr; ++hops) {
    const CachedRecord* link = nullptr;
    for (const CachedRecord& r : a.answer) {
      if (r.type == dns::type::kCname && OwnerIs(r, cur)) link = &r;
    }
    dns::NameKey target;
    if (link == nullptr || !TargetOf(*link, &target)) break;
    prefix.push_back(*link);
    cur = target;
    const partitions::Tag* t = tags->Lookup(cur.span());
    if (t != nullptr && (t->weight || t->ecs)) learned = t;
  }
  if (learned != nullptr) {
    for (Waiter& w : f->waiters) {
      if (!w.HasFront()) continue;
      ++stats.learned_tagged;
      Tagged(std::move(w), learned, prefix);
    }
    return;
  }
  const bool negative = a.answer.empty() || a.rcode != 0;
  const uint32_t ttl = negative ? std::min(MinTtl(a), NegativeTtlOf(a)) : MinTtl(a);
  if (negative && ttl == 0) {
    ++stats.negative_uncached;  // RFC 2308 5: no SOA, nothing to date it by
  } else {
    a.ttl = ClampTtl(ttl);
    a.fresh_until = now + a.ttl;
    const uint32_t keep_until = a.fresh_until + static_cast<uint32_t>(cfg.stale_window);
    plain.Put(key, PlainEntry{a, keep_until}, keep_until);
  }
  for (Waiter& w : f->waiters) {
    if (w.HasFront()) ReplyAnswer(w, a, 0, -1);
  }
}

uint32_t Server::Impl::NegativeTtlOf(Answer& a) const {
  for (CachedRecord& r : a.authority) {
    if (r.type != dns::type::kSoa || r.rdata.size() < 20) continue;
    const uint32_t minimum = dns::Load32(r.rdata.data() + r.rdata.size() - 4);
    r.ttl = std::min({r.ttl, minimum, static_cast<uint32_t>(cfg.negative_max_ttl)});
    return r.ttl;
  }
  return 0;
}

void Server::Impl::ExpireWaiters(std::vector<Waiter>& waiters, const Answer* stale, Steady::time_point now) {
  auto due = [&](const Waiter& w) { return w.HasFront() && w.deadline <= now; };
  for (const Waiter& w : waiters) {
    if (!due(w)) continue;
    if (stale != nullptr) {
      ++stats.deadline_stale;
      ++stats.stale_served;
      ReplyAnswer(w, *stale, 0, cfg.stale_answer_ttl);
    } else {
      ++stats.deadline_servfail;
      ReplyError(w, dns::Rcode::kServFail);
    }
  }
  std::erase_if(waiters, due);
}

void Server::Impl::OnDeadline(uint64_t resolution, const std::string& key) {
  const auto now = Steady::now();
  if (resolution == 0) {
    auto it = ordinary.find(key);
    if (it == ordinary.end()) return;
    OrdinaryFetch& f = *it->second;
    return ExpireWaiters(f.waiters, f.has_stale ? &f.stale : nullptr, now);
  }
  auto it = resolutions.find(resolution);
  if (it == resolutions.end()) return;
  Resolution& r = *it->second;
  ExpireWaiters(r.waiters, r.has_stale ? &r.stale : nullptr, now);
}

void Server::Impl::Log(const std::string& line) {
  const auto now = Steady::now();
  if (now - log_window >= std::chrono::seconds(1)) {
    if (stats.log_suppressed > 0 && log_lines >= 20) {
      std::fprintf(stderr, "weir-recursor: (log lines suppressed so far: %llu)\n",
                   static_cast<unsigned long long>(stats.log_suppressed));
    }
    log_window = now;
    log_lines = 0;
  }
  if (++log_lines > 20) {
    ++stats.log_suppressed;
    return;
  }
  std::fprintf(stderr, "weir-recursor: %s\n", line.c_str());
}

// ---------------------------------------------------------------- tagged names

void Server::Impl::Tagged(Waiter w, const partitions::Tag* tag, std::vector<CachedRecord> prefix) {
  const bool wants_ecs = tag != nullptr ? tag->ecs : w.q.edns.has_ecs;
  std::span<const uint8_t> client;
  if (w.to.peer.len != 0) client = {w.to.peer.addr_bytes(), w.to.peer.addr_len()};
  const EcsChoice c = ChooseEcs(wants_ecs, w.q.edns.has_ecs ? &w.q.edns.ecs : nullptr, client, ecs_settings);
  const uint32_t now = clock->NowSeconds();
  const Answer* a = nullptr;
  const std::string key = KeyOf(w.q.qname, w.q.qtype, 0);
  if (c.zero_source) {
    auto* e = zero_source.Find(key);
    if (e != nullptr && e->value.stale_until > now) a = &e->value.a;
  }
  if (a == nullptr) {
    // A query without ECS upstream (and /0 queries) may only use global answers.
    const dns::ClientSubnet none{};
    if (auto* e = scoped.Find(key))
      a = e->value.Lookup(w.q.qname.span(), w.q.qtype, c.send ? c.subnet : none, now);
  }
  if (a != nullptr && a->fresh_until > now) {
    ++stats.tagged_hits;
    ReplyAnswer(w, *a, now - (a->fresh_until - a->ttl), -1);
    if (WantsPrefetch(*a, now)) StartTagged(w.q.qname, w.q.qtype, c, nullptr, nullptr, std::move(prefix));
    return;
  }
  ++stats.tagged_misses;
  StartTagged(w.q.qname, w.q.qtype, c, &w, a, std::move(prefix));
}

void Server::Impl::StartTagged(const dns::NameKey& qname, uint16_t qtype, const EcsChoice& ecs, Waiter* w,
                               const Answer* stale, std::vector<CachedRecord> prefix) {
  if (w != nullptr) Own(*w);
  std::string key = KeyOf(qname, qtype, 0);
  if (ecs.zero_source) {
    key += 'Z';
  } else if (ecs.send) {
    key += 'E';
    key.push_back(static_cast<char>(ecs.subnet.family));
    key.push_back(static_cast<char>(ecs.subnet.source_prefix));
    key.append(reinterpret_cast<const char*>(ecs.subnet.address.data()), ecs.subnet.AddressBytes());
  } else {
    key += 'N';
  }
  if (auto it = resolution_by_key.find(key); it != resolution_by_key.end()) {
    if (w != nullptr) {
      ++stats.coalesced;
      WatchDeadline(*w, it->second, key);
      resolutions[it->second]->waiters.push_back(std::move(*w));
    }
    return;
  }
  if (AtInflightLimit()) {
    if (w != nullptr) Overloaded(*w, stale);
    return;
  }
  if (w == nullptr) ++stats.prefetches;
  auto r = std::make_unique<Resolution>();
  r->id = next_id++;
  r->key = key;
  r->qname = qname;
  r->qtype = qtype;
  r->ecs = ecs;
  r->cur = qname;
  r->cnames_left = cfg.max_cname_chain;
  if (!prefix.empty()) {
    // Learned: resume after the customer's part of the chain.
    r->cnames_left -= static_cast<int>(prefix.size());
    if (!TargetOf(prefix.back(), &r->cur)) r->cur = qname;
    r->chain = std::move(prefix);
  }
  if (w != nullptr) {
    WatchDeadline(*w, r->id, key);
    r->waiters.push_back(std::move(*w));
  }
  if (stale != nullptr) {
    r->has_stale = true;
    r->stale = *stale;
  }
  Resolution* raw = r.get();
  resolution_by_key[key] = r->id;
  resolutions[r->id] = std::move(r);
  StartStep(raw, false);
}

void Server::Impl::StartStep(Resolution* r, bool force_iterate) {
  const partitions::Tag* t = force_iterate ? nullptr : tags->Lookup(r->cur.span());
  if (t != nullptr && t->policy == partitions::Policy::kForward && !t->targets.empty()) {
    r->cut = t->suffix;
    r->servers.clear();
    for (const partitions::ForwardTarget& f : t->targets) r->servers.push_back(FromIp(f.address, f.port));
    return BeginQueries(r);
  }
  // A referral (force_iterate) says the deepest cached zone above `cur` is
  // not its zone: ask libunbound for the deeper cut, which is then cached
  // under its own name.
  if (!force_iterate) {
    if (const ZoneCut* z = cut_finder.Cached(r->cur)) {
      r->cut = z->cut;
      r->servers = z->servers;
      return BeginQueries(r);
    }
  }
  StartCut(r);
}

// The zone cut of `cur` through libunbound (zone_cuts.h).
void Server::Impl::StartCut(Resolution* r) {
  cut_finder.Find(r->cur, [this, id = r->id](const ZoneCut* z) {
    auto it = resolutions.find(id);
    if (it == resolutions.end()) return;
    Resolution* r = it->second.get();
    if (z == nullptr) return Fail(r);
    r->cut = z->cut;
    r->servers = z->servers;
    BeginQueries(r);
  });
}

void Server::Impl::BeginQueries(Resolution* r) {
  r->attempts_left = cfg.attempts;
  // Servers that timed out lately go last (unbound's infra cache idea): one
  // mute server of a zone costs one timeout a while, not one per query.
  if (r->servers.size() > 1) {
    std::shuffle(r->servers.begin(), r->servers.end(), rng);
    const auto now = Steady::now();
    std::stable_partition(r->servers.begin(), r->servers.end(),
                          [&](const SocketAddress& a) { return !server_health.Avoid(a, now); });
  }
  r->next_server = 0;
  // Only the steps an ecs tag covers carry the subnet: a chain that leaves
  // the tagged suffix (or a learned one, whose query name is no tag's)
  // sends it nowhere else.
  r->ecs_now = r->ecs.send && EcsTagCovers(r->cur);
  r->retried_without_ecs = false;
  SendQuery(r, false);
}

void Server::Impl::CloseQuery(Resolution* r) {
  if (r->fd < 0) return;
  Unwatch(r->fd);
  close(r->fd);
  r->fd = -1;
  r->tcp = false;
  r->tcp_in.Clear();
  r->tcp_sent = 0;
}

void Server::Impl::SendQuery(Resolution* r, bool same_server) {
  CloseQuery(r);
  if (r->servers.empty() || r->attempts_left-- <= 0) return Fail(r);
  if (!same_server) r->server = r->servers[r->next_server++ % r->servers.size()];
  // A fresh socket per query (random source port from the kernel), connected
  // so only the server's address and port can answer, and a random ID.
  const int fd = socket(r->server.family(), SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, r->server.sa(), r->server.len) != 0) {
    if (fd >= 0) close(fd);
    return SendQuery(r, false);
  }
  r->qid = static_cast<uint16_t>(rng());
  uint8_t q[512];
  dns::ResponseWriter w(q, sizeof(q));
  w.Begin(r->qid, 0, r->cur.span(), r->qtype, dns::klass::kIn);  // RD clear: authoritative servers
  w.BeginOpt(1232, false);
  if (r->ecs_now) {
    w.AddEcs(r->ecs.subnet);
    ++stats.ecs_sent;
  }
  w.AddWeights(cfg.weight_option_code, {});
  const size_t len = w.Finish(sizeof(q));
  r->query.assign(q, q + len);
  ++stats.upstream_queries;
  if (send(fd, q, len, 0) < 0) {
    close(fd);
    return SendQuery(r, false);
  }
  r->fd = fd;
  r->generation = next_generation++;
  Watch(fd, EPOLLIN, {FdKind::kLastHop, r->id});
  ArmTimeout(r, cfg.timeout_ms);
}

void Server::Impl::OnLastHopTimeout(Resolution* r) {
  ++stats.upstream_timeouts;
  server_health.TimedOut(r->server, Steady::now());
  SendQuery(r, false);
}

void Server::Impl::OnLastHop(uint64_t id, uint32_t events) {
  auto it = resolutions.find(id);
  if (it == resolutions.end()) return;
  Resolution* r = it->second.get();
  auto matches = [&](const dns::Message& m) {
    return m.id() == r->qid && (m.flags() & dns::flag::kQr) && m.qtype() == r->qtype &&
           m.qclass() == dns::klass::kIn && m.qname() == r->cur;
  };
  if (!r->tcp) {
    for (;;) {
      const ssize_t n = recv(r->fd, buf, sizeof(buf), 0);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        return SendQuery(r, false);  // ICMP unreachable: next server
      }
      dns::Message m;
      if (static_cast<size_t>(n) < dns::kHeaderSize || dns::Load16(buf) != r->qid) {
        ++stats.spoofed_dropped;
        continue;
      }
      if (buf[2] & (dns::flag::kTc >> 8)) {
        // TC: the same question over TCP to the same server (RFC 7766).
        ++stats.truncated;
        Unwatch(r->fd);
        close(r->fd);
        r->fd = socket(r->server.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (r->fd < 0) return SendQuery(r, false);
        int one = 1;
        setsockopt(r->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        connect(r->fd, r->server.sa(), r->server.len);
        r->tcp = true;
        r->tcp_sent = 0;
        r->tcp_in.Clear();
        uint8_t prefix[2];
        dns::Store16(prefix, static_cast<uint16_t>(r->query.size()));
        r->query.insert(r->query.begin(), prefix, prefix + 2);
        ++stats.upstream_tcp;
        r->generation = next_generation++;
        Watch(r->fd, EPOLLIN | EPOLLOUT, {FdKind::kLastHop, r->id});
        ArmTimeout(r, cfg.tcp_timeout_ms);
        return;
      }
      if (m.Parse({buf, static_cast<size_t>(n)}, parse_options) != dns::ParseError::kOk) {
        ++stats.malformed_replies;
        return SendQuery(r, false);
      }
      if (!matches(m)) {
        ++stats.spoofed_dropped;
        continue;  // keep waiting for the genuine answer until the timeout
      }
      return ProcessReply(r, m);
    }
  }
  if (events & (EPOLLERR | EPOLLHUP)) {
    if (!(events & EPOLLIN)) return SendQuery(r, false);
  }
  if ((events & EPOLLOUT) && r->tcp_sent < r->query.size()) {
    const ssize_t n = send(r->fd, r->query.data() + r->tcp_sent, r->query.size() - r->tcp_sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINPROGRESS) return SendQuery(r, false);
    if (n > 0) r->tcp_sent += static_cast<size_t>(n);
    if (r->tcp_sent == r->query.size()) Watch(r->fd, EPOLLIN, {FdKind::kLastHop, r->id});
  }
  if (!(events & EPOLLIN)) return;
  // Only the bytes of the one message expected are taken off the socket
  // (never more than 2 + 65535): whatever the server sends after it is
  // left unread and dropped with the socket.
  while (!r->tcp_in.Complete()) {
    const ssize_t n = recv(r->fd, buf, std::min(sizeof(buf), r->tcp_in.Want()), 0);
    if (n == 0) return SendQuery(r, false);  // closed before the whole answer
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR) continue;
      return SendQuery(r, false);
    }
    if (!r->tcp_in.Append({buf, static_cast<size_t>(n)})) return SendQuery(r, false);
  }
  dns::Message m;
  if (m.Parse(r->tcp_in.Message(), parse_options) != dns::ParseError::kOk) {
    ++stats.malformed_replies;
    return SendQuery(r, false);
  }
  if (!matches(m)) {
    ++stats.spoofed_dropped;
    return SendQuery(r, false);
  }
  // The query went over TCP; restore the UDP form for any retry.
  r->query.erase(r->query.begin(), r->query.begin() + 2);
  ProcessReply(r, m);
}

void Server::Impl::ProcessReply(Resolution* r, const dns::Message& m) {
  server_health.Answered(r->server);
  switch (OnRcode(m.rcode(), r->ecs_now, r->retried_without_ecs)) {
    case RcodeAction::kWithoutEcs:
      ++stats.ecs_retry_without;
      r->ecs_now = false;
      r->retried_without_ecs = true;
      return SendQuery(r, true);
    case RcodeAction::kNextServer:
      return SendQuery(r, false);
    case RcodeAction::kAccept:
      break;
  }
  const EcsReplyCheck check = CheckEcsReply(r->ecs_now, r->ecs.subnet, m.edns());
  if (check.verdict == EcsReply::kForged) {
    ++stats.ecs_forged;
    r->ecs_now = false;
    r->retried_without_ecs = true;
    return SendQuery(r, true);
  }
  if (check.verdict == EcsReply::kUnsolicited) ++stats.ecs_unsolicited;
  StepResult step = ReadStep(m, r->cur, r->qtype, r->cut.span(), r->cnames_left);
  stats.out_of_bailiwick += step.out_of_bailiwick;
  if (step.weight_option && !step.weighted && step.weight_verdict != dns::WeightVerdict::kEmpty) {
    ++stats.weights_invalid;
  }
  if (step.kind == StepResult::Kind::kBogus) return SendQuery(r, false);
  // A chain that comes back to a name it went through in an earlier step
  // (another zone) is a loop as much as one inside a single reply.
  if (step.kind != StepResult::Kind::kLoop && step.kind != StepResult::Kind::kTooLong) {
    for (const CachedRecord& c : step.chain) {
      dns::NameKey target;
      if (c.type != dns::type::kCname || !TargetOf(c, &target)) continue;
      bool seen = target == r->qname;
      for (const CachedRecord& earlier : r->chain) {
        seen = seen || (earlier.type == dns::type::kCname && OwnerIs(earlier, target));
      }
      if (seen) step.kind = StepResult::Kind::kLoop;
    }
  }
  if (step.kind == StepResult::Kind::kLoop || step.kind == StepResult::Kind::kTooLong) {
    const bool loop = step.kind == StepResult::Kind::kLoop;
    ++(loop ? stats.cname_loops : stats.cname_chain_too_long);
    Log(Cat(NameText(r->qname), ": CNAME chain ", loop ? "loops" : "is longer than max_cname_chain", " (at ",
            NameText(r->cur), "): SERVFAIL"));
    return Fail(r);
  }
  CloseQuery(r);
  if (check.verdict == EcsReply::kScoped) r->scope = std::max(r->scope, check.scope);
  r->cnames_left -=
      static_cast<int>(std::count_if(step.chain.begin(), step.chain.end(),
                                     [](const CachedRecord& c) { return c.type == dns::type::kCname; }));
  for (CachedRecord& c : step.chain) r->chain.push_back(std::move(c));
  switch (step.kind) {
    case StepResult::Kind::kAnswer:
      return Complete(r, 0, std::move(step.rrset), {}, step.weighted, std::move(step.weights));
    case StepResult::Kind::kNegative:
      return Complete(r, step.rcode, {}, std::move(step.authority), false, {});
    case StepResult::Kind::kFollow:
    case StepResult::Kind::kReferral:
      if (step.kind == StepResult::Kind::kReferral) ++stats.referrals;
      if (--r->steps_left <= 0) return Fail(r);
      r->cur = step.next;
      return StartStep(r, step.kind == StepResult::Kind::kReferral);
    case StepResult::Kind::kBogus:
    case StepResult::Kind::kLoop:
    case StepResult::Kind::kTooLong:
      break;
  }
}

void Server::Impl::Complete(Resolution* r, uint16_t rcode, std::vector<CachedRecord> rrset,
                            std::vector<CachedRecord> authority, bool weighted,
                            std::vector<uint8_t> weights) {
  const uint32_t now = clock->NowSeconds();
  Answer a;
  a.rcode = rcode;
  a.answer = std::move(r->chain);
  for (CachedRecord& x : rrset) a.answer.push_back(std::move(x));
  a.authority = std::move(authority);
  for (auto* list : {&a.answer, &a.authority}) {
    for (CachedRecord& x : *list) x.ttl = std::min(x.ttl, static_cast<uint32_t>(cfg.max_ttl));
  }
  a.weighted = weighted;
  a.weights = std::move(weights);
  a.scope = r->scope;
  const bool negative = rcode != 0 || rrset.empty();
  uint32_t ttl = MinTtl(a);
  if (negative) ttl = std::min(ttl, NegativeTtlOf(a));
  if (negative && ttl == 0) {
    // RFC 2308 5: a negative answer without SOA is not cached.
    ++stats.negative_uncached;
    a.ttl = 0;
    a.fresh_until = now;
    for (const Waiter& w : r->waiters) ReplyAnswer(w, a, 0, -1);
    return Erase(r);
  }
  a.ttl = ClampTtl(ttl);
  a.fresh_until = now + a.ttl;
  const uint32_t keep_until = a.fresh_until + static_cast<uint32_t>(cfg.stale_window);
  const std::string key = KeyOf(r->qname, r->qtype, 0);
  if (r->ecs.zero_source) {
    zero_source.Put(key, PlainEntry{a, keep_until}, keep_until);
  } else {
    const dns::ClientSubnet none{};
    auto& e = scoped.FindOrInsert(
        key, partitions::EcsScopeCache<Answer>(static_cast<size_t>(cfg.max_subnets)), keep_until);
    e.value.Insert(r->qname.span(), r->qtype, r->ecs.send ? r->ecs.subnet : none, a.scope, now, keep_until,
                   a);
    e.expires = std::max(e.expires, keep_until);  // the name lives as long as its longest-lived answer
  }
  for (const Waiter& w : r->waiters) ReplyAnswer(w, a, 0, -1);
  Erase(r);
}

void Server::Impl::Fail(Resolution* r) {
  CloseQuery(r);
  for (const Waiter& w : r->waiters) {
    if (r->has_stale) {
      ++stats.stale_served;
      ReplyAnswer(w, r->stale, 0, cfg.stale_answer_ttl);
    } else {
      ReplyError(w, dns::Rcode::kServFail);
    }
  }
  Erase(r);
}

void Server::Impl::Erase(Resolution* r) {
  CloseQuery(r);
  resolution_by_key.erase(r->key);
  resolutions.erase(r->id);  // frees r
}

// ---------------------------------------------------------------- control

std::string Server::Impl::StatsJson() {
  const Stats& s = stats;
  size_t unsent = 0;
  for (const auto& [id, c] : conns) unsent += c.stream ? c.stream->unsent() : c.out.size();
  return Cat(
      "{\"queries\":", s.queries, ",\"udp\":", s.udp, ",\"tcp\":", s.tcp, ",\"refused_acl\":", s.refused_acl,
      ",\"formerr\":", s.formerr, ",\"dropped\":", s.dropped, ",\"notimp\":", s.notimp,
      ",\"ordinary_hits\":", s.ordinary_hits, ",\"ordinary_misses\":", s.ordinary_misses,
      ",\"tagged_hits\":", s.tagged_hits, ",\"tagged_misses\":", s.tagged_misses,
      ",\"coalesced\":", s.coalesced, ",\"stale_served\":", s.stale_served, ",\"prefetches\":", s.prefetches,
      ",\"servfail\":", s.servfail, ",\"learned_tagged\":", s.learned_tagged,
      ",\"ub_queries\":", s.ub_queries + cut_finder.stats().resolver_queries,
      ",\"cut_lookups\":", cut_finder.stats().lookups, ",\"cut_cache_hits\":", cut_finder.stats().cache_hits,
      ",\"upstream_queries\":", s.upstream_queries, ",\"upstream_tcp\":", s.upstream_tcp,
      ",\"upstream_timeouts\":", s.upstream_timeouts, ",\"ecs_sent\":", s.ecs_sent,
      ",\"ecs_retry_without\":", s.ecs_retry_without, ",\"ecs_forged\":", s.ecs_forged,
      ",\"ecs_unsolicited\":", s.ecs_unsolicited, ",\"spoofed_dropped\":", s.spoofed_dropped,
      ",\"malformed_replies\":", s.malformed_replies, ",\"out_of_bailiwick\":", s.out_of_bailiwick,
      ",\"truncated\":", s.truncated, ",\"weights_invalid\":", s.weights_invalid,
      ",\"referrals\":", s.referrals, ",\"inflight_limited\":", s.inflight_limited,
      ",\"control_refused\":", s.control_refused, ",\"accept_paused\":", s.accept_paused,
      ",\"tcp_reads_paused\":", s.tcp_reads_paused, ",\"tcp_unsent_closed\":", s.tcp_unsent_closed,
      ",\"tcp_unsent_bytes\":", unsent, ",\"tagged_names\":", scoped.size(),
      ",\"plain_entries\":", plain.size(), ",\"zero_source_entries\":", zero_source.size(),
      ",\"zone_cuts\":", cut_finder.size(), ",\"evictions\":",
      plain.evictions() + scoped.evictions() + zero_source.evictions() + cut_finder.evictions(),
      ",\"in_flight\":", InFlight(), ",\"cname_loops\":", s.cname_loops,
      ",\"cname_chain_too_long\":", s.cname_chain_too_long, ",\"deadline_servfail\":", s.deadline_servfail,
      ",\"deadline_stale\":", s.deadline_stale, ",\"negative_uncached\":", s.negative_uncached,
      ",\"cut_failures\":", cut_finder.stats().failures, ",\"log_suppressed\":", s.log_suppressed, "}");
}

void Server::Impl::HandleControl(uint64_t id, const std::string& line) {
  std::string reply;
  if (line == "stats") {
    reply = StatsJson();
  } else if (line.rfind("advance-clock ", 0) == 0) {
    if (test_clock == nullptr) {
      reply = "error: not started with --test-clock";
    } else {
      test_clock->Advance(static_cast<uint32_t>(std::strtoul(line.c_str() + 14, nullptr, 10)));
      reply = "ok";
    }
  } else if (line == "flush") {
    plain.Clear();
    zero_source.Clear();
    cut_finder.Clear();
    scoped.Clear();
    reply = "ok";
  } else if (line == "reload-tags" && mgmt_node) {
    reply = "error: tags come from weir-mgmt ([mgmt] is configured)";
  } else if (line == "reload-tags") {
    std::unique_ptr<const partitions::TagTable> t;
    absl::Status st = LoadTags(&t);
    if (st.ok()) tags = std::move(t);
    reply = st.ok() ? "ok" : Cat("error: ", common::ToStd(st.message()));
  } else {
    reply = "commands: stats | advance-clock N | flush | reload-tags";
  }
  auto it = conns.find(id);
  if (it == conns.end()) return;
  Conn& c = it->second;
  reply.push_back('\n');
  c.out.insert(c.out.end(), reply.begin(), reply.end());
  c.closing = true;
  WatchConn(id, c);
}

// ---------------------------------------------------------------- Server

Server::Server(RecursorConfig config, partitions::FakeClock* test_clock)
    : impl_(std::make_unique<Impl>(std::move(config), test_clock)) {}

Server::~Server() { Stop(); }

absl::Status Server::Start() {
  absl::Status st = impl_->Start();
  if (!st.ok() || !impl_->mgmt_node) return st;
  const mgmt::NodeStart& node = *impl_->mgmt_node;
  impl_->mgmt_client = std::make_unique<mgmt::NodeClient>(
      mgmt::MakeNodeClientOptions(impl_->cfg.mgmt, "recursor", node.token),
      [this](const mgmt::Snapshot& snap) {
        auto t = partitions::TagTable::FromText(snap.tags);
        if (!t.ok()) return absl::InvalidArgumentError(Cat("tags: ", common::ToStd(t.status().message())));
        {
          std::lock_guard<std::mutex> l(impl_->reload_mu);
          impl_->pending_tags = *std::move(t);
        }
        impl_->loop.Wake();
        return absl::OkStatus();
      });
  return node.stored ? impl_->mgmt_client->Start(node.stored->version, node.stored->origin)
                     : impl_->mgmt_client->Start(0, "");
}

std::string Server::DescribeListeners() const {
  std::string s;
  for (const std::string& l : impl_->describe) s += l + "\n";
  return s + "ready\n";
}

absl::Status Server::ReloadTags() {
  if (impl_->mgmt_node) {
    return absl::FailedPreconditionError("tags come from weir-mgmt ([mgmt] is configured)");
  }
  std::unique_ptr<const partitions::TagTable> t;
  absl::Status st = impl_->LoadTags(&t);
  if (!st.ok()) return st;
  {
    std::lock_guard<std::mutex> l(impl_->reload_mu);
    impl_->pending_tags = std::move(t);
  }
  impl_->loop.Wake();
  return absl::OkStatus();
}

void Server::Stop() {
  if (impl_->mgmt_client) impl_->mgmt_client->Stop();
  if (!impl_->running.exchange(false)) return;
  impl_->loop.Wake();
  impl_->thread.join();
  for (auto& [id, r] : impl_->resolutions) {
    if (r->fd >= 0) close(r->fd);
  }
  for (auto& [id, c] : impl_->conns) close(c.fd);
  for (int fd : impl_->listen_fds) close(fd);
}

}  // namespace weir::recursor
