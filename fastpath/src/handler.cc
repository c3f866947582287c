#include "weir/fastpath/handler.h"

#include "weir/dns/writer.h"
#include "weir/fastpath/upstream_ring.h"

namespace weir::fastpath {

RateLimiter::RateLimiter(uint32_t qps, uint32_t burst)
    : qps_(qps), burst_(burst > 0 ? burst : qps), buckets_(qps > 0 ? 65536 : 0) {}

bool RateLimiter::Allow(const partitions::IpAddress& src, uint32_t now) {
  if (qps_ == 0) return true;
  const size_t n = src.family == 4 ? 4 : 16;
  Bucket& b = buckets_[StableHash(src.bytes.data(), n) & 0xffff];
  if (b.last != now) {
    const uint64_t refill = uint64_t{now - b.last} * qps_;
    b.tokens = static_cast<uint32_t>(std::min<uint64_t>(burst_, b.tokens + refill));
    b.last = now;
  }
  if (b.tokens == 0) return false;
  --b.tokens;
  return true;
}

QueryHandler::QueryHandler(const HandlerOptions& options, WorkerCounters* counters)
    : options_(options), counters_(counters), limiter_(options.rate_limit_qps, options.rate_limit_burst) {
  parse_options_.weight_option_code = options.weight_option_code;
}

bool QueryHandler::Allowed(const partitions::IpAddress& a) const {
  for (const auto& c : options_.allow) {
    if (CidrContains(c, a)) return true;
  }
  return false;
}

bool QueryHandler::Trusted(const partitions::IpAddress& a) const {
  for (const auto& c : options_.trusted_forwarders) {
    if (CidrContains(c, a)) return true;
  }
  return false;
}

size_t QueryHandler::WriteError(const uint8_t* pkt, size_t len, const dns::Query* q, dns::Rcode rcode,
                                uint8_t* out, size_t out_cap) {
  dns::ResponseWriter w(out, out_cap);
  const uint16_t code = static_cast<uint16_t>(rcode);
  if (q != nullptr) {
    if (w.BeginResponse({pkt, len}, *q, static_cast<dns::Rcode>(code & 0xf)) != dns::ParseError::kOk) return 0;
    if (q->edns.present || code > 15) {
      w.BeginOpt(options_.edns_udp_size, q->edns.do_bit, static_cast<uint8_t>(code >> 4));
    }
    return w.Finish(q->udp_limit());
  }
  // Header only: the question could not be read.
  if (len < 4 || out_cap < dns::kHeaderSize) return 0;
  const uint16_t qflags = dns::Load16(pkt + 2);
  const uint16_t flags = static_cast<uint16_t>(dns::flag::kQr | (qflags & (dns::flag::kOpcodeMask | dns::flag::kRd)) |
                                               dns::flag::kRa | (code & 0xf));
  dns::Store16(out, dns::Load16(pkt));
  dns::Store16(out + 2, flags);
  for (size_t i = 4; i < dns::kHeaderSize; ++i) out[i] = 0;
  return dns::kHeaderSize;
}

Verdict QueryHandler::Handle(const uint8_t* pkt, size_t len, const ClientInfo& client, uint32_t now,
                             uint8_t* out, size_t out_cap, size_t* out_len, MissRequest* miss) {
  (client.tcp ? counters_->queries_tcp : counters_->queries_udp).Add();
  // Garbage: too short for a header, or a response (answering responses
  // invites reflection loops).
  if (len < dns::kHeaderSize || (pkt[2] & 0x80) != 0) {
    counters_->Drop(DropReason::kGarbage);
    return Verdict::kDrop;
  }
  if (!limiter_.Allow(client.addr, now)) {
    counters_->Drop(DropReason::kRateLimited);
    return Verdict::kDrop;
  }
  const dns::ParseError err = dns::ParseQuery({pkt, len}, parse_options_, &query_);
  if (!Allowed(client.addr)) {
    counters_->Drop(DropReason::kRefused);
    if (err != dns::ParseError::kOk && err != dns::ParseError::kBadEdnsVersion) return Verdict::kDrop;
    *out_len = WriteError(pkt, len, &query_, dns::Rcode::kRefused, out, out_cap);
    counters_->rcodes[static_cast<size_t>(dns::Rcode::kRefused)].Add();
    return *out_len ? Verdict::kReply : Verdict::kDrop;
  }
  if (err == dns::ParseError::kBadEdnsVersion) {
    *out_len = WriteError(pkt, len, &query_, dns::Rcode::kBadVers, out, out_cap);
    counters_->rcodes[16].Add();
    return *out_len ? Verdict::kReply : Verdict::kDrop;
  }
  if (err != dns::ParseError::kOk) {
    counters_->Drop(DropReason::kFormErr);
    counters_->rcodes[static_cast<size_t>(dns::Rcode::kFormErr)].Add();
    *out_len = WriteError(pkt, len, nullptr, dns::Rcode::kFormErr, out, out_cap);
    return *out_len ? Verdict::kReply : Verdict::kDrop;
  }
  if (query_.opcode() != 0) {
    counters_->Drop(DropReason::kNotImpl);
    counters_->rcodes[static_cast<size_t>(dns::Rcode::kNotImp)].Add();
    *out_len = WriteError(pkt, len, &query_, dns::Rcode::kNotImp, out, out_cap);
    return *out_len ? Verdict::kReply : Verdict::kDrop;
  }
  if (query_.qclass != dns::klass::kIn) {
    counters_->rcodes[static_cast<size_t>(dns::Rcode::kRefused)].Add();
    *out_len = WriteError(pkt, len, &query_, dns::Rcode::kRefused, out, out_cap);
    return *out_len ? Verdict::kReply : Verdict::kDrop;
  }

  // Partition: the packet source, or the ECS address of a trusted forwarder.
  partitions::IpAddress who = client.addr;
  if (query_.edns.has_ecs && Trusted(client.addr)) {
    const dns::ClientSubnet& e = query_.edns.ecs;
    who.family = e.family == dns::kEcsFamilyIpv4 ? 4 : 6;
    who.bytes = e.address;
  }
  (void)who;

  counters_->misses.Add();
  miss->partition = partitions::kCommonPartition;
  miss->qtype = query_.qtype;
  miss->qclass = query_.qclass;
  miss->qname = query_.qname;
  miss->weighted = false;
  miss->send_ecs = false;
  miss->do_bit = query_.edns.do_bit;
  miss->cd_bit = query_.cd();
  return Verdict::kMiss;
}

}  // namespace weir::fastpath
