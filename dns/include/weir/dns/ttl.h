// The TTL rules both tiers apply, in one place: how an answer's TTLs age
// (fresh or stale), the negative TTL an SOA gives (RFC 2308), when a hit is
// refreshed before it expires (prefetch).
//
// Pure, inline: the hit path rewrites TTLs with RewriteTtls and AnswerTtl.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "weir/dns/wire.h"

namespace weir::dns {

// A TTL `age` seconds later, floored at 0.
constexpr uint32_t AgedTtl(uint32_t ttl, uint32_t age) { return ttl > age ? ttl - age : 0; }

// What a cached answer's TTLs become when it is sent: max(TTL - age
// floored at 0, floor). A fresh answer has floor 0; a stale one (RFC 8767)
// an age past every TTL and floor = the stale TTL. One form, no branch.
struct AnswerTtl {
  uint32_t age = 0;
  uint32_t floor = 0;

  static constexpr AnswerTtl Aged(uint32_t age) { return {age, 0}; }
  static constexpr AnswerTtl Stale(uint32_t ttl) { return {UINT32_MAX, ttl}; }
  constexpr bool stale() const { return age == UINT32_MAX; }
  constexpr uint32_t Of(uint32_t ttl) const {
    const uint32_t aged = AgedTtl(ttl, age);
    return aged > floor ? aged : floor;
  }
};

// Rewrites the TTL at each of `ttl_offsets` (counted from `ttl_base`) in
// `records` to new_ttl(the TTL there): AgedTtl, or an AnswerTtl's Of.
template <typename NewTtl>
inline void RewriteTtls(uint8_t* records, std::span<const uint16_t> ttl_offsets, size_t ttl_base,
                        NewTtl new_ttl) {
  for (uint16_t off : ttl_offsets) {
    uint8_t* p = records + (off - ttl_base);
    Store32(p, new_ttl(Load32(p)));
  }
}
inline void RewriteTtls(uint8_t* records, std::span<const uint16_t> ttl_offsets, size_t ttl_base,
                        AnswerTtl ttl) {
  RewriteTtls(records, ttl_offsets, ttl_base, [ttl](uint32_t t) { return ttl.Of(t); });
}

// The MINIMUM field of an SOA record's RDATA (uncompressed: two names of
// at least one byte, then five 32-bit fields); false when `rdata` is too
// short to be one. RFC 2308 5: a negative answer's TTL is min(SOA TTL,
// MINIMUM).
inline bool SoaMinimum(std::span<const uint8_t> rdata, uint32_t* minimum) {
  if (rdata.size() < 22) return false;
  *minimum = Load32(rdata.data() + rdata.size() - 4);
  return true;
}

// Prefetch (both tiers' cache.prefetch_percent): a hit on an answer of TTL
// >= 10 s with `left` seconds of it left, at most `percent` % of the TTL,
// refreshes it before it expires. 0: never.
constexpr bool PrefetchDue(uint32_t ttl, uint32_t left, uint32_t percent) {
  // left * 100 <= ttl * percent for left >= 1; left 0 (expired) wraps to
  // the largest value and is never due. One compare on the hit path.
  return percent != 0 && ttl >= 10 && uint64_t{left} * 100 - 1 < uint64_t{ttl} * percent;
}

}  // namespace weir::dns
