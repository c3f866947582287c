// A hash map with a hard size limit, for the recursor's caches (ordinary
// answers, ECS-scoped names, /0 answers, zone cuts).
//
// Every entry carries the clock second after which it is worthless (for an
// answer: the end of its stale window). When the cache is full, an insert of
// a new key evicts one entry chosen by sampled eviction: it looks at
// kSample entries picked at random and drops the one that expires soonest
// (an expired entry always expires sooner than a live one). This is O(1)
// per insert whatever the size, unlike a scan for expired entries, and it
// approximates "evict the soonest to expire" well (Redis uses the same
// scheme for its volatile-ttl policy).
//
// Entries live in a dense vector so a random one is one index away; the
// hash map holds the key's slot. Erasing moves the last slot into the hole.
//
// Threading: not synchronised; owned by one thread (the recursor's loop).
// Pointers and references returned stay valid until the next non-const call.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "weir/common/hash.h"

namespace weir::recursor {

template <typename K, typename V>
class BoundedCache {
 public:
  static constexpr size_t kSample = 8;

  struct Entry {
    K key;
    V value;
    uint32_t expires = 0;  // clock seconds; the entry is worthless from then on
  };

  explicit BoundedCache(size_t capacity, uint64_t seed = common::kGolden64)
      : capacity_(capacity == 0 ? 1 : capacity), rng_(seed == 0 ? 1 : seed) {}

  // `key` is a K or anything the index looks up heterogeneously (an
  // absl::string_view for std::string keys): a lookup then copies nothing.
  template <typename L = K>
  Entry* Find(const L& key) {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &slots_[it->second];
  }
  template <typename L = K>
  const Entry* Find(const L& key) const {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &slots_[it->second];
  }

  // The entry for `key`: the existing one (its value and expiry untouched),
  // or a new one holding `value` that expires at `expires`, after evicting
  // one entry when the cache is full.
  Entry& FindOrInsert(const K& key, V value, uint32_t expires) {
    if (Entry* e = Find(key)) return *e;
    if (slots_.size() >= capacity_) EvictOne();
    ++inserts_;
    index_.emplace(key, slots_.size());
    slots_.push_back(Entry{key, std::move(value), expires});
    return slots_.back();
  }

  // Stores `value` for `key` (replacing any previous one) until `expires`.
  Entry& Put(const K& key, V value, uint32_t expires) {
    Entry& e = FindOrInsert(key, V{}, expires);
    e.value = std::move(value);
    e.expires = expires;
    return e;
  }

  bool Erase(const K& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return false;
    const size_t slot = it->second;
    index_.erase(it);
    RemoveSlot(slot);
    return true;
  }

  // Drops every entry for which pred(Entry&) is true. O(size): for the
  // periodic sweep, never per query.
  template <typename Pred>
  size_t EraseIf(Pred pred) {
    size_t n = 0;
    for (size_t i = slots_.size(); i-- > 0;) {
      if (!pred(slots_[i])) continue;
      index_.erase(slots_[i].key);
      RemoveSlot(i);
      ++n;
    }
    return n;
  }
  // EraseIf for an operator's flush (weirctl cache flush): the entries
  // dropped are counted as flushed, apart from evictions and expiry.
  // pred(Entry&) may change the value it keeps (a partial flush).
  template <typename Pred>
  size_t EraseMatching(Pred pred) {
    const size_t n = EraseIf(pred);
    flushed_ += n;
    return n;
  }
  // fn(const Entry&) for every entry, in no particular order; false stops.
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (const Entry& e : slots_) {
      if (!fn(e)) return;
    }
  }
  size_t EraseExpired(uint32_t now) {
    return EraseIf([now](const Entry& e) { return e.expires <= now; });
  }

  void Clear() {
    slots_.clear();
    index_.clear();
  }
  size_t size() const { return slots_.size(); }
  size_t capacity() const { return capacity_; }
  uint64_t evictions() const { return evictions_; }
  uint64_t inserts() const { return inserts_; }  // new keys stored
  uint64_t flushed() const { return flushed_; }  // entries EraseMatching dropped

 private:
  uint64_t Next() {  // xorshift64*: cheap, and good enough to pick victims
    rng_ ^= rng_ >> 12;
    rng_ ^= rng_ << 25;
    rng_ ^= rng_ >> 27;
    return rng_ * 0x2545f4914f6cdd1dull;
  }

  void EvictOne() {
    if (slots_.empty()) return;
    size_t victim = 0;
    if (slots_.size() <= kSample) {
      for (size_t i = 1; i < slots_.size(); ++i) {
        if (slots_[i].expires < slots_[victim].expires) victim = i;
      }
    } else {
      victim = Next() % slots_.size();
      for (size_t k = 1; k < kSample; ++k) {
        const size_t i = Next() % slots_.size();
        if (slots_[i].expires < slots_[victim].expires) victim = i;
      }
    }
    index_.erase(slots_[victim].key);
    RemoveSlot(victim);
    ++evictions_;
  }

  // The index entry of `slot` is already gone.
  void RemoveSlot(size_t slot) {
    const size_t last = slots_.size() - 1;
    if (slot != last) {
      slots_[slot] = std::move(slots_[last]);
      index_[slots_[slot].key] = slot;
    }
    slots_.pop_back();
  }

  size_t capacity_;
  uint64_t rng_;
  uint64_t evictions_ = 0;
  uint64_t inserts_ = 0;
  uint64_t flushed_ = 0;
  std::vector<Entry> slots_;
  absl::flat_hash_map<K, size_t> index_;
};

}  // namespace weir::recursor
