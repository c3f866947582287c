// The answer cache (docs/behaviour.md#the-front-cache): key = (partition, canonical qname,
// qtype, qclass), value = an immutable CacheEntry holding the answer as
// pre-encoded records, ready to be copied after the question with TTLs aged.
//
// Index: an array of 64-byte buckets, each one cache line: a control word
// (an 8-bit hash tag per slot, matched for all 7 slots at once, and an
// overflow count) and 7 slots (a 16-bit hash tag and the entry pointer). A
// key lives in its home bucket or, when that was full, in the next buckets
// (linear probing by bucket); the overflow count of a bucket says how many
// entries passed it, so a lookup reads one line in the common case and
// stops at the first bucket nobody passed. There are no tombstones.
// Entries never change once published; a refresh publishes a new entry in
// the same slot and retires the old one. Everything is read under RCU
// (QSBR): retired entries and replaced index tables are reclaimed after a
// grace period (urcu call_rcu, or synchronize_rcu when the writer is not a
// registered thread).
//
// Entries: Insert() copies the built entry into a slab of 64-byte-aligned
// blocks carved from big chunks (2 MB transparent huge pages for big
// caches), so a hit costs no TLB miss on the entry, and the fields a lookup
// reads (hash, partition, qtype, qclass, freshness) and a qname of up to 32
// bytes share the entry's first cache line.
//
// Eviction: CLOCK over the slots, driven by the writer whenever the byte
// budget (entry blocks + index) is exceeded. Readers mark an entry
// referenced with a relaxed load + store (no read-modify-write, and no
// store at all once set). Entries expired for longer than the serve-stale
// window are evicted first. Evicted blocks return to the slab after their
// RCU grace period; while the blocks waiting for one exceed an eighth of the
// budget, inserts are refused (kReclaiming), so entry memory stays within
// 1.125x the budget at any churn rate. The slab's footprint (partly used
// chunks included) plus the index stays within 1.25x the budget: when a
// block size needs a new chunk past that cap, the sparsest chunk is drained
// (its entries evicted, the chunk unmapped once its blocks are back) and the
// insert is refused (kReclaiming) until then.
//
// Threading contract:
// * Find()/FindBurst()/Prefetch(): any number of reader threads, each
//   holding an common::RcuThread (rcu.h) and online. The returned pointer is valid
//   until the reader's next quiescent state. Wait-free: no lock, no atomic
//   RMW, no allocation.
// * Insert()/Erase()/Maintain(): serialised by an internal mutex that
//   readers never touch. TryInsert() never blocks (returns kBusy instead), so
//   a data-path worker can insert without waiting. A writer that is itself a
//   registered RCU thread must announce quiescent states like any reader.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "weir/common/clock.h"
#include "weir/common/hash.h"
#include "weir/dns/ttl.h"
#include "weir/dns/wire.h"
#include "weir/partitions/partition.h"

namespace weir::partitions {

struct CacheKey {
  Partition partition = kCommonPartition;
  std::span<const uint8_t> qname;  // canonical key (dns::NameKey::span())
  uint16_t qtype = 0;
  uint16_t qclass = dns::klass::kIn;
};

// 64-bit hash of a key (the index's; SWRR state goes by CacheEntry::lineage).
inline uint64_t HashCacheKey(const CacheKey& k) {
  constexpr uint64_t kMul = 0x9fb21c651e98df25ULL;
  uint64_t h = (k.partition ^ 0x243f6a8885a308d3ULL) * kMul;
  h ^= (uint64_t{k.qtype} << 16 | k.qclass) + (uint64_t{k.qname.size()} << 40);
  const uint8_t* p = k.qname.data();
  size_t n = k.qname.size();
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * kMul;
    h ^= h >> 32;
  }
  uint64_t tail = 0;
  if (n > 0 && k.qname.size() >= 8) {
    // The last 8 bytes, shifted: the same value as copying the n left
    // over, without a library call.
    std::memcpy(&tail, p + n - 8, 8);
    tail >>= 8 * (8 - n);
  } else if (n > 0) {
    std::memcpy(&tail, p, n);
  }
  h = (h ^ tail) * kMul;
  return common::FastMix64(h);
}

enum class EntryKind : uint8_t {
  kPositive = 0,  // NOERROR with answers
  kNxDomain = 1,  // RFC 2308: negative, with the SOA in authority
  kNoData = 2,    // RFC 2308: NOERROR, no answer of this type, SOA in authority
  kServFail = 3,  // short-lived, never served stale
};

enum class Freshness : uint8_t { kMiss = 0, kFresh = 1, kStale = 2 };

// TTL policy applied when an entry is built.
struct CacheLimits {
  uint32_t min_ttl = 0;
  uint32_t max_ttl = 86400;
  uint32_t negative_max_ttl = 3600;  // RFC 2308 section 5 suggests 1-3 hours
  uint32_t servfail_ttl = 5;
};

// How the record TTLs of a cached answer are written: a fresh answer has
// every TTL less the entry's age (floored at 0); a stale one (RFC 8767 4)
// has every record at the one stale TTL, whatever its cached TTL.
using AnswerTtl = dns::AnswerTtl;  // weir/dns/ttl.h

class CacheEntry;
struct CacheEntryDeleter {
  void operator()(CacheEntry* e) const;
};
using CacheEntryPtr = std::unique_ptr<CacheEntry, CacheEntryDeleter>;

// One cached answer. Immutable once built (the CLOCK reference bit aside).
// The record bytes are laid out to be copied right after the question of
// this qname: the answer section, then (negative entries) the authority
// section. When the answer is a CNAME chain followed by an A/AAAA RRset, the
// address records come last, all of equal size, each owner compressed to the
// chain's last name, so they can be written alone or in any order
// (WriteAnswer in swrr.h).
class CacheEntry {
 public:
  Partition partition() const { return partition_; }
  uint64_t hash() const { return hash_; }
  std::span<const uint8_t> qname() const { return {tail(), qname_len_}; }
  uint16_t qtype() const { return qtype_; }
  uint16_t qclass() const { return qclass_; }
  EntryKind kind() const { return static_cast<EntryKind>(kind_); }
  dns::Rcode rcode() const;
  // Header flags worth keeping from the upstream answer (AD).
  uint16_t flags() const { return meta().flags; }

  uint32_t insert_time() const { return insert_time_; }
  // The entry's lifetime: the smallest record TTL after clamping (for
  // negative entries min(SOA TTL, SOA MINIMUM)).
  uint32_t ttl() const { return ttl_; }
  uint32_t expires() const { return insert_time_ + ttl_; }
  uint32_t Age(uint32_t now) const { return now > insert_time_ ? now - insert_time_ : 0; }
  Freshness FreshnessAt(uint32_t now, uint32_t stale_window) const {
    if (now < expires()) return Freshness::kFresh;
    if (kind() != EntryKind::kServFail && now - expires() < stale_window) return Freshness::kStale;
    return Freshness::kMiss;
  }
  // How to write this entry's TTLs at `now`: aged by the real age while
  // fresh; once expired (a stale answer, RFC 8767 4) every record carries
  // `stale_ttl`.
  AnswerTtl ServeTtl(uint32_t now, uint32_t stale_ttl) const {
    const uint32_t age = Age(now);
    if (age < ttl_) return AnswerTtl::Aged(age);
    return AnswerTtl::Stale(stale_ttl);
  }

  // All records (answer, then authority), with TTLs as originally cached.
  std::span<const uint8_t> records() const { return {tail() + meta().records_off, meta().records_len}; }
  // The answer template: the response to a query of this key, as written
  // for AnswerMode::kAll, is this 12-byte header (ID 0; QR, RA and the
  // RCODE's low bits set, nothing else; QDCOUNT 1, ANCOUNT, NSCOUNT,
  // ARCOUNT 0), the query's own question, then records(), laid out as sent.
  // A hit copies them and patches what belongs to the query (WriteMessage
  // in swrr.h).
  const uint8_t* answer_header() const { return tail() + meta().records_off - dns::kHeaderSize; }
  // Where records() start in such a response: after the header and question.
  size_t head_bytes() const { return dns::kHeaderSize + qname_len_ + 4u; }
  uint16_t answer_count() const { return meta().answer_count; }
  uint16_t authority_count() const { return meta().authority_count; }
  // Offset of each record's TTL within records(), in record order.
  std::span<const uint16_t> ttl_offsets() const {
    return {reinterpret_cast<const uint16_t*>(tail() + meta().ttl_off), meta().ttl_count};
  }

  // ---- The weighted address RRset (address_count() == 0: none).
  uint8_t address_count() const { return meta().address_count; }
  uint8_t address_record_size() const { return meta().address_size; }  // 16 (A) or 28 (AAAA)
  // Bytes and records of the CNAME chain before the address records.
  uint16_t chain_bytes() const { return meta().chain_bytes; }
  uint8_t chain_count() const { return meta().chain_count; }
  // The address (the RDATA) of address record `i` in cached order. The
  // records are laid out as sent: owner pointer (2), type, class, TTL,
  // RDLENGTH (10), then the 4 or 16 address bytes.
  std::span<const uint8_t> address(size_t i) const {
    return records().subspan(chain_bytes() + i * address_record_size() + 12, address_record_size() - 12u);
  }
  // One weight (1..255) per address record in cached order; all 1 when the
  // upstream sent none or invalid ones.
  std::span<const uint8_t> weights() const { return {tail() + meta().weights_off, meta().address_count}; }
  // True when the upstream sent valid weights (the weight option is then
  // echoed with them; otherwise with length 0).
  bool has_weights() const { return meta().has_weights != 0; }
  // Identity of the (address, weight) set: equal across refreshes that bring
  // the same set, different when it changes.
  uint64_t fingerprint() const { return meta().fingerprint; }
  // Which life of its key this entry belongs to: a number the builder gives
  // every entry (unique in the process), which a Cache replaces with its
  // own when it caches the key and hands on to each refresh of it. Two
  // entries with one lineage are the same key, refreshed; a key evicted and
  // cached again has a new one. Workers key their SWRR state by it
  // (SwrrTable), so a pick compares one number, never a name.
  uint64_t lineage() const { return meta().lineage; }

  // ---- ECS metadata of the upstream answer (family 0: none).
  uint16_t ecs_family() const { return meta().ecs_family; }
  uint8_t ecs_source() const { return meta().ecs_source; }
  uint8_t ecs_scope() const { return meta().ecs_scope; }

  // Bytes this entry costs the cache's budget: its slab block once in a
  // Cache (the allocation, malloc rounding included, before that); index
  // slot excluded.
  size_t memory_bytes() const { return meta().alloc_bytes; }

  // Reads the header and the qname only: the entry's first cache line when
  // the qname has at most 32 bytes.
  bool Matches(const CacheKey& k, uint64_t h) const {
    return hash_ == h && partition_ == k.partition && qtype_ == k.qtype && qclass_ == k.qclass &&
           qname_len_ == k.qname.size() && SameBytes(tail(), k.qname.data(), qname_len_);
  }

  // Whether a reader found the entry since it was cached (or since the
  // CLOCK hand last passed it while the cache was over its budget).
  bool referenced() const { return referenced_.load(std::memory_order_relaxed) != 0; }
  // CLOCK reference bit: readers set it without RMW, only when clear.
  void Touch() const {
    if (!referenced_.load(std::memory_order_relaxed)) referenced_.store(1, std::memory_order_relaxed);
  }

 private:
  friend class CacheEntryBuilder;
  friend class Cache;
  friend struct CacheEntryDeleter;

  // Everything a lookup does not read, stored in the tail after the qname
  // so that the qname follows the header in the first cache line.
  struct Meta {
    uint64_t fingerprint;
    uint64_t lineage;
    uint32_t alloc_bytes;
    uint16_t records_off, records_len;  // tail offsets
    uint16_t chain_bytes;
    uint16_t answer_count, authority_count;
    uint16_t flags;
    uint16_t ecs_family;
    uint16_t ttl_off;  // tail offset of the TTL offsets (2-aligned)
    uint16_t weights_off;
    uint8_t ttl_count;
    uint8_t chain_count;
    uint8_t address_count;
    uint8_t address_size;
    uint8_t has_weights;
    uint8_t ecs_source, ecs_scope;
  };
  // Tail layout: qname | pad to 8 | Meta | TTL offsets | weights | answer
  // header | records.
  static constexpr size_t MetaOffset(size_t qname_len) { return (qname_len + 7) & ~size_t{7}; }
  // memcmp(a, b, n) == 0 for short strings without a library call: 8-byte
  // words, the last one overlapping the one before.
  static bool SameBytes(const uint8_t* a, const uint8_t* b, size_t n) {
    if (n < 8) return std::memcmp(a, b, n) == 0;
    uint64_t diff = 0;
    for (size_t i = 0; i + 8 < n; i += 8) diff |= Load64(a + i) ^ Load64(b + i);
    return (diff | (Load64(a + n - 8) ^ Load64(b + n - 8))) == 0;
  }
  static uint64_t Load64(const uint8_t* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }

  CacheEntry() = default;
  const uint8_t* tail() const { return reinterpret_cast<const uint8_t*>(this + 1); }
  uint8_t* tail() { return reinterpret_cast<uint8_t*>(this + 1); }
  const Meta& meta() const {
    return *std::launder(reinterpret_cast<const Meta*>(tail() + MetaOffset(qname_len_)));
  }
  Meta& meta() { return *std::launder(reinterpret_cast<Meta*>(tail() + MetaOffset(qname_len_))); }
  // Header + tail: the bytes a copy of this entry needs.
  size_t size() const { return sizeof(CacheEntry) + meta().records_off + meta().records_len; }

  // 32 bytes, read by every lookup; the qname follows.
  uint64_t hash_ = 0;
  Partition partition_ = 0;
  uint32_t insert_time_ = 0;
  uint32_t ttl_ = 0;
  uint16_t qtype_ = 0, qclass_ = 0;
  uint8_t qname_len_ = 0;
  uint8_t kind_ = 0;
  mutable std::atomic<uint8_t> referenced_{0};
};

// Builds a CacheEntry from the records of an upstream answer (control plane
// speed: it runs on cache fills, not on hits). Names are canonical keys.
class CacheEntryBuilder {
 public:
  explicit CacheEntryBuilder(const CacheKey& key);

  // Answer section, in chain order: qname CNAME t1, t1 CNAME t2, ...
  CacheEntryBuilder& AddCname(std::span<const uint8_t> owner, std::span<const uint8_t> target, uint32_t ttl);
  // An A/AAAA record of the qtype, owned by the chain's last name.
  CacheEntryBuilder& AddAddress(std::span<const uint8_t> owner, std::span<const uint8_t> rdata, uint32_t ttl);
  // Any other answer record (MX, TXT, ...). An entry with such records is
  // not weighted and is always answered as cached.
  CacheEntryBuilder& AddAnswer(std::span<const uint8_t> owner, uint16_t type, uint16_t klass, uint32_t ttl,
                               std::span<const uint8_t> rdata);
  // Authority section of a negative answer (the SOA). Ignored for positive
  // entries, which cache the answer section only.
  CacheEntryBuilder& AddAuthority(std::span<const uint8_t> owner, uint16_t type, uint16_t klass, uint32_t ttl,
                                  std::span<const uint8_t> rdata);
  // Weights for the address records, in the order they were added (as
  // dns::DecodeWeights returns them). Invalid or absent: equal weights.
  CacheEntryBuilder& SetWeights(std::span<const uint8_t> weights);
  CacheEntryBuilder& SetEcs(uint16_t family, uint8_t source, uint8_t scope);
  CacheEntryBuilder& SetFlags(uint16_t flags);

  // Address records are stored sorted by RDATA (duplicates dropped) so the
  // same set gets the same fingerprint in whatever order upstream sent it.
  absl::StatusOr<CacheEntryPtr> Build(EntryKind kind, uint32_t now, const CacheLimits& limits = {}) const;

 private:
  struct Rec {
    int section;  // 0 answer, 1 authority
    std::vector<uint8_t> owner;
    uint16_t type, klass;
    uint32_t ttl;
    std::vector<uint8_t> rdata;
  };
  CacheKey key_;
  std::vector<uint8_t> qname_;
  std::vector<Rec> chain_, addresses_, others_, authority_;
  std::vector<uint8_t> weights_;
  uint16_t ecs_family_ = 0;
  uint8_t ecs_source_ = 0, ecs_scope_ = 0;
  uint16_t flags_ = 0;
  absl::Status error_;
};

struct CacheOptions {
  size_t byte_budget = size_t{256} << 20;  // entry blocks + index
  uint32_t stale_window = 86400;           // RFC 8767: serve stale up to a day
  size_t initial_slots = 1024;             // rounded to initial_slots / 8 buckets (a power of two)
};

struct CacheStats {
  uint64_t entries = 0;
  uint64_t bytes = 0;  // entry blocks + index: what the budget bounds
  // Memory held for entries: slab chunks (free and partly used blocks
  // included) and big entries. With the index, at most 1.25x the budget.
  uint64_t slab_bytes = 0;
  uint64_t index_slots = 0;
  uint64_t index_bytes = 0;
  uint64_t inserts = 0;
  uint64_t replaces = 0;
  uint64_t evictions = 0;          // CLOCK, over budget
  uint64_t expired_evictions = 0;  // past the stale window
  uint64_t busy = 0;               // TryInsert found the writer lock taken
  uint64_t reclaiming = 0;         // inserts refused while retired blocks awaited their grace period
  uint64_t retired_bytes = 0;      // blocks retired and not yet back in the slab
  uint64_t rehashes = 0;
  uint64_t flushed = 0;          // removed by EraseMatching (an operator's flush)
  uint64_t slab_drains = 0;      // chunks emptied to keep the slab's footprint under its cap
  uint64_t drain_evictions = 0;  // live entries those drains evicted (also in evictions)
};

// One partition group's share of the cache (Cache::partition_stats()).
struct PartitionCacheStats {
  uint64_t entries = 0;
  uint64_t bytes = 0;  // entry blocks (the index is the cache's, not a partition's)
  uint64_t inserts = 0;
  uint64_t evictions = 0;          // CLOCK, over budget
  uint64_t expired_evictions = 0;  // past the stale window
  uint64_t flushed = 0;            // removed by an operator's flush
};

// The group a partition's statistics are kept in: 0 the common partition,
// 1 every subnet partition together, 2 every adaptive-level answer
// together, kCityStatsGroup + city id for a city partition.
inline constexpr size_t kSubnetStatsGroup = 1;
inline constexpr size_t kAdaptiveStatsGroup = 2;
inline constexpr size_t kCityStatsGroup = 3;
inline size_t PartitionStatsGroup(Partition p) {
  switch (LevelOf(p)) {
    case CacheLevel::kGlobal:
      return 0;
    case CacheLevel::kSubnet:
      return kSubnetStatsGroup;
    case CacheLevel::kAdaptive:
      return kAdaptiveStatsGroup;
    case CacheLevel::kCity:
      break;
  }
  return kCityStatsGroup + size_t{CityOf(p)};
}

class EntrySlab;

class Cache {
 public:
  Cache(const CacheOptions& options, const common::Clock& clock);
  // No reader may be using the cache any more.
  ~Cache();
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;

  // ---- Reader side (see the threading contract above).
  // The entry for `key` if cached and not past the stale window, with its
  // freshness at `now` (the burst's clock reading). `hash` = HashCacheKey(key).
  const CacheEntry* Find(const CacheKey& key, uint64_t hash, uint32_t now, Freshness* freshness) const {
    return FindIn(index_.load(std::memory_order_acquire), key, hash, now, freshness);
  }
  const CacheEntry* Find(const CacheKey& key, uint32_t now, Freshness* freshness) const {
    return Find(key, HashCacheKey(key), now, freshness);
  }
  // Find() for the cache's own upkeep (the forwarder's active refresh): the
  // entry is not marked as read (CacheEntry::referenced()).
  const CacheEntry* Peek(const CacheKey& key, uint32_t now, Freshness* freshness) const {
    return FindIn</*kMark=*/false>(index_.load(std::memory_order_acquire), key, HashCacheKey(key), now,
                                   freshness);
  }
  // Looks up a burst (the fast path's 32 queries) in three passes so the
  // cache misses of the whole burst overlap instead of queueing one after
  // another: prefetch every home bucket; find each tag's candidate entry and
  // prefetch the lines its key compare reads; compare. Same results as Find().
  void FindBurst(const CacheKey* keys, const uint64_t* hashes, size_t n, uint32_t now, const CacheEntry** out,
                 Freshness* freshness) const {
    const Index* idx = index_.load(std::memory_order_acquire);
    for (size_t base = 0; base < n; base += kMaxBurst) {
      const size_t m = n - base < kMaxBurst ? n - base : kMaxBurst;
      FindBurstIn(idx, keys + base, hashes + base, m, now, out + base, freshness + base);
    }
  }
  // Prefetches the index bucket of `hash`.
  void Prefetch(uint64_t hash) const {
    const Index* idx = index_.load(std::memory_order_acquire);
    __builtin_prefetch(&idx->buckets[hash & idx->mask]);
  }

  // ---- Writer side.
  // kReclaiming: the blocks retired by evictions and refreshes that still
  // wait for their RCU grace period already take an eighth of the budget;
  // the entry is not cached until they are back (the bound on memory must
  // not depend on how fast readers pass quiescent states).
  enum class InsertResult : uint8_t { kInserted, kReplaced, kBusy, kTooLarge, kReclaiming };
  InsertResult Insert(CacheEntryPtr entry);
  InsertResult TryInsert(CacheEntryPtr entry);
  bool Erase(const CacheKey& key);
  // Removes every entry `match` accepts (an operator's flush); returns how
  // many. The index is walked in steps of `step` slots, the writer lock
  // taken for one step at a time, so inserts wait at most one step and
  // readers not at all (removed entries are freed after their grace
  // period). Counted as flushed, not evicted. `match` runs under the lock:
  // it must not call back into the cache.
  size_t EraseMatching(const std::function<bool(const CacheEntry&)>& match, size_t step = 4096);
  // Calls `visit` for entries, in index order, until it returns false
  // (a dump). Same stepping as EraseMatching; an entry moved by a rehash
  // during the walk may be visited twice or not at all. The entry is valid
  // only during the call.
  void ForEach(const std::function<bool(const CacheEntry&)>& visit, size_t step = 4096) const;
  // Evicts entries past the stale window, visiting at most `max_slots`
  // slots from where the last call stopped; flushes pending retirements.
  void Maintain(size_t max_slots = 4096);
  // Waits until everything retired so far has been freed (tests, shutdown).
  void Barrier();

  CacheStats stats() const;
  // Indexed by PartitionStatsGroup(); groups never used are all zero (the
  // vector ends at the last one used).
  std::vector<PartitionCacheStats> partition_stats() const;
  const CacheOptions& options() const { return options_; }

 private:
  static constexpr size_t kMaxBurst = 32;
  static constexpr uint64_t kEmpty = 0;
  static constexpr uint64_t kPtrMask = (uint64_t{1} << 48) - 1;
  static constexpr size_t kBucketSlots = 7;
  // One cache line.
  struct alignas(64) Bucket {
    // Byte s < 7: Tag8() of slot s's entry, 0 when the slot is free.
    // Byte 7: how many entries stored past this bucket have it (or an
    // earlier bucket of their probe sequence) as home, saturating at 255;
    // a lookup reads on only while it is not zero.
    std::atomic<uint64_t> ctrl;
    // kEmpty or SlotTag() << 48 | entry pointer.
    std::atomic<uint64_t> slots[kBucketSlots];
  };
  static_assert(sizeof(Bucket) == 64);
  struct Index {
    size_t mask;  // bucket count - 1
    Bucket* buckets;
    size_t bucket_count() const { return mask + 1; }
  };
  // Slots are numbered bucket * 8 + slot; number 7 of each bucket is no
  // slot.
  static constexpr size_t kPositionsPerBucket = 8;
  struct RetiredBatch;

  static Index* NewIndex(size_t buckets);
  static void FreeIndex(Index* idx);
  static const CacheEntry* EntryOf(uint64_t v) { return reinterpret_cast<const CacheEntry*>(v & kPtrMask); }
  // Three independent parts of the hash: the home bucket (low bits), the
  // control byte (top 8 bits, never 0), the slot tag (bits 32..47).
  static uint64_t Tag8(uint64_t hash) {
    const uint64_t t = hash >> 56;
    return t + (t == 0);
  }
  static uint64_t SlotTag(uint64_t hash) { return (hash >> 32) & 0xffff; }
  static uint64_t SlotValue(const CacheEntry* e) {
    return SlotTag(e->hash()) << 48 | reinterpret_cast<uintptr_t>(e);
  }
  static constexpr uint64_t kLowBits = 0x0101010101010101ULL;
  static constexpr uint64_t kHighBits = 0x0080808080808080ULL;  // slots' bytes only
  // Bit 8s+7 set for each slot s whose control byte is Tag8 (`pattern` =
  // Tag8 * kLowBits): exact zero-byte test of ctrl ^ pattern, no carries.
  static uint64_t MatchTag(uint64_t ctrl, uint64_t pattern) {
    const uint64_t x = ctrl ^ pattern;
    constexpr uint64_t kLow7 = 0x007f7f7f7f7f7f7fULL;
    return ~(((x & kLow7) + kLow7) | x) & kHighBits;
  }
  static size_t Overflow(uint64_t ctrl) { return ctrl >> 56; }

  // `kMark`: a reader's find, which sets the entry's CLOCK mark (Peek's does not).
  template <bool kMark = true>
  const CacheEntry* Accept(const CacheEntry* e, uint32_t now, Freshness* freshness) const {
    const Freshness f = e->FreshnessAt(now, stale_window_);
    *freshness = f;
    if (f == Freshness::kMiss) return nullptr;
    if constexpr (kMark) e->Touch();
    return e;
  }
  // The slot value of the entry for `key` (kEmpty when there is none) and,
  // in `*position`, where it sits. Readers probe with acquire loads, the
  // writer (under mu_) with relaxed ones; both walk this one probe sequence,
  // the one PlaceLocked fills.
  template <std::memory_order kOrder>
  [[gnu::always_inline]] uint64_t Probe(const Index* idx, const CacheKey& key, uint64_t hash,
                                        size_t* position) const {
    const uint64_t pattern = Tag8(hash) * kLowBits, tag = SlotTag(hash);
    size_t b = hash & idx->mask;
    for (size_t visited = 0; visited <= idx->mask; ++visited, b = (b + 1) & idx->mask) {
      const Bucket& bucket = idx->buckets[b];
      const uint64_t ctrl = bucket.ctrl.load(kOrder);
      for (uint64_t m = MatchTag(ctrl, pattern); m != 0; m &= m - 1) {
        const size_t s = __builtin_ctzll(m) / 8;
        const uint64_t v = bucket.slots[s].load(kOrder);
        if ((v >> 48) != tag || v == kEmpty) continue;
        if (EntryOf(v)->Matches(key, hash)) {
          *position = b * kPositionsPerBucket + s;
          return v;
        }
      }
      if (Overflow(ctrl) == 0) break;
    }
    *position = SIZE_MAX;
    return kEmpty;
  }
  template <bool kMark = true>
  const CacheEntry* FindIn(const Index* idx, const CacheKey& key, uint64_t hash, uint32_t now,
                           Freshness* freshness) const {
    size_t position;
    const uint64_t v = Probe<std::memory_order_acquire>(idx, key, hash, &position);
    if (v != kEmpty) return Accept<kMark>(EntryOf(v), now, freshness);
    *freshness = Freshness::kMiss;
    return nullptr;
  }
  // The first entry of `bucket` whose tags (24 bits) match `hash`, almost
  // always the key's entry, with the lines its key compare reads
  // prefetched; null when none. `*ctrl` = the bucket's control word.
  static const CacheEntry* Candidate(const Bucket& bucket, uint64_t hash, size_t qname_len, uint64_t* ctrl) {
    *ctrl = bucket.ctrl.load(std::memory_order_acquire);
    const uint64_t tag = SlotTag(hash);
    for (uint64_t m = MatchTag(*ctrl, Tag8(hash) * kLowBits); m != 0; m &= m - 1) {
      const uint64_t v = bucket.slots[__builtin_ctzll(m) / 8].load(std::memory_order_acquire);
      if ((v >> 48) != tag || v == kEmpty) continue;
      const CacheEntry* e = EntryOf(v);
      const uintptr_t first = reinterpret_cast<uintptr_t>(e);
      const uintptr_t last = first + sizeof(CacheEntry) + qname_len - 1;
      __builtin_prefetch(e);
      if ((first ^ last) >= 64) __builtin_prefetch(reinterpret_cast<const void*>(last));
      return e;
    }
    return nullptr;
  }
  void FindBurstIn(const Index* idx, const CacheKey* keys, const uint64_t* hashes, size_t n, uint32_t now,
                   const CacheEntry** out, Freshness* freshness) const {
    const size_t mask = idx->mask;
    const Bucket* const buckets = idx->buckets;
    for (size_t i = 0; i < n; ++i) __builtin_prefetch(&buckets[hashes[i] & mask]);
    const CacheEntry* candidate[kMaxBurst];
    uint8_t displaced[kMaxBurst];  // keys that may live in the next bucket
    size_t n_displaced = 0;
    for (size_t i = 0; i < n; ++i) {
      const size_t b = hashes[i] & mask;
      uint64_t ctrl;
      candidate[i] = Candidate(buckets[b], hashes[i], keys[i].qname.size(), &ctrl);
      if (candidate[i] == nullptr && Overflow(ctrl) != 0) {
        __builtin_prefetch(&buckets[(b + 1) & mask]);
        displaced[n_displaced++] = static_cast<uint8_t>(i);
      }
    }
    for (size_t j = 0; j < n_displaced; ++j) {
      const size_t i = displaced[j];
      uint64_t ctrl;
      candidate[i] = Candidate(buckets[(hashes[i] + 1) & mask], hashes[i], keys[i].qname.size(), &ctrl);
    }
    for (size_t i = 0; i < n; ++i) {
      const CacheEntry* e = candidate[i];
      if (e != nullptr && e->Matches(keys[i], hashes[i])) {
        out[i] = Accept(e, now, &freshness[i]);
      } else {
        // Another entry with the same tags, or the key lives further on, or
        // it is not cached: the full probe decides.
        out[i] = FindIn(idx, keys[i], hashes[i], now, &freshness[i]);
      }
    }
  }

  InsertResult InsertLocked(CacheEntryPtr entry);
  // Position of the entry matching `key`, or SIZE_MAX.
  size_t FindPositionLocked(const Index* idx, const CacheKey& key, uint64_t hash) const;
  // Stores `v` (an entry with hash `hash`) in the first free slot of its
  // probe sequence, counting the buckets it passes as overflowed.
  static void PlaceLocked(Index* idx, uint64_t hash, uint64_t v);
  // Why an entry leaves: what it is counted as.
  enum class Removal : uint8_t { kBudget, kExpired, kErased, kFlushed };
  void EvictLocked(size_t position, Removal why);
  // The slot value at `position` (kEmpty for the positions that are no slot).
  static uint64_t SlotAt(const Index* idx, size_t position) {
    if (position % kPositionsPerBucket == kBucketSlots) return kEmpty;
    return idx->buckets[position / kPositionsPerBucket].slots[position % kPositionsPerBucket].load(
        std::memory_order_relaxed);
  }
  // One step of an operator's walk (EraseMatching, ForEach): fn(position,
  // value) for each occupied slot of positions [*pos, *pos + step), *pos
  // advanced; stops early when fn returns false. True when the walk is over
  // (the index ended, or fn stopped it).
  template <typename Fn>
  bool WalkStepLocked(const Index* idx, size_t* pos, size_t step, Fn&& fn) const {
    const size_t positions = idx->bucket_count() * kPositionsPerBucket;
    const size_t end = std::min(positions, *pos + std::max<size_t>(step, 1));
    for (; *pos < end; ++*pos) {
      const uint64_t v = SlotAt(idx, *pos);
      if (v != kEmpty && !fn(*pos, v)) return true;
    }
    return *pos >= positions;
  }
  void EvictToBudgetLocked(uint32_t now);
  void MaybeRehashLocked();
  void DrainFreedLocked();
  std::unique_ptr<RetiredBatch> TakeRetiredLocked(bool force);
  void FlushRetired(std::unique_ptr<RetiredBatch> batch);

  const CacheOptions options_;
  const uint32_t stale_window_;
  const common::Clock& clock_;
  std::atomic<Index*> index_;

  // Writer state, under mu_.
  mutable std::mutex mu_;
  std::unique_ptr<EntrySlab> slab_;
  size_t used_ = 0;
  size_t entry_bytes_ = 0;
  // Blocks retired (evicted or replaced entries) that are not back in the
  // slab yet: at most RetiredCap(), so the slab stays within budget + 1/8.
  size_t retired_bytes_ = 0;
  size_t RetiredCap() const { return options_.byte_budget / 8; }
  // Whether the slab can give a block of `block` bytes within its cap,
  // draining chunks when not (EntrySlab::Reserve).
  bool ReserveLocked(size_t block);
  size_t hand_ = 0, sweep_ = 0;  // positions
  std::unique_ptr<RetiredBatch> retired_;
  CacheStats stats_;
  std::vector<PartitionCacheStats> partition_stats_;
  PartitionCacheStats& GroupLocked(Partition p) {
    const size_t g = PartitionStatsGroup(p);
    if (g >= partition_stats_.size()) partition_stats_.resize(g + 1);
    return partition_stats_[g];
  }
  std::atomic<uint64_t> busy_{0};
  // Batches whose grace period has passed, pushed by the RCU callback and
  // returned to the slab by the writer (a lock-free stack: the callback
  // never waits for the writer lock).
  std::atomic<RetiredBatch*> freed_{nullptr};
};

}  // namespace weir::partitions
