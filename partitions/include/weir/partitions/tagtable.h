// TagTable: domain suffix -> tag (docs/behaviour.md#domain-tags); the most specific suffix
// wins ("cdn.example." beats "example.").
//
// Lookup finds the label boundaries in one left-to-right pass, hashes the
// name's last bytes (as many as the longest tag has) in 8-byte words from
// the end, then tries the suffixes whose label count some tag has, most
// specific first, one multiply each, and stops at the first hit: the cost is
// bounded by the qname's length, whatever the table size. A suffix that is
// not a tag is almost always ruled out by an L2-sized filter; a tag costs one
// cache line of the index, which holds the key itself (up to 24 bytes), so
// the hit is verified without another memory access. LookupBurst overlaps
// those cache-line reads across a burst of names.
//
// Text format (one tag per line, '#' comments, documented in
// partitions/README.md):
//   cdn.example.com weight=on ecs=on policy=forward:192.0.2.53@5300,[2001:db8::53]@53 answer=ordered
//   level=city
//   seg.example.com weight=on ecs=on level=adaptive max_segments=512
// Every key is optional: weight=off ecs=off policy=iterate answer=single,
// level=global, or level=city when ecs=on.
//
// Threading: a TagTable is immutable once built; any number of threads look
// up concurrently. Readers reach the current one through TagTableHolder (an
// common::RcuSnapshot, see rcu.h), which mgmt pushes swap atomically.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "weir/common/line_errors.h"
#include "weir/common/rcu.h"
#include "weir/dns/message.h"
#include "weir/partitions/partition.h"

namespace weir::partitions {

namespace internal {
struct TagBucket;  // tagtable.cc

// Words of a suffix an index record holds: its last 24 bytes.
inline constexpr size_t kTailWords = 3;
}  // namespace internal

enum class Policy : uint8_t { kIterate = 0, kForward = 1 };

// How a cached address RRset is answered (docs/behaviour.md#domain-tags, #answering-by-weight). kAll is the
// untagged behaviour: the records as cached, no SWRR.
enum class AnswerMode : uint8_t { kAll = 0, kSingle = 1, kOrdered = 2 };

// level=adaptive's bound on a name's segments (the tag key max_segments).
inline constexpr uint16_t kDefaultSegmentsPerName = 256;
inline constexpr uint32_t kMaxSegmentsPerName = 65534;  // SegmentTable::kMaxMaxSegments

struct ForwardTarget {
  common::IpAddress address;
  uint16_t port = 53;
  friend bool operator==(const ForwardTarget&, const ForwardTarget&) = default;
};

struct Tag {
  dns::NameKey suffix;  // canonical wire form
  bool weight = false;
  bool ecs = false;
  // Traffic-share calibration (docs/calibration.md): weighted picks use the
  // GSLB weight times the factor weir-mgmt pushes. Needs weight=on and a
  // global or city level.
  bool calibrate = false;
  // Active refresh (the white-list, docs/behaviour.md#refreshing-before-expiry):
  // weir-fastpath refreshes the name's cached answers itself before they
  // expire, for as long as subscribers keep asking for them.
  bool active_refresh = false;
  Policy policy = Policy::kIterate;
  std::vector<ForwardTarget> targets;  // non-empty iff policy == kForward
  AnswerMode answer = AnswerMode::kSingle;
  CacheLevel level = CacheLevel::kGlobal;  // already resolved: ecs implies city unless set
  // level=adaptive: the most segments learned per (name, type) (segments.h).
  uint16_t max_segments = kDefaultSegmentsPerName;
};

// Parses one line of the text format (without comment). Errors say what is
// wrong, without a line number.
absl::StatusOr<Tag> ParseTagLine(std::string_view line);
// The line that ParseTagLine reads back to an equal tag.
std::string FormatTag(const Tag& tag);

class TagTable {
 public:
  // A suffix of a query name that some tag could be (tagtable.cc).
  struct Candidate {
    size_t index;  // of its first label in the label starts
    size_t len;    // bytes; 0 = none
    uint64_t hash;
    uint64_t partial;  // its word len / 8, masked
  };

  // Fails on duplicate suffixes.
  static absl::StatusOr<std::unique_ptr<const TagTable>> Build(std::vector<Tag> tags);
  // A bad line rejects the whole text with "line N: reason" (the first).
  static absl::StatusOr<std::unique_ptr<const TagTable>> FromText(std::string_view text);
  // The same, with every error of the text added to `errors` (each bad line
  // is reported and skipped, the rest still read).
  static absl::StatusOr<std::unique_ptr<const TagTable>> FromText(std::string_view text,
                                                                  common::LineErrors* errors);

  // The tag of the most specific suffix of `qname` (a canonical key, as
  // dns::Query::qname), or nullptr when the name is untagged.
  const Tag* Lookup(std::span<const uint8_t> qname) const;
  // The same, given the name's label starts as the parser found them
  // (dns::Query::qname_labels), which saves walking the name again. Wrong
  // starts give wrong answers; an empty span walks the name.
  const Tag* Lookup(std::span<const uint8_t> qname, std::span<const uint8_t> label_starts) const;
  // Lookup for a burst of names (the questions of one recvmmsg batch): hashes
  // every name and prefetches its index bucket before probing any, so the
  // memory reads overlap. `label_starts` is null, or has each name's label
  // starts as for Lookup. Same answers as Lookup; out[i] is for qnames[i].
  void LookupBurst(const std::span<const uint8_t>* qnames, const std::span<const uint8_t>* label_starts,
                   const Tag** out, size_t n) const;

  size_t size() const { return tags_.size(); }
  const std::vector<Tag>& tags() const { return tags_; }
  size_t memory_bytes() const;

 private:
  struct FreeDeleter {
    void operator()(void* p) const;
  };
  TagTable() = default;
  bool MayBeTag(uint64_t hash) const;  // the filter
  // The most specific suffix of q, from its label `from` on, that some tag
  // could be (its label count occurs, the filter passes). `starts` holds the
  // n label starts of q (root included).
  Candidate NextCandidate(const uint8_t* q, size_t size, const uint8_t* starts, size_t n, size_t from) const;
  // The tag whose key is the candidate suffix, if any.
  const Tag* Probe(const uint8_t* q, size_t size, const Candidate& c) const;
  const Tag* LookupFrom(const uint8_t* q, size_t size, const uint8_t* starts, size_t n, size_t from) const;

  std::vector<Tag> tags_;
  // One allocation, 2 MB aligned (huge pages when the kernel gives them):
  // the filter words, then the buckets.
  std::unique_ptr<uint64_t, FreeDeleter> mem_;
  size_t mem_bytes_ = 0;
  // Three bits in one 64-bit word per tag (8-16 bits per tag, L2-resident):
  // most suffixes of a query name are not tags and stop here, ~2 % pass.
  const uint64_t* filter_ = nullptr;
  unsigned filter_shift_ = 63;  // 64 - log2(filter words)
  // Open addressing over cache-line buckets of two records each, linear
  // probing, at most 1/2 full.
  const internal::TagBucket* buckets_ = nullptr;
  uint32_t bucket_count_ = 0;
  // Labels of the longest tag suffix: the labels left of those are never
  // hashed.
  uint32_t max_labels_ = 0;
  // Labels of the shortest tag suffix: shorter suffixes are never hashed.
  uint32_t min_labels_ = 0;
  // Bytes of the longest tag key: longer suffixes are never hashed.
  size_t max_len_ = 0;
  // Bit n set when some tag has n labels (0 = root .. 127).
  uint64_t label_counts_[2] = {0, 0};
};

using TagTableHolder = common::RcuSnapshot<TagTable>;

}  // namespace weir::partitions
