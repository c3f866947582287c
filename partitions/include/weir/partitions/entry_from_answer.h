// The cache entry an upstream answer makes (docs/behaviour.md#the-front-cache), and
// whether it makes one at all: the rules the forwarder applies to every
// answer it receives for a cache miss, kept apart from the cache, the clock
// and the learned tags so they are tested and fuzzed on their own.
//
// Threading: EntryFromAnswer is reentrant and touches no shared state; it
// may run on any number of threads at once (each has its own RDATA
// scratch). Control-plane speed: it runs once per upstream answer, never on
// a cache hit.
#pragma once

#include <cstdint>

#include "weir/dns/message.h"
#include "weir/partitions/cache.h"
#include "weir/partitions/tagtable.h"

namespace weir::partitions {

// One upstream answer to a cache miss, with what the entry depends on.
struct AnswerToCache {
  // The question asked: partition, canonical qname (dns::NameKey::span()),
  // qtype, qclass. The entry is built for exactly this key.
  CacheKey key;
  // The question's name is tagged already (by the tag table or a learned
  // tag): its chain is not looked up in `tags`.
  bool tagged = false;
  // The question had DO or CD set: a DNSSEC-aware answer is relayed, never
  // cached.
  bool dnssec = false;
  // The upstream answer, parsed (Message::Parse returned kOk). Not null.
  const dns::Message* answer = nullptr;
  // The domain tags, to learn the tag of an untagged name whose chain enters
  // a tagged suffix; null: nothing is learned.
  const TagTable* tags = nullptr;
  // The entry's insert time (common::Clock::NowSeconds()).
  uint32_t now = 0;
  CacheLimits limits;
};

// What to do with the answer.
struct CacheFill {
  enum class Outcome : uint8_t {
    // Cache `entry`.
    kEntry,
    // Relay the answer, cache nothing.
    kNotCacheable,
    // The untagged question's CNAME chain enters `learn_tag`'s suffix: the
    // name is learned with that tag for `learn_ttl` seconds and resolved
    // again as a tagged name; this answer is not cached (it would land in
    // the common partition).
    kLearn,
  };
  Outcome outcome = Outcome::kNotCacheable;
  // The upstream answered SERVFAIL. The caller first looks the key up: when
  // the cache holds an entry for it, fresh or stale, nothing is cached and
  // that entry is served instead (RFC 8767 keeps the stale answer); only
  // otherwise does it act on `outcome` (a kEntry is then an
  // EntryKind::kServFail entry, cached for limits.servfail_ttl).
  bool servfail = false;
  CacheEntryPtr entry;  // kEntry only
  // kLearn only. Points into `AnswerToCache::tags`, which must outlive its
  // use.
  const Tag* learn_tag = nullptr;
  // kLearn only: the smallest TTL of the CNAMEs followed up to the tagged
  // name, clamped to [1, limits.max_ttl].
  uint32_t learn_ttl = 0;
};

// Builds the cache entry for an upstream answer.
//
// The entry holds, for the key's qname, qtype and qclass:
// * the CNAME chain from the qname through the answer section (unless the
//   qtype is CNAME): at each name, the first CNAME record it owns; the chain
//   is as long as the answer has records for, with no fixed hop limit;
// * the records of the qtype owned by the chain's last name: A and AAAA
//   records as the weighted address RRset (with the upstream's weight
//   option, when valid, in the order the addresses came), any other type as
//   is; RDATA names decompressed and in canonical form;
// * the SOA records of the authority section (kept by negative entries);
// * the answer's ECS option (family, source and scope prefix) and its flags.
// Records of the answer off the chain, of another class, or of another type
// are left out. The kind is kServFail for SERVFAIL (the entry keeps the
// RCODE only, no records), kNxDomain for NXDOMAIN, kPositive when the
// chain's last name has records of the qtype, else kNoData. Limits apply as
// CacheEntryBuilder::Build applies them.
//
// Not cacheable (relayed as received, never served from the cache):
// * an RCODE other than NOERROR, NXDOMAIN and SERVFAIL (REFUSED, NOTIMP,
//   FORMERR, ...);
// * a truncated answer (TC);
// * a DNSSEC-aware question (`dnssec`);
// * a CNAME loop: the chain comes back to a name it already passed;
// * a record it takes (a CNAME of the chain, a record of the qtype, an SOA
//   of the authority section) whose RDATA cannot be stored (malformed for
//   its type): an entry missing a record would be a wrong answer;
// * an answer the builder refuses (too large, more than 255 records, more
//   than 32 CNAMEs before an address RRset, a negative answer without SOA,
//   a positive one without records).
//
// Learning: when the question is not `tagged` and a CNAME target's most
// specific tagged suffix in `tags` has weight, ECS or a cache level other
// than global, the walk stops there with kLearn (no entry).
CacheFill EntryFromAnswer(const AnswerToCache& in);

}  // namespace weir::partitions
