#include "weir/recursor/answer.h"

#include <algorithm>

#include "weir/dns/writer.h"

namespace weir::recursor {

bool ReadCachedRecord(const dns::Message& m, const dns::RrView& rr, CachedRecord* out) {
  dns::NameKey owner;
  size_t end = 0;
  if (dns::ReadName(m.bytes(), rr.name_offset, &end, &owner) != dns::ParseError::kOk) return false;
  uint8_t rdata[65535];
  size_t len = 0;
  if (dns::CopyRdataUncompressed(m.bytes(), rr, rdata, sizeof(rdata), &len) != dns::ParseError::kOk)
    return false;
  out->owner.assign(owner.bytes.begin(), owner.bytes.begin() + owner.len);
  out->type = rr.type;
  out->klass = rr.klass;
  out->ttl = rr.ttl;
  out->rdata.assign(rdata, rdata + len);
  return true;
}

size_t CountAddresses(std::span<const CachedRecord> records) {
  return static_cast<size_t>(std::count_if(records.begin(), records.end(), [](const CachedRecord& r) {
    return r.type == dns::type::kA || r.type == dns::type::kAaaa;
  }));
}

namespace {

constexpr uint16_t kNsec = 47;
constexpr uint16_t kNsec3 = 50;

// Over TCP the whole answer (RFC 7766). Over UDP the client's EDNS size (512
// without EDNS), never more than the 1232 bytes we advertise: larger
// datagrams fragment, and an answer to a forged source is an amplifier.
size_t UdpLimit(const ReplyContext& ctx) {
  if (ctx.tcp) return 65535;
  return std::min<size_t>(ctx.query->udp_limit(), kMaxUdpAnswer);
}

void AddOpt(dns::ResponseWriter& w, const ReplyContext& ctx, const Answer* a, uint8_t ext_rcode = 0) {
  const dns::Query& q = *ctx.query;
  if (!q.edns.present) return;
  w.BeginOpt(kMaxUdpAnswer, q.edns.do_bit, ext_rcode);
  if (q.edns.has_ecs) {
    dns::ClientSubnet echo = q.edns.ecs;
    echo.scope_prefix = a != nullptr ? std::min(a->scope, echo.source_prefix) : 0;
    w.AddEcs(echo);
  }
  // Answers, negative ones included, echo the option (docs/behaviour.md#the-weight-option); errors do not.
  if (q.edns.has_weight && a != nullptr) {
    if (a->weighted) {
      w.AddWeights(ctx.weight_option_code, a->weights);
    } else {
      w.AddWeights(ctx.weight_option_code, {});
    }
  }
  // Every response to a query with a cookie carries one (RFC 7873 5.2),
  // errors included: the front refuses a UDP answer without it.
  if (!ctx.cookie.empty()) w.AddOption(dns::option::kCookie, ctx.cookie);
}

}  // namespace

size_t WriteAnswer(const ReplyContext& ctx, const Answer& a, uint32_t age, int64_t fixed_ttl, uint8_t* out,
                   size_t cap) {
  dns::ResponseWriter w(out, cap);
  if (w.BeginResponse(ctx.query_pkt, *ctx.query, static_cast<dns::Rcode>(a.rcode & 0xf)) !=
      dns::ParseError::kOk) {
    return 0;
  }
  const dns::Query& q = *ctx.query;
  if (a.ad && dns::AdAllowed(q)) w.AddFlags(dns::flag::kAd);
  // RFC 4035 3.2.1: DNSSEC records only to a client that set DO (or asked
  // for that type by name).
  auto shown = [&](const CachedRecord& r) {
    const bool dnssec = r.type == dns::type::kRrsig || r.type == kNsec || r.type == kNsec3;
    return !dnssec || q.edns.do_bit || r.type == q.qtype;
  };
  auto ttl_of = [&](uint32_t ttl) -> uint32_t {
    if (fixed_ttl >= 0) return static_cast<uint32_t>(fixed_ttl);
    return ttl > age ? ttl - age : 0;
  };
  // Names compressed (owners, CNAME/NS/PTR targets) against the question
  // and one another, answer and authority alike: the size that decides
  // truncation is the size sent.
  dns::RecordEncoder enc(w.tail(), w.room(), q.qname.span());
  uint16_t counts[2] = {0, 0};
  size_t answer_bytes = 0;
  for (int sec = 0; sec < 2; ++sec) {
    for (const CachedRecord& r : sec == 0 ? a.answer : a.authority) {
      if (!shown(r)) continue;
      if (enc.Append(r.owner, r.type, r.klass, ttl_of(r.ttl), r.rdata, nullptr) != dns::ParseError::kOk)
        return 0;
      ++counts[sec];
    }
    if (sec == 0) answer_bytes = enc.size();
  }
  w.Commit(dns::Section::kAnswer, answer_bytes, counts[0]);
  w.Commit(dns::Section::kAuthority, enc.size() - answer_bytes, counts[1]);
  AddOpt(w, ctx, &a);
  return w.Finish(UdpLimit(ctx));
}

size_t WriteError(const ReplyContext& ctx, dns::Rcode rcode, uint8_t* out, size_t cap) {
  dns::ResponseWriter w(out, cap);
  if (w.BeginResponse(ctx.query_pkt, *ctx.query, rcode) != dns::ParseError::kOk) return 0;
  AddOpt(w, ctx, nullptr, static_cast<uint8_t>(static_cast<uint16_t>(rcode) >> 4));
  return w.Finish(UdpLimit(ctx));
}

}  // namespace weir::recursor
