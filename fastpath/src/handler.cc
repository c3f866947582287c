#include "weir/fastpath/handler.h"

#include <algorithm>
#include <optional>

#include "weir/common/hash.h"
#include "weir/dns/ttl.h"
#include "weir/dns/writer.h"
#include "weir/fastpath/upstream_ring.h"

namespace weir::fastpath {

void AnswerCounters::Count(uint64_t entry_hash, partitions::Partition partition,
                           std::span<const uint8_t> qname, const uint8_t* addr, uint8_t addr_len) {
  // The entry's hash with the address mixed in (an entry's addresses change
  // when it is refreshed, so the address is part of the key). The entry's
  // hash is a finished one and the home slot is taken from the high bits,
  // where the multiplies carry the address, so no finaliser is needed.
  // Addresses are 4 (A) or 16 (AAAA) bytes: fixed-size loads, no library
  // call; anything else is read byte by byte.
  uint64_t lo = 0, hi = 0;
  if (addr_len == 4) {
    uint32_t v;
    std::memcpy(&v, addr, 4);
    lo = v;
  } else if (addr_len == 16) {
    std::memcpy(&lo, addr, 8);
    std::memcpy(&hi, addr + 8, 8);
  } else {
    for (size_t i = 0; i < addr_len && i < 16; ++i) (i < 8 ? lo : hi) |= uint64_t{addr[i]} << (8 * (i % 8));
  }
  const uint64_t key = (entry_hash ^ common::CombineWords(lo, hi)) | 1;  // never 0 (empty)
  const size_t home = static_cast<size_t>(key >> 40);
  for (size_t probe = 0; probe < 16; ++probe) {
    const size_t i = (home + probe) & (kSlots - 1);
    Slot& s = slots_[i];
    const uint64_t k = s.key.load(std::memory_order_relaxed);
    if (k == key) {
      s.count.Add();
      return;
    }
    if (k == 0) {
      Labels& l = labels_[i];
      l.partition = partition;
      l.qname_len = static_cast<uint8_t>(qname.size());
      std::copy(qname.begin(), qname.end(), l.qname.begin());
      l.addr_len = addr_len;
      std::copy(addr, addr + addr_len, l.addr.begin());
      s.count.Add();
      s.key.store(key, std::memory_order_release);  // publish to the metrics thread
      return;
    }
  }
  overflow_.Add();
}

void SetUpstreamQuestion(const partitions::Tag* tag, const partitions::City* city, uint8_t family,
                         MissRequest* m) {
  m->tagged = tag != nullptr;
  m->weighted = tag != nullptr && tag->weight;
  m->adaptive = false;
  m->send_ecs = false;
  if (tag == nullptr || !tag->ecs) return;
  if (tag->level == partitions::CacheLevel::kSubnet || tag->level == partitions::CacheLevel::kAdaptive) {
    // The client's own /24 (/56), as its partition names it. Adaptive: the
    // answer's scope then says how far it applies.
    m->adaptive = tag->level == partitions::CacheLevel::kAdaptive &&
                  partitions::LevelOf(m->partition) == partitions::CacheLevel::kSubnet;
    m->ecs = partitions::SubnetEcsOf(m->partition);
    m->send_ecs = true;
  } else if (tag->level == partitions::CacheLevel::kCity && city != nullptr) {
    // The city's own ECS source: subscriber addresses never leave weir.
    m->ecs = city->EcsFor(family);
    m->send_ecs = m->ecs.family != 0;
  }
}

QueryHandler::QueryHandler(const HandlerOptions& options, SharedState* shared, WorkerCounters* counters)
    : options_(options),
      shared_(shared),
      counters_(counters),
      allow_(options.allow),
      trusted_forwarders_(options.trusted_forwarders),
      limiter_(options.rate_limit),
      swrr_(options.swrr_states),
      prefetched_(1024, {0, 0}) {
  parse_options_.weight_option_code = options.weight_option_code;
}

size_t QueryHandler::WriteError(QueryContext& c, bool parsed, dns::Rcode rcode, uint8_t* out,
                                size_t out_cap) {
  if (!parsed) return dns::WriteHeaderOnly({c.pkt, c.len}, rcode, /*ra=*/true, out, out_cap);
  const dns::Query& q = c.query;
  dns::ResponseWriter w(out, out_cap);
  const uint16_t code = static_cast<uint16_t>(rcode);
  if (w.BeginResponse({c.pkt, c.len}, q, static_cast<dns::Rcode>(code & 0xf)) != dns::ParseError::kOk)
    return 0;
  if (q.edns.present || code > 15) {
    w.BeginOpt(options_.edns_udp_size, q.edns.do_bit, static_cast<uint8_t>(code >> 4));
  }
  return w.Finish(c.response_limit);
}

// Inlined into each writer: the hit path pays no call for it.
[[gnu::always_inline]] inline size_t QueryHandler::FinishAnswer(dns::ResponseWriter& w, QueryContext& c,
                                                                bool fits, std::span<const uint8_t> weights) {
  const dns::Query& q = c.query;
  if (q.edns.present) {
    w.BeginOpt(options_.edns_udp_size, q.edns.do_bit);
    if (q.edns.has_ecs) {
      // Echo the client's subnet; the scope says how far the answer applies
      // (0 when the subnet did not choose it: RFC 7871 7.2.1). A trusted
      // forwarder's subnet chose the partition: the answer holds for its
      // whole source prefix (the city or subnet behind it), no wider.
      dns::ClientSubnet ecs = q.edns.ecs;
      ecs.scope_prefix = c.trusted_ecs ? ecs.source_prefix : 0;
      w.AddEcs(ecs);
    }
    // To a client that asked: the weights, or length 0 (supported, not
    // weighted; docs/behaviour.md#the-weight-option).
    if (q.edns.has_weight)
      w.AddWeights(options_.weight_option_code, fits ? weights : std::span<const uint8_t>());
  }
  // Larger than the client's buffer (or than ours), or than its source's
  // byte budget: TC, the client retries over TCP.
  c.unlimited_size = w.size();
  const size_t n = w.Finish(fits ? c.answer_limit() : dns::kHeaderSize);
  if (n != c.unlimited_size || !fits) counters_->truncated.Add();
  return n;
}

void QueryHandler::CountPick(const QueryContext& c, partitions::AnswerMode mode, uint8_t picked) {
  const partitions::CacheEntry& e = *c.entry;
  if (c.tag == nullptr || !c.tag->weight || e.address_count() == 0 || mode == partitions::AnswerMode::kAll)
    return;
  const std::span<const uint8_t> a = e.address(picked);
  answers_.Count(c.hash, c.partition, c.query.qname.span(), a.data(), static_cast<uint8_t>(a.size()));
}

size_t QueryHandler::WriteCached(QueryContext& c, partitions::AnswerTtl ttl, uint8_t* out, size_t out_cap) {
  const dns::Query& q = c.query;
  const partitions::CacheEntry& e = *c.entry;
  // A client that asks for weights gets every address and the weights
  // (docs/behaviour.md#the-weight-option); otherwise tagged names are answered by SWRR.
  const partitions::Tag* tag = c.tag;
  // Subscriber segments sharing an answer each pick in their own sequence.
  const uint64_t sequence = c.sequence;
  partitions::AnswerMode mode = partitions::AnswerMode::kAll;
  if (!q.edns.has_weight && tag != nullptr) mode = tag->answer;
  if (mode == partitions::AnswerMode::kSingle && c.ordered) mode = partitions::AnswerMode::kOrdered;
  // A calibrate=on name picks with its factors (only such names pay the lookup).
  const partitions::FactorSet* factors = nullptr;
  if (tag != nullptr && tag->calibrate && mode != partitions::AnswerMode::kAll) {
    if (const partitions::BoundWeightFactors* f = shared_->factors.Get(); f != nullptr)
      factors = f->Find(c.partition, q.qname.span());
  }
  const uint16_t ad = (e.flags() & dns::flag::kAd) && dns::AdAllowed(q) ? dns::flag::kAd : 0;
  partitions::AnswerWrite aw;
  if (!q.edns.has_ecs && !q.edns.has_weight) [[likely]] {
    // The answer template (CacheEntry::message) and a bare OPT when the
    // query had one: copied and patched, nothing encoded. An answer that
    // does not fit whole goes the general way below (the pick is made only
    // once it fits).
    const size_t opt = q.edns.present ? dns::kBareOptSize : 0;
    const size_t limit = std::min(out_cap, c.answer_limit());
    const size_t n = limit < opt ? 0
                                 : partitions::WriteMessage(e, mode, swrr_, ttl, c.pkt, ad, out, limit - opt,
                                                            &aw, factors, sequence);
    if (n != 0) [[likely]] {
      if (opt != 0) {
        dns::WriteBareOpt(out + n, options_.edns_udp_size, q.edns.do_bit);
        dns::Store16(out + dns::kOffArcount, 1);
      }
      CountPick(c, mode, aw.picked);
      c.unlimited_size = n + opt;
      return n + opt;
    }
  }
  dns::ResponseWriter w(out, out_cap);
  if (w.BeginResponse({c.pkt, c.len}, q, e.rcode()) != dns::ParseError::kOk) return 0;
  if (ad != 0) w.AddFlags(ad);
  uint8_t weights[dns::kMaxWeightedAddresses];
  const bool fits =
      partitions::WriteAnswer(e, mode, swrr_, ttl, w.tail(), w.room(), &aw, weights, factors, sequence);
  if (fits) {
    w.Commit(dns::Section::kAnswer, aw.bytes, aw.answer_count);
    w.Commit(dns::Section::kAuthority, 0, aw.authority_count);
    CountPick(c, mode, aw.picked);
  }
  return FinishAnswer(
      w, c, fits,
      e.has_weights() ? std::span<const uint8_t>(weights, aw.weight_count) : std::span<const uint8_t>());
}

size_t QueryHandler::WriteRelayed(QueryContext& c, const RelayedAnswer& r, uint8_t* out, size_t out_cap) {
  const dns::Query& q = c.query;
  dns::ResponseWriter w(out, out_cap);
  if (w.BeginResponse({c.pkt, c.len}, q, static_cast<dns::Rcode>(r.flags & dns::flag::kRcodeMask)) !=
      dns::ParseError::kOk) {
    return 0;
  }
  if (r.flags & dns::flag::kAd && dns::AdAllowed(q)) w.AddFlags(dns::flag::kAd);
  const bool fits = !r.too_big && r.body.size() <= w.room();
  if (fits) {
    std::copy(r.body.begin(), r.body.end(), w.tail());
    w.Commit(dns::Section::kAnswer, r.body.size(), r.counts[0]);
    w.Commit(dns::Section::kAuthority, 0, r.counts[1]);
    w.Commit(dns::Section::kAdditional, 0, r.counts[2]);
  }
  // The weights the recursor sent, if any.
  return FinishAnswer(w, c, fits,
                      r.has_weight ? std::span<const uint8_t>(r.weight) : std::span<const uint8_t>());
}

size_t QueryHandler::WriteMinimalAny(QueryContext& c, uint8_t* out, size_t out_cap) {
  dns::ResponseWriter w(out, out_cap);
  if (w.BeginResponse({c.pkt, c.len}, c.query, dns::Rcode::kNoError) != dns::ParseError::kOk) return 0;
  // HINFO "RFC8482" "", with the TTL RFC 8482 suggests (one hour or more).
  static constexpr uint8_t kRdata[] = {7, 'R', 'F', 'C', '8', '4', '8', '2', 0};
  const bool fits = w.AppendRecord(dns::Section::kAnswer, c.qname_wire(), dns::type::kHinfo, dns::klass::kIn,
                                   kMinimalAnyTtl, kRdata) == dns::ParseError::kOk;
  return FinishAnswer(w, c, fits, {});
}

template <typename Write>
size_t QueryHandler::WriteBudgeted(QueryContext* c, uint32_t now, Write write) {
  if (!limiter_.limits_bytes() || c->tcp) [[likely]]
    return write();
  c->byte_budget = limiter_.ByteAllowance(&c->source_slot, c->source_generation, *c->source, now);
  const size_t n = write();
  c->byte_budget = SIZE_MAX;
  limiter_.TakeBytes(c->source_slot, static_cast<uint32_t>(n));
  // Sent with TC because of the budget only (it fitted the client's size).
  if (c->unlimited_size > n && c->unlimited_size <= c->response_limit) counters_->rate_limited_bytes.Add();
  return n;
}

Verdict QueryHandler::HandleReturned(const uint8_t* pkt, size_t len, const ClientInfo& client, uint32_t now,
                                     HandleMode mode, const RelayedAnswer* relay, uint8_t* out,
                                     size_t out_cap, size_t* out_len, MissRequest* miss, AnswerInfo* info) {
  const Verdict v = Handle(pkt, len, client, now, out, out_cap, out_len, miss, mode, info);
  if (v == Verdict::kReply || v == Verdict::kReplyAndPrefetch) return Verdict::kReply;
  if (v == Verdict::kMiss && mode == HandleMode::kRetry) return Verdict::kMiss;
  if (v != Verdict::kMiss) return v;  // it did not parse, or did not fit
  // Not in the cache: the upstream's answer as it came (DNSSEC-aware
  // queries, REFUSED, uncacheable), or SERVFAIL when every upstream failed.
  QueryContext& c = single_;
  unsigned rcode;
  if (relay != nullptr) {
    *out_len = WriteBudgeted(&c, now, [&] { return WriteRelayed(c, *relay, out, out_cap); });
    rcode = relay->flags & dns::flag::kRcodeMask;
  } else {
    *out_len = WriteError(c, /*parsed=*/true, dns::Rcode::kServFail, out, out_cap);
    rcode = static_cast<unsigned>(dns::Rcode::kServFail);
    if (*out_len != 0) counters_->Error(ErrorReason::kUpstreamFailure);
  }
  if (*out_len == 0) {
    counters_->Drop(DropReason::kNoRoom);
    return Verdict::kDrop;
  }
  counters_->Response(c.tcp, rcode);
  return Verdict::kReply;
}

bool QueryHandler::ShouldPrefetch(const partitions::CacheEntry& e, uint32_t now) {
  if (options_.prefetch_percent == 0 || e.kind() == partitions::EntryKind::kServFail) return false;
  if (!dns::PrefetchDue(e.ttl(), e.expires() > now ? e.expires() - now : 0, options_.prefetch_percent))
    return false;
  return ClaimRefresh(e, now);
}

bool QueryHandler::ShouldPrefetch(const partitions::Segment& s, uint32_t now) {
  if (options_.prefetch_percent == 0) return false;
  const uint32_t expires = s.Expires();  // once: a refresh may move it on meanwhile
  if (!dns::PrefetchDue(s.Ttl(), expires > now ? expires - now : 0, options_.prefetch_percent)) return false;
  return ClaimRefresh(common::Mix64(s.id), now);
}

bool QueryHandler::ClaimRefresh(uint64_t key, uint32_t now) {
  auto& slot = prefetched_[key & (prefetched_.size() - 1)];
  if (slot.first == key && now - slot.second < 1) return false;
  slot = {key, now};
  return true;
}

bool QueryHandler::Begin(const uint8_t* pkt, size_t len, const ClientInfo& client, uint32_t now, uint8_t* out,
                         size_t out_cap, size_t* out_len, HandleMode mode, QueryContext* c,
                         Verdict* verdict) {
  if (mode == HandleMode::kNormal) (client.tcp ? counters_->queries_tcp : counters_->queries_udp).Add();
  *verdict = Verdict::kDrop;
  // Garbage: too short for a header, or a response (answering responses
  // invites reflection loops).
  if (len < dns::kHeaderSize || (pkt[2] & 0x80) != 0) {
    counters_->Drop(DropReason::kGarbage);
    return false;
  }
  c->pkt = pkt;
  c->len = len;
  if (limiter_.enabled()) [[unlikely]] {
    c->source = &client.addr;
    c->source_slot = RateLimiter::kNoSlot;
    // Queries returned from the upstream side were counted when they came.
    if (mode == HandleMode::kNormal) {
      c->source_slot = limiter_.Track(client.addr, now);
      c->source_generation = limiter_.generation();
      if (!limiter_.TakeQuery(c->source_slot)) {
        counters_->Drop(DropReason::kRateLimited);
        return false;
      }
    }
  }
  dns::Query& query = c->query;
  const dns::ParseError err = dns::ParseQuery({pkt, len}, parse_options_, &query);
  // Over TCP the whole answer goes (RFC 7766); over UDP the client's limit.
  // Over UDP at most our own EDNS size (kEdnsUdpSize): larger datagrams fragment.
  c->response_limit =
      client.tcp ? std::min<size_t>(out_cap, 65535)
                 : std::min<size_t>(query.udp_limit(), std::max<size_t>(options_.edns_udp_size, 512));
  c->tcp = client.tcp;
  c->ordered = client.ordered;
  c->optimistic = client.optimistic;
  c->stale = false;
  // An answer from here: counted by its RCODE (and `why` when it is an
  // error), or a drop when not even the header could be written.
  auto reply = [&](size_t n, dns::Rcode rcode, std::optional<ErrorReason> why) {
    *out_len = n;
    *verdict = n ? Verdict::kReply : Verdict::kDrop;
    if (n == 0) {
      counters_->Drop(DropReason::kNoRoom);
    } else {
      counters_->Response(client.tcp, static_cast<unsigned>(rcode));
      if (why) counters_->Error(*why);
    }
    return false;
  };
  if (!allow_.Contains(client.addr)) {
    if (err != dns::ParseError::kOk && err != dns::ParseError::kBadEdnsVersion) {
      counters_->Drop(DropReason::kAcl);  // nothing readable to refuse
      return false;
    }
    return reply(WriteError(*c, true, dns::Rcode::kRefused, out, out_cap), dns::Rcode::kRefused,
                 ErrorReason::kAcl);
  }
  if (err == dns::ParseError::kBadEdnsVersion) {
    return reply(WriteError(*c, true, dns::Rcode::kBadVers, out, out_cap), dns::Rcode::kBadVers,
                 ErrorReason::kBadVers);
  }
  if (err != dns::ParseError::kOk) {
    return reply(WriteError(*c, false, dns::Rcode::kFormErr, out, out_cap), dns::Rcode::kFormErr,
                 ErrorReason::kFormErr);
  }
  if (query.opcode() != 0) {
    return reply(WriteError(*c, true, dns::Rcode::kNotImp, out, out_cap), dns::Rcode::kNotImp,
                 ErrorReason::kNotImpl);
  }
  if (query.qclass != dns::klass::kIn) {
    return reply(WriteError(*c, true, dns::Rcode::kRefused, out, out_cap), dns::Rcode::kRefused,
                 ErrorReason::kClass);
  }
  if (query.qtype == dns::type::kAny && !client.tcp) {
    // ANY over UDP is the classic amplification query: a minimal answer
    // (RFC 8482 4.2) from here, never the upstream's whole name. Over TCP
    // (no spoofed sources) it is resolved as any other type.
    counters_->any_minimal.Add();
    return reply(WriteBudgeted(c, now, [&] { return WriteMinimalAny(*c, out, out_cap); }),
                 dns::Rcode::kNoError, std::nullopt);
  }
  return true;
}

void QueryHandler::Classify(const ClientInfo& client, uint32_t now, QueryContext* c) {
  const dns::Query& query = c->query;
  // The tag (c->tag, from the tag table), then the partition: the packet
  // source picks the city, or the ECS address when a trusted forwarder sent
  // one.
  if (c->tag == nullptr) {
    const LearnedTags* learned = shared_->learned.Get();
    if (learned != nullptr) c->tag = learned->Lookup(query.qname.span(), now);
  }
  c->who = client.addr;
  // A /0 source says "do not use my address" (RFC 7871 7.1.2): not a subnet.
  c->trusted_ecs =
      query.edns.has_ecs && query.edns.ecs.source_prefix > 0 && trusted_forwarders_.Contains(client.addr);
  if (c->trusted_ecs) {
    c->who.family = query.edns.ecs.family == dns::kEcsFamilyIpv4 ? 4 : 6;
    c->who.bytes = query.edns.ecs.address;
  }
  c->partition = partitions::kCommonPartition;
  c->segment = nullptr;
  c->sequence = 0;
  c->slot = 0;
  c->city = nullptr;
  c->city_id = 0;
  if (c->tag != nullptr && c->tag->level != partitions::CacheLevel::kGlobal) {
    const partitions::CityMap* cm = shared_->citymap.Get();
    const partitions::PartitionId id = cm != nullptr ? cm->Lookup(c->who) : 0;
    if (cm != nullptr) c->city = &cm->city(id);
    c->city_id = id;
    c->partition = partitions::PartitionKey(c->tag->level, id, c->who);
    c->slot = c->tag->level == partitions::CacheLevel::kCity ? 1 + size_t{id} : kSubnetSlot;
    if (c->tag->level == partitions::CacheLevel::kAdaptive) [[unlikely]]
      ClassifyAdaptive(now, c);
  }
  // DNSSEC-aware queries (DO or CD) need RRSIGs and CD semantics the cache
  // does not keep: they are coalesced and relayed, never answered from or
  // written to the cache.
  c->dnssec = query.edns.do_bit || query.cd();
  c->hash = partitions::HashCacheKey(c->key());
}

void QueryHandler::ClassifyAdaptive(uint32_t now, QueryContext* c) {
  // The subscriber's segment, if one is learned and still served: its
  // answer's partition. Else the subscriber's subnet partition, which holds
  // nothing (a miss, asked with the subnet: the answer's scope teaches the
  // segment), or what was cached there while the segment table was full.
  const partitions::SegmentTable* table = shared_->segments.get();
  const partitions::SegmentSet* set =
      table != nullptr ? table->Find(c->query.qname.span(), c->query.qtype) : nullptr;
  const partitions::Segment* seg =
      set != nullptr ? set->Match(partitions::SegmentAddressOf(c->who)) : nullptr;
  c->slot = kSegmentSlot;
  // After every upstream failed, a segment past its time still picks the
  // stale answer (RFC 8767).
  if (seg == nullptr || (seg->Expires() <= now && !c->expired_segments)) return;
  c->segment = seg;
  c->sequence = seg->id;
  c->partition = seg->answer;
}

Verdict QueryHandler::Finish(QueryContext* c, uint32_t now, uint8_t* out, size_t out_cap, size_t* out_len,
                             MissRequest* miss, HandleMode mode) {
  const dns::Query& query = c->query;
  const partitions::Tag* tag = c->tag;
  const partitions::Partition partition = c->partition;
  const partitions::CacheEntry* e = c->entry;
  const partitions::Freshness fresh = c->fresh;
  if (mode == HandleMode::kNormal) {
    const size_t slot = c->slot;
    lookups_[slot].Add();
    if (slot == kSegmentSlot) [[unlikely]]
      tiers_[c->segment == nullptr ? kTierNone : c->segment->len == 0 ? kTierGlobal : kTierSegment].Add();
    if (e != nullptr && fresh == partitions::Freshness::kFresh) hits_[slot].Add();
  }
  if (e != nullptr) {
    partitions::AnswerTtl ttl;
    bool serve = false;
    if (fresh == partitions::Freshness::kFresh) {
      serve = true;
      ttl = partitions::AnswerTtl::Aged(e->Age(now));
    } else if (mode == HandleMode::kAfterFill && e->expires() >= now) {
      serve = true;  // the answer just received, with a TTL of 0
      ttl = partitions::AnswerTtl::Aged(e->Age(now));
    } else if (mode == HandleMode::kNormal && c->optimistic && fresh == partitions::Freshness::kStale) {
      // The optimistic cache: the stale answer now, the refresh behind it.
      serve = true;
      ttl = partitions::AnswerTtl::Stale(options_.stale_answer_ttl);
      counters_->stale_served.Add();
      c->stale = true;
    } else if (mode == HandleMode::kAfterFill || mode == HandleMode::kStaleOk) {
      // An old entry: the upstream failed, or answered with something not
      // cacheable (REFUSED, TC...): RFC 8767 prefers the stale answer, every
      // record at the stale TTL.
      serve = true;
      ttl = partitions::AnswerTtl::Stale(options_.stale_answer_ttl);
      counters_->stale_served.Add();
      c->stale = true;
    }
    if (serve) {
      if (mode == HandleMode::kNormal) counters_->hits.Add();
      *out_len = WriteBudgeted(c, now, [&] { return WriteCached(*c, ttl, out, out_cap); });
      if (*out_len == 0) {
        counters_->Drop(DropReason::kNoRoom);
        return Verdict::kDrop;
      }
      counters_->Response(c->tcp, static_cast<unsigned>(e->rcode()));
      if (mode == HandleMode::kNormal &&
          ((fresh == partitions::Freshness::kFresh &&
            (ShouldPrefetch(*e, now) || (c->segment != nullptr && ShouldPrefetch(*c->segment, now)))) ||
           (c->stale && ClaimRefresh(*e, now)))) {
        // Fill `miss` below and let the caller refresh the entry.
      } else {
        return Verdict::kReply;
      }
    }
  } else if (mode == HandleMode::kAfterFill || mode == HandleMode::kStaleOk) {
    return Verdict::kMiss;  // the caller sends its fallback answer
  }

  const bool prefetch = e != nullptr && (fresh == partitions::Freshness::kFresh || c->stale);
  if (!prefetch) counters_->misses.Add();
  // An adaptive name's miss is asked and coalesced under the subscriber's
  // subnet partition, whatever segment answered it.
  miss->partition = c->segment != nullptr
                        ? partitions::PartitionKey(partitions::CacheLevel::kSubnet, 0, c->who)
                        : partition;
  miss->qtype = query.qtype;
  miss->qclass = query.qclass;
  miss->qname = query.qname;
  SetUpstreamQuestion(tag, c->city, c->who.family, miss);
  miss->do_bit = query.edns.do_bit;
  miss->cd_bit = query.cd();
  miss->city = c->city_id;
  miss->sibling = false;
  return prefetch ? Verdict::kReplyAndPrefetch : Verdict::kMiss;
}

Verdict QueryHandler::Handle(const uint8_t* pkt, size_t len, const ClientInfo& client, uint32_t now,
                             uint8_t* out, size_t out_cap, size_t* out_len, MissRequest* miss,
                             HandleMode mode, AnswerInfo* info) {
  QueryContext* c = &single_;
  Verdict v;
  if (info != nullptr) *info = AnswerInfo{};
  if (!Begin(pkt, len, client, now, out, out_cap, out_len, mode, c, &v)) return v;
  const partitions::TagTable* tags = shared_->tags.Get();
  c->tag = tags != nullptr ? tags->Lookup(c->query.qname.span(), c->query.qname_labels.span()) : nullptr;
  c->expired_segments = mode == HandleMode::kStaleOk;
  Classify(client, now, c);
  c->entry = nullptr;
  c->fresh = partitions::Freshness::kMiss;
  if (!c->dnssec) c->entry = shared_->cache->Find(c->key(), c->hash, now, &c->fresh);
  v = Finish(c, now, out, out_cap, out_len, miss, mode);
  if (info != nullptr && c->entry != nullptr && (v == Verdict::kReply || v == Verdict::kReplyAndPrefetch)) {
    info->cached = true;
    info->stale = c->stale;
    info->origin_ttl = c->entry->ttl();
  }
  return v;
}

void QueryHandler::HandleBurst(BurstPacket* p, size_t n, uint32_t now) {
  // The same steps as Handle, each over the whole burst, so that the tag
  // index and cache reads of all its queries overlap (TagTable::LookupBurst,
  // Cache::FindBurst) instead of each waiting for the one before.
  for (size_t base = 0; base < n; base += kMaxBurst) {
    const size_t m = std::min(n - base, kMaxBurst);
    BurstPacket* b = p + base;
    size_t live[kMaxBurst];
    size_t k = 0;
    for (size_t i = 0; i < m; ++i) {
      b[i].out_len = 0;
      if (Begin(b[i].pkt, b[i].len, b[i].client, now, b[i].out, b[i].out_cap, &b[i].out_len,
                HandleMode::kNormal, &burst_[i], &b[i].verdict)) {
        live[k++] = i;
      }
    }
    if (k == 0) continue;
    std::span<const uint8_t> names[kMaxBurst], starts[kMaxBurst];
    const partitions::Tag* tag[kMaxBurst];
    for (size_t j = 0; j < k; ++j) {
      names[j] = burst_[live[j]].query.qname.span();
      starts[j] = burst_[live[j]].query.qname_labels.span();
    }
    const partitions::TagTable* tags = shared_->tags.Get();
    if (tags != nullptr) {
      tags->LookupBurst(names, starts, tag, k);
    } else {
      std::fill(tag, tag + k, nullptr);
    }
    partitions::CacheKey keys[kMaxBurst];
    uint64_t hashes[kMaxBurst];
    const partitions::CacheEntry* entries[kMaxBurst];
    partitions::Freshness fresh[kMaxBurst];
    size_t cached[kMaxBurst];
    size_t c = 0;
    for (size_t j = 0; j < k; ++j) {
      QueryContext* ctx = &burst_[live[j]];
      ctx->tag = tag[j];
      ctx->expired_segments = false;
      Classify(b[live[j]].client, now, ctx);
      ctx->entry = nullptr;
      ctx->fresh = partitions::Freshness::kMiss;
      if (!ctx->dnssec) {
        keys[c] = ctx->key();
        hashes[c] = ctx->hash;
        cached[c++] = live[j];
      }
    }
    shared_->cache->FindBurst(keys, hashes, c, now, entries, fresh);
    for (size_t j = 0; j < c; ++j) {
      burst_[cached[j]].entry = entries[j];
      burst_[cached[j]].fresh = fresh[j];
    }
    for (size_t j = 0; j < k; ++j) {
      const size_t i = live[j];
      b[i].verdict =
          Finish(&burst_[i], now, b[i].out, b[i].out_cap, &b[i].out_len, b[i].miss, HandleMode::kNormal);
    }
  }
}

}  // namespace weir::fastpath
