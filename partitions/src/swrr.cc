#include "weir/partitions/swrr.h"

#include <algorithm>
#include <cstring>

#include "weir/common/copy.h"
#include "weir/common/hash.h"
#include "weir/partitions/weight_factors.h"

namespace weir::partitions {

SwrrTable::SwrrTable(size_t capacity) {
  capacity_ = std::clamp<size_t>(capacity, 1, size_t{kNone} - 1);
  // Default-initialised: the pages of a state are touched when it is first
  // used, so a big table costs memory as the hot set grows.
  states_.reset(new State[capacity_]);
  chain_.reset(new uint32_t[capacity_]);
  lru_.reset(new Link[capacity_]);
  size_t buckets = 2;
  unsigned bits = 1;
  while (buckets < capacity_) {
    buckets <<= 1;
    ++bits;
  }
  bucket_shift_ = 64 - bits;
  buckets_.reset(new uint32_t[buckets]);
  std::fill_n(buckets_.get(), buckets, kNone);
}

std::span<const uint8_t> SwrrTable::CalibratedWeights(const CacheEntry& e, const FactorSet& f,
                                                      uint64_t* fingerprint) {
  const uint64_t fp = MixPickDigest(e.fingerprint(), f.digest());
  *fingerprint = fp;
  if (!memo_) memo_.reset(new MemoSlot[kMemoSlots]);
  MemoSlot& m = memo_[common::FastMix64(fp) & (kMemoSlots - 1)];
  const uint8_t n = e.address_count();
  if (m.fingerprint != fp || m.n != n) {
    f.PickWeights(e, m.weights);
    m.fingerprint = fp;
    m.n = n;
  }
  return {m.weights, n};
}

SwrrTable::~SwrrTable() = default;
SwrrTable::SwrrTable(SwrrTable&&) noexcept = default;
SwrrTable& SwrrTable::operator=(SwrrTable&&) noexcept = default;

uint8_t SwrrTable::Step(int16_t* current, std::span<const uint8_t> weights, uint16_t total) {
  // nginx's smooth weighted round-robin: add each weight, pick the largest
  // (first on ties), take the total back from it.
  size_t best = 0;
  int best_value = INT32_MIN;
  for (size_t i = 0; i < weights.size(); ++i) {
    const int v = current[i] + weights[i];
    current[i] = static_cast<int16_t>(v);
    if (v > best_value) {
      best_value = v;
      best = i;
    }
  }
  current[best] = static_cast<int16_t>(current[best] - total);
  return static_cast<uint8_t>(best);
}

__attribute__((always_inline)) inline uint32_t SwrrTable::Find(uint64_t lineage) const {
  for (uint32_t i = buckets_[Bucket(lineage)]; i != kNone; i = chain_[i]) {
    if (states_[i].lineage == lineage) [[likely]]
      return i;
  }
  return kNone;
}

__attribute__((always_inline)) inline void SwrrTable::Unlink(uint32_t i) {
  const Link l = lru_[i];
  if (l.prev != kNone) {
    lru_[l.prev].next = l.next;
  } else {
    head_ = l.next;
  }
  if (l.next != kNone) {
    lru_[l.next].prev = l.prev;
  } else {
    tail_ = l.prev;
  }
}

__attribute__((always_inline)) inline void SwrrTable::PushFront(uint32_t i) {
  lru_[i] = {kNone, head_};
  if (head_ != kNone) lru_[head_].prev = i;
  head_ = i;
  if (tail_ == kNone) tail_ = i;
}

uint32_t SwrrTable::Take() {
  if (used_ < capacity_) return used_++;
  // Full: the least recently picked key gives up its state.
  const uint32_t victim = tail_;
  Unlink(victim);
  uint32_t* link = &buckets_[Bucket(states_[victim].lineage)];
  while (*link != victim) link = &chain_[*link];
  *link = chain_[victim];
  stats_->evictions.Add();
  return victim;
}

void SwrrTable::Start(State& s, uint64_t fingerprint, std::span<const uint8_t> weights) {
  s.fingerprint = fingerprint;
  s.n = static_cast<uint8_t>(weights.size());
  s.total = 0;
  for (uint8_t w : weights) s.total = static_cast<uint16_t>(s.total + w);
  std::fill_n(s.current, weights.size(), int16_t{0});
}

__attribute__((noinline)) uint32_t SwrrTable::Insert(uint64_t lineage, uint64_t fingerprint,
                                                     std::span<const uint8_t> weights) {
  const uint32_t i = Take();
  State& s = states_[i];
  s.lineage = lineage;
  Start(s, fingerprint, weights);
  const size_t b = Bucket(lineage);
  chain_[i] = buckets_[b];
  buckets_[b] = i;
  PushFront(i);
  stats_->starts.Add();
  return i;
}

uint8_t SwrrTable::Pick(uint64_t lineage, uint64_t fingerprint, std::span<const uint8_t> weights) {
  const size_t n = weights.size();
  if (n <= 1 || n > kMaxAddresses) return 0;
  uint32_t i = Find(lineage);
  if (i == kNone) [[unlikely]] {
    i = Insert(lineage, fingerprint, weights);
  } else {
    State& s = states_[i];
    if (s.fingerprint != fingerprint || s.n != n) [[unlikely]] {
      // The set changed (a refresh brought other addresses or weights).
      Start(s, fingerprint, weights);
      stats_->resets.Add();
    }
    if (i != head_) {
      Unlink(i);
      PushFront(i);
    }
  }
  State& s = states_[i];
  return Step(s.current, weights, s.total);
}

bool SwrrTable::Peek(uint64_t lineage, uint64_t fingerprint, size_t n, int16_t* out) const {
  if (n == 0 || n > kMaxAddresses) return false;
  const uint32_t i = Find(lineage);
  if (i == kNone) return false;
  const State& s = states_[i];
  if (s.fingerprint != fingerprint || s.n != n) return false;
  std::copy_n(s.current, n, out);
  return true;
}

namespace {

// The SWRR pick for `e`'s address set: by its weights, or with `factors`
// by its calibrated pick weights, as a sequence of their own; a non-zero
// `sequence` (a subscriber segment's) picks in a sequence of its own too.
inline uint8_t PickFor(const CacheEntry& e, SwrrTable& swrr, const FactorSet* factors, uint64_t sequence) {
  if (sequence != 0) [[unlikely]]
    return swrr.Pick(e.lineage() ^ common::Mix64(sequence), e.fingerprint(), e.weights());
  if (factors == nullptr) return swrr.Pick(e);
  uint64_t fingerprint;
  const std::span<const uint8_t> picking = swrr.CalibratedWeights(e, *factors, &fingerprint);
  return swrr.Pick(e.lineage(), fingerprint, picking);
}

// The bytes WriteAnswer writes for `e` in `mode`: all records, or the chain
// and one or every address record.
inline size_t RecordBytes(const CacheEntry& e, AnswerMode mode) {
  const size_t n = e.address_count();
  if (n == 0 || mode == AnswerMode::kAll) return e.records().size();
  return e.chain_bytes() + e.address_record_size() * (mode == AnswerMode::kSingle ? 1 : n);
}

// Writes the address records of `e` at `p` in `mode` (kSingle or kOrdered),
// `pick` first, with the TTLs `ttl` says; returns how many. The weights of
// the written records go to `weights_out` (if not null) in written order.
inline size_t PutAddresses(const CacheEntry& e, AnswerMode mode, uint8_t pick, AnswerTtl ttl, uint8_t* p,
                           uint8_t* weights_out) {
  const uint8_t* rec = e.records().data() + e.chain_bytes();
  const size_t rsize = e.address_record_size();
  const size_t n = e.address_count();
  const std::span<const uint8_t> w = e.weights();
  // Every address record has its TTL 6 bytes in (2-byte pointer, type, class).
  auto put = [&](size_t i) {
    const uint8_t* r = rec + i * rsize;
    // Constant sizes: a variable-length memcpy this short costs more to set
    // up (rep movs) than to do.
    if (rsize == 16) {
      std::memcpy(p, r, 16);
    } else {
      std::memcpy(p, r, 28);
    }
    dns::Store32(p + 6, ttl.Of(dns::Load32(r + 6)));
    p += rsize;
  };
  put(pick);
  if (weights_out != nullptr) weights_out[0] = w[pick];
  size_t written = 1;
  if (mode == AnswerMode::kOrdered) {
    for (size_t i = 0; i < n; ++i) {
      if (i == pick) continue;
      put(i);
      if (weights_out != nullptr) weights_out[written] = w[i];
      ++written;
    }
  }
  return written;
}

}  // namespace

bool WriteAnswer(const CacheEntry& e, AnswerMode mode, SwrrTable& swrr, AnswerTtl ttl, uint8_t* dst,
                 size_t cap, AnswerWrite* out, uint8_t* weights_out, const FactorSet* factors,
                 uint64_t sequence) {
  const std::span<const uint8_t> rec = e.records();
  const std::span<const uint16_t> ttls = e.ttl_offsets();
  const size_t n = e.address_count();
  if (n == 0 || mode == AnswerMode::kAll) {
    if (rec.size() > cap) return false;
    internal::CopyAged(dst, rec.data(), rec.size(), ttls, 0, ttl);
    out->bytes = static_cast<uint16_t>(rec.size());
    out->answer_count = e.answer_count();
    out->authority_count = e.authority_count();
    out->picked = 0;
    out->weight_count = static_cast<uint8_t>(n);
    if (weights_out != nullptr && n > 0) std::memcpy(weights_out, e.weights().data(), n);
    return true;
  }
  const size_t chain = e.chain_bytes();
  const uint8_t pick = PickFor(e, swrr, factors, sequence);
  const size_t total = RecordBytes(e, mode);
  if (total > cap) return false;
  if (chain != 0) internal::CopyAged(dst, rec.data(), chain, ttls.first(e.chain_count()), 0, ttl);
  const size_t written = PutAddresses(e, mode, pick, ttl, dst + chain, weights_out);
  out->bytes = static_cast<uint16_t>(total);
  out->answer_count = static_cast<uint16_t>(e.chain_count() + written);
  out->authority_count = 0;
  out->picked = pick;
  out->weight_count = static_cast<uint8_t>(written);
  return true;
}

size_t WriteMessage(const CacheEntry& e, AnswerMode mode, SwrrTable& swrr, AnswerTtl ttl,
                    const uint8_t* query, uint16_t flags, uint8_t* dst, size_t cap, AnswerWrite* out,
                    const FactorSet* factors, uint64_t sequence) {
  const size_t head = e.head_bytes();
  const size_t n = e.address_count();
  const bool as_cached = n == 0 || mode == AnswerMode::kAll;
  const size_t records = RecordBytes(e, mode);
  if (head + records > cap) return 0;
  // The template's header with what belongs to the query (its ID, RD and
  // CD), the query's question as it came (the client's spelling, 0x20), the
  // template's records up to what the pick chooses (all when nothing is).
  const uint8_t* header = e.answer_header();
  std::memcpy(dst, header, dns::kHeaderSize);
  std::memcpy(dst, query, 2);
  dns::Store16(dst + dns::kOffFlags, static_cast<uint16_t>(dns::Load16(header + dns::kOffFlags) | flags |
                                                           (dns::Load16(query + dns::kOffFlags) &
                                                            (dns::flag::kRd | dns::flag::kCd))));
  common::CopyShort(dst + dns::kHeaderSize, query + dns::kHeaderSize, head - dns::kHeaderSize);
  common::CopyShort(dst + head, header + dns::kHeaderSize, as_cached ? records : e.chain_bytes());
  uint8_t* rec = dst + head;
  const std::span<const uint16_t> ttls = e.ttl_offsets();
  const bool aged = ttl.age != 0 || ttl.floor != 0;  // else every TTL stays as cached
  out->bytes = static_cast<uint16_t>(records);
  if (as_cached) {
    if (aged) dns::RewriteTtls(rec, ttls, 0, ttl);
    out->answer_count = e.answer_count();
    out->authority_count = e.authority_count();
    out->picked = 0;
    out->weight_count = static_cast<uint8_t>(n);
    return head + records;
  }
  if (aged && e.chain_count() != 0) dns::RewriteTtls(rec, ttls.first(e.chain_count()), 0, ttl);
  const uint8_t pick = PickFor(e, swrr, factors, sequence);
  const size_t written = PutAddresses(e, mode, pick, ttl, rec + e.chain_bytes(), nullptr);
  out->answer_count = static_cast<uint16_t>(e.chain_count() + written);
  out->authority_count = 0;
  out->picked = pick;
  out->weight_count = static_cast<uint8_t>(written);
  dns::Store16(dst + dns::kOffAncount, out->answer_count);
  return head + records;
}

}  // namespace weir::partitions
