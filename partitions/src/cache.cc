#include "weir/partitions/cache.h"

#include <malloc.h>
#include <sanitizer/asan_interface.h>
#include <sys/mman.h>

#include <cstdlib>

#include <algorithm>
#include <atomic>
#include <new>
#include <vector>

#include "text_util.h"
#include "weir/common/hash.h"
#include "weir/common/rcu.h"
#include "weir/dns/writer.h"

namespace weir::partitions {
namespace {

constexpr size_t kRetireBatch = 512;
constexpr size_t kMaxRecordsBytes = 16000;  // compression pointers need < 0x4000

// Names a weighted set (its RDATA in canonical order, and their weights) for
// the SWRR state: a refresh that brings the same set continues the rotation.
// Compared within the process only. Each record is hashed on its own, seeded
// by the records before it and its weight, so record boundaries count.
uint64_t Fingerprint(const std::vector<std::pair<std::vector<uint8_t>, uint8_t>>& set, uint16_t type) {
  uint64_t h = type;
  for (const auto& [rdata, w] : set) h = common::HashBytes(rdata.data(), rdata.size(), h ^ w);
  return h;
}

// A lineage no entry of this process had (CacheEntry::lineage); never 0.
uint64_t NewLineage() {
  static std::atomic<uint64_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed) + 1;
}

// How many distinct RDATA the records hold (RFC 2181 5: an RRset's
// duplicates are one record).
template <typename Rec>
size_t DistinctRdata(const std::vector<Rec>& records) {
  std::vector<std::span<const uint8_t>> v;
  v.reserve(records.size());
  for (const Rec& r : records) v.emplace_back(r.rdata);
  std::sort(v.begin(), v.end(), [](auto a, auto b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  });
  return static_cast<size_t>(
      std::unique(v.begin(), v.end(),
                  [](auto a, auto b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }) -
      v.begin());
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
  } else if (kind == EntryKind::kPositive && others_.empty() && !addresses_.empty() &&
             DistinctRdata(addresses_) <= dns::kMaxWeightedAddresses) {
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
        if (r.type == dns::type::kSoa && dns::SoaMinimum(r.rdata, &minimum)) {
          ttl = std::min(ttl, minimum);
          neg_ttl = std::min(neg_ttl, ttl);
        }
        ttl = std::min(clamp(ttl), limits.negative_max_ttl);
        if (absl::Status s = append(r, ttl); !s.ok()) return s;
        ++authority_count;
      }
      // RFC 2308 section 5: without an SOA a negative answer is not cached.
      if (neg_ttl == UINT32_MAX) return absl::FailedPreconditionError("negative answer without SOA");
      entry_ttl = std::min({entry_ttl, clamp(neg_ttl), limits.negative_max_ttl});
    }
    len = enc.size();
  }
  if (entry_ttl == UINT32_MAX) entry_ttl = 0;
  if (ttl_offsets.size() > 255) return absl::InvalidArgumentError("more than 255 records");

  // Layout: header | qname | pad to 8 | Meta | TTL offsets | weights |
  // answer header | records.
  const size_t meta_off = CacheEntry::MetaOffset(qname_.size());
  const size_t ttl_off = meta_off + sizeof(CacheEntry::Meta);
  const size_t weights_off = ttl_off + ttl_offsets.size() * 2;
  const size_t header_off = weights_off + weights.size();
  const size_t records_off = header_off + dns::kHeaderSize;
  const size_t size = sizeof(CacheEntry) + records_off + len;
  void* mem = ::operator new(size);
  CacheEntry* e = new (mem) CacheEntry();
  CacheEntryPtr ptr(e);
  e->partition_ = key_.partition;
  e->hash_ = HashCacheKey(key_);
  e->insert_time_ = now;
  e->ttl_ = entry_ttl;
  e->qtype_ = key_.qtype;
  e->qclass_ = key_.qclass;
  e->qname_len_ = static_cast<uint8_t>(qname_.size());
  e->kind_ = static_cast<uint8_t>(kind);
  uint8_t* t = e->tail();
  std::memcpy(t, qname_.data(), qname_.size());
  std::memset(t + qname_.size(), 0, meta_off - qname_.size());
  CacheEntry::Meta* m = new (t + meta_off) CacheEntry::Meta{};
  m->fingerprint = fingerprint;
  m->lineage = NewLineage();
  m->alloc_bytes = static_cast<uint32_t>(malloc_usable_size(mem));
  m->records_off = static_cast<uint16_t>(records_off);
  m->records_len = static_cast<uint16_t>(len);
  m->chain_bytes = chain_bytes;
  m->answer_count = answer_count;
  m->authority_count = authority_count;
  m->flags = flags_;
  m->ecs_family = ecs_family_;
  m->ttl_off = static_cast<uint16_t>(ttl_off);
  m->weights_off = static_cast<uint16_t>(weights_off);
  m->ttl_count = static_cast<uint8_t>(ttl_offsets.size());
  m->chain_count = chain_count;
  m->address_count = address_count;
  m->address_size = address_size;
  m->has_weights = has_weights;
  m->ecs_source = ecs_source_;
  m->ecs_scope = ecs_scope_;
  // (memcpy with a null source is undefined even for 0 bytes.)
  if (!ttl_offsets.empty()) std::memcpy(t + ttl_off, ttl_offsets.data(), ttl_offsets.size() * 2);
  if (!weights.empty()) std::memcpy(t + weights_off, weights.data(), weights.size());
  if (len > 0) std::memcpy(t + records_off, records, len);
  // The answer template's header (CacheEntry::answer_header).
  uint8_t* h = t + header_off;
  dns::Store16(h + dns::kOffId, 0);
  dns::Store16(h + dns::kOffFlags,
               static_cast<uint16_t>(dns::flag::kQr | dns::flag::kRa |
                                     (static_cast<uint16_t>(e->rcode()) & dns::flag::kRcodeMask)));
  dns::Store16(h + dns::kOffQdcount, 1);
  dns::Store16(h + dns::kOffAncount, answer_count);
  dns::Store16(h + dns::kOffNscount, authority_count);
  dns::Store16(h + dns::kOffArcount, 0);
  return ptr;
}

// ---------------------------------------------------------------- slab

// Blocks of a multiple of 64 bytes, carved from chunks aligned to their size
// (2 MB transparent huge pages for big caches, so 1M entries need ~100 TLB
// entries, which the second-level TLB holds). Each chunk serves one block
// size and starts with its header, found from a block's address by
// masking. A chunk whose blocks are all free again is unmapped, unless it is
// the last one with free blocks of its size. Blocks come back only after a
// grace period (Cache::DrainFreedLocked). Writer side only, under the
// cache's mutex. Entries above kMaxSlabBytes come from operator new.
//
// The slab's footprint has a hard cap (Reserve): when a block size needs a
// new chunk and the cap leaves no room, the sparsest chunk is drained, as
// memcached's slab rebalancer does with a page: its entries are evicted, it
// takes no new blocks, and it is unmapped when its last block comes back.
// Without this, a cache filled with small entries and then churned with big
// ones keeps every small chunk mapped for a few live blocks each.
class EntrySlab {
 public:
  static constexpr size_t kBlock = 64;
  static constexpr size_t kMaxSlabBytes = 4096;

  explicit EntrySlab(size_t chunk_bytes) : chunk_bytes_(chunk_bytes) {}
  ~EntrySlab() {
    for (Chunk* c : chunks_) Unmap(c);
  }
  EntrySlab(const EntrySlab&) = delete;
  EntrySlab& operator=(const EntrySlab&) = delete;

  static size_t BlockBytes(size_t bytes) { return (bytes + kBlock - 1) & ~(kBlock - 1); }

  // Whether a block of `block` bytes can be allocated now without the
  // footprint (mapped_bytes()) passing `cap`. Past `drain_from`, drains the
  // sparsest chunks, calling evict(block address) for each block in use
  // (live or retired), until the chunks being drained will bring the
  // footprint back under `drain_from` once their blocks are back: draining
  // ahead of the cap lets grace periods come before inserts are refused.
  // Drains retire at most `retire_allowance` bytes. Empty chunks are
  // unmapped at once.
  template <typename Evict>
  bool Reserve(size_t block, size_t drain_from, size_t cap, size_t retire_allowance, Evict&& evict) {
    const bool has_free_block = block <= kMaxSlabBytes && partial_[block / kBlock] != nullptr;
    if (has_free_block && mapped_bytes() <= cap) return true;
    const size_t need = has_free_block ? 0 : block > kMaxSlabBytes ? block : chunk_bytes_;
    while (mapped_bytes() - draining_bytes_ + need > drain_from) {
      // The chunk whose draining evicts the fewest bytes, among those
      // carved to the end once: a chunk still being carved is where its
      // block size is growing, and draining it would undo that.
      Chunk* victim = nullptr;
      for (Chunk* c : chunks_) {
        if (c->draining) continue;
        const bool better = victim == nullptr ||
                            (c->bump == c->capacity) > (victim->bump == victim->capacity) ||
                            ((c->bump == c->capacity) == (victim->bump == victim->capacity) &&
                             size_t{c->live} * c->block < size_t{victim->live} * victim->block);
        if (better) victim = c;
      }
      if (victim == nullptr) break;  // big entries only: CLOCK frees them
      const size_t used = size_t{victim->live} * victim->block;
      if (used > retire_allowance) break;  // after the retired blocks are back
      retire_allowance -= used;
      Drain(victim, evict);
    }
    return mapped_bytes() + need <= cap;
  }

  // A block of `block` bytes (a BlockBytes() value), 64-byte aligned.
  void* Allocate(size_t block) {
    if (block > kMaxSlabBytes) {
      big_bytes_ += block;
      return ::operator new (block, std::align_val_t{kBlock});
    }
    const size_t cls = block / kBlock;
    Chunk* c = partial_[cls];
    if (c == nullptr) {
      c = NewChunk(block);
      Link(c);
    }
    uint8_t* p;
    if (c->free != nullptr) {
      p = static_cast<uint8_t*>(c->free);
      ASAN_UNPOISON_MEMORY_REGION(p, block);
      std::memcpy(&c->free, p, sizeof(void*));
    } else {
      p = BlockAt(c, c->bump++);
      ASAN_UNPOISON_MEMORY_REGION(p, block);
    }
    ++c->live;
    const size_t i = IndexOf(c, p);
    c->used[i / 64] |= uint64_t{1} << (i % 64);
    if (Full(c)) Unlink(c);
    return p;
  }

  void Free(void* p, size_t block) {
    if (block > kMaxSlabBytes) {
      big_bytes_ -= block;
      ::operator delete (p, std::align_val_t{kBlock});
      return;
    }
    Chunk* c = reinterpret_cast<Chunk*>(reinterpret_cast<uintptr_t>(p) & ~(chunk_bytes_ - 1));
    const size_t i = IndexOf(c, p);
    c->used[i / 64] &= ~(uint64_t{1} << (i % 64));
    const bool was_full = Full(c);
    std::memcpy(p, &c->free, sizeof(void*));
    c->free = p;
    ASAN_POISON_MEMORY_REGION(p, block);  // a reader past its grace period trips ASan
    --c->live;
    if (c->draining) {
      if (c->live == 0) Remove(c);
      return;
    }
    if (was_full) Link(c);
    if (c->live == 0 && partial_count_[c->block / kBlock] > 1) {
      Unlink(c);
      Remove(c);
    }
  }

  size_t mapped_bytes() const { return chunks_.size() * chunk_bytes_ + big_bytes_; }
  size_t chunk_bytes() const { return chunk_bytes_; }
  uint64_t drains() const { return drains_; }

 private:
  struct Chunk {        // in the chunk's first 64 bytes
    uint32_t block;     // block size
    uint32_t live;      // blocks in use (live or retired)
    uint32_t bump;      // blocks [bump, capacity) were never used
    uint32_t capacity;  // blocks in the chunk
    void* free;         // freed blocks, linked through their first 8 bytes
    Chunk* prev;        // chunks of this block size with a free block
    Chunk* next;
    uint64_t* used;  // one bit per block in use
    uint32_t pos;    // in chunks_
    bool draining;   // takes no new blocks; unmapped when empty
  };
  static_assert(sizeof(Chunk) <= kBlock);

  static bool Full(const Chunk* c) { return c->free == nullptr && c->bump == c->capacity; }
  static uint8_t* BlockAt(Chunk* c, size_t i) {
    return reinterpret_cast<uint8_t*>(c) + kBlock + i * c->block;
  }
  static size_t IndexOf(const Chunk* c, const void* p) {
    return (static_cast<const uint8_t*>(p) - reinterpret_cast<const uint8_t*>(c) - kBlock) / c->block;
  }

  template <typename Evict>
  void Drain(Chunk* c, Evict& evict) {
    if (!Full(c)) Unlink(c);
    ++drains_;
    if (c->live == 0) {
      Remove(c);
      return;
    }
    c->draining = true;
    draining_bytes_ += chunk_bytes_;
    // evict() only retires blocks (they come back through Free after their
    // grace period), so the bitmap does not change under the walk.
    for (size_t w = 0; w * 64 < c->bump; ++w) {
      for (uint64_t bits = c->used[w]; bits != 0; bits &= bits - 1) {
        evict(BlockAt(c, w * 64 + static_cast<size_t>(__builtin_ctzll(bits))));
      }
    }
  }

  Chunk* NewChunk(size_t block) {
    // Over-map, then trim to the alignment.
    void* raw = mmap(nullptr, 2 * chunk_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = (start + chunk_bytes_ - 1) & ~(chunk_bytes_ - 1);
    if (aligned > start) munmap(raw, aligned - start);
    if (start + chunk_bytes_ > aligned) {
      munmap(reinterpret_cast<void*>(aligned + chunk_bytes_), start + chunk_bytes_ - aligned);
    }
    void* mem = reinterpret_cast<void*>(aligned);
    if (chunk_bytes_ >= (size_t{2} << 20)) madvise(mem, chunk_bytes_, MADV_HUGEPAGE);
    Chunk* c = new (mem) Chunk{};
    c->block = static_cast<uint32_t>(block);
    c->capacity = static_cast<uint32_t>((chunk_bytes_ - kBlock) / block);
    c->used = new uint64_t[(c->capacity + 63) / 64]();
    c->pos = static_cast<uint32_t>(chunks_.size());
    chunks_.push_back(c);
    ASAN_POISON_MEMORY_REGION(BlockAt(c, 0), chunk_bytes_ - kBlock);
    return c;
  }

  // Unmaps an empty chunk that is on no partial list.
  void Remove(Chunk* c) {
    if (c->draining) draining_bytes_ -= chunk_bytes_;
    chunks_[c->pos] = chunks_.back();
    chunks_[c->pos]->pos = c->pos;
    chunks_.pop_back();
    Unmap(c);
  }

  void Unmap(Chunk* c) {
    delete[] c->used;
    // ASan keeps poison across munmap: whatever is mapped here next is clean.
    ASAN_UNPOISON_MEMORY_REGION(c, chunk_bytes_);
    munmap(c, chunk_bytes_);
  }

  void Link(Chunk* c) {
    const size_t cls = c->block / kBlock;
    c->prev = nullptr;
    c->next = partial_[cls];
    if (c->next != nullptr) c->next->prev = c;
    partial_[cls] = c;
    ++partial_count_[cls];
  }

  void Unlink(Chunk* c) {
    const size_t cls = c->block / kBlock;
    (c->prev != nullptr ? c->prev->next : partial_[cls]) = c->next;
    if (c->next != nullptr) c->next->prev = c->prev;
    --partial_count_[cls];
  }

  const size_t chunk_bytes_;
  std::vector<Chunk*> chunks_;
  Chunk* partial_[kMaxSlabBytes / kBlock + 1] = {};
  uint32_t partial_count_[kMaxSlabBytes / kBlock + 1] = {};
  size_t big_bytes_ = 0;
  size_t draining_bytes_ = 0;  // chunks being drained, to be unmapped
  uint64_t drains_ = 0;
};

// ---------------------------------------------------------------- cache

// Retired entries and index tables. After the grace period the RCU callback
// frees the tables and hands the entries back to the writer (Cache::freed_).
struct Cache::RetiredBatch {
  Cache* cache = nullptr;
  std::vector<CacheEntry*> entries;
  std::vector<Index*> indexes;
  RetiredBatch* next = nullptr;
  size_t size() const { return entries.size() + indexes.size(); }
};

namespace {

// Small caches get small chunks: one partly used chunk per block size in
// use must fit in the footprint's slack (a quarter of the budget) or the
// slab drains chunks over and over.
size_t ChunkBytesFor(size_t budget) {
  size_t c = size_t{16} << 10;
  while (c < (size_t{2} << 20) && c * 128 <= budget) c <<= 1;
  return c;
}

}  // namespace

Cache::Index* Cache::NewIndex(size_t buckets) {
  Index* idx = new Index;
  idx->mask = buckets - 1;
  // Big indexes get 2 MB pages: a hit costs one TLB entry less.
  const size_t bytes = buckets * sizeof(Bucket);
  const bool huge = bytes >= (size_t{2} << 20);
  void* mem = std::aligned_alloc(huge ? size_t{2} << 20 : alignof(Bucket), bytes);
  if (mem == nullptr) throw std::bad_alloc();
  if (huge) madvise(mem, bytes, MADV_HUGEPAGE);
  idx->buckets = static_cast<Bucket*>(mem);
  for (size_t i = 0; i < buckets; ++i) new (&idx->buckets[i]) Bucket();
  return idx;
}

void Cache::FreeIndex(Index* idx) {
  std::free(idx->buckets);
  delete idx;
}

Cache::Cache(const CacheOptions& options, const common::Clock& clock)
    : options_(options),
      stale_window_(options.stale_window),
      clock_(clock),
      slab_(std::make_unique<EntrySlab>(ChunkBytesFor(options.byte_budget))) {
  size_t buckets = 2;
  while (buckets * kPositionsPerBucket < options.initial_slots) buckets <<= 1;
  index_.store(NewIndex(buckets), std::memory_order_release);
}

Cache::~Cache() {
  Barrier();
  std::lock_guard<std::mutex> lock(mu_);
  DrainFreedLocked();
  Index* idx = index_.load(std::memory_order_relaxed);
  for (size_t b = 0; b < idx->bucket_count(); ++b) {
    for (auto& slot : idx->buckets[b].slots) {
      const uint64_t v = slot.load(std::memory_order_relaxed);
      if (v == kEmpty) continue;
      CacheEntry* e = const_cast<CacheEntry*>(EntryOf(v));
      const size_t bytes = e->memory_bytes();
      e->~CacheEntry();
      slab_->Free(e, bytes);
    }
  }
  FreeIndex(idx);
}

std::unique_ptr<Cache::RetiredBatch> Cache::TakeRetiredLocked(bool force) {
  if (retired_ == nullptr || retired_->size() == 0) return nullptr;
  if (!force && retired_->size() < kRetireBatch) return nullptr;
  return std::move(retired_);
}

void Cache::FlushRetired(std::unique_ptr<RetiredBatch> batch) {
  if (batch == nullptr) return;
  batch->cache = this;
  common::RcuRetire(batch.release(), [](void* p) {
    RetiredBatch* b = static_cast<RetiredBatch*>(p);
    for (Index* idx : b->indexes) FreeIndex(idx);
    b->indexes.clear();
    if (b->entries.empty()) {
      delete b;
      return;
    }
    std::atomic<RetiredBatch*>& freed = b->cache->freed_;
    b->next = freed.load(std::memory_order_relaxed);
    while (!freed.compare_exchange_weak(b->next, b, std::memory_order_release, std::memory_order_relaxed)) {
    }
  });
}

void Cache::DrainFreedLocked() {
  RetiredBatch* b = freed_.exchange(nullptr, std::memory_order_acquire);
  while (b != nullptr) {
    for (CacheEntry* e : b->entries) {
      const size_t bytes = e->memory_bytes();
      e->~CacheEntry();
      slab_->Free(e, bytes);
      retired_bytes_ -= std::min(retired_bytes_, bytes);
    }
    RetiredBatch* next = b->next;
    delete b;
    b = next;
  }
}

Cache::InsertResult Cache::Insert(CacheEntryPtr entry) {
  std::unique_ptr<RetiredBatch> batch;
  InsertResult r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    r = InsertLocked(std::move(entry));
    // Near the cap the batch goes at once: waiting for 512 retirements
    // could hold back the memory that lets inserts in again.
    batch = TakeRetiredLocked(retired_bytes_ >= RetiredCap() / 2);
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
  auto batch = TakeRetiredLocked(retired_bytes_ >= RetiredCap() / 2);
  lock.unlock();
  FlushRetired(std::move(batch));
  return r;
}

size_t Cache::FindPositionLocked(const Index* idx, const CacheKey& key, uint64_t hash) const {
  size_t position;
  (void)Probe<std::memory_order_relaxed>(idx, key, hash, &position);
  return position;
}

void Cache::PlaceLocked(Index* idx, uint64_t hash, uint64_t v) {
  // The load factor stays below 1, so a free slot comes. Only the writer
  // changes the control words: no read-modify-write needed.
  for (size_t b = hash & idx->mask;; b = (b + 1) & idx->mask) {
    Bucket& bucket = idx->buckets[b];
    const uint64_t ctrl = bucket.ctrl.load(std::memory_order_relaxed);
    for (size_t s = 0; s < kBucketSlots; ++s) {
      if (((ctrl >> (8 * s)) & 0xff) != 0) continue;
      // The slot first: a reader that sees the tag sees the entry.
      bucket.slots[s].store(v, std::memory_order_release);
      bucket.ctrl.store(ctrl | Tag8(hash) << (8 * s), std::memory_order_release);
      return;
    }
    if (Overflow(ctrl) < 255) bucket.ctrl.store(ctrl + (uint64_t{1} << 56), std::memory_order_relaxed);
  }
}

Cache::InsertResult Cache::InsertLocked(CacheEntryPtr entry) {
  const size_t block = EntrySlab::BlockBytes(entry->size());
  if (block * 8 > options_.byte_budget) return InsertResult::kTooLarge;
  DrainFreedLocked();
  if (retired_bytes_ > 0 && retired_bytes_ + block > RetiredCap()) {
    ++stats_.reclaiming;
    return InsertResult::kReclaiming;
  }
  if (!ReserveLocked(block)) {
    ++stats_.reclaiming;
    return InsertResult::kReclaiming;
  }
  const CacheKey key{entry->partition(), entry->qname(), entry->qtype(), entry->qclass()};
  const uint64_t h = entry->hash();

  // The cache's own copy, in the slab.
  CacheEntry* e = new (slab_->Allocate(block)) CacheEntry();
  e->hash_ = entry->hash_;
  e->partition_ = entry->partition_;
  e->insert_time_ = entry->insert_time_;
  e->ttl_ = entry->ttl_;
  e->qtype_ = entry->qtype_;
  e->qclass_ = entry->qclass_;
  e->qname_len_ = entry->qname_len_;
  e->kind_ = entry->kind_;
  std::memcpy(e->tail(), entry->tail(), entry->size() - sizeof(CacheEntry));
  e->meta().alloc_bytes = static_cast<uint32_t>(block);

  Index* idx = index_.load(std::memory_order_relaxed);
  if (const size_t pos = FindPositionLocked(idx, key, h); pos != SIZE_MAX) {
    // Refresh: readers see the old or the new entry, both whole.
    std::atomic<uint64_t>& slot = idx->buckets[pos / kPositionsPerBucket].slots[pos % kPositionsPerBucket];
    CacheEntry* old = const_cast<CacheEntry*>(EntryOf(slot.load(std::memory_order_relaxed)));
    entry_bytes_ += block;
    entry_bytes_ -= old->memory_bytes();
    PartitionCacheStats& g = GroupLocked(e->partition());
    g.bytes += block;
    g.bytes -= old->memory_bytes();
    // The same key's next answer: its SWRR sequences go on (or restart if
    // the set changed, which the fingerprint tells).
    e->meta().lineage = old->meta().lineage;
    slot.store(SlotValue(e), std::memory_order_release);
    if (retired_ == nullptr) retired_ = std::make_unique<RetiredBatch>();
    retired_->entries.push_back(old);
    retired_bytes_ += old->memory_bytes();
    ++stats_.replaces;
    EvictToBudgetLocked(clock_.NowSeconds());
    return InsertResult::kReplaced;
  }
  // A new life of this key (a copy of an entry cached elsewhere must not
  // share that one's SWRR state).
  e->meta().lineage = NewLineage();
  MaybeRehashLocked();
  PlaceLocked(index_.load(std::memory_order_relaxed), h, SlotValue(e));
  entry_bytes_ += block;
  ++used_;
  ++stats_.inserts;
  PartitionCacheStats& g = GroupLocked(e->partition());
  ++g.entries;
  g.bytes += block;
  ++g.inserts;
  EvictToBudgetLocked(clock_.NowSeconds());
  return InsertResult::kInserted;
}

bool Cache::ReserveLocked(size_t block) {
  // The index this insert may grow into (MaybeRehashLocked) counts already.
  const Index* idx = index_.load(std::memory_order_relaxed);
  const bool grows = (used_ + 1) * 8 > idx->bucket_count() * kBucketSlots * 7;
  const size_t index_bytes = idx->bucket_count() * sizeof(Bucket) * (grows ? 2 : 1);
  const size_t limit = options_.byte_budget + options_.byte_budget / 4;
  const size_t cap = limit > index_bytes ? limit - index_bytes : 0;
  const size_t drain_from = cap - std::min(cap, options_.byte_budget / 8);
  const size_t retire_allowance = RetiredCap() - std::min(RetiredCap(), retired_bytes_);
  return slab_->Reserve(block, drain_from, cap, retire_allowance, [this](void* block_address) {
    const CacheEntry* e = static_cast<const CacheEntry*>(block_address);
    const CacheKey key{e->partition(), e->qname(), e->qtype(), e->qclass()};
    Index* idx = index_.load(std::memory_order_relaxed);
    const size_t pos = FindPositionLocked(idx, key, e->hash());
    if (pos == SIZE_MAX) return;                 // retired already
    if (EntryOf(SlotAt(idx, pos)) != e) return;  // retired already; the key has a newer entry elsewhere
    EvictLocked(pos, Removal::kBudget);
    ++stats_.drain_evictions;
  });
}

// Called before placing one more entry: keeps the load at most 7/8.
void Cache::MaybeRehashLocked() {
  Index* idx = index_.load(std::memory_order_relaxed);
  if ((used_ + 1) * 8 <= idx->bucket_count() * kBucketSlots * 7) return;
  Index* next = NewIndex(idx->bucket_count() * 2);
  for (size_t b = 0; b < idx->bucket_count(); ++b) {
    for (const auto& slot : idx->buckets[b].slots) {
      const uint64_t v = slot.load(std::memory_order_relaxed);
      if (v != kEmpty) PlaceLocked(next, EntryOf(v)->hash(), v);
    }
  }
  index_.store(next, std::memory_order_release);
  if (retired_ == nullptr) retired_ = std::make_unique<RetiredBatch>();
  retired_->indexes.push_back(idx);
  hand_ = sweep_ = 0;
  ++stats_.rehashes;
}

void Cache::EvictLocked(size_t position, Removal why) {
  Index* idx = index_.load(std::memory_order_relaxed);
  const size_t at = position / kPositionsPerBucket;
  const size_t s = position % kPositionsPerBucket;
  Bucket& bucket = idx->buckets[at];
  CacheEntry* e = const_cast<CacheEntry*>(EntryOf(bucket.slots[s].load(std::memory_order_relaxed)));
  bucket.ctrl.store(bucket.ctrl.load(std::memory_order_relaxed) & ~(uint64_t{0xff} << (8 * s)),
                    std::memory_order_release);
  bucket.slots[s].store(kEmpty, std::memory_order_release);
  // The buckets the entry had passed no longer overflow on its account
  // (a saturated count stays until the next rehash).
  for (size_t b = e->hash() & idx->mask; b != at; b = (b + 1) & idx->mask) {
    std::atomic<uint64_t>& ctrl = idx->buckets[b].ctrl;
    const uint64_t c = ctrl.load(std::memory_order_relaxed);
    if (Overflow(c) < 255) ctrl.store(c - (uint64_t{1} << 56), std::memory_order_relaxed);
  }
  entry_bytes_ -= e->memory_bytes();
  --used_;
  if (retired_ == nullptr) retired_ = std::make_unique<RetiredBatch>();
  retired_->entries.push_back(e);
  retired_bytes_ += e->memory_bytes();

  PartitionCacheStats& g = GroupLocked(e->partition());
  --g.entries;
  g.bytes -= e->memory_bytes();
  switch (why) {
    case Removal::kBudget:
      ++stats_.evictions;
      ++g.evictions;
      break;
    case Removal::kExpired:
      ++stats_.expired_evictions;
      ++g.expired_evictions;
      break;
    case Removal::kErased:  // not an eviction
      break;
    case Removal::kFlushed:
      ++stats_.flushed;
      ++g.flushed;
      break;
  }
}

void Cache::EvictToBudgetLocked(uint32_t now) {
  Index* idx = index_.load(std::memory_order_relaxed);
  const size_t index_bytes = idx->bucket_count() * sizeof(Bucket);
  const size_t positions = idx->bucket_count() * kPositionsPerBucket;
  // Two full turns of the hand clear every reference bit, so this ends.
  size_t steps = 0;
  while (entry_bytes_ + index_bytes > options_.byte_budget && used_ > 0 && steps < 2 * positions + 2) {
    const size_t pos = hand_;
    hand_ = (hand_ + 1) & (positions - 1);
    ++steps;
    const uint64_t v = SlotAt(idx, pos);
    if (v == kEmpty) continue;
    const CacheEntry* e = EntryOf(v);
    if (e->FreshnessAt(now, stale_window_) == Freshness::kMiss) {
      EvictLocked(pos, Removal::kExpired);
    } else if (e->referenced_.load(std::memory_order_relaxed)) {
      e->referenced_.store(0, std::memory_order_relaxed);
    } else {
      EvictLocked(pos, Removal::kBudget);
    }
  }
}

bool Cache::Erase(const CacheKey& key) {
  std::unique_ptr<RetiredBatch> batch;
  bool found = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t pos = FindPositionLocked(index_.load(std::memory_order_relaxed), key, HashCacheKey(key));
    if (pos != SIZE_MAX) {
      EvictLocked(pos, Removal::kErased);
      found = true;
    }
    batch = TakeRetiredLocked(false);
  }
  FlushRetired(std::move(batch));
  return found;
}

size_t Cache::EraseMatching(const std::function<bool(const CacheEntry&)>& match, size_t step) {
  size_t erased = 0;
  size_t pos = 0;
  uint64_t walked = UINT64_MAX;  // the rehash count the walk is in
  for (bool done = false; !done;) {
    std::unique_ptr<RetiredBatch> batch;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // A rehash between steps moved entries: walk the new index from the
      // start (what was removed stays removed).
      if (stats_.rehashes != walked) pos = 0;
      walked = stats_.rehashes;
      done = WalkStepLocked(index_.load(std::memory_order_relaxed), &pos, step, [&](size_t at, uint64_t v) {
        if (match(*EntryOf(v))) {
          EvictLocked(at, Removal::kFlushed);
          ++erased;
        }
        return true;
      });
      batch = TakeRetiredLocked(true);
    }
    FlushRetired(std::move(batch));
  }
  return erased;
}

void Cache::ForEach(const std::function<bool(const CacheEntry&)>& visit, size_t step) const {
  size_t pos = 0;
  for (bool done = false; !done;) {
    std::lock_guard<std::mutex> lock(mu_);
    done = WalkStepLocked(index_.load(std::memory_order_relaxed), &pos, step,
                          [&](size_t, uint64_t v) { return visit(*EntryOf(v)); });
  }
}

void Cache::Maintain(size_t max_slots) {
  std::unique_ptr<RetiredBatch> batch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    DrainFreedLocked();
    const uint32_t now = clock_.NowSeconds();
    Index* idx = index_.load(std::memory_order_relaxed);
    const size_t positions = idx->bucket_count() * kPositionsPerBucket;
    for (size_t n = 0; n < std::min(max_slots, positions); ++n) {
      const size_t pos = sweep_;
      sweep_ = (sweep_ + 1) & (positions - 1);
      const uint64_t v = SlotAt(idx, pos);
      if (v != kEmpty && EntryOf(v)->FreshnessAt(now, stale_window_) == Freshness::kMiss)
        EvictLocked(pos, Removal::kExpired);
    }
    batch = TakeRetiredLocked(true);
  }
  FlushRetired(std::move(batch));
}

void Cache::Barrier() {
  std::unique_ptr<RetiredBatch> batch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    batch = TakeRetiredLocked(true);
  }
  FlushRetired(std::move(batch));
  common::RcuBarrier();
}

std::vector<PartitionCacheStats> Cache::partition_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return partition_stats_;
}

CacheStats Cache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CacheStats s = stats_;
  const Index* idx = index_.load(std::memory_order_relaxed);
  s.entries = used_;
  s.index_slots = idx->bucket_count() * kBucketSlots;
  s.index_bytes = idx->bucket_count() * sizeof(Bucket);
  s.bytes = entry_bytes_ + s.index_bytes;
  s.slab_bytes = slab_->mapped_bytes();
  s.slab_drains = slab_->drains();
  s.busy = busy_.load(std::memory_order_relaxed);
  s.retired_bytes = retired_bytes_;
  return s;
}

}  // namespace weir::partitions
