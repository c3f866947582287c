// Answering by weight: smooth weighted round-robin (docs/behaviour.md#answering-by-weight).
//
// The shared, immutable part of a weighted RRset lives in its CacheEntry
// (address records, weights, fingerprint). The mutable SWRR state (nginx's
// `current` vector) lives in a per-worker SwrrTable keyed by the entry's
// whole cache key (partition, name, type, class), so workers never write
// shared memory. The state is kept while the cached set keeps its
// fingerprint (a refresh with the same addresses and weights continues the
// smooth sequence) and reset when the set changes.
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

// The SWRR states of one worker: one state per key, for any set size up to
// dns::kMaxWeightedAddresses, in one layout (448 bytes, seven cache lines of
// which a pick reads the first one or two for a short name and a small set).
//
// Bound: `capacity` states. A key seen for the first time when the table is
// full takes the state of the least recently picked key (exact LRU), which
// is counted in evictions(); that key's sequence restarts when it is picked
// again. No other key ever resets a sequence: lookups compare the whole key,
// not just its hash. Memory is reserved at construction and touched as
// states are first used (448 bytes each, plus 12 bytes of index per slot).
class SwrrTable {
 public:
  static constexpr size_t kDefaultCapacity = 131072;
  static constexpr size_t kStateBytes = 448;

  explicit SwrrTable(size_t capacity = kDefaultCapacity);
  ~SwrrTable();
  SwrrTable(const SwrrTable&) = delete;
  SwrrTable& operator=(const SwrrTable&) = delete;
  SwrrTable(SwrrTable&&) noexcept;
  SwrrTable& operator=(SwrrTable&&) noexcept;

  // Index of the next address for the RRset of `key` (whose HashCacheKey is
  // `key_hash`) with this fingerprint and these weights (1..255 each, at
  // most dns::kMaxWeightedAddresses).
  uint8_t Pick(const CacheKey& key, uint64_t key_hash, uint64_t fingerprint,
               std::span<const uint8_t> weights);
  // The same for a cached entry.
  uint8_t Pick(const CacheEntry& e) { return Pick(KeyOf(e), e.hash(), e.fingerprint(), e.weights()); }

  // The SWRR `current` values of the RRset (key, fingerprint) with `n`
  // addresses, copied to `out` (n values); false when this table holds no
  // state for it (never picked here, or evicted: the next pick starts the
  // sequence). Same thread as Pick.
  bool Peek(const CacheKey& key, uint64_t key_hash, uint64_t fingerprint, size_t n, int16_t* out) const;

  static CacheKey KeyOf(const CacheEntry& e) { return {e.partition(), e.qname(), e.qtype(), e.qclass()}; }

  // The weights a calibrated entry is picked with (FactorSet::PickWeights)
  // and the fingerprint of that sequence (the entry's mixed with the set's
  // digest), from a small per-worker memo keyed by that fingerprint: a hot
  // name computes them once per entry and factor change, not per pick.
  std::span<const uint8_t> CalibratedWeights(const CacheEntry& e, const FactorSet& f, uint64_t* fingerprint);

  // The counters may be read from any thread (relaxed: metrics).
  size_t capacity() const { return capacity_; }
  // States in use.
  size_t size() const { return stats_->starts.Read() - stats_->evictions.Read(); }
  // States taken from the least recently picked key to make room.
  uint64_t evictions() const { return stats_->evictions.Read(); }
  // Sequences restarted because a key's address/weight set changed.
  uint64_t resets() const { return stats_->resets.Read(); }
  // Sequences started: a key's first pick here, or its first after an eviction.
  uint64_t starts() const { return stats_->starts.Read(); }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  static constexpr size_t kMaxAddresses = dns::kMaxWeightedAddresses;
  // The name's bytes (at most dns::kMaxNameWire), then at the next even
  // offset the `current` values, one per address: int16 storage read as
  // bytes for the name (char access may alias any object).
  static constexpr size_t kWords = (dns::kMaxNameWire + 1) / 2 + kMaxAddresses;
  struct alignas(64) State {
    uint64_t key_hash;
    uint64_t fingerprint;
    Partition partition;
    uint64_t shape;  // Shape(): type, class and name length, compared at once
    uint16_t total;  // sum of the weights
    uint8_t n;       // addresses
    uint8_t qname_len;
    int16_t words[kWords];

    int16_t* current() { return words + (qname_len + 1) / 2; }
    const int16_t* current() const { return words + (qname_len + 1) / 2; }
    const uint8_t* qname() const { return reinterpret_cast<const uint8_t*>(words); }
  };
  static_assert(sizeof(State) == kStateBytes);
  struct Link {
    uint32_t prev, next;  // LRU order: prev is more recent
  };

  size_t Bucket(uint64_t key_hash) const { return (key_hash * common::kGolden64) >> bucket_shift_; }
  static uint64_t Shape(const CacheKey& k) {
    return uint64_t{k.qtype} | uint64_t{k.qclass} << 16 | uint64_t{k.qname.size()} << 32;
  }
  uint32_t Find(const CacheKey& key, uint64_t key_hash) const;
  // A key's first pick here: a free state, or the least recently used one.
  uint32_t Insert(const CacheKey& key, uint64_t key_hash, uint64_t fingerprint,
                  std::span<const uint8_t> weights);
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
// as a sequence of its own (a changed factor starts it again). Returns
// false, writing nothing useful, when `cap` is too small.
// No allocation, no lock; `swrr` is the calling worker's table.
bool WriteAnswer(const CacheEntry& entry, AnswerMode mode, SwrrTable& swrr, AnswerTtl ttl, uint8_t* dst,
                 size_t cap, AnswerWrite* out, uint8_t* weights_out = nullptr,
                 const FactorSet* factors = nullptr);

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
                    const FactorSet* factors = nullptr);

namespace internal {
inline void CopyAged(uint8_t* dst, const uint8_t* src, size_t len, std::span<const uint16_t> ttl_offsets,
                     size_t ttl_base, AnswerTtl ttl) {
  std::memcpy(dst, src, len);
  dns::RewriteTtls(dst, ttl_offsets, ttl_base, ttl);
}
}  // namespace internal

}  // namespace weir::partitions
