#include "weir/fastpath/forwarder_core.h"

#include <netinet/in.h>

#include <algorithm>
#include <cstring>

#include "weir/common/rcu.h"
#include "weir/dns/writer.h"
#include "weir/dnstap/dnstap.h"
#include "weir/fastpath/relay.h"
#include "weir/partitions/entry_from_answer.h"

namespace weir::fastpath {
namespace {

using common::SocketAddress;

// Names learned as tagged at once (docs/behaviour.md#domain-tags); each learn copies the set.
constexpr size_t kMaxLearnedNames = 10000;
constexpr int32_t kAnswered = -2;  // a waiter answered early (ClientRoute::worker)

double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The question name as sent upstream (in its 0x20 case), at offset 12 of
// the query.
std::span<const uint8_t> SentName(const Pending* p) {
  return {p->query.data() + dns::kHeaderSize, p->miss.qname.len};
}

}  // namespace

ForwarderCore::ForwarderCore(const FastpathConfig& config, std::vector<MissChannel*> channels,
                             SharedState* shared, net::Timers& timers, UpstreamTransport& transport,
                             ForwarderStats& stats)
    : config_(config),
      shared_(shared),
      channels_(std::move(channels)),
      timers_(timers),
      transport_(transport),
      stats_(stats),
      overflow_(channels_.size()),
      wake_(channels_.size(), false),
      inflight_(static_cast<size_t>(config.max_inflight), static_cast<size_t>(config.max_waiting_clients)) {
  parse_options_.weight_option_code = config.weight_option_code;
  // One cookie secret for the process's life: the client cookies stay the
  // same across the pool's port changes, as RFC 7873 5.1 wants.
  std::array<uint8_t, 16> secret{};
  rng_.Fill(secret.data(), secret.size());
  cookies_.emplace(secret);
  for (int gi = 0; gi < 2; ++gi) {
    Group& g = groups_[gi];
    g.upstreams = gi == 0 ? config.ordinary : config.weighted;
    g.stats = gi == 0 ? &stats_.ordinary : &stats_.weighted;
    g.stats->clear();
    for (const UpstreamConfig& u : g.upstreams) {
      auto s = std::make_unique<UpstreamStats>();
      s->name = u.name;
      g.stats->push_back(std::move(s));
      int e = EndpointOf(u.address);
      if (e < 0) {
        e = static_cast<int>(endpoints_.size());
        // The pool's sockets are bound to the wildcard address: the client
        // cookie is made from the recursor's address alone.
        endpoints_.push_back({u.address, cookies_->ClientCookie({}, u.address)});
      }
      g.endpoint.push_back(e);
    }
    g.health = std::make_unique<UpstreamHealth>(g.stats, config.ring_load_factor, config.health_failures,
                                                std::chrono::milliseconds(config.health_interval_ms));
  }
  const size_t late_capacity =
      4 * static_cast<size_t>(config.max_inflight) * static_cast<size_t>(config.upstream_attempts) + 1024;
  tries_ = std::make_unique<Tries>(LateWindow(config), late_capacity);
  transport_.SetSink(this);
}

ForwarderCore::~ForwarderCore() { transport_.SetSink(nullptr); }

ForwarderCore::Clock::duration ForwarderCore::LateWindow(const FastpathConfig& config) {
  return std::chrono::milliseconds(std::max(5000, 4 * config.upstream_timeout_ms));
}

absl::Status ForwarderCore::Open() {
  bool want[2] = {false, false};
  for (const Endpoint& e : endpoints_) want[e.address.family() == AF_INET ? 0 : 1] = true;
  absl::Status st = transport_.Open(want[0], want[1]);
  stats_.udp_sockets.store(transport_.udp_sockets(), std::memory_order_relaxed);
  return st;
}

int ForwarderCore::EndpointOf(const SocketAddress& src) const {
  for (size_t e = 0; e < endpoints_.size(); ++e) {
    const SocketAddress& a = endpoints_[e].address;
    if (src.family() == a.family() && src.port() == a.port() &&
        std::memcmp(src.addr_bytes(), a.addr_bytes(), a.addr_len()) == 0) {
      return static_cast<int>(e);
    }
  }
  return -1;
}

std::string ForwarderCore::QuestionKey(int endpoint, uint16_t qtype, const dns::NameKey& qname) {
  std::string key;
  key.reserve(4 + qname.len);
  key.push_back(static_cast<char>(endpoint >> 8));
  key.push_back(static_cast<char>(endpoint));
  key.append(reinterpret_cast<const char*>(&qtype), 2);
  key.append(reinterpret_cast<const char*>(qname.bytes.data()), qname.len);
  return key;
}

void ForwarderCore::Publish() {
  stats_.in_flight.store(inflight_.size(), std::memory_order_relaxed);
  stats_.waiting.store(inflight_.waiting(), std::memory_order_relaxed);
}

void ForwarderCore::Drain() {
  for (size_t w = 0; w < channels_.size(); ++w) {
    PendingClient c;
    // A worker that has not taken back kMaxHeldReturns of its answers (it
    // cannot keep up) gets no more of its misses taken: they stay in its
    // ring, which fills, and the worker drops new misses
    // (weir_drops_total{reason="miss_queue_full"}). Without it the held
    // answers, and the worker's routes for their clients, grow without bound.
    while (overflow_[w].size() < kMaxHeldReturns && channels_[w]->misses.Pop(&c)) Accept(std::move(c));
  }
}

void ForwarderCore::Tick() {
  SendProbes();
  RunDueRefreshes(shared_->clock->NowSeconds());
  // Segments of adaptive names past even the stale window go, a few
  // hundred index slots a turn.
  if (shared_->segments) shared_->segments->Sweep(shared_->clock->NowSeconds(), config_.stale_window, 256);
  transport_.Housekeep(timers_.Now());
  stats_.udp_sockets.store(transport_.udp_sockets(), std::memory_order_relaxed);
  const TcpPoolStats tcp = transport_.tcp_pool();
  stats_.tcp_connections.store(tcp.connections, std::memory_order_relaxed);
  stats_.tcp_opened.store(tcp.opened, std::memory_order_relaxed);
  stats_.tcp_resent.store(tcp.resent, std::memory_order_relaxed);
  stats_.tcp_queued.store(tcp.queued, std::memory_order_relaxed);
  FlushReturns();
}

void ForwarderCore::FlushReturns() {
  for (size_t w = 0; w < channels_.size(); ++w) {
    std::deque<ReturnedQuery>& held = overflow_[w];
    while (!held.empty() && channels_[w]->returns.Push(std::move(held.front()))) {
      held.pop_front();
      wake_[w] = true;
    }
    if (wake_[w]) {
      wake_[w] = false;
      if (channels_[w]->wake_worker) channels_[w]->wake_worker();
    }
  }
}

void ForwarderCore::Accept(PendingClient&& c) {
  const MissRequest& m = c.miss;
  if (c.accepted == Clock::time_point{}) c.accepted = timers_.Now();
  if (c.route.waits()) NoteSubnet(m);
  std::string key = InflightTable::Key(m);
  if (inflight_.WaitingFull()) {
    // As many clients wait as we keep (memory): answer now, stale or
    // SERVFAIL, rather than hold one more until the deadline.
    stats_.waiting_limited.Add();
    return StaleOrServfail(c);
  }
  if (Pending* p = inflight_.Find(key)) {
    stats_.coalesced.Add();
    inflight_.Join(p, std::move(c));
    Publish();
    if (!p->answer_timer) ArmAnswerDeadline(p);
    return;
  }
  bool stale_exists = false;
  if (c.route.waits() && !m.do_bit && !m.cd_bit) {
    // The question may have been answered and cached between the worker's
    // miss and now (it waited in the queue): answer from the cache. Not a
    // DO or CD one: the cache never answers those.
    const partitions::CacheKey ck{m.partition, m.qname.span(), m.qtype, m.qclass};
    partitions::Freshness f;
    if (shared_->cache->Find(ck, shared_->clock->NowSeconds(), &f) != nullptr) {
      if (f == partitions::Freshness::kFresh) {
        stats_.coalesced.Add();
        return Reply(c, HandleMode::kAfterFill, nullptr);
      }
      stale_exists = f == partitions::Freshness::kStale;
    }
  }
  if (inflight_.InflightFull()) {
    // Every socket we allow ourselves is in use: answer now (stale, else
    // SERVFAIL) rather than queue behind questions that may never return.
    stats_.inflight_limited.Add();
    return StaleOrServfail(c);
  }
  Pending* p = inflight_.Start(key, std::move(c));
  Publish();
  if (stale_exists && config_.stale_answer_after_ms > 0) {
    const uint64_t gen = next_generation_++;
    client_timers_[gen] = key;
    timers_.After(std::chrono::milliseconds(config_.stale_answer_after_ms),
                  [this, gen] { OnClientTimer(gen); });
  }
  ArmAnswerDeadline(p);
  Send(p);
}

void ForwarderCore::Send(Pending* p) {
  Group& g = GroupOf(p);
  UpstreamRing& ring = g.health->ring();
  uint8_t hashkey[8 + dns::kMaxNameWire];
  std::memcpy(hashkey, &p->miss.partition, 8);
  std::memcpy(hashkey + 8, p->miss.qname.bytes.data(), p->miss.qname.len);
  const uint64_t hash = StableHash(hashkey, 8 + p->miss.qname.len);
  // The try in flight ends first (a try that timed out may still be
  // answered: late), so its load does not count against its own recursor.
  EndTry(p, true);
  // The next recursor on the ring that has room for one more question.
  uint64_t exclude = p->tried;
  int u;
  bool full = false;
  while ((u = ring.Pick(hash, exclude)) >= 0) {
    if (ring.load(u) < config_.max_inflight_per_upstream) break;
    exclude |= uint64_t{1} << u;
    full = true;
  }
  if (u < 0 && full) stats_.inflight_limited.Add();
  if (u < 0 || p->attempts >= config_.upstream_attempts) return Fail(p);
  const int e = g.endpoint[u];
  Endpoint& ep = endpoints_[e];
  const std::span<const UpstreamTransport::Handle> socks = transport_.Pool(ep.address.family());
  const auto now = timers_.Now();
  // A random socket of the pool and a random ID; the pair (with the
  // upstream) must be neither in flight nor recently ended.
  Tries::Key key;
  bool found = false;
  for (int i = 0; i < 64 && !found && !socks.empty(); ++i) {
    key = {socks[rng_.Below(static_cast<uint32_t>(socks.size()))], static_cast<uint16_t>(e), rng_.Next16()};
    found = tries_->Free(key, now);
  }
  if (!found) return Fail(p);
  dns::ResponseWriter w(out_.data(), out_.size());
  w.Begin(key.id, dns::flag::kRd | (p->miss.cd_bit ? dns::flag::kCd : 0), p->miss.qname.span(), p->miss.qtype,
          p->miss.qclass);
  w.BeginOpt(kEdnsUdpSize, p->miss.do_bit);
  if (p->miss.send_ecs) w.AddEcs(p->miss.ecs);
  if (p->miss.weighted) w.AddWeights(config_.weight_option_code, {});
  if (config_.upstream_cookies) {
    uint8_t cookie[dns::CookieJar::kMaxOption];
    const size_t cookie_len = cookies_->OptionData(ep.client_cookie, ep.address, cookie);
    w.AddOption(dns::option::kCookie, {cookie, cookie_len});
  }
  const size_t len = w.Finish(out_.size());
  p->case_randomized = config_.case_randomization && case_memory_.Preserves(ep.address, now) &&
                       dns::RandomizeCase({out_.data() + dns::kHeaderSize, p->miss.qname.len}, rng_) > 0;
  p->query.assign(out_.data(), out_.data() + len);
  if (const int err = transport_.SendUdp(key.socket, ep.address, p->query); err != 0) {
    p->tried |= uint64_t{1} << u;
    ++p->attempts;
    // A full socket buffer is ours, not the recursor's fault.
    if (err == EAGAIN || err == ENOBUFS) return Fail(p);
    MarkResult(g, u, false);
    return Send(p);
  }
  transport_.TryStarted(key.socket);
  tries_->Add(key, p);
  by_question_[QuestionKey(e, p->miss.qtype, p->miss.qname)].push_back(p);
  p->udp_live = true;
  p->udp_socket = key.socket;
  p->endpoint = e;
  p->id = key.id;
  p->upstream = u;
  p->tried |= uint64_t{1} << u;
  ++p->attempts;
  p->sent = now;
  p->generation = next_generation_++;
  ring.AddLoad(u, 1);
  (*g.stats)[u]->queries.Add();
  stats_.upstream_queries.Add();
  p->tapped_at = {};
  if (tap_ != nullptr && tap_->Sample()) TapQuery(p, key.socket, false);
  ArmTry(p);
}

dns::GuardOutcome ForwarderCore::Check(const Pending* p, std::span<const uint8_t> reply, bool over_tcp,
                                       dns::Message* m) {
  const Endpoint& ep = endpoints_[p->endpoint];
  dns::SentQuery sent;
  sent.id = p->id;
  sent.qname = &p->miss.qname;
  sent.name = SentName(p);
  sent.qtype = p->miss.qtype;
  sent.qclass = p->miss.qclass;
  sent.case_randomized = p->case_randomized;
  sent.cookie = config_.upstream_cookies ? &ep.client_cookie : nullptr;
  sent.server = &ep.address;
  return dns::CheckAnswer(sent, reply, over_tcp, p->badcookie_retried, &*cookies_, parse_options_, m);
}

void ForwarderCore::OnDatagram(UpstreamTransport::Handle socket, const SocketAddress& from,
                               std::span<const uint8_t> data) {
  // The answer must come from a recursor's address and port, to the socket
  // and with the ID of a try in flight to it; then the answer guard.
  const int e = EndpointOf(from);
  if (e < 0 || data.size() < dns::kHeaderSize) {
    stats_.unwanted.Add();
    stats_.spoofed.Add();
    return;
  }
  const auto now = timers_.Now();
  const Tries::Key key{socket, static_cast<uint16_t>(e), dns::Load16(data.data())};
  Pending* p = tries_->Find(key);
  if (p == nullptr) {
    if (tries_->TakeLate(key, now)) {
      stats_.late.Add();  // the answer to a try that timed out or was abandoned
      return;
    }
    stats_.unwanted.Add();
    stats_.spoofed.Add();
    NoteUnwanted(e, data);
    return;
  }
  const Endpoint& ep = endpoints_[e];
  dns::Message m;
  const dns::GuardOutcome g = Check(p, data, /*over_tcp=*/false, &m);
  switch (g.action) {
    case dns::GuardAction::kTake:
      TapResponse(p, data);
      return Answered(p, m);
    case dns::GuardAction::kIgnore:
      // Another question under this try's socket and ID: wait for the
      // genuine answer.
      stats_.spoofed.Add();
      refused_log_(ep.address.ToString(), ": answer refused (", dns::GuardReasonName(g.reason), ")");
      return;
    case dns::GuardAction::kFail:
      stats_.spoofed.Add();
      refused_log_(ep.address.ToString(), ": answer refused (", dns::ParseErrorName(g.parse_error),
                   "): next recursor");
      return TryFailed(p);
    case dns::GuardAction::kRetryUdp:
      // RFC 7873 5.3: once more with the server cookie just learnt, on
      // the same recursor, not counted as an attempt.
      TapResponse(p, data);
      stats_.cookie_retries.Add();
      p->badcookie_retried = true;
      p->tried &= ~(uint64_t{1} << p->upstream);
      if (p->attempts > 0) --p->attempts;
      return Send(p);
    case dns::GuardAction::kToTcp:
      break;
  }
  switch (g.reason) {
    case dns::GuardReason::kTruncated:
      TapResponse(p, data);
      stats_.truncated.Add();
      return SwitchToTcp(p, false);
    case dns::GuardReason::kBadCookie:
      TapResponse(p, data);
      return SwitchToTcp(p, false);
    case dns::GuardReason::kCase:
      // A forger that guessed socket and ID but not our case, or a server
      // that does not keep it: either way this answer is not taken, and the
      // question is asked again over TCP, where the server's own answer
      // tells which it was.
      stats_.case_mismatches.Add();
      stats_.spoofed.Add();
      refused_log_(ep.address.ToString(), ": answer refused (question case differs from the 0x20 query)");
      p->case_suspect = true;
      return SwitchToTcp(p, true);
    default:
      stats_.cookie_mismatches.Add();
      stats_.spoofed.Add();
      refused_log_(ep.address.ToString(), ": answer refused (",
                   g.cookie == dns::CookieJar::Verdict::kAbsent ? "no cookie from a server that sends them"
                                                                : "wrong or malformed cookie",
                   ")");
      return SwitchToTcp(p, true);
  }
}

void ForwarderCore::NoteUnwanted(int e, std::span<const uint8_t> data) {
  if (config_.unwanted_reply_threshold == 0) return;
  dns::Message m;
  if (m.Parse(data, parse_options_) != dns::ParseError::kOk) return;
  auto it = by_question_.find(QuestionKey(e, m.qtype(), m.qname()));
  if (it == by_question_.end()) return;
  // A copy: a reaction ends the try and edits the list.
  const std::vector<Pending*> targets = it->second;
  for (Pending* p : targets) {
    if (!dns::UnwantedReachesThreshold(++p->unwanted,
                                       static_cast<uint32_t>(config_.unwanted_reply_threshold)) ||
        !p->udp_live) {
      continue;
    }
    // Someone is guessing our IDs for this question: stop offering them.
    // TCP cannot be answered blind.
    stats_.spoof_reactions.Add();
    reaction_log_(endpoints_[e].address.ToString(), ": ", p->unwanted,
                  " unwanted answers for one question in flight: asking it over TCP");
    SwitchToTcp(p, true);
  }
}

void ForwarderCore::Answered(Pending* p, const dns::Message& m) {
  Group& g = GroupOf(p);
  (*g.stats)[p->upstream]->latency.Observe(Seconds(timers_.Now() - p->sent));
  (*g.stats)[p->upstream]->answers.Add();
  MarkResult(g, p->upstream, true);
  Finish(p, m);
}

void ForwarderCore::EndTry(Pending* p, bool expect_late) {
  by_generation_.erase(p->generation);
  if (p->try_timer != 0) timers_.Cancel(p->try_timer);
  p->try_timer = 0;
  UpstreamRing& ring = GroupOf(p).health->ring();
  if (p->udp_live) {
    p->udp_live = false;
    tries_->End({p->udp_socket, static_cast<uint16_t>(p->endpoint), p->id}, expect_late, timers_.Now());
    auto q = by_question_.find(QuestionKey(p->endpoint, p->miss.qtype, p->miss.qname));
    if (q != by_question_.end()) {
      std::erase(q->second, p);
      if (q->second.empty()) by_question_.erase(q);
    }
    transport_.TryEnded(p->udp_socket);
    p->udp_socket = -1;
    ring.AddLoad(p->upstream, -1);
  }
  if (p->tcp >= 0) {
    by_tcp_.erase(p->tcp);
    transport_.CloseTcp(p->tcp);
    p->tcp = -1;
    ring.AddLoad(p->upstream, -1);
  }
  p->over_tcp = false;
}

void ForwarderCore::SwitchToTcp(Pending* p, bool expect_late) {
  Group& g = GroupOf(p);
  const int u = p->upstream;
  EndTry(p, expect_late);
  const UpstreamTransport::Handle h = transport_.OpenTcp(g.upstreams[u].address, p->query);
  if (h < 0) {
    MarkResult(g, u, false);
    return Send(p);
  }
  p->tcp = h;
  p->upstream = u;
  p->over_tcp = true;
  const timespec udp_tapped_at = p->tapped_at;
  p->sent = timers_.Now();
  p->generation = next_generation_++;
  g.health->ring().AddLoad(u, 1);
  by_tcp_[h] = p;
  // The same question again over TCP: tapped when its UDP try was.
  if (tap_ != nullptr && (udp_tapped_at.tv_sec != 0 || udp_tapped_at.tv_nsec != 0)) TapQuery(p, h, true);
  ArmTry(p);
}

void ForwarderCore::ArmTry(Pending* p) {
  by_generation_[p->generation] = p;
  // A try the question finished or re-sent since is skipped (and cancelled
  // in EndTry): the timer names its try by generation.
  p->try_timer = timers_.At(p->sent + std::chrono::milliseconds(config_.upstream_timeout_ms),
                            [this, gen = p->generation] {
                              auto it = by_generation_.find(gen);
                              if (it == by_generation_.end()) return;
                              it->second->try_timer = 0;
                              OnTimeout(it->second);
                            });
}

void ForwarderCore::OnTimeout(Pending* p) {
  if (CaseFallback(p)) return;
  Group& g = GroupOf(p);
  (*g.stats)[p->upstream]->timeouts.Add();
  if (p->tcp >= 0 && transport_.TcpQueued(p->tcp)) {
    // It never reached the recursor: our pool was busy, not the recursor.
    stats_.tcp_queue_timeouts.Add();
  } else {
    MarkResult(g, p->upstream, false);
  }
  Send(p);  // next upstream on the ring, or Fail when out of attempts
}

void ForwarderCore::TryFailed(Pending* p) {
  if (CaseFallback(p)) return;
  MarkResult(GroupOf(p), p->upstream, false);
  Send(p);  // the next recursor, over UDP again
}

void ForwarderCore::OnTcpFailed(UpstreamTransport::Handle tcp) {
  auto it = by_tcp_.find(tcp);
  if (it == by_tcp_.end()) return transport_.CloseTcp(tcp);
  TryFailed(it->second);
}

void ForwarderCore::OnTcpMessage(UpstreamTransport::Handle tcp, std::span<const uint8_t> message) {
  auto it = by_tcp_.find(tcp);
  if (it == by_tcp_.end()) return transport_.CloseTcp(tcp);
  Pending* p = it->second;
  dns::Message m;
  const dns::GuardOutcome g = Check(p, message, /*over_tcp=*/true, &m);
  if (g.action != dns::GuardAction::kTake) {
    if (g.reason == dns::GuardReason::kCookie) stats_.cookie_mismatches.Add();
    return TryFailed(p);
  }
  // Over TCP the answer is the server's own: a question in another case
  // than our 0x20 one says the server does not keep it (a forger cannot
  // teach that, so one answer is proof enough).
  if (g.case_not_preserved) LearnNoCase(endpoints_[p->endpoint], "does not keep the question's case");
  TapResponse(p, message);
  Answered(p, m);
}

void ForwarderCore::LearnNoCase(const Endpoint& ep, std::string_view why) {
  case_memory_.NotPreserved(ep.address, timers_.Now());
  stats_.case_fallbacks.Add();
  case_log_(ep.address.ToString(), " ", why, ": 0x20 off for it for ",
            std::chrono::duration_cast<std::chrono::minutes>(dns::CaseMemory::kHold).count(), " minutes");
}

bool ForwarderCore::CaseFallback(Pending* p) {
  if (!p->over_tcp || !p->case_suspect) return false;
  // The server answered over UDP in another case and cannot be asked over
  // TCP: it does not keep the case (a balancer that lower-cases names). It
  // is asked again at once, over UDP without 0x20 (its answers still need
  // the socket, the ID, the question and the cookie), within the client's
  // deadline; this try does not count against it or the attempts.
  p->case_suspect = false;
  LearnNoCase(endpoints_[p->endpoint], "answers in another case than asked and not over TCP");
  p->tried &= ~(uint64_t{1} << p->upstream);
  if (p->attempts > 0) --p->attempts;
  Send(p);
  return true;
}

void ForwarderCore::MarkResult(Group& g, int u, bool ok) {
  switch (g.health->Mark(u, ok, timers_.Now())) {
    case UpstreamHealth::Change::kUp:
      up_log_(g.upstreams[u].address.ToString(), " answered again: marked up");
      break;
    case UpstreamHealth::Change::kDown:
      down_log_(g.upstreams[u].address.ToString(), " marked down after ", g.health->failures(u),
                " failures in a row");
      break;
    case UpstreamHealth::Change::kNone:
      break;
  }
}

void ForwarderCore::Release(Pending* p, bool expect_late) {
  EndTry(p, expect_late);
  inflight_.Erase(p);  // frees p
  Publish();
}

void ForwarderCore::Reply(PendingClient& c, HandleMode mode, std::shared_ptr<const RelayedAnswer> relay) {
  if (!c.route.waits()) return;  // a prefetch: nobody waits
  const auto w = static_cast<size_t>(c.route.worker);
  ReturnedQuery r;
  r.mode = mode;
  r.relay = std::move(relay);
  r.client = std::move(c);
  if (overflow_[w].empty() && channels_[w]->returns.Push(std::move(r))) {
    wake_[w] = true;
    return;
  }
  // The worker's ring is full: hold the return (in order) until it has room.
  // Push moves r only when it succeeds, so r is intact here.
  overflow_[w].push_back(std::move(r));  // NOLINT(bugprone-use-after-move)
}

HandleMode ForwarderCore::FillCache(const Pending& p, const dns::Message& up) {
  partitions::Cache& cache = *shared_->cache;
  const uint32_t now = shared_->clock->NowSeconds();
  const partitions::CacheKey key{p.miss.partition, p.miss.qname.span(), p.miss.qtype, p.miss.qclass};
  partitions::AnswerToCache in;
  in.key = key;
  in.tagged = p.miss.tagged;
  in.dnssec = p.miss.do_bit || p.miss.cd_bit;
  in.answer = &up;
  in.tags = shared_->tags.Get();
  in.now = now;
  in.limits = shared_->limits;
  partitions::CacheFill fill = partitions::EntryFromAnswer(in);
  if (fill.servfail) {
    partitions::Freshness f;
    // RFC 8767: keep the stale answer, do not overwrite it (an adaptive
    // name's: its segment's, even past the segment's TTL).
    if (Cached(p.miss, now, &f, /*expired_segments=*/true) != nullptr) return HandleMode::kStaleOk;
  }
  switch (fill.outcome) {
    case partitions::CacheFill::Outcome::kNotCacheable:
      return HandleMode::kAfterFill;
    case partitions::CacheFill::Outcome::kEntry: {
      if (p.miss.adaptive && !in.dnssec) LearnSegment(p.miss, up, in, &fill);
      const uint32_t ttl = fill.entry->ttl();
      const bool positive = fill.entry->kind() == partitions::EntryKind::kPositive;
      const partitions::Cache::InsertResult r = cache.Insert(std::move(fill.entry));
      if (positive && (r == partitions::Cache::InsertResult::kInserted ||
                       r == partitions::Cache::InsertResult::kReplaced)) {
        ScheduleRefresh(p.miss, ttl, now);
        PrefetchSiblings(p.miss, ttl, now);
      }
      return HandleMode::kAfterFill;
    }
    case partitions::CacheFill::Outcome::kLearn:
      break;
  }
  // An untagged name whose chain enters a tagged suffix takes its tag
  // (docs/behaviour.md#domain-tags): learned for the chain's TTL, and
  // resolved again as a tagged name.
  const LearnedTags* current = shared_->learned.Get();
  const LearnedTags empty;
  auto next = (current != nullptr ? current : &empty)
                  ->With(p.miss.qname.span(), *fill.learn_tag, now + fill.learn_ttl, now, kMaxLearnedNames);
  if (next == nullptr) {
    // Full: the name is not learned, and its answer is relayed but never
    // cached in the common partition.
    stats_.learned_overflow.Add();
    return HandleMode::kAfterFill;
  }
  // Deferred: the forwarder never waits for a grace period.
  shared_->learned.PublishDeferred(std::move(next));
  stats_.learned.Add();
  return HandleMode::kRetry;
}

void ForwarderCore::LearnSegment(const MissRequest& m, const dns::Message& up, partitions::AnswerToCache in,
                                 partitions::CacheFill* fill) {
  partitions::SegmentTable* table = shared_->segments.get();
  // A SERVFAIL says nothing of the GSLB's segments: cached for the subnet.
  if (fill->entry->kind() == partitions::EntryKind::kServFail) return;
  const partitions::Tag* tag = TagOf(m.qname, in.now);
  // A reload may have changed the name's level since it was asked: then it
  // is cached as asked (its subnet).
  if (table == nullptr || tag == nullptr || tag->level != partitions::CacheLevel::kAdaptive || !m.send_ecs)
    return;
  // The scope the GSLB gave the subnet asked. No ECS in the answer: not
  // tailored, the answer for every subscriber (/0). An ECS for another
  // family, prefix or address than asked (RFC 7871 7.3): not learned.
  uint8_t scope = 0;
  const dns::Edns& e = up.edns();
  if (e.present && e.has_ecs) {
    const dns::ClientSubnet& a = e.ecs;
    const size_t n = m.ecs.AddressBytes();
    if (a.family != m.ecs.family || a.source_prefix != m.ecs.source_prefix ||
        std::memcmp(a.address.data(), m.ecs.address.data(), n) != 0) {
      stats_.segment_mismatches.Add();
      return;
    }
    scope = std::min(a.scope_prefix, a.source_prefix);
  }
  const partitions::SegmentTable::Learned l =
      table->Learn(m.qname, m.qtype, m.ecs, scope, partitions::AnswerIdentity(*fill->entry),
                   fill->entry->ttl(), in.now, tag->max_segments);
  if (!l.stored) return;  // full: cached for the subnet, as level=subnet would
  partitions::Cache& cache = *shared_->cache;
  for (const partitions::Partition unused : l.unused)
    cache.Erase({unused, m.qname.span(), m.qtype, m.qclass});
  // The same answer again, keyed by the answer rather than the subnet.
  in.key.partition = l.answer;
  partitions::CacheFill keyed = partitions::EntryFromAnswer(in);
  if (keyed.outcome == partitions::CacheFill::Outcome::kEntry) *fill = std::move(keyed);
}

const partitions::CacheEntry* ForwarderCore::Cached(const MissRequest& m, uint32_t now,
                                                    partitions::Freshness* f, bool expired_segments) const {
  partitions::Partition partition = m.partition;
  if (m.adaptive) {
    // The answer of the segment the subnet asked lies in, while it is served.
    const partitions::SegmentTable* table = shared_->segments.get();
    const partitions::SegmentSet* set = table != nullptr ? table->Find(m.qname.span(), m.qtype) : nullptr;
    const partitions::Segment* seg =
        set != nullptr ? set->Match(partitions::SegmentAddressOf(m.ecs)) : nullptr;
    if (seg == nullptr || (seg->Expires() <= now && !expired_segments)) return nullptr;
    partition = seg->answer;
  }
  return shared_->cache->Peek({partition, m.qname.span(), m.qtype, m.qclass}, now, f);
}

const partitions::Tag* ForwarderCore::TagOf(const dns::NameKey& qname, uint32_t now) const {
  const partitions::TagTable* tags = shared_->tags.Get();
  const partitions::Tag* tag = tags != nullptr ? tags->Lookup(qname.span()) : nullptr;
  if (tag == nullptr) {
    const LearnedTags* learned = shared_->learned.Get();
    if (learned != nullptr) tag = learned->Lookup(qname.span(), now);
  }
  return tag;
}

std::string ForwarderCore::RefreshKey(const MissRequest& m) {
  std::string key(reinterpret_cast<const char*>(&m.partition), sizeof(m.partition));
  key.append(reinterpret_cast<const char*>(&m.qtype), 2);
  key.append(reinterpret_cast<const char*>(&m.qclass), 2);
  key.append(reinterpret_cast<const char*>(m.qname.bytes.data()), m.qname.len);
  return key;
}

bool ForwarderCore::PrefetchRoom() const {
  // Prefetches (active refreshes, siblings) take at most half the questions
  // in flight and never the last waiting slots: clients' misses come first.
  return inflight_.size() < static_cast<size_t>(config_.max_inflight) / 2 && !inflight_.WaitingFull();
}

void ForwarderCore::ScheduleRefresh(const MissRequest& m, uint32_t ttl, uint32_t now) {
  if (m.do_bit || m.cd_bit || config_.active_refresh_max == 0) return;  // never cached / off
  const partitions::Tag* tag = TagOf(m.qname, now);
  if (tag == nullptr || !tag->active_refresh) return;
  // Due when prefetch_percent of the TTL is left, at least a second ahead.
  // Short TTLs too (unlike the hit path's prefetch): a refresh answered
  // from a recursor's cached copy near its own end comes back with a few
  // seconds left, and is asked again just before those run out (an answer
  // of 0-1 s a second later), by when the recursor (whose prefetch that
  // refresh set off) has a fresh one.
  const uint32_t lead = std::max<uint32_t>(1, ttl * config_.prefetch_percent / 100);
  const uint32_t delay = ttl >= 2 ? ttl - lead : 1;
  std::string key = RefreshKey(m);
  auto it = refreshes_.find(key);
  if (it == refreshes_.end()) {
    if (refreshes_.size() >= config_.active_refresh_max) {
      stats_.active_refresh_overflow.Add();
      return;
    }
    it = refreshes_.emplace(key, ScheduledRefresh{}).first;
  }
  it->second.miss = m;
  it->second.due = now + delay;
  refresh_queue_.emplace(it->second.due, std::move(key));
  if (refresh_queue_.size() > 2 * refreshes_.size() + 1024) {
    // Many answers refreshed by their clients before their turn: the queue
    // is rebuilt from the schedule, one time per key.
    std::vector<DueRefresh> live;
    live.reserve(refreshes_.size());
    for (const auto& [k, r] : refreshes_) live.emplace_back(r.due, k);
    refresh_queue_ = decltype(refresh_queue_)(std::greater<>(), std::move(live));
  }
  stats_.active_refresh_scheduled.store(refreshes_.size(), std::memory_order_relaxed);
}

void ForwarderCore::RunDueRefreshes(uint32_t now) {
  // At most kRefreshesPerTick a turn, and only while prefetches have room:
  // answers cached together come due together, and what is left waits for
  // the next turn (it stays due).
  size_t started = 0;
  while (!refresh_queue_.empty() && refresh_queue_.top().first <= now) {
    const auto it = refreshes_.find(refresh_queue_.top().second);
    const bool current = it != refreshes_.end() && it->second.due == refresh_queue_.top().first;
    if (current && (started == kRefreshesPerTick || !PrefetchRoom())) break;
    refresh_queue_.pop();
    if (!current) continue;  // rescheduled since (or done)
    PendingClient c;
    c.miss = it->second.miss;
    refreshes_.erase(it);
    started += Refresh(std::move(c), now) ? 1 : 0;
  }
  stats_.active_refresh_scheduled.store(refreshes_.size(), std::memory_order_relaxed);
}

bool ForwarderCore::Refresh(PendingClient&& c, uint32_t now) {
  c.route = {};  // nobody waits: a prefetch
  MissRequest& m = c.miss;
  // The question as the name's tag and the city map say now: a reload may
  // have changed its weights, its ECS or a city's ECS source since it was
  // scheduled.
  const partitions::Tag* tag = TagOf(m.qname, now);
  const partitions::CacheLevel asked =
      m.adaptive ? partitions::CacheLevel::kAdaptive : partitions::LevelOf(m.partition);
  if (tag == nullptr || !tag->active_refresh || tag->level != asked) {
    stats_.active_refresh_untagged.Add();
    return false;
  }
  const partitions::CityMap* cm = shared_->citymap.Get();
  const partitions::PartitionId id = partitions::CityOf(m.partition);
  const partitions::City* city =
      tag->level == partitions::CacheLevel::kCity && cm != nullptr && id < cm->city_count() ? &cm->city(id)
                                                                                            : nullptr;
  SetUpstreamQuestion(tag, city, m.ecs.family == dns::kEcsFamilyIpv6 ? 6 : 4, &m);
  // Peek, not Find: looking does not count as a client's read.
  partitions::Freshness f;
  const partitions::CacheEntry* e = Cached(m, now, &f);
  if (e == nullptr) {
    stats_.active_refresh_gone.Add();
    return false;
  }
  if (!e->referenced()) {
    // Nobody asked since the last fill: the name goes back to refreshes
    // by its clients (its next miss or prefetch schedules it again).
    stats_.active_refresh_idle.Add();
    return false;
  }
  stats_.active_refresh_sent.Add();
  Accept(std::move(c));
  return true;
}

void ForwarderCore::NoteSubnet(const MissRequest& m) {
  if (config_.sibling_prefetch == 0 || !m.tagged ||
      partitions::LevelOf(m.partition) != partitions::CacheLevel::kSubnet)
    return;
  std::vector<partitions::Partition>& hot = hot_subnets_[m.city];
  // Move (or add) it to the front: the city's most recent first.
  auto it = std::find(hot.begin(), hot.end(), m.partition);
  if (it == hot.end()) {
    if (hot.size() < kHotSubnets) hot.push_back(m.partition);
    it = hot.end() - 1;
    *it = m.partition;  // the least recent one gives way when full
  }
  std::rotate(hot.begin(), it, it + 1);
}

void ForwarderCore::PrefetchSiblings(const MissRequest& m, uint32_t ttl, uint32_t now) {
  if (config_.sibling_prefetch == 0 || m.sibling || !m.tagged || m.do_bit || m.cd_bit ||
      partitions::LevelOf(m.partition) != partitions::CacheLevel::kSubnet)
    return;
  const partitions::Tag* tag = TagOf(m.qname, now);
  if (tag == nullptr ||
      (tag->level != partitions::CacheLevel::kSubnet && tag->level != partitions::CacheLevel::kAdaptive))
    return;
  const auto hot = hot_subnets_.find(m.city);
  if (hot == hot_subnets_.end()) return;
  // Once per (city, question) and TTL: the siblings fetched now are fresh
  // as long as this answer.
  std::string done_key(reinterpret_cast<const char*>(&m.city), sizeof(m.city));
  done_key.append(reinterpret_cast<const char*>(&m.qtype), 2);
  done_key.append(reinterpret_cast<const char*>(m.qname.bytes.data()), m.qname.len);
  if (const auto d = siblings_done_.find(done_key); d != siblings_done_.end() && d->second > now) {
    stats_.sibling_repeats.Add();
    return;
  }
  // A copy: the loop's Accept calls must not see the list move.
  const std::vector<partitions::Partition> subnets = hot->second;
  if (subnets.size() < 2) return;  // no other subnet of the city known yet
  if (siblings_done_.size() >= kSiblingsDone)
    absl::erase_if(siblings_done_, [now](const auto& e) { return e.second <= now; });
  if (siblings_done_.size() >= kSiblingsDone) return;
  siblings_done_[done_key] = now + ttl;
  uint32_t sent = 0;
  for (const partitions::Partition p : subnets) {
    if (sent == config_.sibling_prefetch || !PrefetchRoom()) break;
    if (p == m.partition) continue;
    PendingClient c;
    c.miss = m;
    c.miss.partition = p;
    SetUpstreamQuestion(tag, nullptr, 0, &c.miss);  // that subnet's own ECS
    partitions::Freshness f;
    if (Cached(c.miss, now, &f) != nullptr && f == partitions::Freshness::kFresh)
      continue;  // that subnet has it already (adaptive: its segment is learned and served)
    c.miss.sibling = true;
    c.route = {};  // nobody waits: a prefetch
    stats_.sibling_prefetches.Add();
    ++sent;
    Accept(std::move(c));
  }
}

void ForwarderCore::Finish(Pending* p, const dns::Message& up) {
  const HandleMode mode = FillCache(*p, up);
  // One relay for every waiter (they share the DO bit: it is part of the
  // key); each worker writes its client's answer from it when the cache
  // cannot answer.
  const std::shared_ptr<const RelayedAnswer> relay = PrepareRelay(up, p->miss.qtype, !p->miss.do_bit);
  for (PendingClient& c : p->waiters) Reply(c, mode, relay);
  Release(p, false);
}

void ForwarderCore::Fail(Pending* p) {
  for (PendingClient& c : p->waiters) {
    if (c.route.waits()) StaleOrServfail(c);
  }
  Release(p, true);
}

void ForwarderCore::SendProbes() {
  const auto now = timers_.Now();
  for (int gi = 0; gi < 2; ++gi) {
    Group& g = groups_[gi];
    for (int u = 0; u < g.health->size(); ++u) {
      if (!g.health->ProbeDue(u, now)) continue;
      // The previous probe went unanswered for a whole interval: drop it.
      for (auto it = probes_.begin(); it != probes_.end();) {
        if (it->second.group == gi && it->second.upstream == u) {
          transport_.CloseProbe(it->first);
          probes_.erase(it++);
        } else {
          ++it;
        }
      }
      const uint16_t id = rng_.Next16();
      static constexpr uint8_t kRoot[1] = {0};
      dns::ResponseWriter w(out_.data(), out_.size());
      w.Begin(id, dns::flag::kRd, kRoot, dns::type::kNs, dns::klass::kIn);
      const size_t len = w.Finish(out_.size());
      const UpstreamTransport::Handle h = transport_.SendProbe(g.upstreams[u].address, {out_.data(), len});
      if (h >= 0) probes_[h] = {gi, u, id};
    }
  }
}

void ForwarderCore::OnProbeReply(UpstreamTransport::Handle probe, const SocketAddress& from,
                                 std::span<const uint8_t> data) {
  auto it = probes_.find(probe);
  if (it == probes_.end()) return;
  const Probe pr = it->second;
  Group& g = groups_[pr.group];
  const SocketAddress& dst = g.upstreams[pr.upstream].address;
  // Any genuine answer (any RCODE) brings the recursor back.
  const bool genuine = data.size() >= dns::kHeaderSize && from.family() == dst.family() &&
                       from.port() == dst.port() &&
                       std::memcmp(from.addr_bytes(), dst.addr_bytes(), dst.addr_len()) == 0 &&
                       dns::Load16(data.data()) == pr.id && (data[2] & 0x80) != 0;
  if (!genuine) return;
  transport_.CloseProbe(probe);
  probes_.erase(it);
  MarkResult(g, pr.upstream, true);
}

Pending* ForwarderCore::TimerTarget(uint64_t generation) {
  auto t = client_timers_.find(generation);
  if (t == client_timers_.end()) return nullptr;
  Pending* p = inflight_.Find(t->second);
  client_timers_.erase(t);
  return p;  // null: answered in time
}

void ForwarderCore::AnswerEarly(Pending* p, Clock::time_point accepted_by) {
  for (PendingClient& c : p->waiters) {
    if (c.route.waits() && c.accepted <= accepted_by) {
      StaleOrServfail(c);  // moves the client out
      c.route.worker = kAnswered;
    }
  }
  inflight_.Left(
      std::erase_if(p->waiters, [](const PendingClient& c) { return c.route.worker == kAnswered; }));
  Publish();
}

void ForwarderCore::OnClientTimer(uint64_t generation) {
  // RFC 8767 client response timer: the upstream is slow and a stale answer
  // exists, so the waiting clients get it now; the resolution goes on and
  // refreshes the cache when it completes.
  if (Pending* p = TimerTarget(generation)) AnswerEarly(p, Clock::time_point::max());
}

void ForwarderCore::ArmAnswerDeadline(Pending* p) {
  Clock::time_point first = Clock::time_point::max();
  for (const PendingClient& c : p->waiters) {
    if (c.route.waits()) first = std::min(first, c.accepted);
  }
  p->answer_timer = first != Clock::time_point::max();
  if (!p->answer_timer) return;  // prefetches only: nobody waits
  const uint64_t gen = next_generation_++;
  client_timers_[gen] = p->key;
  timers_.At(first + std::chrono::milliseconds(config_.answer_deadline_ms),
             [this, gen] { OnAnswerDeadline(gen); });
}

void ForwarderCore::OnAnswerDeadline(uint64_t generation) {
  // The upstreams are unreachable or slow: clients that have waited the
  // whole deadline get the stale answer if there is one, else SERVFAIL,
  // before their own timeouts turn it into silence. The tries go on and
  // fill the cache for the next clients.
  Pending* p = TimerTarget(generation);
  if (p == nullptr) return;
  AnswerEarly(p, timers_.Now() - std::chrono::milliseconds(config_.answer_deadline_ms));
  ArmAnswerDeadline(p);
}

std::vector<double> ForwarderCore::RingShares(bool weighted) const {
  const Group& g = groups_[weighted ? 1 : 0];
  std::vector<bool> up(g.stats->size());
  for (size_t i = 0; i < up.size(); ++i) up[i] = (*g.stats)[i]->up.load(std::memory_order_relaxed);
  return g.health->ring().Shares(up);
}

void ForwarderCore::TapQuery(Pending* p, UpstreamTransport::Handle h, bool tcp) {
  p->tap_local = {};
  const SocketAddress local = transport_.LocalAddress(h);
  if (local.len != 0) p->tap_local = dnstap::EndpointOf(local);
  p->tapped_at = dnstap::Now();
  dnstap::Message m;
  m.type = dnstap::MessageType::kForwarderQuery;
  m.protocol = tcp ? dnstap::Protocol::kTcp : dnstap::Protocol::kUdp;
  m.query_address = p->tap_local;
  m.response_address = dnstap::EndpointOf(GroupOf(p).upstreams[p->upstream].address);
  m.query_time = p->tapped_at;
  m.query_message = p->query;
  tap_->Send(m);
}

void ForwarderCore::TapResponse(const Pending* p, std::span<const uint8_t> answer) {
  if (tap_ == nullptr || (p->tapped_at.tv_sec == 0 && p->tapped_at.tv_nsec == 0)) return;
  dnstap::Message m;
  m.type = dnstap::MessageType::kForwarderResponse;
  m.protocol = p->over_tcp ? dnstap::Protocol::kTcp : dnstap::Protocol::kUdp;
  m.query_address = p->tap_local;
  m.response_address = dnstap::EndpointOf(groups_[p->weighted_group ? 1 : 0].upstreams[p->upstream].address);
  m.query_time = p->tapped_at;
  m.response_time = dnstap::Now();
  m.query_message = p->query;
  m.response_message = answer;
  tap_->Send(m);
}

}  // namespace weir::fastpath
