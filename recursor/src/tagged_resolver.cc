#include "weir/recursor/tagged_resolver.h"

#include <netinet/in.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "weir/common/text.h"
#include "weir/dns/writer.h"

namespace weir::recursor {

using common::Cat;
using common::SocketAddress;

namespace {

constexpr int kMaxStepsPerName = 20;  // cut changes (follows, referrals) per resolution

SocketAddress FromIp(const common::IpAddress& ip, uint16_t port) {
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

}  // namespace

// A tagged name being resolved with weir's own last hop.
struct TaggedResolver::Resolution {
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
  // The query in flight (to `server`, ID `qid`).
  bool in_flight = false;
  uint16_t qid = 0;
  SocketAddress server;
};

TaggedResolver::TaggedResolver(const RecursorConfig& cfg, const common::Clock& clock, Timers& timers,
                               const Tags& tags, ZoneCutFinder& cuts, LastHopTransport& transport,
                               Replies& replies, InflightLimit& inflight, Log log, uint64_t seed)
    : cfg_(cfg),
      policy_(CachePolicy::From(cfg)),
      ecs_settings_{cfg.source_v4, cfg.source_v6, cfg.from_client_address},
      clock_(clock),
      timers_(timers),
      tags_(tags),
      cuts_(cuts),
      transport_(transport),
      replies_(replies),
      inflight_(inflight),
      log_(std::move(log)),
      rng_(seed),
      scoped_(static_cast<size_t>(cfg.max_tagged_names), rng_()),
      zero_source_(static_cast<size_t>(cfg.max_zero_source_entries), rng_()) {}

TaggedResolver::~TaggedResolver() = default;

TaggedResolver::Resolution* TaggedResolver::Find(uint64_t id) {
  auto it = resolutions_.find(id);
  return it == resolutions_.end() ? nullptr : it->second.get();
}

void TaggedResolver::Query(Waiter w, const partitions::Tag* tag, std::vector<CachedRecord> prefix) {
  const bool wants_ecs = tag != nullptr ? tag->ecs : w.q.edns.has_ecs;
  std::span<const uint8_t> client;
  if (w.to.peer.len != 0) client = {w.to.peer.addr_bytes(), w.to.peer.addr_len()};
  const EcsChoice c = ChooseEcs(wants_ecs, w.q.edns.has_ecs ? &w.q.edns.ecs : nullptr, client, ecs_settings_);
  const uint32_t now = clock_.NowSeconds();
  const Answer* a = nullptr;
  // Looked up by a key on the stack: a hit allocates nothing.
  const CacheKeyBytes key(w.q.qname, w.q.qtype, 0);
  if (c.zero_source) {
    auto* e = zero_source_.Find(key.view());
    if (e != nullptr && e->value.stale_until > now) a = &e->value.a;
  }
  if (a == nullptr) {
    // A query without ECS upstream (and /0 queries) may only use global answers.
    const dns::ClientSubnet none{};
    if (auto* e = scoped_.Find(key.view()))
      a = e->value.Lookup(w.q.qname.span(), w.q.qtype, c.send ? c.subnet : none, now);
  }
  if (a != nullptr && a->fresh_until > now) {
    ++stats_.wait.hits;
    replies_.Answer(w, *a, now - (a->fresh_until - a->ttl), -1);
    if (policy_.WantsPrefetch(*a, now)) Start(w.q.qname, w.q.qtype, c, nullptr, nullptr, std::move(prefix));
    return;
  }
  ++stats_.wait.misses;
  Start(w.q.qname, w.q.qtype, c, &w, a, std::move(prefix));
}

void TaggedResolver::Start(const dns::NameKey& qname, uint16_t qtype, const EcsChoice& ecs, Waiter* w,
                           const Answer* stale, std::vector<CachedRecord> prefix) {
  if (w != nullptr) w->Hold(timers_.Now() + std::chrono::milliseconds(cfg_.answer_deadline_ms));
  std::string key = CacheKey(qname, qtype, 0);
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
  auto watch_deadline = [this](const Waiter& waiter, uint64_t id) {
    if (waiter.HasFront()) timers_.At(waiter.deadline, [this, id] { OnDeadline(id); });
  };
  if (auto it = resolution_by_key_.find(key); it != resolution_by_key_.end()) {
    if (w != nullptr) {
      ++stats_.wait.coalesced;
      watch_deadline(*w, it->second);
      resolutions_[it->second]->waiters.push_back(std::move(*w));
    }
    return;
  }
  if (inflight_.Full()) {
    if (w != nullptr) ServeOverloaded(replies_, *w, stale, policy_.stale_answer_ttl, stats_.wait);
    return;
  }
  if (w == nullptr) ++stats_.wait.prefetches;
  auto r = std::make_unique<Resolution>();
  r->id = next_id_++;
  r->key = key;
  r->qname = qname;
  r->qtype = qtype;
  r->ecs = ecs;
  r->cur = qname;
  r->cnames_left = cfg_.max_cname_chain;
  if (!prefix.empty()) {
    // Learned: resume after the customer's part of the chain.
    r->cnames_left -= static_cast<int>(prefix.size());
    if (!CnameTarget(prefix.back(), &r->cur)) r->cur = qname;
    r->chain = std::move(prefix);
  }
  if (w != nullptr) {
    watch_deadline(*w, r->id);
    r->waiters.push_back(std::move(*w));
  }
  if (stale != nullptr) {
    r->has_stale = true;
    r->stale = *stale;
  }
  Resolution* raw = r.get();
  resolution_by_key_[key] = r->id;
  resolutions_[r->id] = std::move(r);
  inflight_.Add();
  StartStep(raw, false);
}

void TaggedResolver::OnDeadline(uint64_t id) {
  Resolution* r = Find(id);
  if (r == nullptr) return;
  ExpireWaiters(replies_, r->waiters, r->has_stale ? &r->stale : nullptr, policy_.stale_answer_ttl,
                timers_.Now(), stats_.wait);
}

bool TaggedResolver::EcsTagCovers(const dns::NameKey& name) const {
  const partitions::Tag* t = tags_->Lookup(name.span());
  return t != nullptr && t->ecs;
}

void TaggedResolver::StartStep(Resolution* r, bool force_iterate) {
  const partitions::Tag* t = force_iterate ? nullptr : tags_->Lookup(r->cur.span());
  if (t != nullptr && t->policy == partitions::Policy::kForward && !t->targets.empty()) {
    r->cut = t->suffix;
    r->servers.clear();
    for (const partitions::ForwardTarget& f : t->targets) r->servers.push_back(FromIp(f.address, f.port));
    return BeginQueries(r);
  }
  // A referral (force_iterate) says the deepest cached zone above `cur` is
  // not its zone: ask the resolver for the deeper cut, which is then cached
  // under its own name.
  if (!force_iterate) {
    if (const ZoneCut* z = cuts_.Cached(r->cur)) {
      r->cut = z->cut;
      r->servers = z->servers;
      return BeginQueries(r);
    }
  }
  StartCut(r);
}

// The zone cut of `cur` through the resolver (zone_cuts.h).
void TaggedResolver::StartCut(Resolution* r) {
  cuts_.Find(r->cur, [this, id = r->id](const ZoneCut* z) {
    Resolution* r = Find(id);
    if (r == nullptr) return;
    if (z == nullptr) return Fail(r);
    r->cut = z->cut;
    r->servers = z->servers;
    BeginQueries(r);
  });
}

void TaggedResolver::BeginQueries(Resolution* r) {
  r->attempts_left = cfg_.attempts;
  // Servers that timed out lately go last (unbound's infra cache idea): one
  // mute server of a zone costs one timeout a while, not one per query.
  if (r->servers.size() > 1) {
    std::shuffle(r->servers.begin(), r->servers.end(), rng_);
    const auto now = timers_.Now();
    std::stable_partition(r->servers.begin(), r->servers.end(),
                          [&](const SocketAddress& a) { return !server_health_.Avoid(a, now); });
  }
  r->next_server = 0;
  // Only the steps an ecs tag covers carry the subnet: a chain that leaves
  // the tagged suffix (or a learned one, whose query name is no tag's)
  // sends it nowhere else.
  r->ecs_now = r->ecs.send && EcsTagCovers(r->cur);
  r->retried_without_ecs = false;
  SendQuery(r, false);
}

void TaggedResolver::SendQuery(Resolution* r, bool same_server) {
  if (r->in_flight) {
    transport_.Cancel(r->id);
    r->in_flight = false;
  }
  if (r->servers.empty() || r->attempts_left-- <= 0) return Fail(r);
  if (!same_server) r->server = r->servers[r->next_server++ % r->servers.size()];
  // The transport sends from a random source port, connected so only the
  // server's address and port can answer, and with its own random ID, 0x20
  // and cookie (socket_last_hop.h).
  r->qid = static_cast<uint16_t>(rng_());
  uint8_t q[512];
  dns::ResponseWriter w(q, sizeof(q));
  w.Begin(r->qid, 0, r->cur.span(), r->qtype, dns::klass::kIn);  // RD clear: authoritative servers
  w.BeginOpt(1232, false);
  if (r->ecs_now) w.AddEcs(r->ecs.subnet);
  w.AddWeights(cfg_.weight_option_code, {});
  const size_t len = w.Finish(sizeof(q));
  const LastHopQuery query{r->server, {q, len}, r->qid, r->cur, r->qtype};
  const LastHopTransport::SendResult sent = transport_.Send(r->id, query);
  if (sent == LastHopTransport::SendResult::kNoSocket) return SendQuery(r, false);
  if (r->ecs_now) ++stats_.ecs_sent;
  ++stats_.upstream_queries;
  if (sent == LastHopTransport::SendResult::kSendFailed) return SendQuery(r, false);
  r->in_flight = true;
}

void TaggedResolver::OnFailure(uint64_t token, LastHopTransport::Failure why) {
  Resolution* r = Find(token);
  if (r == nullptr || !r->in_flight) return;
  r->in_flight = false;
  if (why == LastHopTransport::Failure::kTimeout) {
    ++stats_.upstream_timeouts;
    timeout_log_(r->server.ToString(), ": no answer for ", NameText(r->cur), ": next server");
    server_health_.TimedOut(r->server, timers_.Now());
  }
  SendQuery(r, false);
}

void TaggedResolver::OnReply(uint64_t token, const dns::Message& reply) {
  Resolution* r = Find(token);
  if (r == nullptr || !r->in_flight) return;
  r->in_flight = false;
  ProcessReply(r, reply);
}

void TaggedResolver::ProcessReply(Resolution* r, const dns::Message& m) {
  server_health_.Answered(r->server);
  switch (OnRcode(m.rcode(), r->ecs_now, r->retried_without_ecs)) {
    case RcodeAction::kWithoutEcs:
      ++stats_.ecs_retry_without;
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
    ++stats_.ecs_forged;
    forged_ecs_log_(r->server.ToString(), ": answer for ", NameText(r->cur),
                    " carries an ECS option that does not echo the query's: asking again without ECS");
    r->ecs_now = false;
    r->retried_without_ecs = true;
    return SendQuery(r, true);
  }
  if (check.verdict == EcsReply::kUnsolicited) ++stats_.ecs_unsolicited;
  StepResult step = ReadStep(m, r->cur, r->qtype, r->cut.span(), r->cnames_left);
  stats_.out_of_bailiwick += step.out_of_bailiwick;
  if (step.out_of_bailiwick > 0) {
    bailiwick_log_(r->server.ToString(), ": answer for ", NameText(r->cur), " has ", step.out_of_bailiwick,
                   " out-of-bailiwick records (outside ", NameText(r->cut), "): ignored");
  }
  if (step.weight_option && !step.weighted && step.weight_verdict != dns::WeightVerdict::kEmpty) {
    ++stats_.weights_invalid;
    weights_log_(r->server.ToString(), ": invalid weight option in the answer for ", NameText(r->cur), " (",
                 dns::WeightVerdictName(step.weight_verdict), "): answered without weights");
  }
  if (step.kind == StepResult::Kind::kBogus) {
    bogus_log_(r->server.ToString(), ": unreadable records in the answer for ", NameText(r->cur),
               ": next server");
    return SendQuery(r, false);
  }
  // A chain that comes back to a name it went through in an earlier step
  // (another zone) is a loop as much as one inside a single reply.
  if (step.kind != StepResult::Kind::kLoop && step.kind != StepResult::Kind::kTooLong) {
    for (const CachedRecord& c : step.chain) {
      dns::NameKey target;
      if (c.type != dns::type::kCname || !CnameTarget(c, &target)) continue;
      bool seen = target == r->qname;
      for (const CachedRecord& earlier : r->chain) {
        seen = seen || (earlier.type == dns::type::kCname && OwnedBy(earlier, target));
      }
      if (seen) step.kind = StepResult::Kind::kLoop;
    }
  }
  if (step.kind == StepResult::Kind::kLoop || step.kind == StepResult::Kind::kTooLong) {
    const bool loop = step.kind == StepResult::Kind::kLoop;
    ++(loop ? stats_.cname_loops : stats_.cname_chain_too_long);
    log_(Cat(NameText(r->qname), ": CNAME chain ", loop ? "loops" : "is longer than max_cname_chain", " (at ",
             NameText(r->cur), "): SERVFAIL"));
    return Fail(r);
  }
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
      if (step.kind == StepResult::Kind::kReferral) ++stats_.referrals;
      if (--r->steps_left <= 0) return Fail(r);
      r->cur = step.next;
      return StartStep(r, step.kind == StepResult::Kind::kReferral);
    case StepResult::Kind::kBogus:
    case StepResult::Kind::kLoop:
    case StepResult::Kind::kTooLong:
      break;
  }
}

void TaggedResolver::Complete(Resolution* r, uint16_t rcode, std::vector<CachedRecord> rrset,
                              std::vector<CachedRecord> authority, bool weighted,
                              std::vector<uint8_t> weights) {
  const uint32_t now = clock_.NowSeconds();
  Answer a;
  a.rcode = rcode;
  a.answer = std::move(r->chain);
  for (CachedRecord& x : rrset) a.answer.push_back(std::move(x));
  a.authority = std::move(authority);
  for (auto* list : {&a.answer, &a.authority}) {
    for (CachedRecord& x : *list) x.ttl = std::min(x.ttl, policy_.max_ttl);
  }
  a.weighted = weighted;
  a.weights = std::move(weights);
  a.scope = r->scope;
  const bool negative = rcode != 0 || rrset.empty();
  uint32_t ttl = MinTtl(a);
  if (negative) ttl = std::min(ttl, policy_.NegativeTtlOf(a));
  if (negative && ttl == 0) {
    // RFC 2308 5: a negative answer without SOA is not cached.
    ++stats_.wait.negative_uncached;
    a.ttl = 0;
    a.fresh_until = now;
    for (const Waiter& w : r->waiters) replies_.Answer(w, a, 0, -1);
    return Erase(r);
  }
  a.ttl = policy_.Clamp(ttl);
  a.fresh_until = now + a.ttl;
  const uint32_t keep_until = a.fresh_until + policy_.stale_window;
  const std::string key = CacheKey(r->qname, r->qtype, 0);
  if (r->ecs.zero_source) {
    zero_source_.Put(key, PlainEntry{a, keep_until}, keep_until);
  } else {
    const dns::ClientSubnet none{};
    auto& e = scoped_.FindOrInsert(
        key, partitions::EcsScopeCache<Answer>(static_cast<size_t>(cfg_.max_subnets)), keep_until);
    e.value.Insert(r->qname.span(), r->qtype, r->ecs.send ? r->ecs.subnet : none, a.scope, now, keep_until,
                   a);
    e.expires = std::max(e.expires, keep_until);  // the name lives as long as its longest-lived answer
  }
  for (const Waiter& w : r->waiters) replies_.Answer(w, a, 0, -1);
  Erase(r);
}

void TaggedResolver::Fail(Resolution* r) {
  for (const Waiter& w : r->waiters) {
    ServeStaleOrFail(replies_, w, r->has_stale ? &r->stale : nullptr, policy_.stale_answer_ttl, stats_.wait);
  }
  Erase(r);
}

void TaggedResolver::Erase(Resolution* r) {
  if (r->in_flight) transport_.Cancel(r->id);
  resolution_by_key_.erase(r->key);
  resolutions_.erase(r->id);  // frees r
  inflight_.Remove();
}

void TaggedResolver::EraseExpired(uint32_t now) {
  scoped_.EraseIf([&](auto& e) {
    e.value.Expire(now);
    return e.value.name_count() == 0;
  });
  zero_source_.EraseExpired(now);
}

void TaggedResolver::Clear() {
  zero_source_.Clear();
  scoped_.Clear();
}

}  // namespace weir::recursor
