// The answer cache (DESIGN section 6): key = (partition, canonical qname,
// qtype, qclass), value = an immutable CacheEntry holding the answer as
// pre-encoded records, ready to be copied after the question with TTLs aged.
//
// Index: open addressing (linear probing) over 64-bit slots, each holding a
// 16-bit hash tag and the entry pointer, published under RCU (QSBR). Entries
// never change once published; a refresh publishes a new entry in the same
// slot and retires the old one. Retired entries and replaced index tables are
// freed after a grace period (urcu call_rcu, or synchronize_rcu when the
// writer is not a registered thread).
//
// Eviction: CLOCK over the slot array, driven by the writer whenever the
// byte budget is exceeded. Readers mark an entry referenced with a relaxed
// load + store (no read-modify-write, and no store at all once set). Entries
// expired for longer than the serve-stale window are evicted first.
//
// Threading contract:
// * Find()/Prefetch(): any number of reader threads, each holding an
//   RcuThread (rcu.h) and online. The returned pointer is valid until the
//   reader's next quiescent state. Lock-free, no atomic RMW, no allocation.
// * Insert()/Erase()/Maintain(): serialised by an internal mutex that
//   readers never touch. TryInsert() never blocks (returns kBusy instead), so
//   a data-path worker can insert without waiting. A writer that is itself a
//   registered RCU thread must announce quiescent states like any reader.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "weir/dns/wire.h"
#include "weir/partitions/clock.h"
#include "weir/partitions/partition.h"

namespace weir::partitions {

struct CacheKey {
  Partition partition = kCommonPartition;
  std::span<const uint8_t> qname;  // canonical key (dns::NameKey::span())
  uint16_t qtype = 0;
  uint16_t qclass = dns::klass::kIn;
};

// 64-bit hash of a key; also identifies the RRset for per-worker SWRR state.
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
  if (n > 0) std::memcpy(&tail, p, n);
  h = (h ^ tail) * kMul;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 32;
  return h;
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
  uint32_t max_negative_ttl = 3600;  // RFC 2308 section 5 suggests 1-3 hours
  uint32_t servfail_ttl = 5;
};

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
  uint16_t flags() const { return flags_; }

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
  // The age to write TTLs with: the real age while fresh; for stale answers
  // the age that leaves `stale_ttl` seconds (RFC 8767 suggests 30) on the
  // shortest record.
  uint32_t ServeAge(uint32_t now, uint32_t stale_ttl = 30) const {
    const uint32_t age = Age(now);
    if (age < ttl_) return age;
    return ttl_ > stale_ttl ? ttl_ - stale_ttl : 0;
  }

  // All records (answer, then authority), with TTLs as originally cached.
  std::span<const uint8_t> records() const { return {tail() + records_off_, records_len_}; }
  uint16_t answer_count() const { return answer_count_; }
  uint16_t authority_count() const { return authority_count_; }
  // Offset of each record's TTL within records(), in record order.
  std::span<const uint16_t> ttl_offsets() const {
    return {reinterpret_cast<const uint16_t*>(tail() + ttl_off_), ttl_count_};
  }

  // ---- The weighted address RRset (address_count() == 0: none).
  uint8_t address_count() const { return address_count_; }
  uint8_t address_record_size() const { return address_size_; }  // 16 (A) or 28 (AAAA)
  // Bytes and records of the CNAME chain before the address records.
  uint16_t chain_bytes() const { return chain_bytes_; }
  uint8_t chain_count() const { return chain_count_; }
  // One weight (1..255) per address record in cached order; all 1 when the
  // upstream sent none or invalid ones.
  std::span<const uint8_t> weights() const { return {tail() + weights_off_, address_count_}; }
  // True when the upstream sent valid weights (the weight option is then
  // echoed with them; otherwise with length 0).
  bool has_weights() const { return has_weights_ != 0; }
  // Identity of the (address, weight) set: equal across refreshes that bring
  // the same set, different when it changes.
  uint64_t fingerprint() const { return fingerprint_; }

  // ---- ECS metadata of the upstream answer (family 0: none).
  uint16_t ecs_family() const { return ecs_family_; }
  uint8_t ecs_source() const { return ecs_source_; }
  uint8_t ecs_scope() const { return ecs_scope_; }

  // Bytes this entry costs the cache's budget (allocation, malloc rounding
  // included; index slot excluded).
  size_t memory_bytes() const { return alloc_bytes_; }

  bool Matches(const CacheKey& k, uint64_t h) const {
    return hash_ == h && partition_ == k.partition && qtype_ == k.qtype && qclass_ == k.qclass &&
           qname_len_ == k.qname.size() && std::memcmp(tail(), k.qname.data(), qname_len_) == 0;
  }

  // CLOCK reference bit: readers set it without RMW, only when clear.
  void Touch() const {
    if (!referenced_.load(std::memory_order_relaxed)) referenced_.store(1, std::memory_order_relaxed);
  }

 private:
  friend class CacheEntryBuilder;
  friend class Cache;
  friend struct CacheEntryDeleter;
  CacheEntry() = default;
  const uint8_t* tail() const { return reinterpret_cast<const uint8_t*>(this + 1); }
  uint8_t* tail() { return reinterpret_cast<uint8_t*>(this + 1); }

  Partition partition_ = 0;
  uint64_t hash_ = 0;
  uint64_t fingerprint_ = 0;
  uint32_t insert_time_ = 0;
  uint32_t ttl_ = 0;
  uint32_t alloc_bytes_ = 0;
  uint16_t qtype_ = 0, qclass_ = 0;
  uint16_t records_off_ = 0, records_len_ = 0;
  uint16_t chain_bytes_ = 0;
  uint16_t answer_count_ = 0, authority_count_ = 0;
  uint16_t flags_ = 0;
  uint16_t ecs_family_ = 0;
  uint16_t ttl_off_ = 0;  // tail offset of the TTL offsets (after the qname, 2-aligned)
  uint16_t weights_off_ = 0;
  uint8_t qname_len_ = 0;
  uint8_t ttl_count_ = 0;
  uint8_t chain_count_ = 0;
  uint8_t address_count_ = 0;
  uint8_t address_size_ = 0;
  uint8_t kind_ = 0;
  uint8_t has_weights_ = 0;
  uint8_t ecs_source_ = 0, ecs_scope_ = 0;
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
  size_t byte_budget = size_t{256} << 20;  // entries + index
  uint32_t stale_window = 86400;           // RFC 8767: serve stale up to a day
  size_t initial_slots = 1024;
};

struct CacheStats {
  uint64_t entries = 0;
  uint64_t bytes = 0;  // entries + index
  uint64_t index_slots = 0;
  uint64_t inserts = 0;
  uint64_t replaces = 0;
  uint64_t evictions = 0;          // CLOCK, over budget
  uint64_t expired_evictions = 0;  // past the stale window
  uint64_t busy = 0;               // TryInsert found the writer lock taken
  uint64_t rehashes = 0;
};

class Cache {
 public:
  Cache(const CacheOptions& options, const Clock& clock);
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
  // Looks up a burst (the fast path's 32 queries): first prefetches every
  // home slot, then every candidate entry, then compares, so the cache
  // misses of the whole burst overlap instead of queueing one after another.
  void FindBurst(const CacheKey* keys, const uint64_t* hashes, size_t n, uint32_t now, const CacheEntry** out,
                 Freshness* freshness) const {
    const Index* idx = index_.load(std::memory_order_acquire);
    for (size_t i = 0; i < n; ++i) __builtin_prefetch(&idx->slots[hashes[i] & idx->mask]);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t v = idx->slots[hashes[i] & idx->mask].load(std::memory_order_acquire);
      if ((v >> 48) == (hashes[i] >> 48) && v > kTombstone)
        __builtin_prefetch(reinterpret_cast<const void*>(v & kPtrMask));
    }
    for (size_t i = 0; i < n; ++i) out[i] = FindIn(idx, keys[i], hashes[i], now, &freshness[i]);
  }
  // Prefetches the index slot of `hash`.
  void Prefetch(uint64_t hash) const {
    const Index* idx = index_.load(std::memory_order_acquire);
    __builtin_prefetch(&idx->slots[hash & idx->mask]);
  }

  // ---- Writer side.
  enum class InsertResult : uint8_t { kInserted, kReplaced, kBusy, kTooLarge };
  InsertResult Insert(CacheEntryPtr entry);
  InsertResult TryInsert(CacheEntryPtr entry);
  bool Erase(const CacheKey& key);
  // Evicts entries past the stale window, visiting at most `max_slots`
  // slots from where the last call stopped; flushes pending retirements.
  void Maintain(size_t max_slots = 4096);
  // Waits until everything retired so far has been freed (tests, shutdown).
  void Barrier();

  CacheStats stats() const;
  const CacheOptions& options() const { return options_; }

 private:
  static constexpr uint64_t kEmpty = 0;
  static constexpr uint64_t kTombstone = 1;
  static constexpr uint64_t kPtrMask = (uint64_t{1} << 48) - 1;
  struct Index {
    size_t mask;
    std::atomic<uint64_t>* slots;
    size_t capacity() const { return mask + 1; }
  };
  static Index* NewIndex(size_t capacity);
  const CacheEntry* FindIn(const Index* idx, const CacheKey& key, uint64_t hash, uint32_t now,
                           Freshness* freshness) const {
    const uint16_t tag = static_cast<uint16_t>(hash >> 48);
    for (size_t i = hash & idx->mask;; i = (i + 1) & idx->mask) {
      const uint64_t v = idx->slots[i].load(std::memory_order_acquire);
      if (v == kEmpty) break;
      if ((v >> 48) != tag || v == kTombstone) continue;
      const CacheEntry* e = reinterpret_cast<const CacheEntry*>(v & kPtrMask);
      if (!e->Matches(key, hash)) continue;
      const Freshness f = e->FreshnessAt(now, stale_window_);
      *freshness = f;
      if (f == Freshness::kMiss) return nullptr;
      e->Touch();
      return e;
    }
    *freshness = Freshness::kMiss;
    return nullptr;
  }
  static void FreeIndex(void* p);
  static uint64_t SlotValue(const CacheEntry* e) {
    return (e->hash() >> 48 << 48) | reinterpret_cast<uintptr_t>(e);
  }

  InsertResult InsertLocked(CacheEntryPtr entry);
  void EvictLocked(size_t slot, bool expired);
  void EvictToBudgetLocked(uint32_t now);
  void MaybeRehashLocked();
  void Retire(void* p, void (*fn)(void*));
  std::vector<std::pair<void*, void (*)(void*)>> TakeRetiredLocked(bool force);
  static void FlushRetired(std::vector<std::pair<void*, void (*)(void*)>> batch);

  const CacheOptions options_;
  const uint32_t stale_window_;
  const Clock& clock_;
  std::atomic<Index*> index_;

  // Writer state, under mu_.
  mutable std::mutex mu_;
  size_t used_ = 0, tombstones_ = 0;
  size_t entry_bytes_ = 0;
  size_t hand_ = 0, sweep_ = 0;
  std::vector<std::pair<void*, void (*)(void*)>> retired_;
  CacheStats stats_;
  std::atomic<uint64_t> busy_{0};
};

}  // namespace weir::partitions
