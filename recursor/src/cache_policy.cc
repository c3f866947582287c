#include "weir/recursor/cache_policy.h"

#include <algorithm>

#include "weir/dns/ttl.h"

namespace weir::recursor {

std::string CacheKey(const dns::NameKey& name, uint16_t qtype, uint16_t qclass) {
  return CacheKeyBytes(name, qtype, qclass).str();
}

std::string NameText(const dns::NameKey& name) { return dns::NameKeyToText(name.span()); }

bool CnameTarget(const CachedRecord& cname, dns::NameKey* target) {
  size_t end = 0;
  return dns::ReadName(cname.rdata, 0, &end, target) == dns::ParseError::kOk;
}

bool OwnedBy(const CachedRecord& r, const dns::NameKey& name) {
  return r.owner.size() == name.len && std::equal(r.owner.begin(), r.owner.end(), name.bytes.begin());
}

uint32_t MinTtl(const Answer& a) {
  uint32_t t = UINT32_MAX;
  for (const CachedRecord& r : a.answer) t = std::min(t, r.ttl);
  return t;
}

CachePolicy CachePolicy::From(const RecursorConfig& cfg) {
  CachePolicy p;
  p.min_ttl = static_cast<uint32_t>(cfg.min_ttl);
  p.max_ttl = static_cast<uint32_t>(cfg.max_ttl);
  p.negative_max_ttl = static_cast<uint32_t>(cfg.negative_max_ttl);
  p.stale_window = static_cast<uint32_t>(cfg.stale_window);
  p.stale_answer_ttl = static_cast<uint32_t>(cfg.stale_answer_ttl);
  p.prefetch_percent = static_cast<uint32_t>(cfg.prefetch_percent);
  return p;
}

uint32_t CachePolicy::Clamp(uint32_t ttl) const { return std::clamp<uint32_t>(ttl, min_ttl, max_ttl); }

bool CachePolicy::WantsPrefetch(const Answer& a, uint32_t now) const {
  return dns::PrefetchDue(a.ttl, a.fresh_until > now ? a.fresh_until - now : 0, prefetch_percent);
}

uint32_t CachePolicy::NegativeTtlOf(Answer& a) const {
  for (CachedRecord& r : a.authority) {
    uint32_t minimum = 0;
    if (r.type != dns::type::kSoa || !dns::SoaMinimum(r.rdata, &minimum)) continue;
    r.ttl = std::min({r.ttl, minimum, negative_max_ttl});
    return r.ttl;
  }
  return 0;
}

}  // namespace weir::recursor
