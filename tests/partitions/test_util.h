// Helpers shared by the partitions tests.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "weir/dns/message.h"
#include "weir/dns/writer.h"
#include "weir/partitions/cache.h"

namespace weir::partitions::testing {

inline dns::NameKey Name(std::string_view s) {
  dns::NameKey k;
  EXPECT_TRUE(dns::NameKeyFromText(s, &k)) << s;
  return k;
}

inline std::vector<uint8_t> V4(uint32_t a) {
  return {uint8_t(a >> 24), uint8_t(a >> 16), uint8_t(a >> 8), uint8_t(a)};
}

// An A entry: optional CNAME chain, then `addresses` with `weights`.
inline CacheEntryPtr MakeAEntry(Partition partition, const dns::NameKey& qname,
                                const std::vector<uint32_t>& addresses, const std::vector<uint8_t>& weights,
                                uint32_t now, uint32_t ttl = 300,
                                const std::vector<std::string>& chain = {}) {
  CacheKey key{partition, qname.span(), dns::type::kA, dns::klass::kIn};
  CacheEntryBuilder b(key);
  dns::NameKey owner = qname;
  for (const std::string& c : chain) {
    dns::NameKey target = Name(c);
    b.AddCname(owner.span(), target.span(), ttl + 100);
    owner = target;
  }
  for (uint32_t a : addresses) b.AddAddress(owner.span(), V4(a), ttl);
  b.SetWeights(weights);
  auto e = b.Build(EntryKind::kPositive, now);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *std::move(e) : nullptr;
}

// A full response: header + question + the bytes WriteAnswer produced.
struct Response {
  std::vector<uint8_t> bytes;
  dns::Message msg;
};

}  // namespace weir::partitions::testing
