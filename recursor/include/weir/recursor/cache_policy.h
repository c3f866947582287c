// The caching rules the ordinary and the tagged resolution share: cache
// keys, TTL clamps, negative TTLs (RFC 2308 5), prefetch and the stale
// window (RFC 8767).
//
// Threading: plain values and pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "absl/strings/string_view.h"
#include "weir/dns/message.h"
#include "weir/recursor/answer.h"
#include "weir/recursor/config.h"

namespace weir::recursor {

// An answer in the ordinary or the /0 cache, kept until the end of its
// stale window.
struct PlainEntry {
  Answer a;
  uint32_t stale_until = 0;
};

// (name, type, class) as a cache key, built in place: the caches are keyed
// by std::string but looked up by this key's view (absl's heterogeneous
// lookup takes an absl::string_view, which Debian's absl does not alias to
// std::string_view), so a cache hit allocates nothing. Only a new entry
// copies it into a string.
class CacheKeyBytes {
 public:
  CacheKeyBytes(const dns::NameKey& name, uint16_t qtype, uint16_t qclass) {
    std::memcpy(bytes_.data(), name.bytes.data(), name.len);
    len_ = name.len;
    Push(static_cast<char>(qtype >> 8));
    Push(static_cast<char>(qtype));
    Push(static_cast<char>(qclass >> 8));
    Push(static_cast<char>(qclass));
  }
  absl::string_view view() const { return {bytes_.data(), len_}; }
  std::string str() const { return std::string(bytes_.data(), len_); }

 private:
  void Push(char c) { bytes_[len_++] = c; }

  std::array<char, dns::kMaxNameWire + 4> bytes_;
  size_t len_ = 0;
};

std::string CacheKey(const dns::NameKey& name, uint16_t qtype, uint16_t qclass);
std::string NameText(const dns::NameKey& name);
// The target of a CNAME record; false when its rdata is not a name.
bool CnameTarget(const CachedRecord& cname, dns::NameKey* target);
bool OwnedBy(const CachedRecord& r, const dns::NameKey& name);
// The shortest TTL of the answer section (UINT32_MAX when it is empty).
uint32_t MinTtl(const Answer& a);

struct CachePolicy {
  uint32_t min_ttl = 0;
  uint32_t max_ttl = 86400;
  uint32_t negative_max_ttl = 3600;
  uint32_t stale_window = 86400;
  uint32_t stale_answer_ttl = 30;
  uint32_t prefetch_percent = 10;

  static CachePolicy From(const RecursorConfig& cfg);
  uint32_t Clamp(uint32_t ttl) const;
  // Hit in the last prefetch_percent of a TTL of at least 10 s.
  bool WantsPrefetch(const Answer& a, uint32_t now) const;
  // The negative TTL of a negative answer: min(SOA TTL, SOA MINIMUM,
  // negative_max_ttl), also written into the SOA record; 0 when the answer
  // has no SOA (then it is not cached).
  uint32_t NegativeTtlOf(Answer& a) const;
};

}  // namespace weir::recursor
