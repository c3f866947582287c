#include "weir/partitions/cache.h"

#include <malloc.h>
#include <sys/mman.h>

#include <cstdlib>

#include <algorithm>
#include <new>

#include "text_util.h"
#include "weir/dns/writer.h"
#include "weir/partitions/rcu.h"

namespace weir::partitions {
namespace {

constexpr size_t kRetireBatch = 512;
constexpr size_t kMaxRecordsBytes = 16000;  // compression pointers need < 0x4000

uint64_t Fingerprint(const std::vector<std::pair<std::vector<uint8_t>, uint8_t>>& set, uint16_t type) {
  uint64_t h = 0x84222325cbf29ce4ULL ^ type;
  for (const auto& [rdata, w] : set) {
    for (uint8_t b : rdata) h = (h ^ b) * 0x100000001b3ULL;
    h = (h ^ (0x100u | w)) * 0x100000001b3ULL;
  }
  return h;
}

// SOA RDATA ends with MINIMUM; RFC 2308 section 5: the negative TTL is
// min(SOA TTL, MINIMUM).
bool SoaMinimum(std::span<const uint8_t> rdata, uint32_t* minimum) {
  if (rdata.size() < 22) return false;
  *minimum = dns::Load32(rdata.data() + rdata.size() - 4);
  return true;
}

}  // namespace

// ---------------------------------------------------------------- entry

void CacheEntryDeleter::operator()(CacheEntry* e) const {
  e->~CacheEntry();
  ::operator delete(static_cast<void*>(e));
}

dns::Rcode CacheEntry::rcode() const {
  switch (kind()) {
    case EntryKind::kNxDomain:
      return dns::Rcode::kNxDomain;
    case EntryKind::kServFail:
      return dns::Rcode::kServFail;
    default:
      return dns::Rcode::kNoError;
  }
}

CacheEntryBuilder::CacheEntryBuilder(const CacheKey& key)
    : key_(key), qname_(key.qname.begin(), key.qname.end()) {
  key_.qname = qname_;
  if (qname_.empty() || qname_.size() > dns::kMaxNameWire) error_ = absl::InvalidArgumentError("bad qname");
}

CacheEntryBuilder& CacheEntryBuilder::AddCname(std::span<const uint8_t> owner,
                                               std::span<const uint8_t> target, uint32_t ttl) {
  if (!addresses_.empty() || !others_.empty()) {
    error_ = absl::InvalidArgumentError("CNAME after the answer RRset");
  }
  std::span<const uint8_t> expect = chain_.empty() ? std::span<const uint8_t>(qname_) : chain_.back().rdata;
  if (!std::equal(owner.begin(), owner.end(), expect.begin(), expect.end())) {
    error_ = absl::InvalidArgumentError("CNAME chain is not contiguous");
  }
  chain_.push_back({0,
                    {owner.begin(), owner.end()},
                    dns::type::kCname,
                    dns::klass::kIn,
                    ttl,
                    {target.begin(), target.end()}});
  return *this;
}

CacheEntryBuilder& CacheEntryBuilder::AddAddress(std::span<const uint8_t> owner,
                                                 std::span<const uint8_t> rdata, uint32_t ttl) {
  const size_t want = key_.qtype == dns::type::kA ? 4 : key_.qtype == dns::type::kAaaa ? 16 : 0;
  if (want == 0 || rdata.size() != want) {
    error_ = absl::InvalidArgumentError("address record does not match the qtype");
  }
  std::span<const uint8_t> expect = chain_.empty() ? std::span<const uint8_t>(qname_) : chain_.back().rdata;
  if (!std::equal(owner.begin(), owner.end(), expect.begin(), expect.end())) {
    error_ = absl::InvalidArgumentError("address record not owned by the chain's last name");
  }
  addresses_.push_back(
      {0, {owner.begin(), owner.end()}, key_.qtype, key_.qclass, ttl, {rdata.begin(), rdata.end()}});
  return *this;
}

CacheEntryBuilder& CacheEntryBuilder::AddAnswer(std::span<const uint8_t> owner, uint16_t type, uint16_t klass,
                                                uint32_t ttl, std::span<const uint8_t> rdata) {
  others_.push_back({0, {owner.begin(), owner.end()}, type, klass, ttl, {rdata.begin(), rdata.end()}});
  return *this;
}

CacheEntryBuilder& CacheEntryBuilder::AddAuthority(std::span<const uint8_t> owner, uint16_t type,
                                                   uint16_t klass, uint32_t ttl,
                                                   std::span<const uint8_t> rdata) {
  authority_.push_back({1, {owner.begin(), owner.end()}, type, klass, ttl, {rdata.begin(), rdata.end()}});
  return *this;
}

CacheEntryBuilder& CacheEntryBuilder::SetWeights(std::span<const uint8_t> weights) {
  weights_.assign(weights.begin(), weights.end());
  return *this;
}

CacheEntryBuilder& CacheEntryBuilder::SetEcs(uint16_t family, uint8_t source, uint8_t scope) {
  ecs_family_ = family;
  ecs_source_ = source;
  ecs_scope_ = scope;
  return *this;
}

CacheEntryBuilder& CacheEntryBuilder::SetFlags(uint16_t flags) {
  flags_ = flags;
  return *this;
}

absl::StatusOr<CacheEntryPtr> CacheEntryBuilder::Build(EntryKind kind, uint32_t now,
                                                       const CacheLimits& limits) const {
  if (!error_.ok()) return error_;
  const bool negative = kind == EntryKind::kNxDomain || kind == EntryKind::kNoData;
  auto clamp = [&](uint32_t ttl) {
    return std::clamp(ttl, limits.min_ttl, std::max(limits.min_ttl, limits.max_ttl));
  };

  uint8_t records_buf[kMaxRecordsBytes + 1024];  // no zeroing: fills are frequent
  uint8_t* const records = records_buf;
  std::vector<uint16_t> ttl_offsets;
  uint32_t entry_ttl = UINT32_MAX;
  uint16_t answer_count = 0, authority_count = 0, chain_bytes = 0;
  uint8_t chain_count = 0, address_count = 0, address_size = 0;
  std::vector<uint8_t> weights;
  bool has_weights = false;
  uint64_t fingerprint = 0;
  size_t len = 0;

  if (kind == EntryKind::kServFail) {
    entry_ttl = limits.servfail_ttl;
  } else if (kind == EntryKind::kPositive && others_.empty() && !addresses_.empty()) {
    // The weighted layout, encoded here so the address records' owners are
    // known pointers: CNAMEs point at the previous name, address records
    // at the chain's last name.
    size_t prev_name = dns::kHeaderSize;  // the qname in the question
    const size_t base = dns::AnswerOffset(qname_.size());
    for (const Rec& r : chain_) {
      if (len + 12 + r.rdata.size() > kMaxRecordsBytes) return absl::InvalidArgumentError("answer too large");
      uint8_t* p = records + len;
      dns::Store16(p, static_cast<uint16_t>(0xc000 | prev_name));
      dns::Store16(p + 2, dns::type::kCname);
      dns::Store16(p + 4, r.klass);
      const uint32_t ttl = clamp(r.ttl);
      dns::Store32(p + 6, ttl);
      dns::Store16(p + 10, static_cast<uint16_t>(r.rdata.size()));
      std::memcpy(p + 12, r.rdata.data(), r.rdata.size());
      ttl_offsets.push_back(static_cast<uint16_t>(len + 6));
      prev_name = base + len + 12;
      len += 12 + r.rdata.size();
      entry_ttl = std::min(entry_ttl, ttl);
    }
    chain_bytes = static_cast<uint16_t>(len);
    chain_count = static_cast<uint8_t>(chain_.size());
    if (chain_.size() > 32) return absl::InvalidArgumentError("CNAME chain longer than 32");

    // Canonical order, duplicates dropped (RFC 2181 5: an RRset has no
    // duplicate records). Invalid weights mean equal weights.
    const bool valid_w = weights_.size() == addresses_.size() &&
                         std::all_of(weights_.begin(), weights_.end(), [](uint8_t w) { return w != 0; });
    std::vector<std::pair<std::vector<uint8_t>, uint8_t>> set;
    std::vector<uint32_t> ttls;
    for (size_t i = 0; i < addresses_.size(); ++i)
      set.push_back({addresses_[i].rdata, valid_w ? weights_[i] : 1});
    std::vector<size_t> order(set.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return set[a].first < set[b].first; });
    std::vector<std::pair<std::vector<uint8_t>, uint8_t>> sorted;
    for (size_t i : order) {
      if (!sorted.empty() && sorted.back().first == set[i].first) continue;
      sorted.push_back(set[i]);
      ttls.push_back(addresses_[i].ttl);
    }
    if (sorted.size() > dns::kMaxWeightedAddresses)
      return absl::InvalidArgumentError("too many address records");
    address_size = static_cast<uint8_t>(12 + sorted.front().first.size());
    for (size_t i = 0; i < sorted.size(); ++i) {
      if (len + address_size > kMaxRecordsBytes) return absl::InvalidArgumentError("answer too large");
      uint8_t* p = records + len;
      dns::Store16(p, static_cast<uint16_t>(0xc000 | prev_name));
      dns::Store16(p + 2, key_.qtype);
      dns::Store16(p + 4, key_.qclass);
      const uint32_t ttl = clamp(ttls[i]);
      dns::Store32(p + 6, ttl);
      dns::Store16(p + 10, static_cast<uint16_t>(sorted[i].first.size()));
      std::memcpy(p + 12, sorted[i].first.data(), sorted[i].first.size());
      ttl_offsets.push_back(static_cast<uint16_t>(len + 6));
      len += address_size;
      entry_ttl = std::min(entry_ttl, ttl);
      weights.push_back(sorted[i].second);
    }
    address_count = static_cast<uint8_t>(sorted.size());
    has_weights = valid_w;
    fingerprint = Fingerprint(sorted, key_.qtype);
    answer_count = static_cast<uint16_t>(chain_.size() + sorted.size());
  } else {
    // Everything else goes through the generic encoder.
    dns::RecordEncoder enc(records, kMaxRecordsBytes, qname_);
    auto append = [&](const Rec& r, uint32_t ttl) -> absl::Status {
      uint16_t off = 0;
      if (enc.Append(r.owner, r.type, r.klass, ttl, r.rdata, &off) != dns::ParseError::kOk) {
        return absl::InvalidArgumentError("answer too large to cache");
      }
      ttl_offsets.push_back(off);
      return absl::OkStatus();
    };
    if (kind == EntryKind::kPositive && addresses_.empty() && others_.empty() && chain_.empty()) {
      return absl::InvalidArgumentError("positive answer without records");
    }
    for (const auto* list : {&chain_, &addresses_, &others_}) {
      for (const Rec& r : *list) {
        const uint32_t ttl = clamp(r.ttl);
        if (absl::Status s = append(r, ttl); !s.ok()) return s;
        entry_ttl = std::min(entry_ttl, ttl);
        ++answer_count;
      }
    }
    if (negative) {
      uint32_t neg_ttl = UINT32_MAX;
      for (const Rec& r : authority_) {
        uint32_t ttl = r.ttl, minimum;
        if (r.type == dns::type::kSoa && SoaMinimum(r.rdata, &minimum)) {
          ttl = std::min(ttl, minimum);
          neg_ttl = std::min(neg_ttl, ttl);
        }
        ttl = std::min(clamp(ttl), limits.max_negative_ttl);
        if (absl::Status s = append(r, ttl); !s.ok()) return s;
        ++authority_count;
      }
      // RFC 2308 section 5: without an SOA a negative answer is not cached.
      if (neg_ttl == UINT32_MAX) return absl::FailedPreconditionError("negative answer without SOA");
      entry_ttl = std::min({entry_ttl, clamp(neg_ttl), limits.max_negative_ttl});
    }
    len = enc.size();
  }
  if (entry_ttl == UINT32_MAX) entry_ttl = 0;
  if (ttl_offsets.size() > 255) return absl::InvalidArgumentError("more than 255 records");

  // Layout: header | qname | pad to 2 | ttl offsets | weights | records.
  const size_t ttl_off = (qname_.size() + 1) & ~size_t{1};
  const size_t weights_off = ttl_off + ttl_offsets.size() * 2;
  const size_t records_off = weights_off + weights.size();
  const size_t size = sizeof(CacheEntry) + records_off + len;
  void* mem = ::operator new(size);
  CacheEntry* e = new (mem) CacheEntry();
  CacheEntryPtr ptr(e);
  e->partition_ = key_.partition;
  e->hash_ = HashCacheKey(key_);
  e->fingerprint_ = fingerprint;
  e->insert_time_ = now;
  e->ttl_ = entry_ttl;
  e->alloc_bytes_ = static_cast<uint32_t>(malloc_usable_size(mem));
  e->qtype_ = key_.qtype;
  e->qclass_ = key_.qclass;
  e->records_off_ = static_cast<uint16_t>(records_off);
  e->records_len_ = static_cast<uint16_t>(len);
  e->chain_bytes_ = chain_bytes;
  e->answer_count_ = answer_count;
  e->authority_count_ = authority_count;
  e->flags_ = flags_;
  e->ecs_family_ = ecs_family_;
  e->ttl_off_ = static_cast<uint16_t>(ttl_off);
  e->weights_off_ = static_cast<uint16_t>(weights_off);
  e->qname_len_ = static_cast<uint8_t>(qname_.size());
  e->ttl_count_ = static_cast<uint8_t>(ttl_offsets.size());
  e->chain_count_ = chain_count;
  e->address_count_ = address_count;
  e->address_size_ = address_size;
  e->kind_ = static_cast<uint8_t>(kind);
  e->has_weights_ = has_weights;
  e->ecs_source_ = ecs_source_;
  e->ecs_scope_ = ecs_scope_;
  uint8_t* t = e->tail();
  std::memcpy(t, qname_.data(), qname_.size());
  if (ttl_off > qname_.size()) t[qname_.size()] = 0;
  // (memcpy with a null source is undefined even for 0 bytes.)
  if (!ttl_offsets.empty()) std::memcpy(t + ttl_off, ttl_offsets.data(), ttl_offsets.size() * 2);
  if (!weights.empty()) std::memcpy(t + weights_off, weights.data(), weights.size());
  if (len > 0) std::memcpy(t + records_off, records, len);
  return ptr;
}

// ---------------------------------------------------------------- cache

Cache::Index* Cache::NewIndex(size_t capacity) {
  Index* idx = new Index;
  idx->mask = capacity - 1;
  // Big indexes get 2 MB pages: a hit costs one TLB entry less.
  const size_t bytes = capacity * sizeof(uint64_t);
  void* mem = bytes >= (size_t{2} << 20) ? std::aligned_alloc(size_t{2} << 20, bytes) : std::malloc(bytes);
  if (mem == nullptr) throw std::bad_alloc();
  if (bytes >= (size_t{2} << 20)) madvise(mem, bytes, MADV_HUGEPAGE);
  idx->slots = static_cast<std::atomic<uint64_t>*>(mem);
  for (size_t i = 0; i < capacity; ++i) new (&idx->slots[i]) std::atomic<uint64_t>(kEmpty);
  return idx;
}

void Cache::FreeIndex(void* p) {
  Index* idx = static_cast<Index*>(p);
  std::free(idx->slots);
  delete idx;
}

namespace {
void FreeEntry(void* p) { CacheEntryDeleter()(static_cast<CacheEntry*>(p)); }
}  // namespace

Cache::Cache(const CacheOptions& options, const Clock& clock)
    : options_(options), stale_window_(options.stale_window), clock_(clock) {
  size_t cap = 16;
  while (cap < options.initial_slots) cap <<= 1;
  index_.store(NewIndex(cap), std::memory_order_release);
}

Cache::~Cache() {
  Barrier();
  Index* idx = index_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < idx->capacity(); ++i) {
    const uint64_t v = idx->slots[i].load(std::memory_order_relaxed);
    if (v != kEmpty && v != kTombstone) FreeEntry(reinterpret_cast<void*>(v & kPtrMask));
  }
  FreeIndex(idx);
}

void Cache::Retire(void* p, void (*fn)(void*)) { retired_.emplace_back(p, fn); }

std::vector<std::pair<void*, void (*)(void*)>> Cache::TakeRetiredLocked(bool force) {
  std::vector<std::pair<void*, void (*)(void*)>> out;
  if (force ? !retired_.empty() : retired_.size() >= kRetireBatch) out.swap(retired_);
  return out;
}

void Cache::FlushRetired(std::vector<std::pair<void*, void (*)(void*)>> batch) {
  if (batch.empty()) return;
  using Batch = std::vector<std::pair<void*, void (*)(void*)>>;
  RcuRetire(new Batch(std::move(batch)), [](void* p) {
    Batch* b = static_cast<Batch*>(p);
    for (auto& [ptr, fn] : *b) fn(ptr);
    delete b;
  });
}

Cache::InsertResult Cache::Insert(CacheEntryPtr entry) {
  std::vector<std::pair<void*, void (*)(void*)>> batch;
  InsertResult r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    r = InsertLocked(std::move(entry));
    batch = TakeRetiredLocked(false);
  }
  FlushRetired(std::move(batch));  // outside the lock: it may wait for a grace period
  return r;
}

Cache::InsertResult Cache::TryInsert(CacheEntryPtr entry) {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) {
    busy_.fetch_add(1, std::memory_order_relaxed);
    return InsertResult::kBusy;
  }
  InsertResult r = InsertLocked(std::move(entry));
  auto batch = TakeRetiredLocked(false);
  lock.unlock();
  FlushRetired(std::move(batch));
  return r;
}

Cache::InsertResult Cache::InsertLocked(CacheEntryPtr entry) {
  if (entry->memory_bytes() * 8 > options_.byte_budget) return InsertResult::kTooLarge;
  Index* idx = index_.load(std::memory_order_relaxed);
  const CacheKey key{entry->partition(), entry->qname(), entry->qtype(), entry->qclass()};
  const uint64_t h = entry->hash();
  const uint16_t tag = static_cast<uint16_t>(h >> 48);
  size_t free_slot = SIZE_MAX;
  size_t i = h & idx->mask;
  for (;; i = (i + 1) & idx->mask) {
    const uint64_t v = idx->slots[i].load(std::memory_order_relaxed);
    if (v == kEmpty) break;
    if (v == kTombstone) {
      if (free_slot == SIZE_MAX) free_slot = i;
      continue;
    }
    if ((v >> 48) != tag) continue;
    CacheEntry* old = reinterpret_cast<CacheEntry*>(v & kPtrMask);
    if (!old->Matches(key, h)) continue;
    // Refresh: readers see the old or the new entry, both whole.
    entry_bytes_ += entry->memory_bytes();
    entry_bytes_ -= old->memory_bytes();
    idx->slots[i].store(SlotValue(entry.release()), std::memory_order_release);
    Retire(old, FreeEntry);
    ++stats_.replaces;
    EvictToBudgetLocked(clock_.NowSeconds());
    return InsertResult::kReplaced;
  }
  if (free_slot != SIZE_MAX) {
    i = free_slot;
    --tombstones_;
  }
  entry_bytes_ += entry->memory_bytes();
  idx->slots[i].store(SlotValue(entry.release()), std::memory_order_release);
  ++used_;
  ++stats_.inserts;
  MaybeRehashLocked();
  EvictToBudgetLocked(clock_.NowSeconds());
  return InsertResult::kInserted;
}

void Cache::MaybeRehashLocked() {
  Index* idx = index_.load(std::memory_order_relaxed);
  if ((used_ + tombstones_) * 4 <= idx->capacity() * 3) return;
  size_t cap = 16;
  while (cap < used_ * 2 + 2) cap <<= 1;
  Index* next = NewIndex(cap);
  for (size_t i = 0; i < idx->capacity(); ++i) {
    const uint64_t v = idx->slots[i].load(std::memory_order_relaxed);
    if (v == kEmpty || v == kTombstone) continue;
    const CacheEntry* e = reinterpret_cast<const CacheEntry*>(v & kPtrMask);
    size_t j = e->hash() & next->mask;
    while (next->slots[j].load(std::memory_order_relaxed) != kEmpty) j = (j + 1) & next->mask;
    next->slots[j].store(v, std::memory_order_relaxed);
  }
  index_.store(next, std::memory_order_release);
  Retire(idx, FreeIndex);
  tombstones_ = 0;
  hand_ = sweep_ = 0;
  ++stats_.rehashes;
}

void Cache::EvictLocked(size_t slot, bool expired) {
  Index* idx = index_.load(std::memory_order_relaxed);
  const uint64_t v = idx->slots[slot].load(std::memory_order_relaxed);
  CacheEntry* e = reinterpret_cast<CacheEntry*>(v & kPtrMask);
  // An empty next slot ends every probe sequence through here, so this
  // slot can become empty too instead of a tombstone.
  if (idx->slots[(slot + 1) & idx->mask].load(std::memory_order_relaxed) == kEmpty) {
    idx->slots[slot].store(kEmpty, std::memory_order_release);
  } else {
    idx->slots[slot].store(kTombstone, std::memory_order_release);
    ++tombstones_;
  }
  entry_bytes_ -= e->memory_bytes();
  --used_;
  Retire(e, FreeEntry);
  ++(expired ? stats_.expired_evictions : stats_.evictions);
}

void Cache::EvictToBudgetLocked(uint32_t now) {
  Index* idx = index_.load(std::memory_order_relaxed);
  const size_t index_bytes = idx->capacity() * sizeof(uint64_t);
  // Two full turns of the hand clear every reference bit, so this ends.
  size_t steps = 0;
  while (entry_bytes_ + index_bytes > options_.byte_budget && used_ > 0 && steps < 2 * idx->capacity() + 2) {
    const size_t i = hand_;
    hand_ = (hand_ + 1) & idx->mask;
    ++steps;
    const uint64_t v = idx->slots[i].load(std::memory_order_relaxed);
    if (v == kEmpty || v == kTombstone) continue;
    CacheEntry* e = reinterpret_cast<CacheEntry*>(v & kPtrMask);
    if (e->FreshnessAt(now, stale_window_) == Freshness::kMiss) {
      EvictLocked(i, true);
    } else if (e->referenced_.load(std::memory_order_relaxed)) {
      e->referenced_.store(0, std::memory_order_relaxed);
    } else {
      EvictLocked(i, false);
    }
  }
}

bool Cache::Erase(const CacheKey& key) {
  std::vector<std::pair<void*, void (*)(void*)>> batch;
  bool found = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Index* idx = index_.load(std::memory_order_relaxed);
    const uint64_t h = HashCacheKey(key);
    for (size_t i = h & idx->mask;; i = (i + 1) & idx->mask) {
      const uint64_t v = idx->slots[i].load(std::memory_order_relaxed);
      if (v == kEmpty) break;
      if (v == kTombstone || (v >> 48) != (h >> 48)) continue;
      if (reinterpret_cast<const CacheEntry*>(v & kPtrMask)->Matches(key, h)) {
        EvictLocked(i, false);
        --stats_.evictions;  // an erase is not an eviction
        found = true;
        break;
      }
    }
    batch = TakeRetiredLocked(false);
  }
  FlushRetired(std::move(batch));
  return found;
}

void Cache::Maintain(size_t max_slots) {
  std::vector<std::pair<void*, void (*)(void*)>> batch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const uint32_t now = clock_.NowSeconds();
    Index* idx = index_.load(std::memory_order_relaxed);
    for (size_t n = 0; n < std::min(max_slots, idx->capacity()); ++n) {
      const size_t i = sweep_;
      sweep_ = (sweep_ + 1) & idx->mask;
      const uint64_t v = idx->slots[i].load(std::memory_order_relaxed);
      if (v == kEmpty || v == kTombstone) continue;
      const CacheEntry* e = reinterpret_cast<const CacheEntry*>(v & kPtrMask);
      if (e->FreshnessAt(now, stale_window_) == Freshness::kMiss) EvictLocked(i, true);
    }
    batch = TakeRetiredLocked(true);
  }
  FlushRetired(std::move(batch));
}

void Cache::Barrier() {
  std::vector<std::pair<void*, void (*)(void*)>> batch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    batch = TakeRetiredLocked(true);
  }
  FlushRetired(std::move(batch));
  RcuBarrier();
}

CacheStats Cache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CacheStats s = stats_;
  const Index* idx = index_.load(std::memory_order_relaxed);
  s.entries = used_;
  s.index_slots = idx->capacity();
  s.bytes = entry_bytes_ + idx->capacity() * sizeof(uint64_t);
  s.busy = busy_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace weir::partitions
