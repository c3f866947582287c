#include "weir/partitions/swrr.h"

#include <algorithm>

namespace weir::partitions {

SwrrTable::SwrrTable(size_t slots) {
  size_t cap = 2;
  while (cap < slots) cap <<= 1;
  slots_.reset(new Slot[cap]());
  mask_ = cap - 1;
  size_t big = std::max<size_t>(16, cap / 64);
  size_t bcap = 1;
  while (bcap < big) bcap <<= 1;
  big_.reset(new BigSlot[bcap]());
  big_mask_ = bcap - 1;
}

SwrrTable::~SwrrTable() = default;

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

bool SwrrTable::Peek(uint64_t key_hash, uint64_t fingerprint, size_t n, int16_t* out) const {
  if (n == 0 || n > 64) return false;
  if (n > kInline) {
    const BigSlot& b = big_[(key_hash >> 7) & big_mask_];
    if (b.key != key_hash || b.fingerprint != fingerprint || b.n != n) return false;
    std::copy_n(b.current, n, out);
    return true;
  }
  const size_t base = key_hash & mask_ & ~size_t{1};
  for (size_t i = 0; i < 2; ++i) {
    const Slot& s = slots_[base | i];
    if (s.n == n && s.key == key_hash && s.fingerprint == fingerprint) {
      std::copy_n(s.current, n, out);
      return true;
    }
  }
  return false;
}

uint8_t SwrrTable::Pick(uint64_t key_hash, uint64_t fingerprint, std::span<const uint8_t> weights) {
  const size_t n = weights.size();
  if (n <= 1) return 0;
  if (n > kInline) {
    BigSlot& b = big_[(key_hash >> 7) & big_mask_];
    if (b.key != key_hash || b.fingerprint != fingerprint || b.n != n) {
      b.key = key_hash;
      b.fingerprint = fingerprint;
      b.n = static_cast<uint8_t>(n);
      b.total = 0;
      for (uint8_t w : weights) b.total = static_cast<uint16_t>(b.total + w);
      std::fill_n(b.current, 64, int16_t{0});
      ++resets_;
    }
    return Step(b.current, weights, b.total);
  }
  const size_t base = key_hash & mask_ & ~size_t{1};
  Slot* s = &slots_[base];
  if (!(s->n == n && s->key == key_hash && s->fingerprint == fingerprint)) {
    Slot* other = &slots_[base | 1];
    if (other->n == n && other->key == key_hash && other->fingerprint == fingerprint) {
      s = other;
    } else {
      // Reset: replace the same key's stale state, or the older of the pair.
      Slot* victim;
      if (s->key == key_hash && s->n != 0) {
        victim = s;
      } else if (other->key == key_hash && other->n != 0) {
        victim = other;
      } else if (s->n == 0) {
        victim = s;
      } else if (other->n == 0) {
        victim = other;
      } else {
        victim = static_cast<int32_t>(s->last_use - other->last_use) <= 0 ? s : other;
      }
      s = victim;
      s->key = key_hash;
      s->fingerprint = fingerprint;
      s->n = static_cast<uint8_t>(n);
      s->total = 0;
      for (uint8_t w : weights) s->total = static_cast<uint16_t>(s->total + w);
      std::fill_n(s->current, kInline, int16_t{0});
      ++resets_;
    }
  }
  s->last_use = ++tick_;
  return Step(s->current, weights, s->total);
}

bool WriteAnswer(const CacheEntry& e, AnswerMode mode, SwrrTable& swrr, uint32_t age, uint8_t* dst,
                 size_t cap, AnswerWrite* out, uint8_t* weights_out) {
  const std::span<const uint8_t> rec = e.records();
  const std::span<const uint16_t> ttls = e.ttl_offsets();
  const size_t n = e.address_count();
  if (n == 0 || mode == AnswerMode::kAll) {
    if (rec.size() > cap) return false;
    internal::CopyAged(dst, rec.data(), rec.size(), ttls, 0, age);
    out->bytes = static_cast<uint16_t>(rec.size());
    out->answer_count = e.answer_count();
    out->authority_count = e.authority_count();
    out->picked = 0;
    out->weight_count = static_cast<uint8_t>(n);
    if (weights_out != nullptr && n > 0) std::memcpy(weights_out, e.weights().data(), n);
    return true;
  }
  const size_t chain = e.chain_bytes();
  const size_t rsize = e.address_record_size();
  const std::span<const uint8_t> w = e.weights();
  const uint8_t pick = swrr.Pick(e.hash(), e.fingerprint(), w);
  const size_t total = chain + (mode == AnswerMode::kSingle ? rsize : rsize * n);
  if (total > cap) return false;
  if (chain != 0) internal::CopyAged(dst, rec.data(), chain, ttls.first(e.chain_count()), 0, age);
  uint8_t* p = dst + chain;
  // Every address record has its TTL 6 bytes in (2-byte pointer, type, class).
  auto put = [&](size_t i) {
    const uint8_t* r = rec.data() + chain + i * rsize;
    // Constant sizes: a variable-length memcpy this short costs more to set
    // up (rep movs) than to do.
    if (rsize == 16) {
      std::memcpy(p, r, 16);
    } else {
      std::memcpy(p, r, 28);
    }
    const uint32_t ttl = dns::Load32(r + 6);
    dns::Store32(p + 6, ttl > age ? ttl - age : 0);
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
  out->bytes = static_cast<uint16_t>(total);
  out->answer_count = static_cast<uint16_t>(e.chain_count() + written);
  out->authority_count = 0;
  out->picked = pick;
  out->weight_count = static_cast<uint8_t>(written);
  return true;
}

}  // namespace weir::partitions
