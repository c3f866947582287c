#include "weir/fastpath/relay.h"

#include <cstring>

#include "weir/dns/writer.h"

namespace weir::fastpath {
namespace {

constexpr size_t kMaxMessage = 65535;

// DNSSEC records that only a client with DO may get (RFC 3225, RFC 4035
// 3.2.1), unless it asked for that type.
bool DnssecOnly(uint16_t rrtype, uint16_t qtype, dns::Section s) {
  const bool dnssec =
      rrtype == dns::type::kRrsig || rrtype == dns::type::kNsec || rrtype == dns::type::kNsec3;
  return dnssec && !(s == dns::Section::kAnswer && rrtype == qtype);
}

// The records of `up` before `records_end` (its OPT) without the DNSSEC
// ones, names decompressed (dropping a record could strand a compression
// pointer into it). False when `up` has none to drop: relay it verbatim.
bool StripDnssec(const dns::Message& up, uint16_t qtype, size_t records_end, RelayedAnswer* out) {
  bool any = false;
  for (int s = 0; s < 3; ++s) {
    auto it = up.Records(static_cast<dns::Section>(s));
    dns::RrView rr;
    while (it.Next(&rr)) any = any || DnssecOnly(rr.type, qtype, rr.section);
  }
  if (!any) return false;
  out->body.clear();
  std::vector<uint8_t> rdata(kMaxMessage);
  for (int s = 0; s < 3; ++s) {
    out->counts[s] = 0;
    auto it = up.Records(static_cast<dns::Section>(s));
    dns::RrView rr;
    while (it.Next(&rr)) {
      if (rr.name_offset >= records_end || DnssecOnly(rr.type, qtype, rr.section)) continue;
      dns::NameKey owner;
      size_t end, rdlen = 0;
      if (dns::ReadName(up.bytes(), rr.name_offset, &end, &owner) != dns::ParseError::kOk ||
          dns::CopyRdataUncompressed(up.bytes(), rr, rdata.data(), rdata.size(), &rdlen) !=
              dns::ParseError::kOk ||
          rdlen > kMaxMessage) {
        continue;
      }
      const size_t at = out->body.size(), n = owner.len + 10 + rdlen;
      out->body.resize(at + n);
      dns::EncodeRecord(owner.span(), rr.type, rr.klass, rr.ttl, {rdata.data(), rdlen}, out->body.data() + at,
                        n);
      ++out->counts[s];
    }
  }
  return true;
}

}  // namespace

std::shared_ptr<const RelayedAnswer> PrepareRelay(const dns::Message& up, uint16_t qtype, bool strip_dnssec) {
  auto r = std::make_shared<RelayedAnswer>();
  const std::span<const uint8_t> bytes = up.bytes();
  r->flags = up.flags();
  const size_t body = dns::AnswerOffset(up.qname().len);  // the first record
  size_t records_end = bytes.size();
  uint16_t arcount = up.count(dns::Section::kAdditional);
  if (up.edns().present) {
    records_end = up.edns().opt_offset;
    arcount = 0;
    auto it = up.Records(dns::Section::kAdditional);
    dns::RrView rr;
    while (it.Next(&rr) && rr.name_offset < records_end) ++arcount;
    r->has_ecs = up.edns().has_ecs;
    r->ecs_scope = up.edns().ecs.scope_prefix;
    r->has_weight = up.edns().has_weight;
    const auto w = bytes.subspan(up.edns().weight_offset, up.edns().weight_len);
    if (r->has_weight) r->weight.assign(w.begin(), w.end());
  }
  r->counts[0] = up.count(dns::Section::kAnswer);
  r->counts[1] = up.count(dns::Section::kAuthority);
  r->counts[2] = arcount;
  // The upstream was asked without DO, but need not have listened.
  if (!(strip_dnssec && StripDnssec(up, qtype, records_end, r.get())) && records_end > body) {
    r->body.assign(bytes.begin() + body, bytes.begin() + records_end);
  }
  // Decompressed names can outgrow a message: header + question with TC.
  if (body + r->body.size() + 64 > kMaxMessage) {
    r->too_big = true;
    r->body.clear();
  }
  return r;
}

}  // namespace weir::fastpath
