// Helpers shared by the partitions tests and the tests of the folders above
// partitions: include as "partitions/test_util.h".
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dns/test_util.h"
#include "weir/dns/message.h"
#include "weir/dns/writer.h"
#include "weir/partitions/cache.h"
#include "weir/partitions/partition.h"

namespace weir::partitions::testing {

using dns::testing::Key;

// An address from its text ("10.1.2.3", "2001:db8::1"); a bad one fails the
// calling test.
inline common::IpAddress Ip(std::string_view text) {
  common::IpAddress a;
  EXPECT_TRUE(common::ParseIp(text, &a)) << text;
  return a;
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
    dns::NameKey target = Key(c);
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
