#include "weir/fastpath/rate_limiter.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <random>

#include "weir/common/hash.h"

namespace weir::fastpath {
namespace {

// The mask of a prefix over the address bytes, as the two 8-byte words
// they are loaded in (memory order, so the same on any endianness).
std::array<uint64_t, 2> PrefixMask(unsigned bits, unsigned width_bytes) {
  uint8_t m[16] = {};
  for (unsigned i = 0; i < width_bytes; ++i) {
    const unsigned have = bits > i * 8 ? bits - i * 8 : 0;
    m[i] = have >= 8 ? 0xff : static_cast<uint8_t>(0xff00u >> have);
  }
  std::array<uint64_t, 2> w;
  std::memcpy(w.data(), m, 16);
  return w;
}

uint64_t RandomSeed() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd() ^ common::kGolden64;
}

}  // namespace

RateLimiter::RateLimiter(const RateLimitOptions& o)
    : qps_(o.qps),
      burst_(o.burst != 0 ? o.burst : o.qps),
      bytes_rate_(o.bytes_per_second),
      bytes_burst_(o.bytes_burst != 0 ? o.bytes_burst : o.bytes_per_second),
      v4_mask_(PrefixMask(o.ipv4_prefix, 4)),
      v6_mask_(PrefixMask(o.ipv6_prefix, 16)),
      seed_(o.seed != 0 ? o.seed : RandomSeed()) {
  if (qps_ == 0 && bytes_rate_ == 0) return;
  const uint32_t slots = std::bit_ceil(std::max<uint32_t>(o.table_size, 2 * kWindow));
  mask_ = slots - 1;
  table_.reset(new Entry[slots]);  // value-initialised: every slot empty
}

RateLimiter::Key RateLimiter::KeyOf(const common::IpAddress& src) const {
  const std::array<uint64_t, 2>& m = src.family == 4 ? v4_mask_ : v6_mask_;
  Key k;
  std::memcpy(&k.lo, src.bytes.data(), 8);
  std::memcpy(&k.hi, src.bytes.data() + 8, 8);
  k.lo &= m[0];
  k.hi &= m[1];
  k.family = src.family;
  return k;
}

uint64_t RateLimiter::Hash(const Key& k) const {
  // Keyed by a per-process seed, so a sender cannot pick addresses that
  // crowd one window on every node.
  return common::HashWords(k.lo ^ seed_, k.hi + k.family + (seed_ >> 17));
}

uint32_t RateLimiter::Deficit(const Entry& e, uint32_t now) const {
  Entry r = e;
  Refill(r, now);
  uint64_t d = 0;
  if (burst_ != 0) d = std::max<uint64_t>(d, (uint64_t{burst_ - r.tokens} << 16) / burst_);
  if (bytes_burst_ != 0) d = std::max<uint64_t>(d, (uint64_t{bytes_burst_ - r.bytes} << 16) / bytes_burst_);
  return static_cast<uint32_t>(d);
}

uint32_t RateLimiter::Track(const common::IpAddress& src, uint32_t now) {
  if (mask_ == 0) return kNoSlot;
  const Key k = KeyOf(src);
  const uint64_t home = Hash(k);
  uint32_t victim = kNoSlot;
  for (uint32_t i = 0; i < kWindow; ++i) {
    const uint32_t s = static_cast<uint32_t>(home + i) & mask_;
    Entry& e = table_[s];
    if (e.family == k.family && e.lo == k.lo && e.hi == k.hi) {
      Refill(e, now);
      return s;
    }
    if (e.family == 0) {
      // Slots are never emptied, so the key is not further on: take this one.
      victim = s;
      break;
    }
  }
  uint32_t victim_deficit = 0;
  if (victim == kNoSlot) {
    // A new source and a full window: replace the source that loses least.
    victim_deficit = UINT32_MAX;
    uint32_t victim_last = UINT32_MAX;
    for (uint32_t i = 0; i < kWindow; ++i) {
      const uint32_t s = static_cast<uint32_t>(home + i) & mask_;
      const Entry& e = table_[s];
      const uint32_t d = Deficit(e, now);
      if (d < victim_deficit || (d == victim_deficit && e.last < victim_last)) {
        victim = s;
        victim_deficit = d;
        victim_last = e.last;
      }
    }
  }
  ++generation_;
  Entry& e = table_[victim];
  if (e.family != 0) (victim_deficit == 0 ? evicted_idle_ : evicted_active_).Add();
  e.lo = k.lo;
  e.hi = k.hi;
  e.family = k.family;
  e.last = now;
  e.tokens = burst_;
  e.bytes = bytes_burst_;
  return victim;
}

uint32_t RateLimiter::ByteAllowance(uint32_t* slot, uint32_t generation, const common::IpAddress& src,
                                    uint32_t now) {
  if (bytes_rate_ == 0) return UINT32_MAX;
  if (*slot == kNoSlot || generation != generation_) {
    *slot = Track(src, now);
  } else {
    Refill(table_[*slot], now);
  }
  return table_[*slot].bytes;
}

}  // namespace weir::fastpath
