// Answering by weight: smooth weighted round-robin (docs/behaviour.md#answering-by-weight).
//
// The shared, immutable part of a weighted RRset lives in its CacheEntry
// (address records, weights, fingerprint). The mutable SWRR state (nginx's
// `current` vector) lives in a per-worker SwrrTable keyed by the entry's key
// hash, so workers never write shared memory. The state is kept while the
// cached set keeps its fingerprint (a refresh with the same addresses and
// weights continues the smooth sequence) and reset when the set changes.
//
// Per worker, every window of sum(w) consecutive picks of one RRset holds
// address i exactly w[i] times; equal (or absent) weights give round-robin.
//
// Threading: a SwrrTable belongs to one worker thread; all calls happen on
// that thread. WriteAnswer() reads the entry only (RCU reader side).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "weir/partitions/cache.h"
#include "weir/partitions/tagtable.h"

namespace weir::partitions {

class SwrrTable {
 public:
  // `slots`: RRsets whose state is remembered at once (2-way set
  // associative, least recently used of the pair replaced; 64 bytes each).
  // Size it above the worker's hot weighted set; an evicted state restarts
  // its sequence. The default (4096, 256 KB) stays in a core's L2.
  explicit SwrrTable(size_t slots = 4096);
  ~SwrrTable();
  SwrrTable(const SwrrTable&) = delete;
  SwrrTable& operator=(const SwrrTable&) = delete;
  SwrrTable(SwrrTable&&) noexcept = default;
  SwrrTable& operator=(SwrrTable&&) noexcept = default;

  // Index of the next address for the RRset (key_hash, fingerprint) with
  // these weights (1..255 each, at most dns::kMaxWeightedAddresses).
  uint8_t Pick(uint64_t key_hash, uint64_t fingerprint, std::span<const uint8_t> weights);

  uint64_t resets() const { return resets_; }

  // The SWRR `current` values of the RRset (key_hash, fingerprint) with `n`
  // addresses, copied to `out` (n values); false when this table holds no
  // state for it (never picked here, or evicted: the next pick starts the
  // sequence). Same thread as Pick.
  bool Peek(uint64_t key_hash, uint64_t fingerprint, size_t n, int16_t* out) const;

 private:
  static constexpr size_t kInline = 16;
  struct alignas(64) Slot {
    uint64_t key;
    uint64_t fingerprint;
    uint32_t last_use;
    uint16_t total;
    uint8_t n;  // 0 = empty
    int16_t current[kInline];
  };
  struct BigSlot {
    uint64_t key;
    uint64_t fingerprint;
    uint16_t total;
    uint8_t n;
    int16_t current[64];
  };
  static uint8_t Step(int16_t* current, std::span<const uint8_t> weights, uint16_t total);

  std::unique_ptr<Slot[]> slots_;
  size_t mask_;
  std::unique_ptr<BigSlot[]> big_;  // RRsets of more than kInline addresses
  size_t big_mask_;
  uint32_t tick_ = 0;
  uint64_t resets_ = 0;
};

struct AnswerWrite {
  uint16_t bytes = 0;
  uint16_t answer_count = 0;
  uint16_t authority_count = 0;
  uint8_t picked = 0;        // the SWRR pick (weighted modes)
  uint8_t weight_count = 0;  // weights written to weights_out
};

// Writes `entry`'s records at `dst`, the answer offset of a response whose
// question is the entry's qname (dns::AnswerOffset), with every TTL aged by
// `age` (floored at 0). Modes, for an entry with an address RRset:
//   kAll      the records as cached;
//   kSingle   the CNAME chain + the SWRR-picked address record;
//   kOrdered  the chain + the picked record first, then the others in order.
// Entries without an address RRset (negative, SERVFAIL, MX...) are written as
// cached whatever the mode. If `weights_out` is not null it receives the
// weights of the written address records in written order (for the weight
// option). Returns false, writing nothing useful, when `cap` is too small.
// No allocation, no lock; `swrr` is the calling worker's table.
bool WriteAnswer(const CacheEntry& entry, AnswerMode mode, SwrrTable& swrr, uint32_t age, uint8_t* dst,
                 size_t cap, AnswerWrite* out, uint8_t* weights_out = nullptr);

namespace internal {
inline void CopyAged(uint8_t* dst, const uint8_t* src, size_t len, std::span<const uint16_t> ttl_offsets,
                     size_t ttl_base, uint32_t age) {
  std::memcpy(dst, src, len);
  for (uint16_t off : ttl_offsets) {
    uint8_t* p = dst + (off - ttl_base);
    const uint32_t ttl = dns::Load32(p);
    dns::Store32(p, ttl > age ? ttl - age : 0);
  }
}
}  // namespace internal

}  // namespace weir::partitions
