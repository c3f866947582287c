#include "weir/partitions/tagtable.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include <sys/mman.h>

#include "text_util.h"
#include "weir/common/text.h"
#include "weir/partitions/segments.h"

namespace weir::partitions {

static_assert(kMaxSegmentsPerName == SegmentTable::kMaxMaxSegments);
namespace internal {

namespace {

// Suffix hash, anchored at the end of the name. Word k of a name of `size`
// bytes is name[size - 8k - 8, size - 8k), little-endian (word 0 ends with the
// root byte). A suffix of L bytes is words 0 .. m-1 whole (m = L / 8) and the
// high L % 8 bytes of word m, so every suffix of a name shares one chain of
// multiplies over its words: the chain runs once per lookup over the last
// bytes (as many as the longest tag has), and each candidate suffix costs one
// masked word and one multiply. A tag's key and the same suffix inside a
// longer name hash alike by construction: the function sees only the
// suffix's bytes.
constexpr uint64_t kChainSeed = 0x243f6a8885a308d3ULL;
constexpr uint64_t kFoldSeed = 0xa0761d6478bd642fULL;
constexpr uint64_t kFinalSeed = 0xe7037ed1a0b428dbULL;

// 64 x 64 -> 128 bit multiply, halves folded (as wyhash): every output bit
// depends on every input bit.
inline uint64_t Mum(uint64_t a, uint64_t b) {
  const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
}

// Word k of name[0, size) as above, zero-filled left of the name's first
// byte, never reading outside name[0, size). 8k < size.
[[gnu::always_inline]] inline uint64_t TailWord(const uint8_t* name, size_t size, size_t k) {
  const size_t end = size - 8 * k;
  uint64_t w;
  if (end >= 8) {
    std::memcpy(&w, name + end - 8, 8);
  } else if (size >= 8) {
    std::memcpy(&w, name, 8);
    w <<= 8 * (8 - end);  // name[0, end) in the high bytes
  } else {
    w = 0;
    for (size_t i = 0; i < end; ++i) w |= uint64_t{name[i]} << (8 * (8 - end + i));
  }
  return w;
}

// Masks of the high r bytes of a word (r < 8).
constexpr uint64_t kHighBytes[8] = {0,
                                    0xff00000000000000ULL,
                                    0xffff000000000000ULL,
                                    0xffffff0000000000ULL,
                                    0xffffffff00000000ULL,
                                    0xffffffffff000000ULL,
                                    0xffffffffffff0000ULL,
                                    0xffffffffffffff00ULL};

// Label starts of a canonical key, left to right, root included. Returns
// the count (labels + 1), or 0 unless the key is well-formed: at most 127
// labels, the root byte last.
[[gnu::always_inline]] inline size_t LabelOffsets(const uint8_t* key, size_t size, uint8_t* offsets) {
  if (size == 0 || size > dns::kMaxNameWire) return 0;
  size_t n = 0, pos = 0;
  while (true) {
    offsets[n++] = static_cast<uint8_t>(pos);
    const uint8_t len = key[pos];
    if (len == 0) break;
    pos += 1 + size_t{len};
    if (pos >= size) return 0;  // (so at most 127 labels: each takes 2 bytes or more)
  }
  return pos + 1 == size ? n : 0;
}

}  // namespace

// The multiply chain over a name's words, computed as far as the longest
// suffix hashed so far needs: h[k] covers words 0 .. k-1.
struct Chain {
  uint64_t h[dns::kMaxNameWire / 8 + 2];
  size_t done = 0;
  Chain() { h[0] = kChainSeed; }
};

namespace {

// The hash of the suffix name[size - len, size); *partial receives its
// masked word len / 8 (the high len % 8 bytes). Call with decreasing len.
[[gnu::always_inline]] inline uint64_t SuffixHash(const uint8_t* name, size_t size, size_t len, Chain* chain,
                                                  uint64_t* partial) {
  const size_t m = len / 8;
  for (; chain->done < m; ++chain->done) {
    uint64_t w;
    std::memcpy(&w, name + size - 8 * chain->done - 8, 8);
    chain->h[chain->done + 1] = Mum(chain->h[chain->done] ^ w, kFoldSeed);
  }
  const size_t r = len % 8;
  const uint64_t p = r == 0 ? 0 : TailWord(name, size, m) & kHighBytes[r];
  *partial = p;
  // p's low byte is zero (r < 8), so (p, len) is injective.
  return Mum(chain->h[m] ^ p ^ len, kFinalSeed);
}

// What an index record holds for a key of `len` bytes (<= 24): its words
// 0 .. 2, zero left of the key. Words below len / 8 are read from the name,
// word len / 8 is `partial`.
[[gnu::always_inline]] inline void TailWords(const uint8_t* name, size_t size, size_t len, uint64_t partial,
                                             uint64_t* tail) {
  const size_t m = len / 8;
  for (size_t j = 0; j < kTailWords; ++j) {
    uint64_t w = 0;
    if (j < m) std::memcpy(&w, name + size - 8 * j - 8, 8);
    tail[j] = j < m ? w : j == m ? partial : 0;
  }
}

}  // namespace

}  // namespace internal

namespace {

absl::Status ParseOnOff(std::string_view v, bool* out) {
  if (v == "on") {
    *out = true;
  } else if (v == "off") {
    *out = false;
  } else {
    return absl::InvalidArgumentError(common::Cat("expected on/off, got '", v, "'"));
  }
  return absl::OkStatus();
}

absl::Status ParseTarget(std::string_view t, ForwardTarget* out) {
  std::string_view addr = t, port_text;
  if (!t.empty() && t.front() == '[') {
    size_t close = t.find(']');
    if (close == std::string_view::npos)
      return absl::InvalidArgumentError(common::Cat("bad target '", t, "'"));
    addr = t.substr(1, close - 1);
    std::string_view rest = t.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != '@') return absl::InvalidArgumentError(common::Cat("bad target '", t, "'"));
      port_text = rest.substr(1);
      if (port_text.empty()) return absl::InvalidArgumentError(common::Cat("bad port in '", t, "'"));
    }
  } else if (size_t at = t.rfind('@'); at != std::string_view::npos) {
    addr = t.substr(0, at);
    port_text = t.substr(at + 1);
    if (port_text.empty()) return absl::InvalidArgumentError(common::Cat("bad port in '", t, "'"));
  }
  ForwardTarget ft;
  if (!common::ParseIp(addr, &ft.address))
    return absl::InvalidArgumentError(common::Cat("bad target address '", addr, "'"));
  if (!port_text.empty()) {
    unsigned port = 0;
    auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || ptr != port_text.data() + port_text.size() || port == 0 || port > 65535) {
      return absl::InvalidArgumentError(common::Cat("bad port '", port_text, "'"));
    }
    ft.port = static_cast<uint16_t>(port);
  }
  *out = ft;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tag> ParseTagLine(std::string_view line) {
  std::vector<std::string_view> words;
  for (std::string_view w : common::Split(line, ' ')) {
    for (std::string_view x : common::Split(w, '\t')) {
      if (!x.empty()) words.push_back(x);
    }
  }
  if (words.empty()) return absl::InvalidArgumentError("empty tag line");
  Tag tag;
  // Host names only (letters, digits, '-', '_'): no escapes, nothing that
  // would not read back the same from FormatTag.
  for (char c : words[0]) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.';
    if (!ok) return absl::InvalidArgumentError(common::Cat("bad domain suffix '", words[0], "'"));
  }
  if (!dns::NameKeyFromText(words[0], &tag.suffix)) {
    return absl::InvalidArgumentError(common::Cat("bad domain suffix '", words[0], "'"));
  }
  bool level_set = false;
  uint32_t seen = 0;
  static constexpr std::string_view kKeys[] = {"weight", "ecs",       "policy",  "answer",
                                               "level",  "calibrate", "refresh", "max_segments"};
  for (size_t i = 1; i < words.size(); ++i) {
    std::string_view w = words[i];
    size_t eq = w.find('=');
    if (eq == std::string_view::npos)
      return absl::InvalidArgumentError(common::Cat("expected key=value, got '", w, "'"));
    std::string_view k = w.substr(0, eq), v = w.substr(eq + 1);
    size_t ki = 0;
    while (ki < std::size(kKeys) && kKeys[ki] != k) ++ki;
    if (ki == std::size(kKeys)) return absl::InvalidArgumentError(common::Cat("unknown key '", k, "'"));
    if (seen & (1u << ki)) return absl::InvalidArgumentError(common::Cat("key '", k, "' given twice"));
    seen |= 1u << ki;
    absl::Status s;
    if (k == "weight") {
      s = ParseOnOff(v, &tag.weight);
    } else if (k == "ecs") {
      s = ParseOnOff(v, &tag.ecs);
    } else if (k == "calibrate") {
      s = ParseOnOff(v, &tag.calibrate);
    } else if (k == "refresh") {
      if (v == "active") {
        tag.active_refresh = true;
      } else if (v != "passive") {
        return absl::InvalidArgumentError(common::Cat("refresh must be active or passive, got '", v, "'"));
      }
    } else if (k == "max_segments") {
      uint32_t n = 0;
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec != std::errc() || end != v.data() + v.size() || n < 1 || n > kMaxSegmentsPerName) {
        return absl::InvalidArgumentError(
            common::Cat("max_segments must be 1..", kMaxSegmentsPerName, ", got '", v, "'"));
      }
      tag.max_segments = static_cast<uint16_t>(n);
    } else if (k == "policy") {
      if (v == "iterate") {
        tag.policy = Policy::kIterate;
      } else if (v.starts_with("forward:")) {
        tag.policy = Policy::kForward;
        std::string_view list = v.substr(8);
        if (list.empty()) return absl::InvalidArgumentError("policy=forward needs targets");
        for (std::string_view t : common::Split(list, ',')) {
          ForwardTarget ft;
          if (s = ParseTarget(t, &ft); !s.ok()) return s;
          tag.targets.push_back(ft);
        }
        if (tag.targets.size() > 16) return absl::InvalidArgumentError("more than 16 forward targets");
      } else if (v == "forward") {
        return absl::InvalidArgumentError("policy=forward needs targets: forward:addr[@port],...");
      } else {
        return absl::InvalidArgumentError(
            common::Cat("policy must be iterate or forward:..., got '", v, "'"));
      }
    } else if (k == "answer") {
      if (v == "single") {
        tag.answer = AnswerMode::kSingle;
      } else if (v == "ordered") {
        tag.answer = AnswerMode::kOrdered;
      } else {
        return absl::InvalidArgumentError(common::Cat("answer must be single or ordered, got '", v, "'"));
      }
    } else {  // level
      level_set = true;
      if (v == "global") {
        tag.level = CacheLevel::kGlobal;
      } else if (v == "city") {
        tag.level = CacheLevel::kCity;
      } else if (v == "subnet") {
        tag.level = CacheLevel::kSubnet;
      } else if (v == "adaptive") {
        tag.level = CacheLevel::kAdaptive;
      } else {
        return absl::InvalidArgumentError(
            common::Cat("level must be global, city, subnet or adaptive, got '", v, "'"));
      }
    }
    if (!s.ok()) return absl::InvalidArgumentError(common::Cat(k, ": ", s.message()));
  }
  if (tag.ecs && !level_set) tag.level = CacheLevel::kCity;
  if (tag.calibrate && !tag.weight) return absl::InvalidArgumentError("calibrate=on needs weight=on");
  if (tag.calibrate && (tag.level == CacheLevel::kSubnet || tag.level == CacheLevel::kAdaptive))
    return absl::InvalidArgumentError("calibrate=on needs level=global or level=city (feedback is per city)");
  // Segments are learned from the scope of the GSLB's ECS answers.
  if (tag.level == CacheLevel::kAdaptive && !tag.ecs)
    return absl::InvalidArgumentError("level=adaptive needs ecs=on");
  if ((seen & (1u << 7)) != 0 && tag.level != CacheLevel::kAdaptive)
    return absl::InvalidArgumentError("max_segments needs level=adaptive");
  return tag;
}

std::string FormatTag(const Tag& tag) {
  std::string out = dns::NameKeyToText(tag.suffix.span());
  common::CatTo(out, " weight=", tag.weight ? "on" : "off", " ecs=", tag.ecs ? "on" : "off", " policy=");
  if (tag.policy == Policy::kIterate) {
    out += "iterate";
  } else {
    out += "forward:";
    for (size_t i = 0; i < tag.targets.size(); ++i) {
      const ForwardTarget& t = tag.targets[i];
      if (i) out += ",";
      if (t.address.family == 6) {
        common::CatTo(out, "[", common::IpToString(t.address), "]@", t.port);
      } else {
        common::CatTo(out, common::IpToString(t.address), "@", t.port);
      }
    }
  }
  common::CatTo(out, " answer=", tag.answer == AnswerMode::kOrdered ? "ordered" : "single", " level=",
                tag.level == CacheLevel::kGlobal   ? "global"
                : tag.level == CacheLevel::kCity   ? "city"
                : tag.level == CacheLevel::kSubnet ? "subnet"
                                                   : "adaptive");
  if (tag.level == CacheLevel::kAdaptive && tag.max_segments != kDefaultSegmentsPerName)
    common::CatTo(out, " max_segments=", tag.max_segments);
  // Written only when on, so that every tag line from before the key reads
  // back to the same canonical text.
  if (tag.calibrate) out += " calibrate=on";
  if (tag.active_refresh) out += " refresh=active";
  return out;
}

// A record holds the key itself when it fits (24 bytes), as the three words
// TailWords gives: the last 8 bytes first, zero left of the key. A hit is
// verified from the bucket's cache line against the same words of the query
// name. Longer keys are compared with the Tag's.
struct internal::TagBucket {
  struct Record {
    uint32_t check;  // 24 bits of the suffix hash, then the key length; 0 = free
    uint32_t index;  // into tags_
    uint64_t tail[internal::kTailWords];
  };
  alignas(64) Record records[2];
};

void TagTable::FreeDeleter::operator()(void* p) const { std::free(p); }

namespace {

using Bucket = internal::TagBucket;
constexpr size_t kInlineKey = sizeof(Bucket::Record::tail);
constexpr size_t kHugePage = size_t{2} << 20;

inline uint32_t Check(uint64_t h, size_t len) {
  return (static_cast<uint32_t>(h >> 32) & 0xffffff00u) | static_cast<uint32_t>(len);
}
inline size_t BucketOf(uint64_t h, uint32_t count) {
  return static_cast<size_t>((uint64_t{static_cast<uint32_t>(h)} * count) >> 32);
}
// Three bits of one filter word.
inline uint64_t FilterBits(uint64_t g) {
  return (uint64_t{1} << (g & 63)) | (uint64_t{1} << ((g >> 6) & 63)) | (uint64_t{1} << ((g >> 12) & 63));
}

// Filter words for `keys` keys: 8 bits or more per key, a power of two.
size_t FilterWords(size_t keys) {
  size_t words = 16;
  while (words * 64 < keys * 8) words <<= 1;
  return words;
}

}  // namespace

absl::StatusOr<std::unique_ptr<const TagTable>> TagTable::Build(std::vector<Tag> tags) {
  if (tags.size() >= UINT32_MAX / 2) return absl::InvalidArgumentError("too many tags");
  std::unique_ptr<TagTable> t(new TagTable());
  const size_t words = FilterWords(tags.size());
  t->filter_shift_ = 64 - static_cast<unsigned>(std::countr_zero(words));
  t->bucket_count_ = static_cast<uint32_t>(tags.size() + 1);  // <= 1/2 full
  const size_t filter_bytes = words * sizeof(uint64_t);
  size_t bytes = filter_bytes + size_t{t->bucket_count_} * sizeof(Bucket);
  // Big tables get 2 MB pages: a probe costs no TLB miss.
  const size_t align = bytes >= kHugePage / 2 ? kHugePage : alignof(Bucket);
  bytes = (bytes + align - 1) / align * align;
  void* mem = std::aligned_alloc(align, bytes);
  if (mem == nullptr) return absl::ResourceExhaustedError("cannot allocate the tag index");
  if (align == kHugePage) madvise(mem, bytes, MADV_HUGEPAGE);
  std::memset(mem, 0, bytes);
  t->mem_.reset(static_cast<uint64_t*>(mem));
  t->mem_bytes_ = bytes;
  uint64_t* filter = static_cast<uint64_t*>(mem);
  Bucket* buckets = reinterpret_cast<Bucket*>(static_cast<uint8_t*>(mem) + filter_bytes);
  t->filter_ = filter;
  t->buckets_ = buckets;

  for (size_t i = 0; i < tags.size(); ++i) {
    std::span<const uint8_t> key = tags[i].suffix.span();
    uint8_t starts[128];
    const size_t n = internal::LabelOffsets(key.data(), key.size(), starts);
    if (n == 0) return absl::InvalidArgumentError("malformed suffix key");
    const size_t labels = n - 1;
    t->label_counts_[labels / 64] |= uint64_t{1} << (labels % 64);
    if (labels > t->max_labels_) t->max_labels_ = static_cast<uint32_t>(labels);
    if (i == 0 || labels < t->min_labels_) t->min_labels_ = static_cast<uint32_t>(labels);
    if (key.size() > t->max_len_) t->max_len_ = key.size();

    internal::Chain chain;
    uint64_t partial = 0;
    const uint64_t h = internal::SuffixHash(key.data(), key.size(), key.size(), &chain, &partial);
    filter[h >> t->filter_shift_] |= FilterBits(h);
    const uint32_t check = Check(h, key.size());
    Bucket::Record* free_record = nullptr;
    for (size_t b = BucketOf(h, t->bucket_count_); free_record == nullptr;
         b = b + 1 == t->bucket_count_ ? 0 : b + 1) {
      for (Bucket::Record& r : buckets[b].records) {
        if (r.check == 0) {
          free_record = &r;
          break;
        }
        if (r.check == check && tags[r.index].suffix == tags[i].suffix) {
          return absl::InvalidArgumentError(common::Cat("duplicate tag for ", dns::NameKeyToText(key)));
        }
      }
    }
    free_record->check = check;
    free_record->index = static_cast<uint32_t>(i);
    if (key.size() <= kInlineKey)
      internal::TailWords(key.data(), key.size(), key.size(), partial, free_record->tail);
  }
  t->tags_ = std::move(tags);
  return std::unique_ptr<const TagTable>(std::move(t));
}

absl::StatusOr<std::unique_ptr<const TagTable>> TagTable::FromText(std::string_view text) {
  common::LineErrors errors;
  return FromText(text, &errors);
}

absl::StatusOr<std::unique_ptr<const TagTable>> TagTable::FromText(std::string_view text,
                                                                   common::LineErrors* errors) {
  std::vector<Tag> tags;
  std::vector<int> lines;
  // A bad line is recorded and skipped: every error of the text is reported.
  internal::ForEachLine(text, [&](int line_no, std::string_view line) {
    absl::StatusOr<Tag> tag = ParseTagLine(line);
    if (!tag.ok()) {
      errors->Add(line_no, std::string(common::ToStd(tag.status().message())));
      return true;
    }
    tags.push_back(*std::move(tag));
    lines.push_back(line_no);
    return true;
  });
  // Report duplicates with both line numbers before building.
  {
    std::vector<size_t> order(tags.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const auto sa = tags[a].suffix.span(), sb = tags[b].suffix.span();
      if (std::lexicographical_compare(sa.begin(), sa.end(), sb.begin(), sb.end())) return true;
      if (std::lexicographical_compare(sb.begin(), sb.end(), sa.begin(), sa.end())) return false;
      return a < b;
    });
    size_t first = 0;  // the first line of the run of equal suffixes
    for (size_t i = 1; i < order.size(); ++i) {
      if (tags[order[i]].suffix != tags[order[first]].suffix) {
        first = i;
        continue;
      }
      errors->Add(lines[order[i]],
                  common::Cat("duplicate tag for ", dns::NameKeyToText(tags[order[i]].suffix.span()),
                              " (first on line ", lines[order[first]], ")"));
    }
  }
  if (!errors->empty()) return errors->First();
  auto built = Build(std::move(tags));
  if (!built.ok()) errors->Add(0, std::string(common::ToStd(built.status().message())));
  return built;
}

namespace {

// Short keys: 8 bytes at a time, no call into libc.
inline bool SameBytes(const uint8_t* a, const uint8_t* b, size_t n) {
  for (; n >= 8; n -= 8, a += 8, b += 8) {
    uint64_t x, y;
    std::memcpy(&x, a, 8);
    std::memcpy(&y, b, 8);
    if (x != y) return false;
  }
  for (; n > 0; --n) {
    if (*a++ != *b++) return false;
  }
  return true;
}

}  // namespace

namespace {

// Calls visit(c) for the suffixes of q from its label `from` on whose label
// count some tag has (from min_labels to max_labels), most specific first,
// with c.index, c.len, c.hash and c.partial set, until visit returns true.
// Returns the label index after the last one visited (past `last` when all
// were).
template <typename Visit>
[[gnu::always_inline]] inline size_t ForEachSuffix(const uint8_t* q, size_t size, const uint8_t* starts,
                                                   size_t n, size_t from, size_t min_labels,
                                                   size_t max_labels, size_t max_len,
                                                   const uint64_t* label_counts, Visit&& visit) {
  if (n - 1 < min_labels) return n;
  const size_t last = n - 1 - min_labels;
  size_t i = std::max<size_t>(from, n - 1 > max_labels ? n - 1 - max_labels : 0);
  // The words and the multiply chain (as SuffixHash computes them) over the
  // name's last min(size, max_len) bytes, once; each suffix then costs a
  // masked word and one multiply.
  const size_t span = std::min(size, max_len);
  const size_t words = span / 8 + 1;
  uint64_t w[dns::kMaxNameWire / 8 + 1], chain[dns::kMaxNameWire / 8 + 1];
  chain[0] = internal::kChainSeed;
  for (size_t k = 0; k < words; ++k) {
    w[k] = 8 * k < size ? internal::TailWord(q, size, k) : 0;
    if (k + 1 < words) chain[k + 1] = internal::Mum(chain[k] ^ w[k], internal::kFoldSeed);
  }
  for (; i <= last; ++i) {
    const size_t labels = n - 1 - i;
    const size_t len = size - starts[i];
    if (len > span || !((label_counts[labels >> 6] >> (labels & 63)) & 1)) continue;
    const size_t m = len / 8;
    TagTable::Candidate c;
    c.index = i;
    c.len = len;
    c.partial = w[m] & internal::kHighBytes[len % 8];
    // (partial's low byte is zero, so (partial, len) is injective.)
    c.hash = internal::Mum(chain[m] ^ c.partial ^ len, internal::kFinalSeed);
    if (visit(c)) return i + 1;
  }
  return i;
}

}  // namespace

[[gnu::always_inline]] inline bool TagTable::MayBeTag(uint64_t h) const {
  // h is a full multiply-fold: its top bits pick the word, its low bits
  // the three bits (the bucket uses bits 0-31 scaled, the check bits 40-63).
  const uint64_t bits = FilterBits(h);
  return (filter_[h >> filter_shift_] & bits) == bits;
}

[[gnu::always_inline]] inline TagTable::Candidate TagTable::NextCandidate(const uint8_t* q, size_t size,
                                                                          const uint8_t* starts, size_t n,
                                                                          size_t from) const {
  Candidate found;
  found.len = 0;
  ForEachSuffix(q, size, starts, n, from, min_labels_, max_labels_, max_len_, label_counts_,
                [&](const Candidate& c) {
                  if (!MayBeTag(c.hash)) return false;
                  found = c;
                  return true;
                });
  return found;
}

[[gnu::always_inline]] inline const Tag* TagTable::Probe(const uint8_t* q, size_t size,
                                                         const Candidate& c) const {
  // Records with this check have a key of c.len bytes, so words above
  // c.len / 8 are zero in both: compare words 0 .. m-1 and the partial one.
  const uint32_t check = Check(c.hash, c.len);
  const size_t m = c.len / 8;
  for (size_t b = BucketOf(c.hash, bucket_count_);; b = b + 1 == bucket_count_ ? 0 : b + 1) {
    const Bucket::Record* r = buckets_[b].records;
    for (size_t k = 0; k < 2; ++k) {
      if (r[k].check == check) {
        bool same;
        if (c.len > kInlineKey) {
          same = SameBytes(tags_[r[k].index].suffix.bytes.data(), q + size - c.len, c.len);
        } else {
          same = m == internal::kTailWords || r[k].tail[m] == c.partial;
          for (size_t j = 0; j < m && same; ++j) {
            uint64_t w;
            std::memcpy(&w, q + size - 8 * j - 8, 8);
            same = r[k].tail[j] == w;
          }
        }
        if (same) return &tags_[r[k].index];
      }
      if (r[k].check == 0) return nullptr;
    }
  }
}

[[gnu::always_inline]] inline const Tag* TagTable::LookupFrom(const uint8_t* q, size_t size,
                                                              const uint8_t* starts, size_t n,
                                                              size_t from) const {
  while (true) {
    const Candidate c = NextCandidate(q, size, starts, n, from);
    if (c.len == 0) return nullptr;
    if (const Tag* t = Probe(q, size, c)) return t;
    from = c.index + 1;  // the filter passed a suffix that is not a tag: go on with shorter ones
  }
}

namespace {

// The label starts to use for q: the given ones when they fit the name
// (the last is the root byte), else the walk's; 0 for a malformed name.
inline size_t StartsFor(std::span<const uint8_t> q, std::span<const uint8_t> given, uint8_t* walked,
                        const uint8_t** starts) {
  if (!given.empty() && q.size() <= dns::kMaxNameWire && given.back() + size_t{1} == q.size() &&
      q[given.back()] == 0) {
    *starts = given.data();
    return given.size();
  }
  *starts = walked;
  return internal::LabelOffsets(q.data(), q.size(), walked);
}

}  // namespace

const Tag* TagTable::Lookup(std::span<const uint8_t> qname) const { return Lookup(qname, {}); }

const Tag* TagTable::Lookup(std::span<const uint8_t> qname, std::span<const uint8_t> label_starts) const {
  if (tags_.empty()) return nullptr;  // no tags configured: nothing to hash
  uint8_t walked[128];
  const uint8_t* starts;
  const size_t n = StartsFor(qname, label_starts, walked, &starts);
  if (n == 0) return nullptr;
  return LookupFrom(qname.data(), qname.size(), starts, n, 0);
}

void TagTable::LookupBurst(const std::span<const uint8_t>* qnames,
                           const std::span<const uint8_t>* label_starts, const Tag** out, size_t n) const {
  if (tags_.empty()) {
    for (size_t i = 0; i < n; ++i) out[i] = nullptr;
    return;
  }
  // Stage 1 finds every name's most specific suffix that passes the filter
  // and prefetches its bucket; stage 2 probes them.
  constexpr size_t kStage = 32;
  Candidate c[kStage];
  const uint8_t* starts[kStage];
  size_t counts[kStage];
  uint8_t walked[kStage][128];
  for (size_t base = 0; base < n; base += kStage) {
    const size_t m = n - base < kStage ? n - base : kStage;
    for (size_t i = 0; i < m; ++i) {
      const std::span<const uint8_t> q = qnames[base + i];
      counts[i] = StartsFor(q, label_starts != nullptr ? label_starts[base + i] : std::span<const uint8_t>(),
                            walked[i], &starts[i]);
      if (counts[i] == 0) {
        c[i].len = 0;
        continue;
      }
      c[i] = NextCandidate(q.data(), q.size(), starts[i], counts[i], 0);
      if (c[i].len != 0) {
        const size_t b = BucketOf(c[i].hash, bucket_count_);
        __builtin_prefetch(&buckets_[b]);
        __builtin_prefetch(&buckets_[b + 1 == bucket_count_ ? 0 : b + 1]);
      }
    }
    for (size_t i = 0; i < m; ++i) {
      const Tag* t = nullptr;
      if (c[i].len != 0) {
        const std::span<const uint8_t> q = qnames[base + i];
        t = Probe(q.data(), q.size(), c[i]);
        // Rare: the filter passed a suffix that is not a tag; the shorter
        // ones are looked up one by one.
        if (t == nullptr) t = LookupFrom(q.data(), q.size(), starts[i], counts[i], c[i].index + 1);
      }
      out[base + i] = t;
    }
  }
}

size_t TagTable::memory_bytes() const {
  size_t b = mem_bytes_ + tags_.size() * sizeof(Tag);
  for (const Tag& t : tags_) b += t.targets.capacity() * sizeof(ForwardTarget);
  return b;
}

}  // namespace weir::partitions
