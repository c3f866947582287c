#include "weir/partitions/tagtable.h"

#include <bit>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include <sys/mman.h>

#include "text_util.h"

namespace weir::partitions {
namespace internal {

namespace {

// Suffix hash: a fold from the root leftwards, one multiply per 8 bytes of
// each label. A label's words are read from its first byte (the length) on and
// may run into the labels to its right, which belong to the suffix too: the
// hash is a function of the suffix's bytes alone, so a tag's key and the same
// suffix inside a longer name hash alike, without masking each label.
constexpr uint64_t kRootHash = 0x243f6a8885a308d3ULL;
constexpr uint64_t kFoldSeed = 0xa0761d6478bd642fULL;

// 64 x 64 -> 128 bit multiply, halves folded (as wyhash): every output bit
// depends on every input bit.
inline uint64_t Mum(uint64_t a, uint64_t b) {
  const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
}

// key[pos, pos + 8) little-endian, zero-padded past the end of the key and
// never reading outside key[0, size). pos < size.
[[gnu::always_inline]] inline uint64_t LoadWord(const uint8_t* key, size_t size, size_t pos) {
  uint64_t w;
  if (pos + 8 <= size) {
    std::memcpy(&w, key + pos, 8);
  } else if (size >= 8) {
    // The last 8 bytes of the key, shifted so that key[pos] is the low byte.
    std::memcpy(&w, key + size - 8, 8);
    w >>= 8 * (pos + 8 - size);
  } else {
    w = 0;
    for (size_t i = 0; pos + i < size; ++i) w |= uint64_t{key[pos + i]} << (8 * i);
  }
  return w;
}

// The hash of the suffix key[pos, size), given `h`, the hash of the suffix
// after the label at key[pos].
[[gnu::always_inline]] inline uint64_t FoldLabel(uint64_t h, const uint8_t* key, size_t size, size_t pos) {
  const size_t len = size_t{key[pos]} + 1;
  for (size_t j = (len - 1) & ~size_t{7}; j > 0; j -= 8) h = Mum(h ^ LoadWord(key, size, pos + j), kFoldSeed);
  return Mum(h ^ LoadWord(key, size, pos), kFoldSeed);
}

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

size_t SuffixHashes(std::span<const uint8_t> key, uint64_t* hashes, uint8_t* offsets) {
  const size_t n = LabelOffsets(key.data(), key.size(), offsets);
  if (n == 0) return 0;
  uint64_t h = kRootHash;
  hashes[n - 1] = h;
  for (size_t i = n - 1; i-- > 0;) {
    h = FoldLabel(h, key.data(), key.size(), offsets[i]);
    hashes[i] = h;
  }
  return n;
}

}  // namespace internal

namespace {

absl::Status ParseOnOff(std::string_view v, bool* out) {
  if (v == "on") {
    *out = true;
  } else if (v == "off") {
    *out = false;
  } else {
    return absl::InvalidArgumentError(internal::Cat("expected on/off, got '", v, "'"));
  }
  return absl::OkStatus();
}

absl::Status ParseTarget(std::string_view t, ForwardTarget* out) {
  std::string_view addr = t, port_text;
  if (!t.empty() && t.front() == '[') {
    size_t close = t.find(']');
    if (close == std::string_view::npos)
      return absl::InvalidArgumentError(internal::Cat("bad target '", t, "'"));
    addr = t.substr(1, close - 1);
    std::string_view rest = t.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != '@') return absl::InvalidArgumentError(internal::Cat("bad target '", t, "'"));
      port_text = rest.substr(1);
      if (port_text.empty()) return absl::InvalidArgumentError(internal::Cat("bad port in '", t, "'"));
    }
  } else if (size_t at = t.rfind('@'); at != std::string_view::npos) {
    addr = t.substr(0, at);
    port_text = t.substr(at + 1);
    if (port_text.empty()) return absl::InvalidArgumentError(internal::Cat("bad port in '", t, "'"));
  }
  ForwardTarget ft;
  if (!ParseIp(addr, &ft.address))
    return absl::InvalidArgumentError(internal::Cat("bad target address '", addr, "'"));
  if (!port_text.empty()) {
    unsigned port = 0;
    auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || ptr != port_text.data() + port_text.size() || port == 0 || port > 65535) {
      return absl::InvalidArgumentError(internal::Cat("bad port '", port_text, "'"));
    }
    ft.port = static_cast<uint16_t>(port);
  }
  *out = ft;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tag> ParseTagLine(std::string_view line) {
  std::vector<std::string_view> words;
  for (std::string_view w : internal::Split(line, ' ')) {
    for (std::string_view x : internal::Split(w, '\t')) {
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
    if (!ok) return absl::InvalidArgumentError(internal::Cat("bad domain suffix '", words[0], "'"));
  }
  if (!dns::NameKeyFromText(words[0], &tag.suffix)) {
    return absl::InvalidArgumentError(internal::Cat("bad domain suffix '", words[0], "'"));
  }
  bool level_set = false;
  uint32_t seen = 0;
  static constexpr std::string_view kKeys[] = {"weight", "ecs", "policy", "answer", "level"};
  for (size_t i = 1; i < words.size(); ++i) {
    std::string_view w = words[i];
    size_t eq = w.find('=');
    if (eq == std::string_view::npos)
      return absl::InvalidArgumentError(internal::Cat("expected key=value, got '", w, "'"));
    std::string_view k = w.substr(0, eq), v = w.substr(eq + 1);
    size_t ki = 0;
    while (ki < std::size(kKeys) && kKeys[ki] != k) ++ki;
    if (ki == std::size(kKeys)) return absl::InvalidArgumentError(internal::Cat("unknown key '", k, "'"));
    if (seen & (1u << ki)) return absl::InvalidArgumentError(internal::Cat("key '", k, "' given twice"));
    seen |= 1u << ki;
    absl::Status s;
    if (k == "weight") {
      s = ParseOnOff(v, &tag.weight);
    } else if (k == "ecs") {
      s = ParseOnOff(v, &tag.ecs);
    } else if (k == "policy") {
      if (v == "iterate") {
        tag.policy = Policy::kIterate;
      } else if (v.starts_with("forward:")) {
        tag.policy = Policy::kForward;
        std::string_view list = v.substr(8);
        if (list.empty()) return absl::InvalidArgumentError("policy=forward needs targets");
        for (std::string_view t : internal::Split(list, ',')) {
          ForwardTarget ft;
          if (s = ParseTarget(t, &ft); !s.ok()) return s;
          tag.targets.push_back(ft);
        }
        if (tag.targets.size() > 16) return absl::InvalidArgumentError("more than 16 forward targets");
      } else if (v == "forward") {
        return absl::InvalidArgumentError("policy=forward needs targets: forward:addr[@port],...");
      } else {
        return absl::InvalidArgumentError(
            internal::Cat("policy must be iterate or forward:..., got '", v, "'"));
      }
    } else if (k == "answer") {
      if (v == "single") {
        tag.answer = AnswerMode::kSingle;
      } else if (v == "ordered") {
        tag.answer = AnswerMode::kOrdered;
      } else {
        return absl::InvalidArgumentError(internal::Cat("answer must be single or ordered, got '", v, "'"));
      }
    } else {  // level
      level_set = true;
      if (v == "global") {
        tag.level = CacheLevel::kGlobal;
      } else if (v == "city") {
        tag.level = CacheLevel::kCity;
      } else if (v == "subnet") {
        tag.level = CacheLevel::kSubnet;
      } else {
        return absl::InvalidArgumentError(
            internal::Cat("level must be global, city or subnet, got '", v, "'"));
      }
    }
    if (!s.ok()) return absl::InvalidArgumentError(internal::Cat(k, ": ", s.message()));
  }
  if (tag.ecs && !level_set) tag.level = CacheLevel::kCity;
  return tag;
}

std::string FormatTag(const Tag& tag) {
  std::string out = dns::NameKeyToText(tag.suffix.span());
  internal::CatTo(out, " weight=", tag.weight ? "on" : "off", " ecs=", tag.ecs ? "on" : "off", " policy=");
  if (tag.policy == Policy::kIterate) {
    out += "iterate";
  } else {
    out += "forward:";
    for (size_t i = 0; i < tag.targets.size(); ++i) {
      const ForwardTarget& t = tag.targets[i];
      if (i) out += ",";
      if (t.address.family == 6) {
        internal::CatTo(out, "[", IpToString(t.address), "]@", t.port);
      } else {
        internal::CatTo(out, IpToString(t.address), "@", t.port);
      }
    }
  }
  internal::CatTo(out, " answer=", tag.answer == AnswerMode::kOrdered ? "ordered" : "single", " level=",
                  tag.level == CacheLevel::kGlobal ? "global"
                  : tag.level == CacheLevel::kCity ? "city"
                                                   : "subnet");
  return out;
}

// A record holds the key itself when it fits, right-aligned after zero
// bytes, so that a hit is verified from the bucket's cache line (the key is
// compared 8 bytes at a time from the end of the query name, where every
// suffix ends). Longer keys are compared with the Tag's.
struct internal::TagBucket {
  struct Record {
    uint32_t check;  // 24 bits of the suffix hash, then the key length; 0 = free
    uint32_t index;  // into tags_
    uint8_t key[24];
  };
  alignas(64) Record records[2];
};

void TagTable::FreeDeleter::operator()(void* p) const { std::free(p); }

namespace {

using Bucket = internal::TagBucket;
constexpr size_t kInlineKey = sizeof(Bucket::Record::key);
constexpr uint64_t kFilterMul = 0x9e3779b97f4a7c15ULL;
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

}  // namespace

absl::StatusOr<std::unique_ptr<const TagTable>> TagTable::Build(std::vector<Tag> tags) {
  if (tags.size() >= UINT32_MAX / 2) return absl::InvalidArgumentError("too many tags");
  std::unique_ptr<TagTable> t(new TagTable());
  size_t words = 16;
  while (words * 64 < tags.size() * 8) words <<= 1;
  t->filter_shift_ = 64 - static_cast<unsigned>(std::countr_zero(words));
  t->bucket_count_ = static_cast<uint32_t>(tags.size() * 2 / 3 + 1);  // <= 3/4 full
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

  uint64_t hashes[128];
  uint8_t offsets[128];
  for (size_t i = 0; i < tags.size(); ++i) {
    std::span<const uint8_t> key = tags[i].suffix.span();
    size_t n = internal::SuffixHashes(key, hashes, offsets);
    if (n == 0) return absl::InvalidArgumentError("malformed suffix key");
    const uint64_t h = hashes[0];
    const size_t labels = n - 1;
    t->label_counts_[labels / 64] |= uint64_t{1} << (labels % 64);
    if (labels > t->max_labels_) t->max_labels_ = static_cast<uint32_t>(labels);
    const uint64_t g = h * kFilterMul;
    filter[g >> t->filter_shift_] |= FilterBits(g);
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
          return absl::InvalidArgumentError(internal::Cat("duplicate tag for ", dns::NameKeyToText(key)));
        }
      }
    }
    free_record->check = check;
    free_record->index = static_cast<uint32_t>(i);
    if (key.size() <= kInlineKey)
      std::memcpy(free_record->key + kInlineKey - key.size(), key.data(), key.size());
  }
  t->tags_ = std::move(tags);
  return std::unique_ptr<const TagTable>(std::move(t));
}

absl::StatusOr<std::unique_ptr<const TagTable>> TagTable::FromText(std::string_view text) {
  std::vector<Tag> tags;
  std::vector<int> lines;
  absl::Status status;
  internal::ForEachLine(text, [&](int line_no, std::string_view line) {
    absl::StatusOr<Tag> tag = ParseTagLine(line);
    if (!tag.ok()) {
      status = absl::InvalidArgumentError(internal::Cat("line ", line_no, ": ", tag.status().message()));
      return false;
    }
    tags.push_back(*std::move(tag));
    lines.push_back(line_no);
    return true;
  });
  if (!status.ok()) return status;
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
    for (size_t i = 1; i < order.size(); ++i) {
      if (tags[order[i]].suffix == tags[order[i - 1]].suffix) {
        return absl::InvalidArgumentError(internal::Cat("line ", lines[order[i]], ": duplicate tag for ",
                                                        dns::NameKeyToText(tags[order[i]].suffix.span()),
                                                        " (first on line ", lines[order[i - 1]], ")"));
      }
    }
  }
  return Build(std::move(tags));
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

// Whether the record's key is qname[size - len, size).
inline bool SameKey(const Bucket::Record& r, const uint8_t* qname, size_t size, size_t len,
                    const std::vector<Tag>& tags) {
  if (len > kInlineKey) return SameBytes(tags[r.index].suffix.bytes.data(), qname + size - len, len);
  for (size_t k = 0; 8 * k < len; ++k) {
    const size_t end = size - 8 * k;
    const size_t rest = len - 8 * k;
    // qname[end - 8, end), or just its last `rest` bytes, in the high bytes.
    uint64_t w = 0;
    if (end >= 8) {
      std::memcpy(&w, qname + end - 8, 8);
      if (rest < 8) w &= ~uint64_t{0} << (64 - 8 * rest);
    } else {
      for (size_t j = 0; j < rest; ++j) w |= uint64_t{qname[end - rest + j]} << (8 * (8 - rest + j));
    }
    uint64_t x;
    std::memcpy(&x, r.key + kInlineKey - 8 * (k + 1), 8);
    if (w != x) return false;
  }
  return true;
}

}  // namespace

const Tag* TagTable::Lookup(std::span<const uint8_t> qname) const {
  if (tags_.empty()) return nullptr;  // no tags configured: nothing to hash
  const uint8_t* q = qname.data();
  const size_t size = qname.size();
  uint8_t offsets[128];
  const size_t n = internal::LabelOffsets(q, size, offsets);
  if (n == 0) return nullptr;
  // Suffix i starts at offsets[i] and has n - 1 - i labels; the ones left of
  // `first` are longer than any tag.
  const size_t first = n - 1 > max_labels_ ? n - 1 - max_labels_ : 0;
  uint64_t hashes[128];
  uint64_t h = internal::kRootHash;
  hashes[n - 1] = h;
  for (size_t i = n - 1; i-- > first;) {
    h = internal::FoldLabel(h, q, size, offsets[i]);
    hashes[i] = h;
  }
  for (size_t i = first; i < n; ++i) {
    const size_t labels = n - 1 - i;
    if (!((label_counts_[labels / 64] >> (labels % 64)) & 1)) continue;
    h = hashes[i];
    const uint64_t g = h * kFilterMul;
    const uint64_t bits = FilterBits(g);
    if ((filter_[g >> filter_shift_] & bits) != bits) continue;
    const size_t len = size - offsets[i];
    const uint32_t check = Check(h, len);
    for (size_t b = BucketOf(h, bucket_count_);; b = b + 1 == bucket_count_ ? 0 : b + 1) {
      const Bucket::Record* r = buckets_[b].records;
      if (r[0].check == check && SameKey(r[0], q, size, len, tags_)) return &tags_[r[0].index];
      if (r[0].check == 0) break;
      if (r[1].check == check && SameKey(r[1], q, size, len, tags_)) return &tags_[r[1].index];
      if (r[1].check == 0) break;
    }
  }
  return nullptr;
}

size_t TagTable::memory_bytes() const {
  size_t b = mem_bytes_ + tags_.size() * sizeof(Tag);
  for (const Tag& t : tags_) b += t.targets.capacity() * sizeof(ForwardTarget);
  return b;
}

}  // namespace weir::partitions
