#include "weir/recursor/last_hop_policy.h"

#include <algorithm>
#include <cstring>

namespace weir::recursor {

EcsChoice ChooseEcs(bool name_wants_ecs, const dns::ClientSubnet* front_ecs, std::span<const uint8_t> client,
                    const EcsSettings& settings) {
  EcsChoice c;
  if (!name_wants_ecs) return c;
  if (front_ecs != nullptr) {
    if (front_ecs->source_prefix == 0) {
      c.zero_source = true;
      return c;
    }
    const bool v4 = front_ecs->family == dns::kEcsFamilyIpv4;
    const uint8_t source = std::min(front_ecs->source_prefix, v4 ? settings.source_v4 : settings.source_v6);
    c.send = dns::MakeClientSubnet({front_ecs->address.data(), v4 ? 4u : 16u}, source, &c.subnet);
    return c;
  }
  if (settings.from_client_address && (client.size() == 4 || client.size() == 16)) {
    c.send = dns::MakeClientSubnet(client, client.size() == 4 ? settings.source_v4 : settings.source_v6,
                                   &c.subnet);
  }
  // Nothing to send for a name that wants ECS: the authority answers without
  // knowing who asks, and that answer must not become the one every subnet
  // gets: it serves queries without a subnet only, like /0 (RFC 7871 7.1.2).
  if (!c.send) c.zero_source = true;
  return c;
}

EcsReplyCheck CheckEcsReply(bool sent, const dns::ClientSubnet& sent_subnet, const dns::Edns& reply) {
  if (!reply.has_ecs) return {EcsReply::kGlobal, 0};
  if (!sent) return {EcsReply::kUnsolicited, 0};
  const dns::ClientSubnet& r = reply.ecs;
  if (r.family != sent_subnet.family || r.source_prefix != sent_subnet.source_prefix ||
      r.address != sent_subnet.address) {
    return {EcsReply::kForged, 0};
  }
  return {EcsReply::kScoped, std::min(r.scope_prefix, sent_subnet.source_prefix)};
}

RcodeAction OnRcode(uint16_t rcode, bool ecs_sent, bool retried_without_ecs) {
  if (rcode == static_cast<uint16_t>(dns::Rcode::kNoError) ||
      rcode == static_cast<uint16_t>(dns::Rcode::kNxDomain)) {
    return RcodeAction::kAccept;
  }
  if ((rcode == static_cast<uint16_t>(dns::Rcode::kRefused) ||
       rcode == static_cast<uint16_t>(dns::Rcode::kFormErr)) &&
      ecs_sent && !retried_without_ecs) {
    return RcodeAction::kWithoutEcs;
  }
  return RcodeAction::kNextServer;
}

bool IsAtOrBelow(std::span<const uint8_t> name, std::span<const uint8_t> zone) {
  if (zone.empty() || name.empty() || zone.size() > name.size()) return false;
  size_t off = 0;
  while (off < name.size()) {
    if (name.size() - off == zone.size())
      return std::memcmp(name.data() + off, zone.data(), zone.size()) == 0;
    if (name[off] == 0) return false;
    off += 1u + name[off];
  }
  return false;
}

namespace {

// Canonical key of an uncompressed name in RDATA (lower-cased).
bool KeyOf(std::span<const uint8_t> wire, dns::NameKey* key) {
  size_t end = 0;
  return dns::ReadName(wire, 0, &end, key) == dns::ParseError::kOk;
}

struct Seen {
  CachedRecord rec;
  int address_index = -1;  // position among the reply's A/AAAA answer records
  bool taken = false;
};

constexpr uint16_t kDname = 39;

bool IsAddress(uint16_t type) { return type == dns::type::kA || type == dns::type::kAaaa; }

}  // namespace

StepResult ReadStep(const dns::Message& reply, const dns::NameKey& qname, uint16_t qtype,
                    std::span<const uint8_t> cut, int cname_budget) {
  StepResult out;
  out.rcode = reply.rcode();
  std::vector<Seen> answers;
  int addresses = 0;
  auto it = reply.Records(dns::Section::kAnswer);
  dns::RrView rr;
  while (it.Next(&rr)) {
    Seen s;
    if (!ReadCachedRecord(reply, rr, &s.rec)) return out;
    if (IsAddress(rr.type)) s.address_index = addresses++;
    if (!IsAtOrBelow(s.rec.owner, cut)) {
      ++out.out_of_bailiwick;
      continue;
    }
    if (rr.klass != dns::klass::kIn) continue;
    answers.push_back(std::move(s));
  }

  dns::NameKey cur = qname;
  auto owner_is = [](const CachedRecord& r, const dns::NameKey& k) {
    return r.owner.size() == k.len && std::equal(r.owner.begin(), r.owner.end(), k.bytes.begin());
  };
  for (;;) {
    if (qtype != dns::type::kCname) {
      Seen* cname = nullptr;
      for (Seen& s : answers) {
        if (!s.taken && s.rec.type == dns::type::kCname && owner_is(s.rec, cur)) {
          cname = &s;
          break;
        }
      }
      if (cname != nullptr) {
        dns::NameKey target;
        if (!KeyOf(cname->rec.rdata, &target)) return out;
        bool seen = target == qname;
        for (const CachedRecord& c : out.chain)
          seen = seen || (c.type == dns::type::kCname && owner_is(c, target));
        if (seen) {
          out.kind = StepResult::Kind::kLoop;
          return out;
        }
        if (cname_budget-- <= 0) {
          out.kind = StepResult::Kind::kTooLong;
          return out;
        }
        cname->taken = true;
        // A CNAME synthesized from a DNAME (RFC 6672) follows its DNAME.
        for (Seen& d : answers) {
          if (!d.taken && d.rec.type == kDname && !owner_is(d.rec, cur) &&
              IsAtOrBelow(cur.span(), d.rec.owner)) {
            d.taken = true;
            out.chain.push_back(d.rec);
            break;
          }
        }
        out.chain.push_back(cname->rec);
        cur = target;
        continue;
      }
    }
    break;
  }
  for (Seen& s : answers) {
    if (!s.taken && (s.rec.type == qtype || qtype == dns::type::kAny) && owner_is(s.rec, cur)) {
      s.taken = true;
      out.rrset.push_back(s.rec);
    }
  }
  if (!out.rrset.empty()) {
    out.kind = StepResult::Kind::kAnswer;
  } else if (!IsAtOrBelow(cur.span(), cut)) {
    out.kind = StepResult::Kind::kFollow;
    out.next = cur;
  } else {
    // No data for `cur` inside the cut: a referral to a deeper cut, a
    // negative answer with the zone's SOA, or a CNAME target this server
    // did not answer, to be resolved from its own cut.
    const bool aa = reply.flags() & dns::flag::kAa;
    const bool followed = !out.chain.empty();
    auto auth = reply.Records(dns::Section::kAuthority);
    bool referral = false;
    while (auth.Next(&rr)) {
      CachedRecord r;
      if (!ReadCachedRecord(reply, rr, &r) || rr.klass != dns::klass::kIn) continue;
      if (rr.type == dns::type::kSoa && IsAtOrBelow(cur.span(), r.owner) && out.authority.empty()) {
        out.authority.push_back(std::move(r));
      } else if (rr.type == dns::type::kNs && (!aa || followed) && IsAtOrBelow(r.owner, cut) &&
                 r.owner.size() > cut.size() && IsAtOrBelow(cur.span(), r.owner)) {
        referral = true;
      }
    }
    const bool nxdomain = out.rcode == static_cast<uint16_t>(dns::Rcode::kNxDomain);
    if (referral && out.rcode == 0 && out.authority.empty()) {
      out.kind = StepResult::Kind::kReferral;
      out.next = cur;
    } else if (followed && out.rcode == 0 && out.authority.empty()) {
      out.kind = StepResult::Kind::kFollow;
      out.next = cur;
    } else if (aa || !out.authority.empty() || nxdomain) {
      out.kind = StepResult::Kind::kNegative;
    }
  }

  const dns::Edns& e = reply.edns();
  if (e.has_weight) {
    out.weight_option = true;
    const dns::WeightSet ws = dns::DecodeWeights(reply.bytes().subspan(e.weight_offset, e.weight_len),
                                                 static_cast<size_t>(addresses));
    out.weight_verdict = ws.verdict;
    if (ws.valid() && out.kind == StepResult::Kind::kAnswer) {
      for (const Seen& s : answers) {
        if (s.taken && s.address_index >= 0) out.weights.push_back(ws.weights[s.address_index]);
      }
      out.weighted = !out.weights.empty() && out.weights.size() == CountAddresses(out.rrset);
      if (!out.weighted) out.weights.clear();
    }
  }
  return out;
}

uint32_t NegativeTtl(std::span<const CachedRecord> authority, uint32_t fallback) {
  for (const CachedRecord& r : authority) {
    if (r.type != dns::type::kSoa || r.rdata.size() < 20) continue;
    const uint32_t minimum = dns::Load32(r.rdata.data() + r.rdata.size() - 4);
    return std::min(r.ttl, minimum);
  }
  return fallback;
}

}  // namespace weir::recursor
