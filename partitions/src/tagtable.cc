#include "weir/partitions/tagtable.h"

#include <bit>
#include <charconv>
#include <cstring>

#include "text_util.h"

namespace weir::partitions {
namespace internal {

namespace {
inline uint64_t Mix(uint64_t h) {
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ULL;
  h ^= h >> 32;
  return h;
}
}  // namespace

size_t SuffixHashes(std::span<const uint8_t> key, uint64_t* hashes, uint8_t* offsets) {
  // Label starts, left to right.
  size_t n = 0, pos = 0;
  while (true) {
    if (pos >= key.size() || n >= 128) return 0;
    offsets[n++] = static_cast<uint8_t>(pos);
    const uint8_t len = key[pos];
    if (len == 0) break;
    pos += 1 + len;
  }
  // Fold labels right to left: each suffix hash covers its own labels only.
  uint64_t h = 0x9e3779b97f4a7c15ULL;
  hashes[n - 1] = Mix(h);
  for (size_t i = n - 1; i-- > 0;) {
    const uint8_t* p = key.data() + offsets[i];
    const size_t len = size_t{p[0]} + 1;
    size_t j = 0;
    for (; j + 8 <= len; j += 8) {
      uint64_t w;
      std::memcpy(&w, p + j, 8);
      h = (h ^ w) * 0x9fb21c651e98df25ULL;
      h ^= h >> 29;
    }
    uint64_t tail = 0;
    const size_t rest = len - j;
    if (rest > 0) {
      if (offsets[i] + j + 8 <= key.size()) {
        // One unaligned load, masked: the key has 8 bytes left here.
        std::memcpy(&tail, p + j, 8);
        tail &= ~uint64_t{0} >> (64 - 8 * rest);
      } else {
        for (size_t k = 0; k < rest; ++k) tail |= uint64_t{p[j + k]} << (8 * k);
      }
    }
    h = (h ^ tail ^ (uint64_t{len} << 56)) * 0x9fb21c651e98df25ULL;
    h ^= h >> 29;
    hashes[i] = Mix(h) | 1;  // never 0 (empty slot)
  }
  hashes[n - 1] |= 1;
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

absl::StatusOr<std::unique_ptr<const TagTable>> TagTable::Build(std::vector<Tag> tags) {
  std::unique_ptr<TagTable> t(new TagTable());
  size_t cap = 16;
  while (cap < tags.size() * 2 + 2) cap <<= 1;
  t->slots_.assign(cap, Slot{0, kEmpty});
  t->mask_ = cap - 1;
  size_t fbits = 1024;
  while (fbits < tags.size() * 8) fbits <<= 1;
  t->filter_.assign(fbits / 64, 0);
  t->filter_mask_ = fbits - 1;
  uint64_t hashes[128];
  uint8_t offsets[128];
  for (size_t i = 0; i < tags.size(); ++i) {
    std::span<const uint8_t> key = tags[i].suffix.span();
    size_t n = internal::SuffixHashes(key, hashes, offsets);
    if (n == 0) return absl::InvalidArgumentError("malformed suffix key");
    const uint64_t h = hashes[0];
    const size_t labels = n - 1;
    t->label_counts_[labels / 64] |= uint64_t{1} << (labels % 64);
    t->filter_[(h & t->filter_mask_) / 64] |= uint64_t{1} << (h % 64);
    t->key_off_.push_back(static_cast<uint32_t>(t->keys_.size()));
    t->keys_.insert(t->keys_.end(), key.begin(), key.end());
    for (size_t s = (h >> 20) & t->mask_;; s = (s + 1) & t->mask_) {
      Slot& slot = t->slots_[s];
      if (slot.index == kEmpty) {
        slot = Slot{static_cast<uint32_t>(h >> 32), static_cast<uint32_t>(i)};
        break;
      }
      if (slot.check == static_cast<uint32_t>(h >> 32) && tags[slot.index].suffix == tags[i].suffix) {
        return absl::InvalidArgumentError(internal::Cat("duplicate tag for ", dns::NameKeyToText(key)));
      }
    }
  }
  t->key_off_.push_back(static_cast<uint32_t>(t->keys_.size()));
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
}  // namespace

const Tag* TagTable::Lookup(std::span<const uint8_t> qname) const {
  if (tags_.empty()) return nullptr;  // no tags configured: nothing to hash
  uint64_t hashes[128];
  uint8_t offsets[128];
  const size_t n = internal::SuffixHashes(qname, hashes, offsets);
  for (size_t i = 0; i < n; ++i) {
    const size_t labels = n - 1 - i;
    if (!((label_counts_[labels / 64] >> (labels % 64)) & 1)) continue;
    const uint64_t h = hashes[i];
    if (!((filter_[(h & filter_mask_) / 64] >> (h % 64)) & 1)) continue;
    const uint32_t check = static_cast<uint32_t>(h >> 32);
    const size_t len = qname.size() - offsets[i];
    for (size_t s = (h >> 20) & mask_;; s = (s + 1) & mask_) {
      const Slot slot = slots_[s];
      if (slot.index == kEmpty) break;
      if (slot.check != check) continue;
      const uint32_t off = key_off_[slot.index];
      if (key_off_[slot.index + 1] - off == len &&
          SameBytes(keys_.data() + off, qname.data() + offsets[i], len)) {
        return &tags_[slot.index];
      }
    }
  }
  return nullptr;
}

size_t TagTable::memory_bytes() const {
  size_t b = slots_.size() * sizeof(Slot) + tags_.size() * sizeof(Tag) + keys_.size() +
             key_off_.size() * sizeof(uint32_t) + filter_.size() * sizeof(uint64_t);
  for (const Tag& t : tags_) b += t.targets.capacity() * sizeof(ForwardTarget);
  return b;
}

}  // namespace weir::partitions
