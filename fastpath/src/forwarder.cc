#include "weir/fastpath/forwarder.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "weir/common/log.h"
#include "weir/dns/writer.h"
#include "weir/dnstap/dnstap.h"
#include "weir/fastpath/relay.h"
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
constexpr int32_t kAnswered = -2;  // a waiter answered early (ClientRoute::worker)

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
  int fd = -1;
  uint16_t id = 0;
  uint16_t port = 0;
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
  std::vector<std::unique_ptr<UpstreamStats>>* stats;
  std::unique_ptr<UpstreamRing> ring;
  std::vector<int> consecutive_failures;
  std::vector<Clock::time_point> next_probe;
};

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
  bool loop_ready = false;
  std::atomic<bool> running{false};
  std::thread thread;
  Group groups[2];  // 0 ordinary, 1 weighted
  absl::flat_hash_map<std::string, std::unique_ptr<Pending>> inflight;
  absl::flat_hash_map<int, Pending*> by_fd;
  // Timers name their try by generation, never by pointer: a Pending may
  // be freed long before its old deadlines come up.
  absl::flat_hash_map<uint64_t, Pending*> by_generation;
  // RFC 8767 client response timers and answer deadlines: generation ->
  // the pending's key.
  absl::flat_hash_map<uint64_t, std::string> client_timers;
  uint64_t next_generation = 1;
  std::mt19937_64 rng{std::random_device{}()};
  dns::ParseOptions parse_options;
  dnstap::Producer* tap = nullptr;
  uint8_t buf[kMaxMessage];
  uint8_t out[kMaxMessage];

  void Run();
  void Drain();
  void Accept(PendingClient&& c);
  void Send(Pending* p);
  void OnReadable(int fd);
  void OnTcp(Pending* p, uint32_t events);
  void SwitchToTcp(Pending* p);
  void CloseSocket(Pending* p);
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
  void Release(Pending* p);
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
  }
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
  // The forwarder reads and writes the cache: an RCU thread like the
  // workers, offline while its loop waits.
  partitions::RcuThread rcu;
  loop.SetWaitHooks([&rcu] { rcu.Offline(); }, [&rcu] { rcu.Online(); });
  while (running.load(std::memory_order_relaxed)) {
    // Descriptors (upstream answers, probes), the wake (misses), timers.
    loop.RunOnce(std::chrono::milliseconds(50));
    Drain();  // a push may have raced the wake
    SendProbes();
    FlushReturns();  // one wake per worker per turn
    rcu.Quiescent();
  }
  loop.SetWaitHooks(nullptr, nullptr);
}

void Forwarder::Impl::Drain() {
  for (MissChannel* ch : channels) {
    PendingClient c;
    while (ch->misses.Pop(&c)) Accept(std::move(c));
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
  auto it = inflight.find(key);
  if (it != inflight.end()) {
    self->coalesced_.Add();
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
    const int own = p->fd >= 0 && p->upstream == u ? 1 : 0;
    if (g.ring->load(u) - own < config.max_inflight_per_upstream) break;
    exclude |= uint64_t{1} << u;
    full = true;
  }
  if (u < 0 && full) self->inflight_limited_.Add();
  if (u < 0 || p->attempts >= config.upstream_attempts) return Fail(p);
  CloseSocket(p);
  const SocketAddress& dst = g.upstreams[u].address;
  // A fresh socket per query: the kernel picks a random ephemeral source port.
  const int fd = socket(dst.family(), SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Fail(p);
  p->id = static_cast<uint16_t>(rng());
  dns::ResponseWriter w(out, sizeof(out));
  w.Begin(p->id, dns::flag::kRd | (p->miss.cd_bit ? dns::flag::kCd : 0), p->miss.qname.span(), p->miss.qtype,
          p->miss.qclass);
  w.BeginOpt(kEdnsUdpSize, p->miss.do_bit);
  if (p->miss.send_ecs) w.AddEcs(p->miss.ecs);
  if (p->miss.weighted) w.AddWeights(config.weight_option_code, {});
  const size_t len = w.Finish(sizeof(out));
  p->query.assign(out, out + len);
  if (sendto(fd, out, len, 0, dst.sa(), dst.len) < 0) {
    close(fd);
    p->tried |= uint64_t{1} << u;
    ++p->attempts;
    MarkResult(g, u, false);
    return Send(p);
  }
  sockaddr_storage local{};
  socklen_t ll = sizeof(local);
  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll);
  p->port = SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&local), ll).port();
  p->fd = fd;
  p->upstream = u;
  p->tried |= uint64_t{1} << u;
  ++p->attempts;
  p->sent = Clock::now();
  p->deadline = p->sent + std::chrono::milliseconds(config.upstream_timeout_ms);
  p->generation = next_generation++;
  g.ring->AddLoad(u, 1);
  (*g.stats)[u]->queries.Add();
  self->upstream_queries_.Add();
  by_fd[fd] = p;
  loop.Watch(fd, EPOLLIN, [this, fd](uint32_t) { OnReadable(fd); });
  p->tapped_at = {};
  if (tap != nullptr && tap->Sample()) TapQuery(p, fd, false);
  ArmTry(p);
}

void Forwarder::Impl::OnReadable(int fd) {
  auto it = by_fd.find(fd);
  if (it == by_fd.end()) return;
  Pending* p = it->second;
  Group& g = groups[p->weighted_group ? 1 : 0];
  for (;;) {
    sockaddr_storage from{};
    socklen_t fl = sizeof(from);
    const ssize_t n = recvfrom(fd, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &fl);
    if (n < 0) return;
    const SocketAddress src = SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&from), fl);
    const SocketAddress& dst = g.upstreams[p->upstream].address;
    dns::Message m;
    // Anti-spoofing: the answer must come from the recursor's address and
    // port, carry our random ID and echo our question exactly.
    const bool from_ok = src.family() == dst.family() && src.port() == dst.port() &&
                         std::memcmp(src.addr_bytes(), dst.addr_bytes(), dst.addr_len()) == 0;
    if (!from_ok) {
      self->spoofed_.Add();
      continue;
    }
    if (!Genuine(p, buf, static_cast<size_t>(n), &m)) continue;  // wait for the genuine one
    TapResponse(p, buf, static_cast<size_t>(n));
    if (m.flags() & dns::flag::kTc) {
      SwitchToTcp(p);
      return;
    }
    (*g.stats)[p->upstream]->latency.Observe(Seconds(Clock::now() - p->sent));
    (*g.stats)[p->upstream]->answers.Add();
    MarkResult(g, p->upstream, true);
    Finish(p, buf, static_cast<size_t>(n));
    return;
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

void Forwarder::Impl::CloseSocket(Pending* p) {
  by_generation.erase(p->generation);
  loop.Cancel(p->try_timer);
  if (p->fd < 0) return;
  loop.Unwatch(p->fd);
  by_fd.erase(p->fd);
  close(p->fd);
  p->fd = -1;
  groups[p->weighted_group ? 1 : 0].ring->AddLoad(p->upstream, -1);
  p->over_tcp = false;
  p->tcp_out.clear();
  p->tcp_in.Clear();
  p->tcp_sent = 0;
}

void Forwarder::Impl::SwitchToTcp(Pending* p) {
  Group& g = groups[p->weighted_group ? 1 : 0];
  const int u = p->upstream;
  CloseSocket(p);
  const SocketAddress& dst = g.upstreams[u].address;
  const int fd = socket(dst.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Send(p);
  if (connect(fd, dst.sa(), dst.len) != 0 && errno != EINPROGRESS) {
    close(fd);
    MarkResult(g, u, false);
    return Send(p);
  }
  p->fd = fd;
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
  // in CloseSocket): the timer names its try by generation.
  p->try_timer = loop.At(p->deadline, [this, gen = p->generation] {
    auto it = by_generation.find(gen);
    if (it != by_generation.end()) OnTimeout(it->second);
  });
}

void Forwarder::Impl::OnTcp(Pending* p, uint32_t events) {
  Group& g = groups[p->weighted_group ? 1 : 0];
  auto fail = [&] {
    MarkResult(g, p->upstream, false);
    Send(p);  // the next recursor, over UDP again
  };
  if (events & (EPOLLERR | EPOLLHUP) && !(events & EPOLLIN)) return fail();
  if ((events & EPOLLOUT) && p->tcp_sent < p->tcp_out.size()) {
    const ssize_t n =
        send(p->fd, p->tcp_out.data() + p->tcp_sent, p->tcp_out.size() - p->tcp_sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN) return fail();
    if (n > 0) p->tcp_sent += static_cast<size_t>(n);
    if (p->tcp_sent == p->tcp_out.size()) {
      loop.Modify(p->fd, EPOLLIN);
    }
  }
  if (!(events & EPOLLIN)) return;
  // Only the bytes of the one answer expected are taken off the socket.
  while (!p->tcp_in.Complete()) {
    const ssize_t n = recv(p->fd, buf, std::min(sizeof(buf), p->tcp_in.Want()), 0);
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
  TapResponse(p, out, len);
  std::memcpy(buf, out, len);
  (*g.stats)[p->upstream]->latency.Observe(Seconds(Clock::now() - p->sent));
  (*g.stats)[p->upstream]->answers.Add();
  MarkResult(g, p->upstream, true);
  Finish(p, buf, len);
}

void Forwarder::Impl::OnTimeout(Pending* p) {
  Group& g = groups[p->weighted_group ? 1 : 0];
  (*g.stats)[p->upstream]->timeouts.Add();
  MarkResult(g, p->upstream, false);
  Send(p);  // next upstream on the ring, or Fail when out of attempts
}

void Forwarder::Impl::MarkResult(Group& g, int u, bool ok) {
  if (ok) {
    g.consecutive_failures[u] = 0;
    if (!g.ring->IsUp(u)) {
      g.ring->SetUp(u, true);
      (*g.stats)[u]->up = true;
      common::LogInfo("upstream", g.upstreams[u].address.ToString(), " answered again: marked up");
    }
    return;
  }
  if (++g.consecutive_failures[u] >= config.health_failures && g.ring->IsUp(u)) {
    g.next_probe[u] = Clock::now() + std::chrono::milliseconds(config.health_interval_ms);
    // Down until a health probe is answered; the ring moves its share to the
    // next live recursor only. If every recursor is down, all are retried.
    g.ring->SetUp(u, false);
    (*g.stats)[u]->up = false;
    common::LogWarning("upstream", g.upstreams[u].address.ToString(), " marked down after ",
                       g.consecutive_failures[u], " failures in a row");
    bool any = false;
    for (int i = 0; i < g.ring->size(); ++i) any = any || g.ring->IsUp(i);
    if (!any) {
      for (int i = 0; i < g.ring->size(); ++i) g.ring->SetUp(i, true);
    }
  }
}

void Forwarder::Impl::Release(Pending* p) {
  CloseSocket(p);
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
  uint8_t rdata[dns::kMaxNameWire * 2 + 32];
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
        if (dns::CopyRdataUncompressed(up.bytes(), r.rr, rdata, sizeof(rdata), &rdlen) !=
            dns::ParseError::kOk) {
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
    if (dns::CopyRdataUncompressed(up.bytes(), r.rr, rdata, sizeof(rdata), &rdlen) != dns::ParseError::kOk) {
      continue;
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
    if (dns::CopyRdataUncompressed(up.bytes(), rr, rdata, sizeof(rdata), &rdlen) != dns::ParseError::kOk)
      continue;
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
  Release(p);
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
      const uint16_t id = static_cast<uint16_t>(rng());
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
  Release(p);
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
  std::erase_if(p->waiters, [](const PendingClient& c) { return c.route.worker == kAnswered; });
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

}  // namespace weir::fastpath
