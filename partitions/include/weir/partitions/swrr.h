// Answering by weight: smooth weighted round-robin (docs/behaviour.md#answering-by-weight).
//
// The shared, immutable part of a weighted RRset lives in its CacheEntry
// (address records, weights, fingerprint). The mutable SWRR state (nginx's
// `current` vector) lives in a per-worker SwrrTable keyed by the entry's
// lineage (CacheEntry::lineage: one number per life of a cache key, handed
// on to each refresh), so workers never write shared memory and a pick
// compares one number, never a name. The state is kept while the cached
// set keeps its fingerprint (a refresh with the same addresses and weights
// continues the smooth sequence) and reset when the set changes; a key
// evicted from the cache and cached again starts a new sequence.
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

#include "weir/common/hash.h"
#include "weir/common/owned_counter.h"
#include "weir/partitions/cache.h"
#include "weir/partitions/tagtable.h"

namespace weir::partitions {

class FactorSet;  // weight_factors.h

// The SWRR states of one worker: one state per lineage, for any set size
// up to dns::kMaxWeightedAddresses, in one layout (192 bytes, three cache
// lines of which a pick reads the first one for a set of up to 24
// addresses).
//
// Bound: `capacity` states. A lineage seen for the first time when the
// table is full takes the state of the least recently picked one (exact
// LRU), which is counted in evictions(); that lineage's sequence restarts
// when it is picked again. No other lineage ever resets a sequence: lookups
// compare the whole lineage, not a hash of it. Memory is reserved at
// construction and touched as states are first used (192 bytes each, plus
// 12 bytes of index per slot).
class SwrrTable {
 public:
  static constexpr size_t kDefaultCapacity = 131072;
  static constexpr size_t kStateBytes = 192;

  explicit SwrrTable(size_t capacity = kDefaultCapacity);
  ~SwrrTable();
  SwrrTable(const SwrrTable&) = delete;
  SwrrTable& operator=(const SwrrTable&) = delete;
  SwrrTable(SwrrTable&&) noexcept;
  SwrrTable& operator=(SwrrTable&&) noexcept;

  // Index of the next address for the RRset of `lineage` with this
  // fingerprint and these weights (1..255 each, at most
  // dns::kMaxWeightedAddresses).
  uint8_t Pick(uint64_t lineage, uint64_t fingerprint, std::span<const uint8_t> weights);
  // The same for a cached entry.
  uint8_t Pick(const CacheEntry& e) { return Pick(e.lineage(), e.fingerprint(), e.weights()); }

  // The SWRR `current` values of the RRset (lineage, fingerprint) with `n`
  // addresses, copied to `out` (n values); false when this table holds no
  // state for it (never picked here, or evicted: the next pick starts the
  // sequence). Same thread as Pick.
  bool Peek(uint64_t lineage, uint64_t fingerprint, size_t n, int16_t* out) const;

  // The weights a calibrated entry is picked with (FactorSet::PickWeights)
  // and the fingerprint of that sequence (the entry's mixed with the set's
  // digest), from a small per-worker memo keyed by that fingerprint: a hot
  // name computes them once per entry and factor change, not per pick.
  std::span<const uint8_t> CalibratedWeights(const CacheEntry& e, const FactorSet& f, uint64_t* fingerprint);

  // The counters may be read from any thread (relaxed: metrics).
  size_t capacity() const { return capacity_; }
  // States in use.
  size_t size() const { return stats_->starts.Read() - stats_->evictions.Read(); }
  // States taken from the least recently picked lineage to make room.
  uint64_t evictions() const { return stats_->evictions.Read(); }
  // Sequences restarted because a lineage's address/weight set changed.
  uint64_t resets() const { return stats_->resets.Read(); }
  // Sequences started: a lineage's first pick here, or its first after an
  // eviction.
  uint64_t starts() const { return stats_->starts.Read(); }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  static constexpr size_t kMaxAddresses = dns::kMaxWeightedAddresses;
  struct alignas(64) State {
    uint64_t lineage;
    uint64_t fingerprint;
    uint16_t total;  // sum of the weights
    uint8_t n;       // addresses
    int16_t current[kMaxAddresses];
  };
  static_assert(sizeof(State) == kStateBytes);
  struct Link {
    uint32_t prev, next;  // LRU order: prev is more recent
  };

  size_t Bucket(uint64_t lineage) const { return (lineage * common::kGolden64) >> bucket_shift_; }
  uint32_t Find(uint64_t lineage) const;
  // A lineage's first pick here: a free state, or the least recently used one.
  uint32_t Insert(uint64_t lineage, uint64_t fingerprint, std::span<const uint8_t> weights);
  uint32_t Take();
  void Start(State& s, uint64_t fingerprint, std::span<const uint8_t> weights);
  void Unlink(uint32_t i);
  void PushFront(uint32_t i);
  static uint8_t Step(int16_t* current, std::span<const uint8_t> weights, uint16_t total);

  size_t capacity_ = 0;
  std::unique_ptr<State[]> states_;
  std::unique_ptr<uint32_t[]> chain_;    // next state in the same bucket
  std::unique_ptr<Link[]> lru_;          // per state
  std::unique_ptr<uint32_t[]> buckets_;  // first state of each bucket
  unsigned bucket_shift_ = 63;
  uint32_t used_ = 0;
  uint32_t head_ = kNone;  // most recently picked
  uint32_t tail_ = kNone;  // least recently picked
  // Its own cache line: written by this worker's picks, read by the metrics
  // thread, next to no other worker's data.
  struct alignas(64) Stats {
    common::OwnedCounter evictions, resets, starts;
  };
  std::unique_ptr<Stats> stats_ = std::make_unique<Stats>();
  // CalibratedWeights' memo: direct-mapped by fingerprint, allocated at
  // the first calibrated pick (a worker without one pays nothing).
  static constexpr size_t kMemoSlots = 256;
  struct MemoSlot {
    uint64_t fingerprint = 0;  // 0: empty
    uint8_t n = 0;
    uint8_t weights[kMaxAddresses];
  };
  std::unique_ptr<MemoSlot[]> memo_;
};

struct AnswerWrite {
  uint16_t bytes = 0;
  uint16_t answer_count = 0;
  uint16_t authority_count = 0;
  uint8_t picked = 0;        // the SWRR pick (weighted modes)
  uint8_t weight_count = 0;  // weights written to weights_out
};

// Writes `entry`'s records at `dst`, the answer offset of a response whose
// question is the entry's qname (dns::AnswerOffset), with the TTLs `ttl`
// says (aged, or all stale). Modes, for an entry with an address RRset:
//   kAll      the records as cached;
//   kSingle   the CNAME chain + the SWRR-picked address record;
//   kOrdered  the chain + the picked record first, then the others in order.
// Entries without an address RRset (negative, SERVFAIL, MX...) are written as
// cached whatever the mode. If `weights_out` is not null it receives the
// weights of the written address records in written order (for the weight
// option): the GSLB's, always. With `factors` (the name's calibration,
// weight_factors.h) the pick uses each weight times its address's factor,
// as a sequence of its own (a changed factor starts it again). A non-zero
// `sequence` picks in a sequence of its own too, for the entry's life and
// that number (a subscriber segment's id: segments.h). Returns false,
// writing nothing useful, when `cap` is too small.
// No allocation, no lock; `swrr` is the calling worker's table.
bool WriteAnswer(const CacheEntry& entry, AnswerMode mode, SwrrTable& swrr, AnswerTtl ttl, uint8_t* dst,
                 size_t cap, AnswerWrite* out, uint8_t* weights_out = nullptr,
                 const FactorSet* factors = nullptr, uint64_t sequence = 0);

// The whole response to `query` (the received message; its question is
// `entry`'s key) from `entry`'s template (CacheEntry::answer_header): the
// header with the query's ID, its RD and CD bits and `flags` (e.g. AD)
// set, the question as the client spelled it (0x20), then the records
// WriteAnswer writes in `mode` (the same pick), TTLs as `ttl` says; ARCOUNT
// 0 (the caller appends an OPT). `out` as WriteAnswer fills it (its bytes:
// the records'). Returns the length, or 0, writing nothing useful, when it
// is larger than `cap`. No allocation, no lock; `swrr` is the calling
// worker's table.
size_t WriteMessage(const CacheEntry& entry, AnswerMode mode, SwrrTable& swrr, AnswerTtl ttl,
                    const uint8_t* query, uint16_t flags, uint8_t* dst, size_t cap, AnswerWrite* out,
                    const FactorSet* factors = nullptr, uint64_t sequence = 0);

namespace internal {
inline void CopyAged(uint8_t* dst, const uint8_t* src, size_t len, std::span<const uint16_t> ttl_offsets,
                     size_t ttl_base, AnswerTtl ttl) {
  std::memcpy(dst, src, len);
  dns::RewriteTtls(dst, ttl_offsets, ttl_base, ttl);
}
}  // namespace internal

}  // namespace weir::partitions
