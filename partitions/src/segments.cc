#include "weir/partitions/segments.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "weir/common/hash.h"
#include "weir/common/rcu.h"
#include "weir/common/text.h"
#include "weir/dns/wire.h"
#include "weir/partitions/cache.h"

namespace weir::partitions {
namespace {

uint8_t MaxLen(uint8_t family) { return family == 4 ? 24 : 56; }

// The index's slots for `names`: a power of two, at most half full.
size_t SlotsFor(size_t names) {
  size_t n = 16;
  while (n < 2 * std::max<size_t>(names, 1)) n *= 2;
  return n;
}

bool SameKey(const Segment& a, const Segment& b) {
  return a.family == b.family && a.len == b.len && a.bits == b.bits;
}

bool Before(const Segment& a, const Segment& b) {
  if (a.family != b.family) return a.family < b.family;
  if (a.bits != b.bits) return a.bits < b.bits;
  return a.len < b.len;
}

// `inner` lies inside `outer` (or is it).
bool Inside(const Segment& inner, const Segment& outer) {
  return inner.len >= outer.len && outer.Contains(inner.family, inner.bits);
}

// Inserts `x` into the sorted `segs`, keeping them sorted.
void InsertSorted(std::vector<Segment>* segs, const Segment& x) {
  segs->insert(std::upper_bound(segs->begin(), segs->end(), x, Before), x);
}

// The other half of s's parent.
Segment SiblingOf(const Segment& s) {
  Segment t = s;
  t.bits = s.bits ^ (uint64_t{1} << (64 - s.len));
  return t;
}

// A predicate for the segments of the sorted `segs` past their time whose
// two halves are both segments: they serve no address.
auto CoveredBy(const std::vector<Segment>& segs, uint32_t now) {
  const auto has = [&](const Segment& x) {
    const auto it = std::lower_bound(segs.begin(), segs.end(), x, Before);
    return it != segs.end() && SameKey(*it, x);
  };
  std::vector<Segment> covered;
  for (const Segment& x : segs) {
    if (x.expires > now || x.len >= MaxLen(x.family)) continue;
    Segment lo = x;
    lo.len = static_cast<uint8_t>(x.len + 1);
    if (has(lo) && has(SiblingOf(lo))) covered.push_back(x);
  }
  return [covered = std::move(covered)](const Segment& x) {
    return !covered.empty() && std::binary_search(covered.begin(), covered.end(), x, Before);
  };
}

// The segment with s's key in the sorted `segs`, if any.
template <typename Vec>
auto FindKey(Vec& segs, const Segment& s) {
  const auto it = std::lower_bound(segs.begin(), segs.end(), s, Before);
  return it != segs.end() && SameKey(*it, s) ? it : segs.end();
}

void Store(const uint32_t& field, uint32_t v) {
  // The published set is immutable but for these fields (Segment).
  std::atomic_ref<uint32_t>(const_cast<uint32_t&>(field)).store(v, std::memory_order_relaxed);
}

}  // namespace

SegmentAddress SegmentAddressOf(const common::IpAddress& a) {
  SegmentAddress s;
  if (a.family == 4 || a.IsV4Mapped()) {
    s.family = 4;
    s.bits = uint64_t{dns::Load32(a.bytes.data() + (a.family == 4 ? 0 : 12))} << 32;
  } else {
    s.family = 6;
    for (int i = 0; i < 8; ++i) s.bits = (s.bits << 8) | a.bytes[i];
  }
  return s;
}

SegmentAddress SegmentAddressOf(const dns::ClientSubnet& e) {
  SegmentAddress s;
  if (e.family == dns::kEcsFamilyIpv4) {
    s.family = 4;
    s.bits = uint64_t{dns::Load32(e.address.data())} << 32;
  } else {
    s.family = 6;
    for (int i = 0; i < 8; ++i) s.bits = (s.bits << 8) | e.address[i];
  }
  return s;
}

std::string SegmentText(const Segment& s) {
  common::IpAddress a;
  a.family = s.family;
  const int bytes = s.family == 4 ? 4 : 8;
  const uint64_t v = s.family == 4 ? s.bits >> 32 : s.bits;
  for (int i = 0; i < bytes; ++i) a.bytes[i] = static_cast<uint8_t>(v >> (8 * (bytes - 1 - i)));
  return common::Cat(common::IpToString(a), "/", int{s.len});
}

uint64_t AnswerIdentity(const CacheEntry& e) {
  // The records with their TTLs zeroed (the addresses are cached sorted, so
  // the GSLB's order does not count), the weights, kind and RCODE.
  const std::span<const uint8_t> r = e.records();
  std::string buf(reinterpret_cast<const char*>(r.data()), r.size());
  for (const uint16_t off : e.ttl_offsets()) {
    if (size_t{off} + 4 <= buf.size()) std::memset(buf.data() + off, 0, 4);
  }
  uint64_t h = common::HashBytes(buf.data(), buf.size());
  if (e.has_weights()) {
    const std::span<const uint8_t> w = e.weights();
    h = common::HashBytes(w.data(), w.size(), h);
  }
  return common::HashWords(
      h, (uint64_t{static_cast<uint8_t>(e.kind())} << 16) | static_cast<uint64_t>(e.rcode()));
}

const Segment* SegmentSet::Match(const SegmentAddress& a) const {
  // The last segment sorting at or before the address, then out through
  // its enclosing segments to the first that contains it.
  Segment probe;
  probe.family = a.family;
  probe.bits = a.bits;
  probe.len = 64;
  auto it = std::upper_bound(segments_.begin(), segments_.end(), probe, Before);
  if (it == segments_.begin()) return nullptr;
  size_t i = static_cast<size_t>(it - segments_.begin()) - 1;
  while (true) {
    const Segment& s = segments_[i];
    if (s.Contains(a.family, a.bits)) return &s;
    if (s.parent == Segment::kNoParent) return nullptr;
    i = s.parent;
  }
}

SegmentTable::SegmentTable(size_t names, size_t total)
    : names_(std::max<size_t>(names, 1)), total_(std::max<size_t>(total, 1)) {
  capacity_ = SlotsFor(names_);
  slots_ = std::make_unique<Slot[]>(capacity_);
}

SegmentTable::~SegmentTable() {
  // No reader may be using the table any more.
  for (size_t i = 0; i < capacity_; ++i) delete slots_[i].set.load(std::memory_order_relaxed);
}

uint64_t SegmentTable::Hash(std::span<const uint8_t> qname, uint16_t qtype) {
  return common::HashBytes(qname.data(), qname.size(), qtype) | 1;  // never 0 (free)
}

const SegmentSet* SegmentTable::Find(uint64_t hash, std::span<const uint8_t> qname, uint16_t qtype) const {
  const size_t mask = capacity_ - 1;
  for (size_t i = hash & mask, n = 0; n < capacity_; i = (i + 1) & mask, ++n) {
    const uint64_t h = slots_[i].hash.load(std::memory_order_acquire);
    if (h == 0) return nullptr;
    if (h != hash) continue;
    const SegmentSet* s = slots_[i].set.load(std::memory_order_acquire);
    if (s != nullptr && s->qtype_ == qtype && s->qname_.len == qname.size() &&
        std::memcmp(s->qname_.bytes.data(), qname.data(), qname.size()) == 0) {
      return s;
    }
  }
  return nullptr;
}

SegmentTable::Slot* SegmentTable::SlotFor(uint64_t hash, std::span<const uint8_t> qname, uint16_t qtype) {
  // The name's own slot, else the first free one on its probe path: a
  // slot whose set is null (its name was swept, or a learn stored nothing)
  // or, at the end of the path, an empty one. Readers skip slots without a
  // set, so a free slot may take another name's hash at any time.
  const size_t mask = capacity_ - 1;
  Slot* free_slot = nullptr;
  for (size_t i = hash & mask, n = 0; n < capacity_; i = (i + 1) & mask, ++n) {
    Slot& slot = slots_[i];
    const uint64_t h = slot.hash.load(std::memory_order_relaxed);
    if (h == 0) {
      if (free_slot == nullptr) free_slot = &slot;
      break;
    }
    const SegmentSet* s = slot.set.load(std::memory_order_relaxed);
    if (s == nullptr) {
      if (free_slot == nullptr) free_slot = &slot;
      continue;
    }
    if (h == hash && s->qtype_ == qtype && s->qname_.len == qname.size() &&
        std::memcmp(s->qname_.bytes.data(), qname.data(), qname.size()) == 0) {
      return &slot;
    }
  }
  if (free_slot == nullptr || stats_.names.load(std::memory_order_relaxed) >= names_) {
    stats_.overflow.Add();
    return nullptr;
  }
  free_slot->hash.store(hash, std::memory_order_release);
  return free_slot;
}

void SegmentTable::Publish(Slot* slot, std::unique_ptr<SegmentSet> next) {
  const SegmentSet* old = slot->set.load(std::memory_order_relaxed);
  const size_t old_n = old != nullptr ? old->segments_.size() : 0;
  const size_t new_n = next->segments_.size();
  if (old == nullptr && new_n != 0) stats_.names.fetch_add(1, std::memory_order_relaxed);
  if (old != nullptr && new_n == 0) stats_.names.fetch_sub(1, std::memory_order_relaxed);
  segment_bytes_ = segment_bytes_ + new_n * sizeof(Segment) - old_n * sizeof(Segment);
  stats_.segments.store(stats_.segments.load(std::memory_order_relaxed) + new_n - old_n,
                        std::memory_order_relaxed);
  // A name without segments frees its slot (readers skip a null set).
  slot->set.store(new_n != 0 ? next.release() : nullptr, std::memory_order_release);
  if (old != nullptr)
    common::RcuRetire(const_cast<SegmentSet*>(old), [](void* p) { delete static_cast<SegmentSet*>(p); });
}

void SegmentTable::Link(std::vector<Segment>* segs) {
  // Each segment's closest enclosing one: a stack of the open prefixes.
  std::vector<uint16_t> open;
  for (size_t i = 0; i < segs->size(); ++i) {
    Segment& x = (*segs)[i];
    while (!open.empty() && !Inside(x, (*segs)[open.back()])) open.pop_back();
    x.parent = open.empty() ? Segment::kNoParent : open.back();
    open.push_back(static_cast<uint16_t>(i));
  }
}

size_t SegmentTable::Sweep(uint32_t now, uint32_t horizon, size_t max_slots) {
  size_t dropped = 0;
  for (size_t n = 0; n < std::min(max_slots, capacity_); ++n) {
    Slot& slot = slots_[sweep_cursor_];
    sweep_cursor_ = (sweep_cursor_ + 1) & (capacity_ - 1);
    const SegmentSet* old = slot.set.load(std::memory_order_relaxed);
    if (old == nullptr) continue;
    // Long past their time, or past it and serving no address (both
    // halves are segments: refreshes in place leave such a parent).
    const auto covered = CoveredBy(old->segments_, now);
    const auto gone = [&](const Segment& x) { return uint64_t{x.expires} + horizon <= now || covered(x); };
    if (std::none_of(old->segments_.begin(), old->segments_.end(), gone)) continue;
    auto next = std::make_unique<SegmentSet>();
    next->qname_ = old->qname_;
    next->qtype_ = old->qtype_;
    next->segments_ = old->segments_;
    dropped += static_cast<size_t>(std::erase_if(next->segments_, gone));
    Link(&next->segments_);
    Publish(&slot, std::move(next));
  }
  stats_.swept.Add(dropped);
  return dropped;
}

SegmentTable::Learned SegmentTable::Learn(const dns::NameKey& qname, uint16_t qtype,
                                          const dns::ClientSubnet& asked, uint8_t scope, uint64_t fingerprint,
                                          uint32_t ttl, uint32_t now, size_t max_segments) {
  Learned out;
  if (ttl == 0) return out;  // nothing to serve: cached for the subnet, not learned
  const uint64_t hash = Hash(qname.span(), qtype);
  Slot* slot = SlotFor(hash, qname.span(), qtype);
  if (slot == nullptr) return out;
  max_segments = std::clamp<size_t>(max_segments, 1, kMaxMaxSegments);
  const SegmentSet* old = slot->set.load(std::memory_order_relaxed);

  const SegmentAddress a = SegmentAddressOf(asked);
  Segment s;
  s.family = a.family;
  s.len = std::min({scope, asked.source_prefix, MaxLen(a.family)});
  s.bits = PrefixBits(a.bits, s.len);
  s.expires = now + ttl;
  s.ttl = ttl;
  s.learned = now;
  s.fingerprint = fingerprint;

  // The same segment with the same answer, where the learn changes nothing
  // else: no longer segment holds the subnet asked (it would be absorbed),
  // no live sibling with this answer (they would merge), the bound kept.
  if (old != nullptr && old->segments_.size() <= max_segments) {
    const auto x = FindKey(old->segments_, s);
    bool refresh = x != old->segments_.end() && x->fingerprint == fingerprint && old->Match(a) == &*x;
    if (refresh && s.len > 0) {
      const auto sib = FindKey(old->segments_, SiblingOf(s));
      refresh = sib == old->segments_.end() || sib->fingerprint != fingerprint || sib->Expires() <= now;
    }
    if (refresh) {
      Store(x->ttl, ttl);
      Store(x->learned, now);
      Store(x->expires, now + ttl);
      stats_.refreshed.Add();
      stats_.learned.Add();
      out.stored = true;
      out.answer = x->answer;
      return out;
    }
  }
  // Room for the new segment from the start: one allocation, one copy.
  std::vector<Segment> segs;
  if (old != nullptr) {
    segs.reserve(old->segments_.size() + 1);
    segs.assign(old->segments_.begin(), old->segments_.end());
  }
  // The answer's partition: the one its identity has in this set already,
  // else a new one.
  s.answer = 0;
  for (const Segment& x : segs) {
    if (x.fingerprint == fingerprint) {
      s.answer = x.answer;
      break;
    }
  }
  if (s.answer == 0) s.answer = AnswerPartition(next_answer_++);

  // Longer segments that hold the subnet asked: the answer says it is part
  // of a wider segment now. (Other segments inside the new one stay: a GSLB
  // may nest its segments, e.g. a default answer of scope 0 around them.)
  const auto contradicted = [&](const Segment& x) { return Inside(x, s) && x.Contains(a.family, a.bits); };
  const Segment* same = nullptr;
  size_t absorbed = 0;
  const Segment* enclosing = nullptr;
  for (const Segment& x : segs) {
    if (SameKey(x, s)) {
      same = &x;
    } else if (contradicted(x)) {
      ++absorbed;
    } else if (Inside(s, x) && (enclosing == nullptr || x.len > enclosing->len)) {
      enclosing = &x;
    }
  }
  // The same segment with the same answer continues its SWRR sequence.
  s.id = same != nullptr && same->fingerprint == fingerprint ? same->id : next_segment_++;
  const bool is_new = same == nullptr;
  const bool split = is_new && enclosing != nullptr && enclosing->fingerprint != fingerprint;
  // The answers of segments that go: maybe unused after this learn.
  std::vector<Partition> gone;
  const auto remove_if = [&](auto pred) {
    std::erase_if(segs, [&](const Segment& x) {
      if (!pred(x)) return false;
      gone.push_back(x.answer);
      return true;
    });
  };
  remove_if(contradicted);

  size_t merges = 0, bound_drops = 0;
  // ORTC: while the sibling holds the same answer (and is still served),
  // the two are their parent.
  while (s.len > 0) {
    const auto it = FindKey(segs, SiblingOf(s));
    if (it == segs.end() || it->fingerprint != fingerprint || it->expires <= now) break;
    Segment parent = s;
    parent.len = static_cast<uint8_t>(s.len - 1);
    parent.bits = PrefixBits(s.bits, parent.len);
    parent.expires = std::min(s.expires, it->expires);
    parent.ttl = std::min(s.ttl, it->ttl);
    parent.id = next_segment_++;
    segs.erase(it);
    // A segment that was the parent already is replaced.
    remove_if([&](const Segment& x) { return SameKey(x, parent); });
    ++merges;
    s = parent;
  }
  InsertSorted(&segs, s);
  // Before the bound, which would take them for victims first (past their
  // time) and drop the live segments around them.
  remove_if(CoveredBy(segs, now));

  // The bound: what is past its time first, then the least recently
  // learned, never the segment just learned; each dropped with the
  // segments around it: their answers are not the dropped one's
  // subscribers' (that is why it was a segment of its own), and those
  // subscribers must be asked again, never answered wrong. (Merging it
  // into its sibling would keep its subscribers answered, with the
  // sibling's answer: a mis-scheduled answer each.) One pass in victim
  // order, so a bound lowered by a tag reload costs O(n log n).
  if (segs.size() > max_segments) {
    Link(&segs);
    std::vector<uint32_t> order;
    order.reserve(segs.size());
    for (uint32_t i = 0; i < segs.size(); ++i) {
      if (!SameKey(segs[i], s)) order.push_back(i);
    }
    std::stable_sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
      const bool x_over = segs[x].expires <= now, y_over = segs[y].expires <= now;
      return x_over != y_over ? x_over : segs[x].learned < segs[y].learned;
    });
    std::vector<bool> drop(segs.size());
    size_t left = segs.size();
    for (const uint32_t v : order) {
      if (left <= max_segments) break;
      if (drop[v]) continue;
      drop[v] = true;
      --left;
      ++bound_drops;
      for (uint16_t p = segs[v].parent; p != Segment::kNoParent; p = segs[p].parent) {
        if (!drop[p] && !SameKey(segs[p], s)) {
          drop[p] = true;
          --left;
        }
      }
    }
    size_t i = 0;
    remove_if([&](const Segment&) { return drop[i++]; });
  }

  const size_t old_n = old != nullptr ? old->segments_.size() : 0;
  if (segs.size() > old_n && stats_.segments.load(std::memory_order_relaxed) - old_n + segs.size() > total_) {
    stats_.overflow.Add();
    return out;
  }
  Link(&segs);
  // Answers of the segments that went which no segment uses now.
  std::sort(gone.begin(), gone.end());
  gone.erase(std::unique(gone.begin(), gone.end()), gone.end());
  for (const Partition g : gone) {
    if (std::none_of(segs.begin(), segs.end(), [&](const Segment& y) { return y.answer == g; }))
      out.unused.push_back(g);
  }
  if (is_new) stats_.new_segments.Add();
  if (split) stats_.splits.Add();
  stats_.absorbed.Add(absorbed);
  stats_.merges.Add(merges);
  stats_.bound_drops.Add(bound_drops);
  auto next = std::make_unique<SegmentSet>();
  next->qname_ = qname;
  next->qtype_ = qtype;
  next->segments_ = std::move(segs);
  Publish(slot, std::move(next));
  stats_.learned.Add();
  out.stored = true;
  out.answer = s.answer;
  return out;
}

size_t SegmentTable::MemoryBound(size_t names, size_t total) {
  return SlotsFor(names) * sizeof(Slot) + total * sizeof(Segment) + names * sizeof(SegmentSet);
}

size_t SegmentTable::memory_bytes() const {
  return capacity_ * sizeof(Slot) + segment_bytes_ +
         stats_.names.load(std::memory_order_relaxed) * sizeof(SegmentSet);
}

}  // namespace weir::partitions
