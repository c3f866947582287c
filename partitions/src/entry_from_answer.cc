#include "weir/partitions/entry_from_answer.h"

#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "weir/dns/wire.h"

namespace weir::partitions {
namespace {

// RDATA as stored: RDLENGTH is at most 65535, and the types whose names are
// decompressed (NS, CNAME, PTR, MX, SOA) need at most two names and 20
// octets, far less.
constexpr size_t kRdataCap = 65535;

// An answer record of the question's class; its owner's canonical key is
// kept in one string for all of them.
struct AnswerRecord {
  dns::RrView rr;
  uint32_t owner_off;
  uint8_t owner_len;
};

std::string_view AsText(std::span<const uint8_t> key) {
  return {reinterpret_cast<const char*>(key.data()), key.size()};
}

}  // namespace

CacheFill EntryFromAnswer(const AnswerToCache& in) {
  CacheFill fill;
  const CacheKey& key = in.key;
  if (in.answer == nullptr || key.qname.empty() || key.qname.size() > dns::kMaxNameWire) return fill;
  const dns::Message& up = *in.answer;
  const uint16_t rcode = up.rcode();
  fill.servfail = rcode == static_cast<uint16_t>(dns::Rcode::kServFail);
  if (!fill.servfail && rcode != static_cast<uint16_t>(dns::Rcode::kNoError) &&
      rcode != static_cast<uint16_t>(dns::Rcode::kNxDomain)) {
    return fill;  // REFUSED, NOTIMP, FORMERR...: relayed, never cached
  }
  if (up.flags() & dns::flag::kTc) return fill;
  if (in.dnssec) return fill;  // DNSSEC-aware answers are relayed only

  // The answer section's records of the question's class; the others are
  // not ours to cache.
  std::vector<AnswerRecord> answers;
  answers.reserve(up.count(dns::Section::kAnswer));
  std::string owners;
  dns::Message::Iterator it = up.Records(dns::Section::kAnswer);
  dns::RrView rr;
  while (it.Next(&rr)) {
    dns::NameKey owner;
    size_t end;
    if (dns::ReadName(up.bytes(), rr.name_offset, &end, &owner) != dns::ParseError::kOk) return fill;
    if (rr.klass != key.qclass) continue;
    answers.push_back({rr, static_cast<uint32_t>(owners.size()), owner.len});
    owners.append(AsText(owner.span()));
  }
  auto owner_of = [&](const AnswerRecord& r) {
    return std::string_view(owners).substr(r.owner_off, r.owner_len);
  };

  // Each name's first CNAME record (a name has one, RFC 2181 10.1), by
  // owner. The chain follows each record at most once, so it is as long as
  // the answer makes it and ends at a loop.
  struct Hop {
    size_t record;
    bool followed = false;
  };
  absl::flat_hash_map<std::string_view, Hop> cname_of;
  if (key.qtype != dns::type::kCname) {
    for (size_t i = 0; i < answers.size(); ++i) {
      if (answers[i].rr.type == dns::type::kCname) cname_of.try_emplace(owner_of(answers[i]), Hop{i});
    }
  }

  // Any RDATA fits (a TXT record of several KB too): one that did not would
  // leave its record out of the entry, a wrong answer from the cache. One
  // buffer per thread, allocated on its first answer.
  thread_local std::vector<uint8_t> scratch(kRdataCap);
  uint8_t* const rdata = scratch.data();

  CacheEntryBuilder b(key);
  b.SetFlags(up.flags());
  dns::NameKey cur;
  cur.len = static_cast<uint8_t>(key.qname.size());
  std::memcpy(cur.bytes.data(), key.qname.data(), key.qname.size());
  uint32_t chain_ttl = UINT32_MAX;
  for (auto hop = cname_of.find(AsText(cur.span())); hop != cname_of.end();
       hop = cname_of.find(AsText(cur.span()))) {
    if (hop->second.followed) return fill;  // a CNAME loop: never cached
    hop->second.followed = true;
    const AnswerRecord& r = answers[hop->second.record];
    size_t rdlen = 0;
    if (dns::CopyRdataUncompressed(up.bytes(), r.rr, rdata, kRdataCap, &rdlen) != dns::ParseError::kOk ||
        rdlen > dns::kMaxNameWire) {
      return fill;
    }
    b.AddCname(cur.span(), {rdata, rdlen}, r.rr.ttl);
    std::memcpy(cur.bytes.data(), rdata, rdlen);
    cur.len = static_cast<uint8_t>(rdlen);
    chain_ttl = std::min(chain_ttl, r.rr.ttl);
    // An untagged name whose chain enters a tagged suffix takes its tag
    // (docs/behaviour.md#domain-tags): not cached in the common partition,
    // learned for the chain's TTL, and resolved again as a tagged name.
    const Tag* tag = in.tags != nullptr && !in.tagged ? in.tags->Lookup(cur.span()) : nullptr;
    if (tag != nullptr && (tag->weight || tag->ecs || tag->level != CacheLevel::kGlobal)) {
      fill.outcome = CacheFill::Outcome::kLearn;
      fill.learn_tag = tag;
      fill.learn_ttl = std::clamp<uint32_t>(chain_ttl, 1, std::max<uint32_t>(1, in.limits.max_ttl));
      return fill;
    }
  }

  // The records of the qtype owned by the chain's last name.
  size_t address_count = 0;
  bool found = false;
  for (const AnswerRecord& r : answers) {
    if (r.rr.type != key.qtype || owner_of(r) != AsText(cur.span())) continue;
    size_t rdlen = 0;
    if (dns::CopyRdataUncompressed(up.bytes(), r.rr, rdata, kRdataCap, &rdlen) != dns::ParseError::kOk) {
      return fill;  // a record of the answer that cannot be stored: relayed, not cached without it
    }
    if ((r.rr.type == dns::type::kA && rdlen == 4) || (r.rr.type == dns::type::kAaaa && rdlen == 16)) {
      b.AddAddress(cur.span(), {rdata, rdlen}, r.rr.ttl);
      ++address_count;
    } else {
      b.AddAnswer(cur.span(), r.rr.type, r.rr.klass, r.rr.ttl, {rdata, rdlen});
    }
    found = true;
  }

  // The SOA of a negative answer (RFC 2308): the builder keeps it for
  // negative entries only.
  dns::Message::Iterator auth = up.Records(dns::Section::kAuthority);
  while (auth.Next(&rr)) {
    if (rr.type != dns::type::kSoa) continue;
    dns::NameKey owner;
    size_t end, rdlen;
    if (dns::ReadName(up.bytes(), rr.name_offset, &end, &owner) != dns::ParseError::kOk) continue;
    if (dns::CopyRdataUncompressed(up.bytes(), rr, rdata, kRdataCap, &rdlen) != dns::ParseError::kOk)
      return fill;
    b.AddAuthority(owner.span(), rr.type, rr.klass, rr.ttl, {rdata, rdlen});
  }

  const dns::Edns& edns = up.edns();
  if (edns.has_weight && address_count > 0) {
    const dns::WeightSet w =
        dns::DecodeWeights(up.bytes().subspan(edns.weight_offset, edns.weight_len), address_count);
    if (w.valid()) b.SetWeights({w.weights.data(), w.count});
  }
  if (edns.has_ecs) b.SetEcs(edns.ecs.family, edns.ecs.source_prefix, edns.ecs.scope_prefix);

  EntryKind kind = EntryKind::kPositive;
  if (fill.servfail) {
    kind = EntryKind::kServFail;
  } else if (rcode == static_cast<uint16_t>(dns::Rcode::kNxDomain)) {
    kind = EntryKind::kNxDomain;
  } else if (!found) {
    kind = EntryKind::kNoData;
  }
  absl::StatusOr<CacheEntryPtr> entry = b.Build(kind, in.now, in.limits);
  if (!entry.ok()) return fill;
  fill.outcome = CacheFill::Outcome::kEntry;
  fill.entry = *std::move(entry);
  return fill;
}

}  // namespace weir::partitions
