// Learned subscriber segments for adaptive-level names (docs/behaviour.md#adaptive-segments).
//
// A name tagged level=adaptive is asked upstream with each subscriber's own
// /24 (/56) as ECS; the GSLB's answer says, with its ECS scope, how far that
// answer applies: the segment. The SegmentTable keeps, per (name, type), the
// segments learned so far as a set of prefixes, each with the answer it was
// given and until when it holds (the answer's TTL). Workers find a client's
// segment by longest-prefix match and read the answer's cache entry, which
// is keyed by the answer, not the segment: segments with the same answer
// (the same records, addresses and weights) share one entry
// (AnswerPartition), so the cache holds one copy per distinct answer.
//
// The learning (SegmentTable::Learn, on the forwarder thread):
//  * a learned segment replaces the longer segments that hold the subnet
//    asked (the GSLB now answers it for a wider prefix); other segments
//    inside it stay (GSLBs nest their segments: a default answer of scope
//    0 around specific ones);
//  * inside a wider segment with another answer it is a split: the longest
//    match finds it first;
//  * two sibling segments (the halves of one prefix) with the same answer
//    are merged into their parent, repeatedly (ORTC: the fewest prefixes
//    that give every address the answer it was given);
//  * past the name's bound (max_segments), segments past their time go
//    first, then the least recently learned one, with the segments around
//    it (its subscribers are asked again, never given another segment's
//    answer);
//  * a segment learned again with the same answer, where nothing else
//    changes (no longer segment holds the subnet, no sibling to merge
//    with), is refreshed in place: its time moves on in the published set,
//    without a copy (the steady state: every segment is learned again once
//    per TTL, and a hot name has thousands).
// A scope of 0 is the name's answer for every subscriber of that family:
// the /0 segment, which every longer segment overrides.
//
// Threading: one writer thread (Learn, Sweep); readers (Find, Match) on
// RCU reader threads (common/rcu.h) get published SegmentSets, valid until
// their next quiescent state; a replaced set is freed after a grace period.
// A published set never changes but for its segments' expires, ttl and
// learned (a refresh in place: atomic, read with Segment::Expires() etc.).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "weir/common/ip.h"
#include "weir/common/owned_counter.h"
#include "weir/dns/message.h"
#include "weir/partitions/partition.h"

namespace weir::partitions {

class CacheEntry;

// One learned segment: a prefix of the subscriber space and its answer.
// The writer moves `expires`, `ttl` and `learned` on in place when the
// same segment is learned again with the same answer (a refresh); other
// threads read them with Expires() and Ttl().
struct Segment {
  static constexpr uint16_t kNoParent = UINT16_MAX;
  uint64_t bits = 0;            // the prefix, left-aligned (IPv4: the address << 32), zero past `len`
  uint8_t family = 4;           // 4 or 6
  uint8_t len = 0;              // 0..24 (IPv4), 0..56 (IPv6)
  uint16_t parent = kNoParent;  // the closest enclosing segment's index in the set
  uint32_t expires = 0;         // the cache clock's second it stops being served
  uint32_t ttl = 0;             // of the answer that taught it
  uint32_t learned = 0;         // when it was last learned (the bound's "least used")
  Partition answer = 0;         // AnswerPartition of its answer's cache entry
  uint64_t fingerprint = 0;     // its answer's identity (AnswerIdentity)
  uint64_t id = 0;              // unique per segment life: its SWRR sequence (per subscriber segment)

  bool Contains(uint8_t f, uint64_t addr_bits) const {
    return f == family && (len == 0 || ((addr_bits ^ bits) >> (64 - len)) == 0);
  }
  uint32_t Expires() const { return Load(expires); }
  uint32_t Ttl() const { return Load(ttl); }
  uint32_t Learned() const { return Load(learned); }

 private:
  static_assert(std::atomic_ref<uint32_t>::is_always_lock_free);
  static_assert(std::atomic_ref<uint32_t>::required_alignment <= alignof(uint32_t));
  static uint32_t Load(const uint32_t& field) {
    return std::atomic_ref<uint32_t>(const_cast<uint32_t&>(field)).load(std::memory_order_relaxed);
  }
};

// The prefix bits Segment::bits compares: an IPv4 address (or v4-mapped
// IPv6) in the top 32 bits, an IPv6 address's first 8 bytes.
struct SegmentAddress {
  uint8_t family = 4;
  uint64_t bits = 0;
};
SegmentAddress SegmentAddressOf(const common::IpAddress& a);
// The same for an ECS address (the ClientSubnet's family code and bytes).
SegmentAddress SegmentAddressOf(const dns::ClientSubnet& s);
// `bits` cut to its first `len` bits.
inline uint64_t PrefixBits(uint64_t bits, uint8_t len) {
  return len == 0 ? 0 : bits & (~uint64_t{0} << (64 - len));
}
// "10.1.0.0/16", "2001:db8::/48".
std::string SegmentText(const Segment& s);

// The identity of a cached answer: equal for two entries with the same
// kind, RCODE, records (TTLs aside) and weights; what segments compare.
uint64_t AnswerIdentity(const CacheEntry& e);

// The segments of one (name, type): immutable once published, but for the
// times a refresh moves on (Segment).
class SegmentSet {
 public:
  const dns::NameKey& qname() const { return qname_; }
  uint16_t qtype() const { return qtype_; }
  // Sorted by (family, bits, len): an enclosing segment before the ones
  // inside it.
  std::span<const Segment> segments() const { return segments_; }
  // The longest segment containing `a`, or null (whether or not it is
  // still to be served: see Segment::expires).
  const Segment* Match(const SegmentAddress& a) const;

 private:
  friend class SegmentTable;
  dns::NameKey qname_;
  uint16_t qtype_ = 0;
  std::vector<Segment> segments_;
};

struct SegmentStats {
  common::OwnedCounter learned;       // answers learned from (Learn calls that stored)
  common::OwnedCounter refreshed;     // of them, refreshes in place (same segment, same answer)
  common::OwnedCounter new_segments;  // segments created by a learn (not merges)
  common::OwnedCounter splits;        // learned inside a wider segment with another answer
  common::OwnedCounter merges;        // sibling pairs with one answer merged (ORTC)
  common::OwnedCounter absorbed;      // longer segments replaced by a wider one learned for their subnet
  common::OwnedCounter bound_drops;   // dropped to keep a name within max_segments
  common::OwnedCounter overflow;      // answers not learned: names or total segments full
  common::OwnedCounter swept;         // dropped by Sweep (long past their TTL, or covered)
  std::atomic<uint64_t> names{0};
  std::atomic<uint64_t> segments{0};
};

class SegmentTable {
 public:
  static constexpr size_t kDefaultNames = 65536;
  static constexpr size_t kDefaultTotal = 1000000;
  static constexpr size_t kMaxMaxSegments = 65534;  // Segment::parent's range

  // Room for `names` (name, type) pairs (the index takes 32 to 64 bytes per
  // name) and `total` segments over all of them (sizeof(Segment) each): a
  // learn that would pass either is not stored (stats().overflow).
  explicit SegmentTable(size_t names = kDefaultNames, size_t total = kDefaultTotal);
  ~SegmentTable();
  SegmentTable(const SegmentTable&) = delete;
  SegmentTable& operator=(const SegmentTable&) = delete;

  // ---- Readers.
  static uint64_t Hash(std::span<const uint8_t> qname, uint16_t qtype);
  // The set of (qname, type), or null when nothing was learned for it.
  const SegmentSet* Find(uint64_t hash, std::span<const uint8_t> qname, uint16_t qtype) const;
  const SegmentSet* Find(std::span<const uint8_t> qname, uint16_t qtype) const {
    return Find(Hash(qname, qtype), qname, qtype);
  }

  // ---- The writer.
  struct Learned {
    bool stored = false;   // false: the table is full (cache the answer as level=subnet)
    Partition answer = 0;  // where the answer's entry goes (AnswerPartition)
    // Answers no segment uses any more: their entries may go.
    std::vector<Partition> unused;
  };
  // The GSLB answered `asked` (the ECS source sent: a /24 or /56) with an
  // answer of identity `fingerprint` for `ttl` seconds, and ECS scope
  // `scope` (cut to the source's length). `now`: the cache clock.
  Learned Learn(const dns::NameKey& qname, uint16_t qtype, const dns::ClientSubnet& asked, uint8_t scope,
                uint64_t fingerprint, uint32_t ttl, uint32_t now, size_t max_segments);
  // Drops the segments of up to `max_slots` index slots (from where the
  // last call stopped) that ended `horizon` seconds or more before `now`,
  // and those past their time whose two halves are both segments (they
  // serve no address); a name left with none frees its slot. Returns the
  // segments dropped.
  size_t Sweep(uint32_t now, uint32_t horizon, size_t max_slots);
  // Calls `visit` with each name's set (reader or writer thread).
  template <typename F>
  void ForEach(F visit) const {
    for (size_t i = 0; i < capacity_; ++i) {
      const SegmentSet* s = slots_[i].set.load(std::memory_order_acquire);
      if (s != nullptr) visit(*s);
    }
  }

  const SegmentStats& stats() const { return stats_; }
  size_t capacity() const { return names_; }
  size_t memory_bytes() const;
  // What a table of (names, total) holds at most.
  static size_t MemoryBound(size_t names, size_t total);

 private:
  struct Slot {
    std::atomic<uint64_t> hash{0};  // 0: free
    std::atomic<const SegmentSet*> set{nullptr};
  };
  // The slot of (qname, type): its own, or a free one (null when full).
  Slot* SlotFor(uint64_t hash, std::span<const uint8_t> qname, uint16_t qtype);
  void Publish(Slot* slot, std::unique_ptr<SegmentSet> next);
  // Links each of a set's segments (sorted) to its closest enclosing one.
  static void Link(std::vector<Segment>* segs);

  size_t names_ = 0;     // the bound on (name, type) pairs
  size_t total_ = 0;     // the bound on segments
  size_t capacity_ = 0;  // slots (a power of two, at least 2x names_)
  size_t sweep_cursor_ = 0;
  std::unique_ptr<Slot[]> slots_;
  uint64_t next_answer_ = 1;
  uint64_t next_segment_ = 1;
  size_t segment_bytes_ = 0;  // of the published sets' segments
  SegmentStats stats_;
};

}  // namespace weir::partitions
