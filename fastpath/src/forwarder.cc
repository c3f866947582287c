#include "weir/fastpath/forwarder.h"

#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <optional>
#include <span>

#include "absl/container/flat_hash_map.h"
#include "weir/common/log.h"
#include "weir/common/secure_random.h"
#include "weir/dns/case_randomization.h"
#include "weir/dns/cookies.h"
#include "weir/dns/writer.h"
#include "weir/dnstap/dnstap.h"
#include "weir/fastpath/relay.h"
#include "weir/fastpath/upstream_guard.h"
#include "weir/fastpath/upstream_ring.h"
#include "weir/net/dns_tcp.h"
#include "weir/net/event_loop.h"
#include "weir/partitions/rcu.h"

namespace weir::fastpath {
namespace {

using Clock = std::chrono::steady_clock;
// Names learned as tagged at once (docs/behaviour.md#domain-tags); each learn copies the set.
constexpr size_t kMaxLearnedNames = 10000;
constexpr size_t kMaxMessage = 65535;
constexpr int32_t kAnswered = -2;   // a waiter answered early (ClientRoute::worker)
constexpr int kForwarderNice = 10;  // below the workers: hits first (Run)

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// One question in flight upstream, with every client waiting for it.
struct Pending {
  std::string key;
  MissRequest miss;
  std::vector<PendingClient> waiters;
  bool weighted_group = false;
  int upstream = -1;
  uint64_t tried = 0;
  int attempts = 0;
  // The UDP try in flight, if any: a pool socket (shared, not owned), the
  // upstream's endpoint and the ID; the three name it in the TryTable.
  bool udp_live = false;
  int udp_socket = -1;
  int endpoint = -1;
  uint16_t id = 0;
  uint16_t port = 0;
  bool case_randomized = false;  // the query's qname went out in 0x20 case
  // The TCP try follows a UDP answer in another case than our 0x20 one: if
  // the server cannot be asked over TCP, that answer was its own.
  bool case_suspect = false;
  // Answers carrying this question that matched no try (a forger's ID
  // guesses); past upstream.unwanted_reply_threshold the UDP try is
  // abandoned and the question asked over TCP.
  uint32_t unwanted = 0;
  int tcp_fd = -1;  // the TCP try in flight, if any (owned)
  bool has_try() const { return udp_live || tcp_fd >= 0; }
  Clock::time_point sent;
  Clock::time_point deadline;
  uint64_t generation = 0;
  net::EventLoop::TimerId try_timer = 0;  // this try's timeout
  bool answer_timer = false;              // an answer deadline timer is armed for the waiters
  std::vector<uint8_t> query;             // as sent upstream
  // A truncated UDP answer moves the question to TCP on the same recursor.
  bool over_tcp = false;
  std::vector<uint8_t> tcp_out;  // length-prefixed query
  size_t tcp_sent = 0;
  net::DnsTcpReader tcp_in;
  // dnstap: when this try was sent (zero: not tapped) and from where.
  timespec tapped_at{};
  dnstap::Endpoint tap_local;
};

struct Group {
  std::vector<UpstreamConfig> upstreams;
  std::vector<int> endpoint;  // index into Impl::endpoints, per upstream
  std::vector<std::unique_ptr<UpstreamStats>>* stats;
  std::unique_ptr<UpstreamRing> ring;
  std::vector<int> consecutive_failures;
  std::vector<Clock::time_point> next_probe;
};

// The question name as sent upstream (in its 0x20 case), at offset 12 of
// the query.
std::span<const uint8_t> SentName(const Pending* p) {
  return {p->query.data() + dns::kHeaderSize, p->miss.qname.len};
}

// A recursor's address, shared by the groups that list it: its cookie and
// 0x20 state (in the CookieJar and the CaseMemory, keyed by address and
// port) are the server's, whichever group asks.
struct Endpoint {
  SocketAddress address;
  dns::CookieJar::ClientCookieBytes client_cookie{};
};

// A socket of the UDP pool: bound to a random port at start (or when it
// replaced a retired one), shared by every query that draws it.
struct PoolSocket {
  int fd = -1;
  int family = AF_INET;
  uint16_t port = 0;
  uint32_t tries = 0;  // UDP tries in flight on it
  bool retired = false;
  Clock::time_point close_after;  // retired: once its late answers can no longer come
};

using Tries = TryTable<Pending*>;

}  // namespace

struct Forwarder::Impl {
  Forwarder* self;
  FastpathConfig config;
  SharedState* shared;
  std::vector<MissChannel*> channels;
  // Returns that found their worker's ring full, pushed again every loop
  // turn (never dropped: each one holds a route in its worker's backend).
  std::vector<std::deque<ReturnedQuery>> overflow;
  std::vector<bool> wake;  // workers with returns pushed this loop turn
  net::EventLoop loop;
  // Answers refused as malformed or not matching the query (spoofed_).
  common::RateLimitedLog refused_log{{.component = "upstream"}};
  // Questions moved to TCP after too many unwanted answers.
  common::RateLimitedLog reaction_log{{.component = "upstream"}};
  // Health changes and 0x20 fallbacks: a recursor that fails and answers by
  // turns must not flood the log either.
  common::RateLimitedLog down_log{{.component = "upstream"}};
  common::RateLimitedLog up_log{{.level = common::LogLevel::kInfo, .component = "upstream"}};
  common::RateLimitedLog case_log{{.component = "upstream"}};
  bool loop_ready = false;
  std::atomic<bool> running{false};
  std::thread thread;
  Group groups[2];  // 0 ordinary, 1 weighted
  absl::flat_hash_map<std::string, std::unique_ptr<Pending>> inflight;
  size_t waiting = 0;                        // waiters of every Pending in `inflight`
  absl::flat_hash_map<int, Pending*> by_fd;  // TCP tries, by socket
  std::vector<Endpoint> endpoints;
  // The UDP pool (per address family) and the retired sockets still open
  // for their tries' answers, all by descriptor.
  absl::flat_hash_map<int, PoolSocket> sockets;
  std::vector<int> pool[2];  // [0] IPv4, [1] IPv6
  std::unique_ptr<Tries> tries;
  PortRange ports;  // where the pool's ports are drawn from
  // UDP tries in flight by question (endpoint, qtype, qname), to charge a
  // forger's unwanted answers to the question they target.
  absl::flat_hash_map<std::string, std::vector<Pending*>> by_question;
  Clock::time_point next_housekeeping{};
  Clock::time_point next_rotation{};
  // Timers name their try by generation, never by pointer: a Pending may
  // be freed long before its old deadlines come up.
  absl::flat_hash_map<uint64_t, Pending*> by_generation;
  // RFC 8767 client response timers and answer deadlines: generation ->
  // the pending's key.
  absl::flat_hash_map<uint64_t, std::string> client_timers;
  uint64_t next_generation = 1;
  common::SecureRandom rng;
  // 0x20 off for the recursors found not to keep the question's case; the
  // DNS cookies (RFC 7873) of every recursor (set in the constructor: its
  // secret is drawn then).
  dns::CaseMemory case_memory;
  std::optional<dns::CookieJar> cookies;
  dns::ParseOptions parse_options;
  dnstap::Producer* tap = nullptr;
  uint8_t buf[kMaxMessage];
  uint8_t out[kMaxMessage];

  void Run();
  // FillCache's RDATA, uncompressed (RDLENGTH is at most 65535).
  std::vector<uint8_t> rdata_scratch = std::vector<uint8_t>(65535);
  // After a 0x20 mismatch, a TCP try that failed: asks again over UDP
  // without 0x20 (true), or false when `p` is not such a try.
  bool CaseFallback(Pending* p);
  // Proof that the upstream does not keep the question's case: 0x20 off
  // for it for CaseMemory::kHold, counted and logged with `why`.
  void LearnNoCase(const Endpoint& ep, std::string_view why);
  void Drain();
  void Accept(PendingClient&& c);
  void Send(Pending* p);
  void OnTcp(Pending* p, uint32_t events);
  void SwitchToTcp(Pending* p, bool expect_late);
  // Ends the try in flight (UDP or TCP). `expect_late`: its answer may
  // still come and is then counted as late, not as unwanted.
  void EndTry(Pending* p, bool expect_late);
  absl::Status OpenPool();
  // A socket bound to a random port of the family; -1 when none could be.
  int OpenPoolSocket(int family);
  // Retires pool sockets past their lifetime, closes retired ones whose
  // tries are over.
  void Housekeep();
  void OnPoolReadable(int fd);
  void OnDatagram(int fd, size_t n, const SocketAddress& src);
  // An answer from endpoint `e` that matched no try: charged to the
  // question it carries.
  void NoteUnwanted(int e, size_t n);
  int EndpointOf(const SocketAddress& src) const;
  static std::string QuestionKey(int endpoint, uint16_t qtype, const dns::NameKey& qname);
  Clock::duration LateWindow() const {
    return std::chrono::milliseconds(std::max(5000, 4 * config.upstream_timeout_ms));
  }
  // Checks an answer against the question sent; counts spoofed ones.
  bool Genuine(const Pending* p, const uint8_t* data, size_t len, dns::Message* m);
  void OnTimeout(Pending* p);
  // Registers the try just sent and arms its timeout.
  void ArmTry(Pending* p);
  void Finish(Pending* p, const uint8_t* answer, size_t len);
  void Fail(Pending* p);
  void Reply(PendingClient& c, HandleMode mode, std::shared_ptr<const RelayedAnswer> relay);
  // The worker serves a stale entry if it has one (RFC 8767), else SERVFAIL.
  void StaleOrServfail(PendingClient& c) { Reply(c, HandleMode::kStaleOk, nullptr); }
  // Pushes held-back returns and wakes the workers that got some.
  void FlushReturns();
  // Health probes of recursors marked down: ". NS" every health interval on
  // a fresh socket; any genuine answer (any RCODE) brings the recursor back.
  struct Probe {
    int group;
    int upstream;
    uint16_t id;
  };
  absl::flat_hash_map<int, Probe> probes;  // by socket
  void SendProbes();
  void OnProbe(int fd);
  void OnClientTimer(uint64_t generation);
  // The in-flight query a client timer was set for; null when it is done.
  Pending* TimerTarget(uint64_t generation);
  // Waiting clients accepted by `accepted_by` get their stale answer or
  // SERVFAIL now and stop waiting; the upstream query goes on.
  void AnswerEarly(Pending* p, Clock::time_point accepted_by);
  // Arms the answer deadline of `p`'s earliest waiting client, if any.
  void ArmAnswerDeadline(Pending* p);
  void OnAnswerDeadline(uint64_t generation);
  bool FillCache(const Pending& p, const dns::Message& up, bool* stale_instead, bool* learned);
  void MarkResult(Group& g, int u, bool ok);
  void Release(Pending* p, bool expect_late);
  // dnstap of the try just sent on `fd`, and of its genuine answer.
  void TapQuery(Pending* p, int fd, bool tcp);
  void TapResponse(const Pending* p, const uint8_t* answer, size_t len);
};

void Forwarder::SetTap(dnstap::Producer* tap) { impl_->tap = tap; }

void Forwarder::Impl::TapQuery(Pending* p, int fd, bool tcp) {
  sockaddr_storage local{};
  socklen_t ll = sizeof(local);
  p->tap_local = {};
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) == 0)
    p->tap_local = dnstap::EndpointOf(SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&local), ll));
  p->tapped_at = dnstap::Now();
  dnstap::Message m;
  m.type = dnstap::MessageType::kForwarderQuery;
  m.protocol = tcp ? dnstap::Protocol::kTcp : dnstap::Protocol::kUdp;
  m.query_address = p->tap_local;
  m.response_address = dnstap::EndpointOf(groups[p->weighted_group ? 1 : 0].upstreams[p->upstream].address);
  m.query_time = p->tapped_at;
  m.query_message = p->query;
  tap->Send(m);
}

void Forwarder::Impl::TapResponse(const Pending* p, const uint8_t* answer, size_t len) {
  if (tap == nullptr || (p->tapped_at.tv_sec == 0 && p->tapped_at.tv_nsec == 0)) return;
  dnstap::Message m;
  m.type = dnstap::MessageType::kForwarderResponse;
  m.protocol = p->over_tcp ? dnstap::Protocol::kTcp : dnstap::Protocol::kUdp;
  m.query_address = p->tap_local;
  m.response_address = dnstap::EndpointOf(groups[p->weighted_group ? 1 : 0].upstreams[p->upstream].address);
  m.query_time = p->tapped_at;
  m.response_time = dnstap::Now();
  m.query_message = p->query;
  m.response_message = {answer, len};
  tap->Send(m);
}

Forwarder::Forwarder(const FastpathConfig& config, std::vector<MissChannel*> channels, SharedState* shared)
    : impl_(std::make_unique<Impl>()) {
  impl_->self = this;
  impl_->config = config;
  impl_->shared = shared;
  impl_->parse_options.weight_option_code = config.weight_option_code;
  impl_->overflow.resize(channels.size());
  impl_->wake.assign(channels.size(), false);
  impl_->channels = std::move(channels);
  for (int g = 0; g < 2; ++g) {
    Group& grp = impl_->groups[g];
    grp.upstreams = g == 0 ? config.ordinary : config.weighted;
    grp.stats = g == 0 ? &ordinary_stats_ : &weighted_stats_;
    for (const auto& u : grp.upstreams) {
      auto s = std::make_unique<UpstreamStats>();
      s->name = u.name;
      grp.stats->push_back(std::move(s));
    }
    grp.ring =
        std::make_unique<UpstreamRing>(static_cast<int>(grp.upstreams.size()), 128, config.ring_load_factor);
    grp.consecutive_failures.assign(grp.upstreams.size(), 0);
    grp.next_probe.assign(grp.upstreams.size(), Clock::time_point{});
  }
  // One cookie secret for the process's life: the client cookies stay the
  // same across the pool's port changes, as RFC 7873 5.1 wants.
  std::array<uint8_t, 16> secret{};
  impl_->rng.Fill(secret.data(), secret.size());
  impl_->cookies.emplace(secret);
  for (Group& grp : impl_->groups) {
    for (const UpstreamConfig& u : grp.upstreams) {
      int e = impl_->EndpointOf(u.address);
      if (e < 0) {
        e = static_cast<int>(impl_->endpoints.size());
        // The pool's sockets are bound to the wildcard address: the client
        // cookie is made from the recursor's address alone.
        impl_->endpoints.push_back({u.address, impl_->cookies->ClientCookie({}, u.address)});
      }
      grp.endpoint.push_back(e);
    }
  }
  const size_t late_capacity =
      4 * static_cast<size_t>(config.max_inflight) * static_cast<size_t>(config.upstream_attempts) + 1024;
  impl_->tries = std::make_unique<Tries>(impl_->LateWindow(), late_capacity);
}

int Forwarder::Impl::EndpointOf(const SocketAddress& src) const {
  for (size_t e = 0; e < endpoints.size(); ++e) {
    const SocketAddress& a = endpoints[e].address;
    if (src.family() == a.family() && src.port() == a.port() &&
        std::memcmp(src.addr_bytes(), a.addr_bytes(), a.addr_len()) == 0) {
      return static_cast<int>(e);
    }
  }
  return -1;
}

int Forwarder::Impl::OpenPoolSocket(int family) {
  const int fd = socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (family == AF_INET6) {
    const int on = 1;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on));
  }
  // Room for a burst of answers while the loop is busy elsewhere.
  const int rcvbuf = 1 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  // A port of the ephemeral range (less the reserved ports) drawn from the
  // CSPRNG; taken ones are drawn again; after 32 misses the kernel picks.
  bool bound = false;
  for (int i = 0; i < 33 && !bound; ++i) {
    const uint16_t port = i < 32 ? ports.Draw(rng) : 0;
    sockaddr_storage ss{};
    socklen_t len = 0;
    if (family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      a->sin_family = AF_INET;
      a->sin_port = htons(port);
      len = sizeof(sockaddr_in);
    } else {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      a->sin6_family = AF_INET6;
      a->sin6_port = htons(port);
      len = sizeof(sockaddr_in6);
    }
    bound = bind(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0;
  }
  if (!bound) {
    close(fd);
    return -1;
  }
  sockaddr_storage local{};
  socklen_t ll = sizeof(local);
  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll);
  PoolSocket& s = sockets[fd];
  s.fd = fd;
  s.family = family;
  s.port = SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&local), ll).port();
  loop.Watch(fd, EPOLLIN, [this, fd](uint32_t) { OnPoolReadable(fd); });
  return fd;
}

static std::string ReadSmallFile(const char* path) {
  char text[4096];
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return {};
  const size_t n = std::fread(text, 1, sizeof(text), f);
  std::fclose(f);
  return std::string(text, n);
}

absl::Status Forwarder::Impl::OpenPool() {
  ports = PortRange::FromProc(ReadSmallFile("/proc/sys/net/ipv4/ip_local_port_range"),
                              ReadSmallFile("/proc/sys/net/ipv4/ip_local_reserved_ports"));
  bool want[2] = {false, false};
  for (const Endpoint& e : endpoints) want[e.address.family() == AF_INET ? 0 : 1] = true;
  for (int f = 0; f < 2; ++f) {
    if (!want[f] || !pool[f].empty()) continue;
    for (int i = 0; i < config.udp_sockets; ++i) {
      const int fd = OpenPoolSocket(f == 0 ? AF_INET : AF_INET6);
      if (fd < 0) {
        return absl::UnavailableError(common::Cat("forwarder: cannot open upstream socket ", i + 1, " of ",
                                                  config.udp_sockets, ": ", std::strerror(errno)));
      }
      pool[f].push_back(fd);
    }
  }
  self->udp_sockets_.store(sockets.size(), std::memory_order_relaxed);
  if (config.udp_socket_lifetime_s > 0) {
    next_rotation = Clock::now() + std::chrono::seconds(config.udp_socket_lifetime_s) / config.udp_sockets;
  }
  return absl::OkStatus();
}

void Forwarder::Impl::Housekeep() {
  const auto now = Clock::now();
  if (now < next_housekeeping) return;
  next_housekeeping = now + std::chrono::seconds(1);
  std::vector<int> done;
  for (const auto& [fd, s] : sockets) {
    if (s.retired && s.tries == 0 && now >= s.close_after) done.push_back(fd);
  }
  for (int fd : done) {
    loop.Unwatch(fd);
    close(fd);
    sockets.erase(fd);
  }
  if (config.udp_socket_lifetime_s > 0 && now >= next_rotation) {
    // One socket of each pool moves to a fresh random port; over a lifetime
    // every port is replaced, so a port that leaked (a packet capture, a
    // listing of the host's sockets) stops being useful. The old socket
    // stays open for its tries' answers, then closes.
    next_rotation = now + std::chrono::seconds(config.udp_socket_lifetime_s) / config.udp_sockets;
    for (int f = 0; f < 2; ++f) {
      if (pool[f].empty()) continue;
      const int fresh = OpenPoolSocket(f == 0 ? AF_INET : AF_INET6);
      if (fresh < 0) continue;  // keep the old one until the next turn
      const uint32_t i = rng.Below(static_cast<uint32_t>(pool[f].size()));
      PoolSocket& old = sockets[pool[f][i]];
      old.retired = true;
      old.close_after = now + LateWindow();
      pool[f][i] = fresh;
    }
  }
  self->udp_sockets_.store(sockets.size(), std::memory_order_relaxed);
}

Forwarder::~Forwarder() { Stop(); }

absl::Status Forwarder::Start() {
  Impl& f = *impl_;
  if (!f.loop_ready) {
    if (absl::Status st = f.loop.Init(); !st.ok()) {
      return absl::Status(st.code(), common::Cat("forwarder: ", st.message()));
    }
    f.loop_ready = true;
  }
  if (absl::Status st = f.OpenPool(); !st.ok()) return st;
  f.loop.SetWakeHandler([&f] { f.Drain(); });
  f.running = true;
  f.thread = std::thread([&f] { f.Run(); });
  return absl::OkStatus();
}

void Forwarder::Stop() {
  if (!impl_->running.exchange(false)) return;
  Notify();
  impl_->thread.join();
  for (auto& [fd, p] : impl_->by_fd) {
    impl_->loop.Unwatch(fd);
    close(fd);
    p->tcp_fd = -1;
  }
  for (auto& [fd, s] : impl_->sockets) {
    impl_->loop.Unwatch(fd);
    close(fd);
  }
  impl_->sockets.clear();
  impl_->pool[0].clear();
  impl_->pool[1].clear();
  for (auto& [fd, probe] : impl_->probes) {
    impl_->loop.Unwatch(fd);
    close(fd);
  }
  impl_->by_fd.clear();
  impl_->probes.clear();
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
  partitions::RcuThread rcu;
  loop.SetWaitHooks([&rcu] { rcu.Offline(); }, [&rcu] { rcu.Online(); });
  while (running.load(std::memory_order_relaxed)) {
    self->heartbeat_.Beat();
    // Descriptors (upstream answers, probes), the wake (misses), timers.
    loop.RunOnce(std::chrono::milliseconds(50));
    Drain();  // a push may have raced the wake
    SendProbes();
    Housekeep();
    FlushReturns();  // one wake per worker per turn
    rcu.Quiescent();
  }
  loop.SetWaitHooks(nullptr, nullptr);
}

void Forwarder::Impl::Drain() {
  for (size_t w = 0; w < channels.size(); ++w) {
    PendingClient c;
    // A worker that has not taken back kMaxHeldReturns of its answers (it
    // cannot keep up) gets no more of its misses taken: they stay in its
    // ring, which fills, and the worker drops new misses
    // (weir_drops_total{reason="miss_queue_full"}). Without it the held
    // answers, and the worker's routes for their clients, grow without bound.
    while (overflow[w].size() < kMaxHeldReturns && channels[w]->misses.Pop(&c)) Accept(std::move(c));
  }
}

void Forwarder::Impl::FlushReturns() {
  for (size_t w = 0; w < channels.size(); ++w) {
    std::deque<ReturnedQuery>& held = overflow[w];
    while (!held.empty() && channels[w]->returns.Push(std::move(held.front()))) {
      held.pop_front();
      wake[w] = true;
    }
    if (wake[w]) {
      wake[w] = false;
      if (channels[w]->wake_worker) channels[w]->wake_worker();
    }
  }
}

void Forwarder::Impl::Accept(PendingClient&& c) {
  // Coalescing key: everything that makes two answers differ.
  const MissRequest& m = c.miss;
  if (c.accepted == Clock::time_point{}) c.accepted = Clock::now();
  std::string key;
  key.reserve(16 + m.qname.len);
  key.append(reinterpret_cast<const char*>(&m.partition), sizeof(m.partition));
  key.append(reinterpret_cast<const char*>(&m.qtype), 2);
  key.push_back(static_cast<char>((m.do_bit ? 1 : 0) | (m.cd_bit ? 2 : 0) | (m.weighted ? 4 : 0)));
  key.append(reinterpret_cast<const char*>(m.qname.bytes.data()), m.qname.len);
  if (waiting >= static_cast<size_t>(config.max_waiting_clients)) {
    // As many clients wait as we keep (memory): answer now, stale or
    // SERVFAIL, rather than hold one more until the deadline.
    self->waiting_limited_.Add();
    return StaleOrServfail(c);
  }
  auto it = inflight.find(key);
  if (it != inflight.end()) {
    self->coalesced_.Add();
    ++waiting;
    self->waiting_.store(waiting, std::memory_order_relaxed);
    it->second->waiters.push_back(std::move(c));
    if (!it->second->answer_timer) ArmAnswerDeadline(it->second.get());
    return;
  }
  bool stale_exists = false;
  if (c.route.waits() && !m.do_bit && !m.cd_bit) {
    // The question may have been answered and cached between the worker's
    // miss and now (it waited in the queue): answer from the cache. Not a
    // DO or CD one: the cache never answers those (the worker would find
    // nothing and send SERVFAIL).
    const partitions::CacheKey ck{m.partition, m.qname.span(), m.qtype, m.qclass};
    partitions::Freshness f;
    if (shared->cache->Find(ck, shared->clock->NowSeconds(), &f) != nullptr) {
      if (f == partitions::Freshness::kFresh) {
        self->coalesced_.Add();
        return Reply(c, HandleMode::kAfterFill, nullptr);
      }
      stale_exists = f == partitions::Freshness::kStale;
    }
  }
  if (inflight.size() >= static_cast<size_t>(config.max_inflight)) {
    // Every socket we allow ourselves is in use: answer now (stale, else
    // SERVFAIL) rather than queue behind questions that may never return.
    self->inflight_limited_.Add();
    return StaleOrServfail(c);
  }
  auto p = std::make_unique<Pending>();
  p->key = key;
  p->miss = c.miss;
  p->weighted_group = m.weighted || m.send_ecs;
  p->waiters.push_back(std::move(c));
  ++waiting;
  self->waiting_.store(waiting, std::memory_order_relaxed);
  Pending* raw = p.get();
  inflight.emplace(key, std::move(p));
  self->in_flight_.store(inflight.size(), std::memory_order_relaxed);
  if (stale_exists && config.stale_answer_after_ms > 0) {
    const uint64_t gen = next_generation++;
    client_timers[gen] = key;
    loop.After(std::chrono::milliseconds(config.stale_answer_after_ms), [this, gen] { OnClientTimer(gen); });
  }
  ArmAnswerDeadline(raw);
  Send(raw);
}

std::string Forwarder::Impl::QuestionKey(int endpoint, uint16_t qtype, const dns::NameKey& qname) {
  std::string key;
  key.reserve(4 + qname.len);
  key.push_back(static_cast<char>(endpoint >> 8));
  key.push_back(static_cast<char>(endpoint));
  key.append(reinterpret_cast<const char*>(&qtype), 2);
  key.append(reinterpret_cast<const char*>(qname.bytes.data()), qname.len);
  return key;
}

void Forwarder::Impl::Send(Pending* p) {
  Group& g = groups[p->weighted_group ? 1 : 0];
  uint8_t hashkey[8 + dns::kMaxNameWire];
  std::memcpy(hashkey, &p->miss.partition, 8);
  std::memcpy(hashkey + 8, p->miss.qname.bytes.data(), p->miss.qname.len);
  const uint64_t hash = StableHash(hashkey, 8 + p->miss.qname.len);
  // The next recursor on the ring that has room for one more question (this
  // question's own try there, if any, is about to end).
  uint64_t exclude = p->tried;
  int u;
  bool full = false;
  while ((u = g.ring->Pick(hash, exclude)) >= 0) {
    const int own = p->has_try() && p->upstream == u ? 1 : 0;
    if (g.ring->load(u) - own < config.max_inflight_per_upstream) break;
    exclude |= uint64_t{1} << u;
    full = true;
  }
  if (u < 0 && full) self->inflight_limited_.Add();
  if (u < 0 || p->attempts >= config.upstream_attempts) return Fail(p);
  EndTry(p, true);  // a try that timed out may still be answered: late
  const int e = g.endpoint[u];
  Endpoint& ep = endpoints[e];
  const SocketAddress& dst = ep.address;
  const std::vector<int>& socks = pool[dst.family() == AF_INET ? 0 : 1];
  const auto now = Clock::now();
  // A random socket of the pool and a random ID; the pair (with the
  // upstream) must be neither in flight nor recently ended.
  Tries::Key key;
  bool found = false;
  for (int i = 0; i < 64 && !found && !socks.empty(); ++i) {
    key = {socks[rng.Below(static_cast<uint32_t>(socks.size()))], static_cast<uint16_t>(e), rng.Next16()};
    found = tries->Free(key, now);
  }
  if (!found) return Fail(p);
  dns::ResponseWriter w(out, sizeof(out));
  w.Begin(key.id, dns::flag::kRd | (p->miss.cd_bit ? dns::flag::kCd : 0), p->miss.qname.span(), p->miss.qtype,
          p->miss.qclass);
  w.BeginOpt(kEdnsUdpSize, p->miss.do_bit);
  if (p->miss.send_ecs) w.AddEcs(p->miss.ecs);
  if (p->miss.weighted) w.AddWeights(config.weight_option_code, {});
  if (config.upstream_cookies) {
    uint8_t cookie[dns::CookieJar::kMaxOption];
    const size_t cookie_len = cookies->OptionData(ep.client_cookie, ep.address, cookie);
    w.AddOption(dns::option::kCookie, {cookie, cookie_len});
  }
  const size_t len = w.Finish(sizeof(out));
  p->case_randomized = config.case_randomization && case_memory.Preserves(ep.address, now) &&
                       dns::RandomizeCase({out + dns::kHeaderSize, p->miss.qname.len}, rng) > 0;
  p->query.assign(out, out + len);
  if (sendto(key.socket, out, len, 0, dst.sa(), dst.len) < 0) {
    p->tried |= uint64_t{1} << u;
    ++p->attempts;
    // A full socket buffer is ours, not the recursor's fault.
    if (errno == EAGAIN || errno == ENOBUFS) return Fail(p);
    MarkResult(g, u, false);
    return Send(p);
  }
  PoolSocket& sock = sockets[key.socket];
  ++sock.tries;
  tries->Add(key, p);
  by_question[QuestionKey(e, p->miss.qtype, p->miss.qname)].push_back(p);
  p->udp_live = true;
  p->udp_socket = key.socket;
  p->endpoint = e;
  p->id = key.id;
  p->port = sock.port;
  p->upstream = u;
  p->tried |= uint64_t{1} << u;
  ++p->attempts;
  p->sent = now;
  p->deadline = p->sent + std::chrono::milliseconds(config.upstream_timeout_ms);
  p->generation = next_generation++;
  g.ring->AddLoad(u, 1);
  (*g.stats)[u]->queries.Add();
  self->upstream_queries_.Add();
  p->tapped_at = {};
  if (tap != nullptr && tap->Sample()) TapQuery(p, key.socket, false);
  ArmTry(p);
}

void Forwarder::Impl::OnPoolReadable(int fd) {
  // A bounded batch per wake-up: a flood on one socket cannot starve the
  // others, the workers' misses or the timers.
  for (int i = 0; i < 256; ++i) {
    sockaddr_storage from{};
    socklen_t fl = sizeof(from);
    const ssize_t n = recvfrom(fd, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &fl);
    if (n < 0) return;
    OnDatagram(fd, static_cast<size_t>(n),
               SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&from), fl));
    if (!sockets.contains(fd)) return;  // closed meanwhile (never today; cheap to be sure)
  }
}

void Forwarder::Impl::OnDatagram(int fd, size_t n, const SocketAddress& src) {
  // Anti-spoofing: the answer must come from a recursor's address and port,
  // to the socket and with the ID of a try in flight to it, echo our
  // question exactly (in our 0x20 case) and our cookie.
  const int e = EndpointOf(src);
  if (e < 0 || n < dns::kHeaderSize) {
    self->unwanted_.Add();
    self->spoofed_.Add();
    return;
  }
  const auto now = Clock::now();
  const Tries::Key key{fd, static_cast<uint16_t>(e), dns::Load16(buf)};
  Pending* p = tries->Find(key);
  if (p == nullptr) {
    if (tries->TakeLate(key, now)) {
      self->late_.Add();  // the answer to a try that timed out or was abandoned
      return;
    }
    self->unwanted_.Add();
    self->spoofed_.Add();
    NoteUnwanted(e, n);
    return;
  }
  Group& g = groups[p->weighted_group ? 1 : 0];
  dns::Message m;
  if (!Genuine(p, buf, n, &m)) return;  // wait for the genuine one
  Endpoint& ep = endpoints[e];
  if (p->case_randomized) {
    if (!dns::SameSpelling({buf, n}, SentName(p))) {
      // A forger that guessed socket and ID but not our case, or a server
      // that does not keep it: either way this answer is not taken, and the
      // question is asked again over TCP, where case does not matter and
      // the server's own answer tells which it was (OnTcp).
      self->case_mismatches_.Add();
      self->spoofed_.Add();
      refused_log(ep.address.ToString(), ": answer refused (question case differs from the 0x20 query)");
      p->case_suspect = true;
      return SwitchToTcp(p, true);
    }
  }
  if (config.upstream_cookies) {
    dns::CookieJar::Verdict v{};
    const dns::CookieJar::Outcome o = cookies->OnAnswer(ep.client_cookie, ep.address, m, false, &v);
    if (o == dns::CookieJar::Outcome::kRefuse) {
      self->cookie_mismatches_.Add();
      self->spoofed_.Add();
      refused_log(ep.address.ToString(), ": answer refused (",
                  v == dns::CookieJar::Verdict::kAbsent ? "no cookie from a server that sends them"
                                                        : "wrong or malformed cookie",
                  ")");
      return SwitchToTcp(p, true);
    }
    // BADCOOKIE (RFC 7873 5.3): the new server cookie is learned; TCP
    // needs none.
    if (o == dns::CookieJar::Outcome::kBadCookie) {
      TapResponse(p, buf, n);
      return SwitchToTcp(p, false);
    }
  }
  TapResponse(p, buf, n);
  if (m.flags() & dns::flag::kTc) return SwitchToTcp(p, false);
  (*g.stats)[p->upstream]->latency.Observe(Seconds(now - p->sent));
  (*g.stats)[p->upstream]->answers.Add();
  MarkResult(g, p->upstream, true);
  Finish(p, buf, n);
}

void Forwarder::Impl::NoteUnwanted(int e, size_t n) {
  if (config.unwanted_reply_threshold == 0) return;
  dns::Message m;
  if (m.Parse({buf, n}, parse_options) != dns::ParseError::kOk) return;
  auto it = by_question.find(QuestionKey(e, m.qtype(), m.qname()));
  if (it == by_question.end()) return;
  // A copy: a reaction ends the try and edits the list.
  const std::vector<Pending*> targets = it->second;
  for (Pending* p : targets) {
    if (++p->unwanted < static_cast<uint32_t>(config.unwanted_reply_threshold) || !p->udp_live) continue;
    // Someone is guessing our IDs for this question: stop offering them.
    // TCP cannot be answered blind (unbound's unwanted-reply-threshold,
    // per question).
    self->spoof_reactions_.Add();
    reaction_log(endpoints[e].address.ToString(), ": ", p->unwanted,
                 " unwanted answers for one question in flight: asking it over TCP");
    SwitchToTcp(p, true);
  }
}

bool Forwarder::Impl::Genuine(const Pending* p, const uint8_t* data, size_t len, dns::Message* m) {
  const dns::ParseError e = m->Parse({data, len}, parse_options);
  if (e != dns::ParseError::kOk || m->id() != p->id || !(m->flags() & dns::flag::kQr) ||
      m->qtype() != p->miss.qtype || m->qclass() != p->miss.qclass || !(m->qname() == p->miss.qname)) {
    self->spoofed_.Add();
    const Group& g = groups[p->weighted_group ? 1 : 0];
    refused_log(g.upstreams[p->upstream].address.ToString(), ": answer refused (",
                e != dns::ParseError::kOk ? dns::ParseErrorName(e) : "does not match the query", ")");
    return false;
  }
  return true;
}

void Forwarder::Impl::EndTry(Pending* p, bool expect_late) {
  by_generation.erase(p->generation);
  loop.Cancel(p->try_timer);
  Group& g = groups[p->weighted_group ? 1 : 0];
  if (p->udp_live) {
    p->udp_live = false;
    tries->End({p->udp_socket, static_cast<uint16_t>(p->endpoint), p->id}, expect_late, Clock::now());
    auto q = by_question.find(QuestionKey(p->endpoint, p->miss.qtype, p->miss.qname));
    if (q != by_question.end()) {
      std::erase(q->second, p);
      if (q->second.empty()) by_question.erase(q);
    }
    auto s = sockets.find(p->udp_socket);
    if (s != sockets.end() && s->second.tries > 0) --s->second.tries;
    p->udp_socket = -1;
    g.ring->AddLoad(p->upstream, -1);
  }
  if (p->tcp_fd >= 0) {
    loop.Unwatch(p->tcp_fd);
    by_fd.erase(p->tcp_fd);
    close(p->tcp_fd);
    p->tcp_fd = -1;
    g.ring->AddLoad(p->upstream, -1);
  }
  p->over_tcp = false;
  p->tcp_out.clear();
  p->tcp_in.Clear();
  p->tcp_sent = 0;
}

void Forwarder::Impl::SwitchToTcp(Pending* p, bool expect_late) {
  Group& g = groups[p->weighted_group ? 1 : 0];
  const int u = p->upstream;
  EndTry(p, expect_late);
  const SocketAddress& dst = g.upstreams[u].address;
  const int fd = socket(dst.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Send(p);
  if (connect(fd, dst.sa(), dst.len) != 0 && errno != EINPROGRESS) {
    close(fd);
    MarkResult(g, u, false);
    return Send(p);
  }
  p->tcp_fd = fd;
  p->upstream = u;
  p->over_tcp = true;
  const timespec udp_tapped_at = p->tapped_at;
  p->tcp_out.resize(2 + p->query.size());
  dns::Store16(p->tcp_out.data(), static_cast<uint16_t>(p->query.size()));
  std::memcpy(p->tcp_out.data() + 2, p->query.data(), p->query.size());
  p->sent = Clock::now();
  p->deadline = p->sent + std::chrono::milliseconds(config.upstream_timeout_ms);
  p->generation = next_generation++;
  g.ring->AddLoad(u, 1);
  by_fd[fd] = p;
  loop.Watch(fd, EPOLLIN | EPOLLOUT, [this, fd](uint32_t events) {
    auto it = by_fd.find(fd);
    if (it != by_fd.end()) OnTcp(it->second, events);
  });
  // The same question again over TCP: tapped when its UDP try was.
  if (tap != nullptr && (udp_tapped_at.tv_sec != 0 || udp_tapped_at.tv_nsec != 0)) TapQuery(p, fd, true);
  ArmTry(p);
}

void Forwarder::Impl::ArmTry(Pending* p) {
  by_generation[p->generation] = p;
  // A try the pending finished or re-sent since is skipped (and cancelled
  // in EndTry): the timer names its try by generation.
  p->try_timer = loop.At(p->deadline, [this, gen = p->generation] {
    auto it = by_generation.find(gen);
    if (it != by_generation.end()) OnTimeout(it->second);
  });
}

void Forwarder::Impl::OnTcp(Pending* p, uint32_t events) {
  Group& g = groups[p->weighted_group ? 1 : 0];
  auto fail = [&] {
    if (CaseFallback(p)) return;
    MarkResult(g, p->upstream, false);
    Send(p);  // the next recursor, over UDP again
  };
  if (events & (EPOLLERR | EPOLLHUP) && !(events & EPOLLIN)) return fail();
  if ((events & EPOLLOUT) && p->tcp_sent < p->tcp_out.size()) {
    const ssize_t n =
        send(p->tcp_fd, p->tcp_out.data() + p->tcp_sent, p->tcp_out.size() - p->tcp_sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN) return fail();
    if (n > 0) p->tcp_sent += static_cast<size_t>(n);
    if (p->tcp_sent == p->tcp_out.size()) {
      loop.Modify(p->tcp_fd, EPOLLIN);
    }
  }
  if (!(events & EPOLLIN)) return;
  // Only the bytes of the one answer expected are taken off the socket.
  while (!p->tcp_in.Complete()) {
    const ssize_t n = recv(p->tcp_fd, buf, std::min(sizeof(buf), p->tcp_in.Want()), 0);
    if (n == 0) return fail();  // closed before a whole answer
    if (n < 0) {
      if (errno == EAGAIN) return;
      if (errno == EINTR) continue;
      return fail();
    }
    if (!p->tcp_in.Append({buf, static_cast<size_t>(n)})) return fail();
  }
  const size_t len = p->tcp_in.Message().size();
  dns::Message m;
  // Copy out: Finish releases `p` and with it tcp_in.
  std::memcpy(out, p->tcp_in.Message().data(), len);
  if (!Genuine(p, out, len, &m)) return fail();
  const Endpoint& ep = endpoints[p->endpoint];
  // Over TCP the answer is the server's own: a question in another case
  // than our 0x20 one says the server does not keep it (a forger cannot
  // teach that, so one answer is proof enough).
  if (p->case_randomized && !dns::SameSpelling({out, len}, SentName(p))) {
    LearnNoCase(ep, "does not keep the question's case");
  }
  if (config.upstream_cookies &&
      cookies->OnAnswer(ep.client_cookie, ep.address, m, true) == dns::CookieJar::Outcome::kRefuse) {
    self->cookie_mismatches_.Add();
    return fail();
  }
  TapResponse(p, out, len);
  std::memcpy(buf, out, len);
  (*g.stats)[p->upstream]->latency.Observe(Seconds(Clock::now() - p->sent));
  (*g.stats)[p->upstream]->answers.Add();
  MarkResult(g, p->upstream, true);
  Finish(p, buf, len);
}

void Forwarder::Impl::LearnNoCase(const Endpoint& ep, std::string_view why) {
  case_memory.NotPreserved(ep.address, Clock::now());
  self->case_fallbacks_.Add();
  case_log(ep.address.ToString(), " ", why, ": 0x20 off for it for ",
           std::chrono::duration_cast<std::chrono::minutes>(dns::CaseMemory::kHold).count(), " minutes");
}

bool Forwarder::Impl::CaseFallback(Pending* p) {
  if (!p->over_tcp || !p->case_suspect) return false;
  // The server answered over UDP in another case and cannot be asked over
  // TCP: it does not keep the case (a balancer that lower-cases names). It
  // is asked again at once, over UDP without 0x20 (its answers still need
  // the socket, the ID, the question and the cookie), within the client's
  // deadline; this try does not count against it or the attempts.
  p->case_suspect = false;
  LearnNoCase(endpoints[p->endpoint], "answers in another case than asked and not over TCP");
  p->tried &= ~(uint64_t{1} << p->upstream);
  if (p->attempts > 0) --p->attempts;
  Send(p);
  return true;
}

void Forwarder::Impl::OnTimeout(Pending* p) {
  if (CaseFallback(p)) return;
  Group& g = groups[p->weighted_group ? 1 : 0];
  (*g.stats)[p->upstream]->timeouts.Add();
  MarkResult(g, p->upstream, false);
  Send(p);  // next upstream on the ring, or Fail when out of attempts
}

void Forwarder::Impl::MarkResult(Group& g, int u, bool ok) {
  // `up` in the stats is the recursor's health as the operator sees it
  // (weir_upstream_up, the lines below); the ring's own flag may be set
  // again for a recursor that is down when every one of them is.
  if (ok) {
    g.consecutive_failures[u] = 0;
    if (!g.ring->IsUp(u)) g.ring->SetUp(u, true);
    if (!(*g.stats)[u]->up) {
      (*g.stats)[u]->up = true;
      up_log(g.upstreams[u].address.ToString(), " answered again: marked up");
    }
    return;
  }
  if (++g.consecutive_failures[u] < config.health_failures) return;
  if ((*g.stats)[u]->up) {
    // Down until a health probe (or a query) is answered. Said once per
    // change, not per failure after it.
    (*g.stats)[u]->up = false;
    g.next_probe[u] = Clock::now() + std::chrono::milliseconds(config.health_interval_ms);
    down_log(g.upstreams[u].address.ToString(), " marked down after ", g.consecutive_failures[u],
             " failures in a row");
  }
  if (g.ring->IsUp(u)) {
    // The ring moves its share to the next live recursor only. If every
    // recursor is down, all are retried.
    g.ring->SetUp(u, false);
    bool any = false;
    for (int i = 0; i < g.ring->size(); ++i) any = any || g.ring->IsUp(i);
    if (!any) {
      for (int i = 0; i < g.ring->size(); ++i) g.ring->SetUp(i, true);
    }
  }
}

void Forwarder::Impl::Release(Pending* p, bool expect_late) {
  EndTry(p, expect_late);
  waiting -= p->waiters.size();
  self->waiting_.store(waiting, std::memory_order_relaxed);
  inflight.erase(p->key);  // frees p
  self->in_flight_.store(inflight.size(), std::memory_order_relaxed);
}

void Forwarder::Impl::Reply(PendingClient& c, HandleMode mode, std::shared_ptr<const RelayedAnswer> relay) {
  if (!c.route.waits()) return;  // a prefetch: nobody waits
  const auto w = static_cast<size_t>(c.route.worker);
  ReturnedQuery r;
  r.mode = mode;
  r.relay = std::move(relay);
  r.client = std::move(c);
  if (overflow[w].empty() && channels[w]->returns.Push(std::move(r))) {
    wake[w] = true;
    return;
  }
  // The worker's ring is full: hold the return (in order) until it has room.
  overflow[w].push_back(std::move(r));
}

// Builds the cache entry for an upstream answer and inserts it. Returns
// false when the answer is not cacheable. *stale_instead is set when the
// answer is a failure and a stale entry should be served instead.
bool Forwarder::Impl::FillCache(const Pending& p, const dns::Message& up, bool* stale_instead,
                                bool* learned) {
  *stale_instead = false;
  *learned = false;
  partitions::Cache& cache = *shared->cache;
  const uint32_t now = shared->clock->NowSeconds();
  const partitions::CacheKey key{p.miss.partition, p.miss.qname.span(), p.miss.qtype, p.miss.qclass};
  const uint16_t rcode = up.rcode();
  if (rcode == static_cast<uint16_t>(dns::Rcode::kServFail)) {
    partitions::Freshness f;
    if (cache.Find(key, now, &f) != nullptr) {
      *stale_instead = true;  // RFC 8767: keep the stale answer, do not overwrite it
      return false;
    }
  } else if (rcode != 0 && rcode != static_cast<uint16_t>(dns::Rcode::kNxDomain)) {
    return false;  // REFUSED, NOTIMP, FORMERR...: relayed, never cached
  }
  if (up.flags() & dns::flag::kTc) return false;
  if (p.miss.do_bit || p.miss.cd_bit) return false;  // DNSSEC-aware answers are relayed only
  partitions::CacheEntryBuilder b(key);
  b.SetFlags(up.flags());
  // Follow the CNAME chain from the qname through the answer section; records
  // off the chain are not ours to cache.
  struct Rec {
    dns::NameKey owner;
    dns::RrView rr;
  };
  std::vector<Rec> answers;
  auto it = up.Records(dns::Section::kAnswer);
  dns::RrView rr;
  while (it.Next(&rr)) {
    Rec r;
    size_t end;
    if (dns::ReadName(up.bytes(), rr.name_offset, &end, &r.owner) != dns::ParseError::kOk) return false;
    r.rr = rr;
    answers.push_back(r);
  }
  dns::NameKey cur = p.miss.qname;
  // Any RDATA fits (a TXT record of several KB too): one that did not would
  // leave its record out of the entry, a wrong answer from the cache.
  uint8_t* const rdata = rdata_scratch.data();
  const size_t rdata_cap = rdata_scratch.size();
  size_t address_count = 0;
  bool found = false;
  uint32_t chain_ttl = UINT32_MAX;
  const partitions::TagTable* tags = shared->tags.Get();
  for (int hops = 0; hops < 16; ++hops) {
    bool advanced = false;
    for (const Rec& r : answers) {
      if (!(r.owner == cur) || r.rr.klass != p.miss.qclass) continue;
      size_t rdlen = 0;
      if (r.rr.type == dns::type::kCname && p.miss.qtype != dns::type::kCname) {
        if (dns::CopyRdataUncompressed(up.bytes(), r.rr, rdata, rdata_cap, &rdlen) != dns::ParseError::kOk) {
          return false;
        }
        b.AddCname(cur.span(), {rdata, rdlen}, r.rr.ttl);
        std::copy(rdata, rdata + rdlen, cur.bytes.begin());
        cur.len = static_cast<uint8_t>(rdlen);
        chain_ttl = std::min(chain_ttl, r.rr.ttl);
        advanced = true;
        // An untagged name whose chain enters a tagged suffix takes its tag
        // (docs/behaviour.md#domain-tags): not cached in the common partition, learned for
        // the chain's TTL, and resolved again as a tagged name.
        const partitions::Tag* tag = tags != nullptr && !p.miss.tagged ? tags->Lookup(cur.span()) : nullptr;
        if (tag != nullptr && (tag->weight || tag->ecs || tag->level != partitions::CacheLevel::kGlobal)) {
          const uint32_t now = shared->clock->NowSeconds();
          const uint32_t ttl = std::clamp<uint32_t>(chain_ttl, 1, shared->limits.max_ttl);
          const LearnedTags* current = shared->learned.Get();
          const LearnedTags empty;
          auto next = (current != nullptr ? current : &empty)
                          ->With(p.miss.qname.span(), *tag, now + ttl, now, kMaxLearnedNames);
          if (next == nullptr) {
            // Full: the name is not learned, and its answer is relayed but
            // never cached in the common partition.
            self->learned_overflow_.Add();
            return false;
          }
          // Deferred: the forwarder never waits for a grace period.
          shared->learned.PublishDeferred(std::move(next));
          self->learned_.Add();
          *learned = true;
          return false;
        }
        break;
      }
    }
    if (!advanced) break;
  }
  for (const Rec& r : answers) {
    if (!(r.owner == cur) || r.rr.type != p.miss.qtype || r.rr.klass != p.miss.qclass) continue;
    size_t rdlen = 0;
    if (dns::CopyRdataUncompressed(up.bytes(), r.rr, rdata, rdata_cap, &rdlen) != dns::ParseError::kOk) {
      return false;  // a record of the answer that cannot be stored: relayed, not cached without it
    }
    if ((r.rr.type == dns::type::kA && rdlen == 4) || (r.rr.type == dns::type::kAaaa && rdlen == 16)) {
      b.AddAddress(cur.span(), {rdata, rdlen}, r.rr.ttl);
      ++address_count;
    } else {
      b.AddAnswer(cur.span(), r.rr.type, r.rr.klass, r.rr.ttl, {rdata, rdlen});
    }
    found = true;
  }
  auto auth = up.Records(dns::Section::kAuthority);
  while (auth.Next(&rr)) {
    if (rr.type != dns::type::kSoa) continue;
    dns::NameKey owner;
    size_t end, rdlen;
    if (dns::ReadName(up.bytes(), rr.name_offset, &end, &owner) != dns::ParseError::kOk) continue;
    if (dns::CopyRdataUncompressed(up.bytes(), rr, rdata, rdata_cap, &rdlen) != dns::ParseError::kOk)
      return false;
    b.AddAuthority(owner.span(), rr.type, rr.klass, rr.ttl, {rdata, rdlen});
  }
  if (up.edns().has_weight && address_count > 0) {
    const dns::WeightSet w =
        dns::DecodeWeights(up.bytes().subspan(up.edns().weight_offset, up.edns().weight_len), address_count);
    if (w.valid()) b.SetWeights({w.weights.data(), w.count});
  }
  if (up.edns().has_ecs)
    b.SetEcs(up.edns().ecs.family, up.edns().ecs.source_prefix, up.edns().ecs.scope_prefix);
  partitions::EntryKind kind = partitions::EntryKind::kPositive;
  if (rcode == static_cast<uint16_t>(dns::Rcode::kServFail)) {
    kind = partitions::EntryKind::kServFail;
  } else if (rcode == static_cast<uint16_t>(dns::Rcode::kNxDomain)) {
    kind = partitions::EntryKind::kNxDomain;
  } else if (!found) {
    kind = partitions::EntryKind::kNoData;
  }
  auto entry = b.Build(kind, now, shared->limits);
  if (!entry.ok()) return false;
  cache.Insert(*std::move(entry));
  return true;
}

void Forwarder::Impl::Finish(Pending* p, const uint8_t* answer, size_t len) {
  dns::Message up;
  up.Parse({answer, len}, parse_options);
  bool stale_instead = false, learned = false;
  FillCache(*p, up, &stale_instead, &learned);
  const HandleMode mode = learned         ? HandleMode::kRetry
                          : stale_instead ? HandleMode::kStaleOk
                                          : HandleMode::kAfterFill;
  // One relay for every waiter (they share the DO bit: it is part of the
  // key); each worker writes its client's answer from it when the cache
  // cannot answer.
  const std::shared_ptr<const RelayedAnswer> relay = PrepareRelay(up, p->miss.qtype, !p->miss.do_bit);
  for (PendingClient& c : p->waiters) Reply(c, mode, relay);
  Release(p, false);
}

void Forwarder::Impl::SendProbes() {
  const auto now = Clock::now();
  for (int gi = 0; gi < 2; ++gi) {
    Group& g = groups[gi];
    for (int u = 0; u < g.ring->size(); ++u) {
      if (g.ring->IsUp(u) || now < g.next_probe[u]) continue;
      g.next_probe[u] = now + std::chrono::milliseconds(config.health_interval_ms);
      // The previous probe went unanswered for a whole interval: drop it.
      for (auto it = probes.begin(); it != probes.end();) {
        if (it->second.group == gi && it->second.upstream == u) {
          loop.Unwatch(it->first);
          close(it->first);
          probes.erase(it++);
        } else {
          ++it;
        }
      }
      const SocketAddress& dst = g.upstreams[u].address;
      const int fd = socket(dst.family(), SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      const uint16_t id = rng.Next16();
      static constexpr uint8_t kRoot[1] = {0};
      dns::ResponseWriter w(out, sizeof(out));
      w.Begin(id, dns::flag::kRd, kRoot, dns::type::kNs, dns::klass::kIn);
      const size_t len = w.Finish(sizeof(out));
      if (sendto(fd, out, len, 0, dst.sa(), dst.len) < 0) {
        close(fd);
        continue;
      }
      loop.Watch(fd, EPOLLIN, [this, fd](uint32_t) { OnProbe(fd); });
      probes[fd] = {gi, u, id};
    }
  }
}

void Forwarder::Impl::OnProbe(int fd) {
  const Probe probe = probes[fd];
  Group& g = groups[probe.group];
  const SocketAddress& dst = g.upstreams[probe.upstream].address;
  sockaddr_storage from{};
  socklen_t fl = sizeof(from);
  const ssize_t n = recvfrom(fd, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &fl);
  if (n < static_cast<ssize_t>(dns::kHeaderSize)) return;
  const SocketAddress src = SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&from), fl);
  const bool genuine = src.family() == dst.family() && src.port() == dst.port() &&
                       std::memcmp(src.addr_bytes(), dst.addr_bytes(), dst.addr_len()) == 0 &&
                       dns::Load16(buf) == probe.id && (buf[2] & 0x80) != 0;
  if (!genuine) return;
  loop.Unwatch(fd);
  close(fd);
  probes.erase(fd);
  MarkResult(g, probe.upstream, true);
}

void Forwarder::Impl::Fail(Pending* p) {
  for (PendingClient& c : p->waiters) {
    if (c.route.waits()) StaleOrServfail(c);
  }
  Release(p, true);
}

Pending* Forwarder::Impl::TimerTarget(uint64_t generation) {
  auto t = client_timers.find(generation);
  if (t == client_timers.end()) return nullptr;
  auto it = inflight.find(t->second);
  client_timers.erase(t);
  return it == inflight.end() ? nullptr : it->second.get();  // null: answered in time
}

void Forwarder::Impl::AnswerEarly(Pending* p, Clock::time_point accepted_by) {
  for (PendingClient& c : p->waiters) {
    if (c.route.waits() && c.accepted <= accepted_by) {
      StaleOrServfail(c);  // moves the client out
      c.route.worker = kAnswered;
    }
  }
  waiting -= std::erase_if(p->waiters, [](const PendingClient& c) { return c.route.worker == kAnswered; });
  self->waiting_.store(waiting, std::memory_order_relaxed);
}

void Forwarder::Impl::OnClientTimer(uint64_t generation) {
  // RFC 8767 client response timer: the upstream is slow and a stale answer
  // exists, so the waiting clients get it now; the resolution goes on and
  // refreshes the cache when it completes.
  if (Pending* p = TimerTarget(generation)) AnswerEarly(p, Clock::time_point::max());
}

void Forwarder::Impl::ArmAnswerDeadline(Pending* p) {
  Clock::time_point first = Clock::time_point::max();
  for (const PendingClient& c : p->waiters) {
    if (c.route.waits()) first = std::min(first, c.accepted);
  }
  p->answer_timer = first != Clock::time_point::max();
  if (!p->answer_timer) return;  // prefetches only: nobody waits
  const uint64_t gen = next_generation++;
  client_timers[gen] = p->key;
  loop.At(first + std::chrono::milliseconds(config.answer_deadline_ms),
          [this, gen] { OnAnswerDeadline(gen); });
}

void Forwarder::Impl::OnAnswerDeadline(uint64_t generation) {
  // The upstreams are unreachable or slow: clients that have waited the
  // whole deadline get the stale answer if there is one, else SERVFAIL,
  // before their own timeouts turn it into silence. The tries go on and
  // fill the cache for the next clients.
  Pending* p = TimerTarget(generation);
  if (p == nullptr) return;
  AnswerEarly(p, Clock::now() - std::chrono::milliseconds(config.answer_deadline_ms));
  ArmAnswerDeadline(p);
}

std::vector<double> Forwarder::RingShares(bool weighted) const {
  const Group& g = impl_->groups[weighted ? 1 : 0];
  const auto& stats = upstream_stats(weighted);
  std::vector<bool> up(stats.size());
  for (size_t i = 0; i < stats.size(); ++i) up[i] = stats[i]->up.load(std::memory_order_relaxed);
  return g.ring ? g.ring->Shares(up) : std::vector<double>(stats.size(), 0.0);
}

}  // namespace weir::fastpath
