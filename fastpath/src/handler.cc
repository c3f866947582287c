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
  uint64_t lo = 0, hi = 0;
  std::memcpy(&lo, addr, std::min<size_t>(addr_len, 8));
  if (addr_len > 8) std::memcpy(&hi, addr + 8, std::min<size_t>(addr_len - 8, 8));
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

QueryHandler::QueryHandler(const HandlerOptions& options, SharedState* shared, WorkerCounters* counters)
    : options_(options),
      shared_(shared),
      counters_(counters),
      limiter_(options.rate_limit),
      swrr_(options.swrr_states),
      prefetched_(1024, {0, 0}) {
  parse_options_.weight_option_code = options.weight_option_code;
}

bool QueryHandler::Allowed(const common::IpAddress& a) const {
  for (const auto& c : options_.allow) {
    if (c.Contains(a)) return true;
  }
  return false;
}

bool QueryHandler::Trusted(const common::IpAddress& a) const {
  for (const auto& c : options_.trusted_forwarders) {
    if (c.Contains(a)) return true;
  }
  return false;
}

size_t QueryHandler::WriteError(const uint8_t* pkt, size_t len, const dns::Query* q, dns::Rcode rcode,
                                uint8_t* out, size_t out_cap) {
  dns::ResponseWriter w(out, out_cap);
  const uint16_t code = static_cast<uint16_t>(rcode);
  if (q != nullptr) {
    if (w.BeginResponse({pkt, len}, *q, static_cast<dns::Rcode>(code & 0xf)) != dns::ParseError::kOk)
      return 0;
    if (q->edns.present || code > 15) {
      w.BeginOpt(options_.edns_udp_size, q->edns.do_bit, static_cast<uint8_t>(code >> 4));
    }
    return w.Finish(response_limit_ != 0 ? response_limit_ : q->udp_limit());
  }
  // Header only: the question could not be read.
  if (len < 4 || out_cap < dns::kHeaderSize) return 0;
  const uint16_t qflags = dns::Load16(pkt + 2);
  const uint16_t flags = static_cast<uint16_t>(
      dns::flag::kQr | (qflags & (dns::flag::kOpcodeMask | dns::flag::kRd)) | dns::flag::kRa | (code & 0xf));
  dns::Store16(out, dns::Load16(pkt));
  dns::Store16(out + 2, flags);
  for (size_t i = 4; i < dns::kHeaderSize; ++i) out[i] = 0;
  return dns::kHeaderSize;
}

size_t QueryHandler::WriteCached(const uint8_t* pkt, size_t len, const dns::Query& q,
                                 const partitions::CacheEntry& e, const partitions::Tag* tag,
                                 partitions::Partition partition, uint64_t entry_hash, bool trusted_ecs,
                                 partitions::AnswerTtl ttl, uint8_t* out, size_t out_cap) {
  dns::ResponseWriter w(out, out_cap);
  const uint16_t rcode = static_cast<uint16_t>(e.rcode());
  const uint16_t flags =
      static_cast<uint16_t>(dns::flag::kQr | dns::flag::kRa |
                            (q.flags & (dns::flag::kOpcodeMask | dns::flag::kRd | dns::flag::kCd)) |
                            (q.flags & dns::flag::kAd ? e.flags() & dns::flag::kAd : 0) | (rcode & 0xf));
  if (w.Begin(q.id, flags, {pkt + dns::kHeaderSize, q.qname.len}, q.qtype, q.qclass) !=
      dns::ParseError::kOk) {
    return 0;
  }
  (void)len;
  // A client that asks for weights gets every address and the weights
  // (docs/behaviour.md#the-weight-option); otherwise tagged names are answered by SWRR.
  partitions::AnswerMode mode = partitions::AnswerMode::kAll;
  if (!q.edns.has_weight && tag != nullptr) mode = tag->answer;
  uint8_t weights[dns::kMaxWeightedAddresses];
  partitions::AnswerWrite aw;
  const bool fits = partitions::WriteAnswer(e, mode, swrr_, ttl, w.tail(), w.room(), &aw, weights);
  if (fits) {
    w.Commit(dns::Section::kAnswer, aw.bytes, aw.answer_count);
    w.Commit(dns::Section::kAuthority, 0, aw.authority_count);
    if (tag != nullptr && tag->weight && e.address_count() > 0 && mode != partitions::AnswerMode::kAll) {
      // The picked record's RDATA: owner pointer (2) + type, class, TTL,
      // RDLENGTH (10), then the address.
      const uint8_t* rec = e.records().data() + e.chain_bytes() + size_t{aw.picked} * e.address_record_size();
      answers_.Count(entry_hash, partition, q.qname.span(), rec + 12,
                     static_cast<uint8_t>(e.address_record_size() - 12));
    }
  }
  if (q.edns.present) {
    w.BeginOpt(options_.edns_udp_size, q.edns.do_bit);
    if (q.edns.has_ecs) {
      // Echo the client's subnet; the scope says how far the answer applies
      // (0 when the subnet did not choose it: RFC 7871 7.2.1).
      dns::ClientSubnet ecs = q.edns.ecs;
      // A trusted forwarder's subnet chose the partition: the answer holds for
      // its whole source prefix (the city or subnet behind it), no wider.
      ecs.scope_prefix = trusted_ecs ? ecs.source_prefix : 0;
      w.AddEcs(ecs);
    }
    if (q.edns.has_weight) {
      if (e.has_weights() && fits) {
        w.AddWeights(options_.weight_option_code, {weights, aw.weight_count});
      } else {
        w.AddWeights(options_.weight_option_code, {});  // supported, not weighted
      }
    }
  }
  // Larger than the client's buffer (or than ours), or than its source's
  // byte budget: TC, the client retries over TCP.
  const size_t whole = w.size();
  unlimited_size_ = whole;
  const size_t n = w.Finish(fits ? AnswerLimit() : dns::kHeaderSize);
  if (n != whole || !fits) counters_->truncated.Add();
  if (n != 0) counters_->Response(tcp_, rcode);
  return n;
}

size_t QueryHandler::WriteRelayed(const uint8_t* pkt, const Work& w, const RelayedAnswer& r, uint8_t* out,
                                  size_t out_cap) {
  const dns::Query& q = w.query;
  dns::ResponseWriter wr(out, out_cap);
  const uint16_t flags =
      static_cast<uint16_t>(dns::flag::kQr | dns::flag::kRa |
                            (q.flags & (dns::flag::kOpcodeMask | dns::flag::kRd | dns::flag::kCd)) |
                            (r.flags & dns::flag::kRcodeMask) |
                            // AD only to clients that asked for it (RFC 6840 5.8).
                            ((q.edns.do_bit || (q.flags & dns::flag::kAd)) ? r.flags & dns::flag::kAd : 0));
  if (wr.Begin(q.id, flags, {pkt + dns::kHeaderSize, q.qname.len}, q.qtype, q.qclass) !=
      dns::ParseError::kOk) {
    return 0;
  }
  const bool fits = !r.too_big && r.body.size() <= wr.room();
  if (fits) {
    std::copy(r.body.begin(), r.body.end(), wr.tail());
    wr.Commit(dns::Section::kAnswer, r.body.size(), r.counts[0]);
    wr.Commit(dns::Section::kAuthority, 0, r.counts[1]);
    wr.Commit(dns::Section::kAdditional, 0, r.counts[2]);
  }
  if (q.edns.present) {
    // The same OPT as a cached answer's: our buffer size, the client's DO,
    // its subnet echoed with the partition's scope, weights only to a
    // client that asked (the recursor's, or length 0).
    wr.BeginOpt(options_.edns_udp_size, q.edns.do_bit);
    if (q.edns.has_ecs) {
      dns::ClientSubnet ecs = q.edns.ecs;
      ecs.scope_prefix = w.trusted_ecs ? ecs.source_prefix : 0;
      wr.AddEcs(ecs);
    }
    if (q.edns.has_weight) {
      wr.AddWeights(options_.weight_option_code,
                    r.has_weight && fits ? std::span<const uint8_t>(r.weight) : std::span<const uint8_t>());
    }
  }
  const size_t whole = wr.size();
  unlimited_size_ = whole;
  const size_t n = wr.Finish(fits ? AnswerLimit() : dns::kHeaderSize);
  if (n != whole || !fits) counters_->truncated.Add();
  if (n != 0) counters_->Response(tcp_, r.flags & dns::flag::kRcodeMask);
  return n;
}

size_t QueryHandler::WriteMinimalAny(const uint8_t* pkt, const dns::Query& q, uint8_t* out, size_t out_cap) {
  dns::ResponseWriter w(out, out_cap);
  const uint16_t flags = static_cast<uint16_t>(dns::flag::kQr | dns::flag::kRa |
                                               (q.flags & (dns::flag::kOpcodeMask | dns::flag::kRd)));
  const std::span<const uint8_t> qname{pkt + dns::kHeaderSize, q.qname.len};
  if (w.Begin(q.id, flags, qname, q.qtype, q.qclass) != dns::ParseError::kOk) return 0;
  // HINFO "RFC8482" "", with the TTL RFC 8482 suggests (one hour or more).
  static constexpr uint8_t kRdata[] = {7, 'R', 'F', 'C', '8', '4', '8', '2', 0};
  w.AppendRecord(dns::Section::kAnswer, qname, dns::type::kHinfo, dns::klass::kIn, kMinimalAnyTtl, kRdata);
  if (q.edns.present) w.BeginOpt(options_.edns_udp_size, q.edns.do_bit);
  unlimited_size_ = w.size();
  const size_t n = w.Finish(AnswerLimit());
  if (n != unlimited_size_) counters_->truncated.Add();
  return n;
}

void QueryHandler::BudgetBytes(Work* w, uint32_t now) {
  byte_budget_ = limiter_.ByteAllowance(&w->source_slot, w->source_generation, *w->source, now);
}

void QueryHandler::ChargeBytes(Work* w, size_t sent) {
  byte_budget_ = SIZE_MAX;
  limiter_.TakeBytes(w->source_slot, static_cast<uint32_t>(sent));
  // Sent with TC because of the budget only (it fitted the client's size).
  if (unlimited_size_ > sent && unlimited_size_ <= response_limit_) counters_->rate_limited_bytes.Add();
}

Verdict QueryHandler::HandleReturned(const uint8_t* pkt, size_t len, const ClientInfo& client, uint32_t now,
                                     HandleMode mode, const RelayedAnswer* relay, uint8_t* out,
                                     size_t out_cap, size_t* out_len, MissRequest* miss) {
  const Verdict v = Handle(pkt, len, client, now, out, out_cap, out_len, miss, mode);
  if (v == Verdict::kReply || v == Verdict::kReplyAndPrefetch) return Verdict::kReply;
  if (v == Verdict::kMiss && mode == HandleMode::kRetry) return Verdict::kMiss;
  if (v != Verdict::kMiss) return v;  // it did not parse, or did not fit
  // Not in the cache: the upstream's answer as it came (DNSSEC-aware
  // queries, REFUSED, uncacheable), or SERVFAIL when every upstream failed.
  if (relay != nullptr) {
    const bool charged = ByteLimited(single_);
    if (charged) BudgetBytes(&single_, now);
    *out_len = WriteRelayed(pkt, single_, *relay, out, out_cap);
    if (charged) ChargeBytes(&single_, *out_len);
  } else {
    *out_len = WriteError(pkt, len, &single_.query, dns::Rcode::kServFail, out, out_cap);
    if (*out_len != 0) {
      counters_->Error(ErrorReason::kUpstreamFailure);
      counters_->Response(tcp_, static_cast<unsigned>(dns::Rcode::kServFail));
    }
  }
  if (*out_len == 0) {
    counters_->Drop(DropReason::kNoRoom);
    return Verdict::kDrop;
  }
  return Verdict::kReply;
}

bool QueryHandler::ShouldPrefetch(const partitions::CacheEntry& e, uint32_t now) {
  if (options_.prefetch_percent == 0 || e.kind() == partitions::EntryKind::kServFail) return false;
  if (!dns::PrefetchDue(e.ttl(), e.expires() > now ? e.expires() - now : 0, options_.prefetch_percent))
    return false;
  auto& slot = prefetched_[e.hash() & (prefetched_.size() - 1)];
  if (slot.first == e.hash() && now - slot.second < 1) return false;
  slot = {e.hash(), now};
  return true;
}

bool QueryHandler::Begin(const uint8_t* pkt, size_t len, const ClientInfo& client, uint32_t now, uint8_t* out,
                         size_t out_cap, size_t* out_len, HandleMode mode, Work* w, Verdict* verdict) {
  if (mode == HandleMode::kNormal) (client.tcp ? counters_->queries_tcp : counters_->queries_udp).Add();
  *verdict = Verdict::kDrop;
  // Garbage: too short for a header, or a response (answering responses
  // invites reflection loops).
  if (len < dns::kHeaderSize || (pkt[2] & 0x80) != 0) {
    counters_->Drop(DropReason::kGarbage);
    return false;
  }
  if (limiter_.enabled()) [[unlikely]] {
    w->source = &client.addr;
    w->source_slot = RateLimiter::kNoSlot;
    // Queries returned from the upstream side were counted when they came.
    if (mode == HandleMode::kNormal) {
      w->source_slot = limiter_.Track(client.addr, now);
      w->source_generation = limiter_.generation();
      if (!limiter_.TakeQuery(w->source_slot)) {
        counters_->Drop(DropReason::kRateLimited);
        return false;
      }
    }
  }
  dns::Query& query = w->query;
  const dns::ParseError err = dns::ParseQuery({pkt, len}, parse_options_, &query);
  // Over TCP the whole answer goes (RFC 7766); over UDP the client's limit.
  // Over UDP at most our own EDNS size (kEdnsUdpSize): larger datagrams fragment.
  response_limit_ = client.tcp
                        ? std::min<size_t>(out_cap, 65535)
                        : std::min<size_t>(query.udp_limit(), std::max<size_t>(options_.edns_udp_size, 512));
  w->response_limit = response_limit_;
  w->tcp = client.tcp;
  tcp_ = client.tcp;
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
  if (!Allowed(client.addr)) {
    if (err != dns::ParseError::kOk && err != dns::ParseError::kBadEdnsVersion) {
      counters_->Drop(DropReason::kAcl);  // nothing readable to refuse
      return false;
    }
    return reply(WriteError(pkt, len, &query, dns::Rcode::kRefused, out, out_cap), dns::Rcode::kRefused,
                 ErrorReason::kAcl);
  }
  if (err == dns::ParseError::kBadEdnsVersion) {
    return reply(WriteError(pkt, len, &query, dns::Rcode::kBadVers, out, out_cap), dns::Rcode::kBadVers,
                 ErrorReason::kBadVers);
  }
  if (err != dns::ParseError::kOk) {
    return reply(WriteError(pkt, len, nullptr, dns::Rcode::kFormErr, out, out_cap), dns::Rcode::kFormErr,
                 ErrorReason::kFormErr);
  }
  if (query.opcode() != 0) {
    return reply(WriteError(pkt, len, &query, dns::Rcode::kNotImp, out, out_cap), dns::Rcode::kNotImp,
                 ErrorReason::kNotImpl);
  }
  if (query.qclass != dns::klass::kIn) {
    return reply(WriteError(pkt, len, &query, dns::Rcode::kRefused, out, out_cap), dns::Rcode::kRefused,
                 ErrorReason::kClass);
  }
  if (query.qtype == dns::type::kAny && !client.tcp) {
    // ANY over UDP is the classic amplification query: a minimal answer
    // (RFC 8482 4.2) from here, never the upstream's whole name. Over TCP
    // (no spoofed sources) it is resolved as any other type.
    counters_->any_minimal.Add();
    const bool charged = ByteLimited(*w);
    if (charged) BudgetBytes(w, now);
    const size_t n = WriteMinimalAny(pkt, query, out, out_cap);
    if (charged) ChargeBytes(w, n);
    return reply(n, dns::Rcode::kNoError, std::nullopt);
  }
  return true;
}

void QueryHandler::Classify(const ClientInfo& client, uint32_t now, Work* w) {
  const dns::Query& query = w->query;
  // The tag (w->tag, from the tag table), then the partition: the packet
  // source picks the city, or the ECS address when a trusted forwarder sent
  // one.
  if (w->tag == nullptr) {
    const LearnedTags* learned = shared_->learned.Get();
    if (learned != nullptr) w->tag = learned->Lookup(query.qname.span(), now);
  }
  w->who = client.addr;
  // A /0 source says "do not use my address" (RFC 7871 7.1.2): not a subnet.
  w->trusted_ecs = query.edns.has_ecs && query.edns.ecs.source_prefix > 0 && Trusted(client.addr);
  if (w->trusted_ecs) {
    w->who.family = query.edns.ecs.family == dns::kEcsFamilyIpv4 ? 4 : 6;
    w->who.bytes = query.edns.ecs.address;
  }
  w->partition = partitions::kCommonPartition;
  w->city = nullptr;
  if (w->tag != nullptr && w->tag->level != partitions::CacheLevel::kGlobal) {
    const partitions::CityMap* cm = shared_->citymap.Get();
    const partitions::PartitionId id = cm != nullptr ? cm->Lookup(w->who) : 0;
    if (cm != nullptr) w->city = &cm->city(id);
    w->partition = partitions::PartitionKey(w->tag->level, id, w->who);
  }
  // DNSSEC-aware queries (DO or CD) need RRSIGs and CD semantics the cache
  // does not keep: they are coalesced and relayed, never answered from or
  // written to the cache.
  w->dnssec = query.edns.do_bit || query.cd();
  w->hash = partitions::HashCacheKey(w->key());
}

Verdict QueryHandler::Finish(const uint8_t* pkt, size_t len, uint32_t now, uint8_t* out, size_t out_cap,
                             size_t* out_len, MissRequest* miss, HandleMode mode, Work* w) {
  const dns::Query& query = w->query;
  response_limit_ = w->response_limit;
  tcp_ = w->tcp;
  const partitions::Tag* tag = w->tag;
  const partitions::Partition partition = w->partition;
  const partitions::CacheEntry* e = w->entry;
  const partitions::Freshness fresh = w->fresh;
  if (mode == HandleMode::kNormal) {
    const size_t slot = PartitionSlot(partition);
    lookups_[slot].Add();
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
    } else if (mode == HandleMode::kAfterFill || mode == HandleMode::kStaleOk) {
      // An old entry: the upstream failed, or answered with something not
      // cacheable (REFUSED, TC...): RFC 8767 prefers the stale answer, every
      // record at the stale TTL.
      serve = true;
      ttl = partitions::AnswerTtl::Stale(options_.stale_answer_ttl);
      counters_->stale_served.Add();
    }
    if (serve) {
      if (mode == HandleMode::kNormal) counters_->hits.Add();
      const bool charged = ByteLimited(*w);
      if (charged) [[unlikely]]
        BudgetBytes(w, now);
      *out_len = WriteCached(pkt, len, query, *e, tag, partition, w->hash, w->trusted_ecs, ttl, out, out_cap);
      if (charged) [[unlikely]]
        ChargeBytes(w, *out_len);
      if (*out_len == 0) {
        counters_->Drop(DropReason::kNoRoom);
        return Verdict::kDrop;
      }
      if (mode == HandleMode::kNormal && fresh == partitions::Freshness::kFresh && ShouldPrefetch(*e, now)) {
        // Fill `miss` below and let the caller refresh the entry.
      } else {
        return Verdict::kReply;
      }
    }
  } else if (mode == HandleMode::kAfterFill || mode == HandleMode::kStaleOk) {
    return Verdict::kMiss;  // the caller sends its fallback answer
  }

  const bool prefetch = e != nullptr && fresh == partitions::Freshness::kFresh;
  if (!prefetch) counters_->misses.Add();
  miss->partition = partition;
  miss->qtype = query.qtype;
  miss->qclass = query.qclass;
  miss->qname = query.qname;
  miss->tagged = tag != nullptr;
  miss->weighted = tag != nullptr && tag->weight;
  miss->send_ecs = false;
  if (tag != nullptr && tag->ecs) {
    if (tag->level == partitions::CacheLevel::kSubnet) {
      miss->ecs = partitions::SubnetEcs(w->who);
      miss->send_ecs = true;
    } else if (tag->level == partitions::CacheLevel::kCity && w->city != nullptr) {
      // The city's own ECS source: subscriber addresses never leave weir.
      miss->ecs = w->city->EcsFor(w->who.family);
      miss->send_ecs = miss->ecs.family != 0;
    }
  }
  miss->do_bit = query.edns.do_bit;
  miss->cd_bit = query.cd();
  return prefetch ? Verdict::kReplyAndPrefetch : Verdict::kMiss;
}

Verdict QueryHandler::Handle(const uint8_t* pkt, size_t len, const ClientInfo& client, uint32_t now,
                             uint8_t* out, size_t out_cap, size_t* out_len, MissRequest* miss,
                             HandleMode mode) {
  Work* w = &single_;
  Verdict v;
  if (!Begin(pkt, len, client, now, out, out_cap, out_len, mode, w, &v)) return v;
  const partitions::TagTable* tags = shared_->tags.Get();
  w->tag = tags != nullptr ? tags->Lookup(w->query.qname.span(), w->query.qname_labels.span()) : nullptr;
  Classify(client, now, w);
  w->entry = nullptr;
  w->fresh = partitions::Freshness::kMiss;
  if (!w->dnssec) w->entry = shared_->cache->Find(w->key(), w->hash, now, &w->fresh);
  return Finish(pkt, len, now, out, out_cap, out_len, miss, mode, w);
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
      Work* w = &burst_[live[j]];
      w->tag = tag[j];
      Classify(b[live[j]].client, now, w);
      w->entry = nullptr;
      w->fresh = partitions::Freshness::kMiss;
      if (!w->dnssec) {
        keys[c] = w->key();
        hashes[c] = w->hash;
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
      b[i].verdict = Finish(b[i].pkt, b[i].len, now, b[i].out, b[i].out_cap, &b[i].out_len, b[i].miss,
                            HandleMode::kNormal, &burst_[i]);
    }
  }
}

}  // namespace weir::fastpath
