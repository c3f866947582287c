#include "ordinary_resolver.h"

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

namespace weir::recursor {

struct OrdinaryResolver::Fetch {
  std::vector<Waiter> waiters;
  bool has_stale = false;
  Answer stale;
  dns::NameKey qname;
  uint16_t qtype = 0;
  uint16_t qclass = 0;
};

OrdinaryResolver::OrdinaryResolver(const RecursorConfig& cfg, const common::Clock& clock, Timers& timers,
                                   const TaggedResolver::Tags& tags, Resolver& resolver,
                                   FrontReplies& replies, InflightLimit& inflight, TaggedResolver& tagged,
                                   uint64_t seed)
    : cfg_(cfg),
      policy_(CachePolicy::From(cfg)),
      clock_(clock),
      timers_(timers),
      tags_(tags),
      resolver_(resolver),
      replies_(replies),
      inflight_(inflight),
      tagged_(tagged),
      plain_(static_cast<size_t>(cfg.max_entries), seed) {
  parse_options_.weight_option_code = cfg.weight_option_code;
}

OrdinaryResolver::~OrdinaryResolver() = default;

void OrdinaryResolver::Query(Waiter w) {
  const uint32_t now = clock_.NowSeconds();
  // Looked up by a key on the stack: a hit allocates nothing; a miss or a
  // prefetch keeps the key as a string.
  const CacheKeyBytes key_bytes(w.q.qname, w.q.qtype, w.q.qclass);
  const PlainEntry* hit = nullptr;
  if (auto* e = plain_.Find(key_bytes.view()); e != nullptr && e->value.stale_until > now) hit = &e->value;
  const bool fresh = hit != nullptr && hit->a.fresh_until > now;
  if (fresh) {
    ++stats_.wait.hits;
    replies_.Answer(w, hit->a, now - (hit->a.fresh_until - hit->a.ttl), -1);
    if (!policy_.WantsPrefetch(hit->a, now) || fetches_.contains(key_bytes.view()) || inflight_.Full())
      return;
  }
  const std::string key = key_bytes.str();
  if (fresh) {
    ++stats_.wait.prefetches;
    auto f = std::make_unique<Fetch>();
    f->qname = w.q.qname;
    f->qtype = w.q.qtype;
    f->qclass = w.q.qclass;
    fetches_.emplace(key, std::move(f));
  } else {
    ++stats_.wait.misses;
    w.Hold(timers_.Now() + std::chrono::milliseconds(cfg_.answer_deadline_ms));
    auto watch_deadline = [&] { timers_.At(w.deadline, [this, key] { OnDeadline(key); }); };
    if (auto it = fetches_.find(key); it != fetches_.end()) {
      ++stats_.wait.coalesced;
      watch_deadline();
      it->second->waiters.push_back(std::move(w));
      return;
    }
    if (inflight_.Full()) {
      return ServeOverloaded(replies_, w, hit != nullptr ? &hit->a : nullptr, policy_.stale_answer_ttl,
                             stats_.wait);
    }
    auto f = std::make_unique<Fetch>();
    f->qname = w.q.qname;
    f->qtype = w.q.qtype;
    f->qclass = w.q.qclass;
    if (hit != nullptr) {
      f->has_stale = true;
      f->stale = hit->a;
    }
    watch_deadline();
    f->waiters.push_back(std::move(w));
    fetches_.emplace(key, std::move(f));
  }
  inflight_.Add();
  const Fetch& f = *fetches_[key];
  ++stats_.resolver_queries;
  if (!resolver_.Resolve(NameText(f.qname), f.qtype, f.qclass,
                         [this, key](const ResolverResult& r) { OnResult(key, r); })) {
    OnResult(key, ResolverResult{-1, {}, false, false});
  }
}

void OrdinaryResolver::OnDeadline(const std::string& key) {
  auto it = fetches_.find(key);
  if (it == fetches_.end()) return;
  Fetch& f = *it->second;
  ExpireWaiters(replies_, f.waiters, f.has_stale ? &f.stale : nullptr, policy_.stale_answer_ttl,
                timers_.Now(), stats_.wait);
}

void OrdinaryResolver::OnResult(const std::string& key, const ResolverResult& result) {
  auto it = fetches_.find(key);
  if (it == fetches_.end()) return;
  std::unique_ptr<Fetch> f = std::move(it->second);
  fetches_.erase(it);
  inflight_.Remove();
  const uint32_t now = clock_.NowSeconds();
  dns::Message m;
  const bool ok = result.err == 0 && !result.packet.empty() && !result.bogus &&
                  m.Parse(result.packet, parse_options_) == dns::ParseError::kOk &&
                  (m.rcode() == 0 || m.rcode() == 3 || m.rcode() == 5);
  if (ok && m.rcode() == 5) {
    // REFUSED from libunbound is a local zone's answer (type refuse): the
    // operator's policy, relayed as it is and never cached.
    for (Waiter& w : f->waiters) {
      if (w.HasFront()) replies_.Error(w, dns::Rcode::kRefused);
    }
    return;
  }
  if (!ok) {
    for (Waiter& w : f->waiters) {
      ServeStaleOrFail(replies_, w, f->has_stale ? &f->stale : nullptr, policy_.stale_answer_ttl,
                       stats_.wait);
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
      r.ttl = std::min(r.ttl, policy_.max_ttl);
      (sec == dns::Section::kAnswer ? a.answer : a.authority).push_back(std::move(r));
    }
  }
  // docs/behaviour.md#domain-tags: a chain entering a tagged suffix makes the name tagged. The
  // chain up to the tagged name is the customer's (resolved here, without
  // ECS); the tagged rest is resolved by weir's last hop from that name,
  // which needs no zone cut of the customer's zone (a flat forwarder may
  // not give one).
  const partitions::Tag* learned = nullptr;
  std::vector<CachedRecord> prefix;
  dns::NameKey cur = f->qname;
  for (int hops = 0; hops < cfg_.max_cname_chain && learned == nullptr; ++hops) {
    const CachedRecord* link = nullptr;
    for (const CachedRecord& r : a.answer) {
      if (r.type == dns::type::kCname && OwnedBy(r, cur)) link = &r;
    }
    dns::NameKey target;
    if (link == nullptr || !CnameTarget(*link, &target)) break;
    prefix.push_back(*link);
    cur = target;
    const partitions::Tag* t = tags_->Lookup(cur.span());
    if (t != nullptr && (t->weight || t->ecs)) learned = t;
  }
  if (learned != nullptr) {
    for (Waiter& w : f->waiters) {
      if (!w.HasFront()) continue;
      ++stats_.learned_tagged;
      tagged_.Query(std::move(w), learned, prefix);
    }
    return;
  }
  // RFC 2308 2.2: an answer with no record of the asked type at the end of
  // its chain (a CNAME to a name without one) is a NODATA, dated by its SOA
  // like any other (and not cached without one), not by the CNAME's TTL.
  auto answers_question = [&] {
    if (f->qtype == dns::type::kAny) return !a.answer.empty();
    dns::NameKey name = f->qname;
    for (size_t i = 0;; ++i) {
      for (const CachedRecord& r : a.answer) {
        if (r.type == f->qtype && OwnedBy(r, name)) return true;
      }
      if (i >= prefix.size() || !CnameTarget(prefix[i], &name)) return false;
    }
  };
  const bool negative = a.rcode != 0 || !answers_question();
  const uint32_t ttl = negative ? std::min(MinTtl(a), policy_.NegativeTtlOf(a)) : MinTtl(a);
  if (negative && ttl == 0) {
    ++stats_.wait.negative_uncached;  // RFC 2308 5: no SOA, nothing to date it by
  } else {
    a.ttl = policy_.Clamp(ttl);
    a.fresh_until = now + a.ttl;
    const uint32_t keep_until = a.fresh_until + policy_.stale_window;
    plain_.Put(key, PlainEntry{a, keep_until}, keep_until);
  }
  for (Waiter& w : f->waiters) {
    if (w.HasFront()) replies_.Answer(w, a, 0, -1);
  }
}

}  // namespace weir::recursor
