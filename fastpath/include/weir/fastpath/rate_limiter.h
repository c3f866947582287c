// Per-source rate limiting (docs/fastpath-config.md#rate-limiting): a token
// bucket of queries and one of UDP answer bytes per source prefix (/32 IPv4,
// /56 IPv6 by default), in a fixed open-addressing table.
//
// Threading: one RateLimiter per worker; every call happens on the owning
// worker. The limit is per worker: a source whose queries the kernel (or the
// NIC's RSS) spreads over n workers can get up to n times the configured
// rate, and one whose flows land on one worker (one socket, the usual
// forwarder) gets exactly it. Dividing the rate by the workers instead would
// cut the latter to 1/n. No allocation, lock or syscall per packet.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>

#include "weir/fastpath/metrics.h"
#include "weir/partitions/partition.h"

namespace weir::fastpath {

struct RateLimitOptions {
  uint32_t qps = 0;               // queries per second per source prefix; 0: not limited
  uint32_t burst = 0;             // the query bucket's size; 0: = qps
  uint32_t bytes_per_second = 0;  // UDP answer bytes per second per source prefix; 0: not limited
  uint32_t bytes_burst = 0;       // the byte bucket's size; 0: = bytes_per_second
  uint8_t ipv4_prefix = 32;       // a source is its address cut to this prefix
  uint8_t ipv6_prefix = 56;
  uint32_t table_size = 65536;  // sources tracked per worker (rounded up to a power of two)
  uint64_t seed = 0;            // of the slot hash; 0: random per process (tests fix it)
};

// The table: a source's key is its prefix (family and masked bytes),
// compared in full, so two sources never share a bucket. A key lives in the
// kWindow slots after its home slot. When all of them are taken by other
// sources, the one that loses least by being forgotten is replaced: an idle
// one (its buckets have refilled, so forgetting it loses nothing), else the
// one with the fullest buckets (least recently seen among equals). A source
// being limited (empty buckets) is thus the last to be forgotten: a flood of
// new sources (spoofed addresses) cannot reset an abuser's bucket without
// first replacing every fuller source of its window, and replacing an
// innocent source costs it nothing (it comes back with a full bucket).
// Evictions of sources whose buckets were not yet full are counted
// (`evicted_active`): a sign table_size is too small for the sources seen.
class RateLimiter {
 public:
  static constexpr uint32_t kNoSlot = UINT32_MAX;
  static constexpr uint32_t kWindow = 8;  // slots probed per key: 256 bytes

  explicit RateLimiter(const RateLimitOptions& options);

  bool enabled() const { return mask_ != 0; }
  bool limits_bytes() const { return bytes_rate_ != 0; }

  // The slot of `src`'s prefix (taken for it if it is new), its buckets
  // refilled to `now` (seconds, the burst's clock reading). kNoSlot when the
  // limiter is off.
  uint32_t Track(const common::IpAddress& src, uint32_t now);
  // Takes one query token from `slot`; false when its bucket is empty (or
  // nothing when queries are not limited: true).
  bool TakeQuery(uint32_t slot) {
    if (qps_ == 0) return true;
    Entry& e = table_[slot];
    if (e.tokens == 0) return false;
    --e.tokens;
    return true;
  }
  // Counts the sources taken into the table: a slot from Track still holds
  // its source while this has not changed.
  uint32_t generation() const { return generation_; }
  // The UDP answer bytes `src` may get now. `slot` from Track for the same
  // source and `now` when the generation is still `generation` (a later
  // source of the burst may have taken the slot: then it is tracked again).
  uint32_t ByteAllowance(uint32_t* slot, uint32_t generation, const common::IpAddress& src, uint32_t now);
  // Takes `n` bytes (at most what is left) from `slot`'s byte bucket.
  void TakeBytes(uint32_t slot, uint32_t n) {
    Entry& e = table_[slot];
    e.bytes = n < e.bytes ? e.bytes - n : 0;
  }

  size_t capacity() const { return enabled() ? mask_ + 1 : 0; }
  static constexpr size_t kEntryBytes = 32;  // per tracked source
  uint64_t evicted_idle() const { return evicted_idle_.Read(); }
  uint64_t evicted_active() const { return evicted_active_.Read(); }

 private:
  struct Key {
    uint64_t lo = 0, hi = 0;  // the masked address bytes
    uint8_t family = 0;
    bool operator==(const Key&) const = default;
  };
  struct Entry {
    uint64_t lo = 0, hi = 0;
    uint8_t family = 0;  // 0: empty
    uint32_t last = 0;   // the clock second the buckets were last refilled
    uint32_t tokens = 0;
    uint32_t bytes = 0;
  };
  static_assert(sizeof(Entry) == kEntryBytes);

  Key KeyOf(const common::IpAddress& src) const;
  uint64_t Hash(const Key& k) const;
  [[gnu::always_inline]] void Refill(Entry& e, uint32_t now) const {
    if (e.last == now) return;
    // The clock only moves forward; if it ever steps back, nothing is added.
    const uint64_t elapsed = now > e.last ? now - e.last : 0;
    e.last = now;
    if (elapsed == 0) return;
    e.tokens = static_cast<uint32_t>(std::min<uint64_t>(burst_, e.tokens + elapsed * qps_));
    e.bytes = static_cast<uint32_t>(std::min<uint64_t>(bytes_burst_, e.bytes + elapsed * bytes_rate_));
  }
  // How much of its buckets `e` would miss at `now`, in 1/65536 of a bucket
  // (0: idle, nothing to lose).
  uint32_t Deficit(const Entry& e, uint32_t now) const;

  uint32_t qps_;
  uint32_t burst_;
  uint32_t bytes_rate_;
  uint32_t bytes_burst_;
  std::array<uint64_t, 2> v4_mask_{};  // the prefixes as masks of the address's two words
  std::array<uint64_t, 2> v6_mask_{};
  uint64_t seed_;
  uint32_t mask_ = 0;  // slots - 1; 0: off
  uint32_t generation_ = 0;
  std::unique_ptr<Entry[]> table_;
  OwnedCounter evicted_idle_;
  OwnedCounter evicted_active_;
};

}  // namespace weir::fastpath
