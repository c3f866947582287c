#include "weir/common/siphash.h"

#include <gtest/gtest.h>

#include <vector>

namespace weir::common {
namespace {

TEST(SipHash24Test, ReferenceVectors) {
  // The SipHash paper, appendix A, and the reference implementation's
  // vectors: key 00..0f, message 00..(n-1).
  std::array<uint8_t, 16> key;
  for (int i = 0; i < 16; ++i) key[i] = static_cast<uint8_t>(i);
  uint8_t msg[15];
  for (int i = 0; i < 15; ++i) msg[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(SipHash24(key, {msg, 0}), 0x726fdb47dd0e0e31ull);
  EXPECT_EQ(SipHash24(key, {msg, 8}), 0x93f5f5799a932462ull);
  EXPECT_EQ(SipHash24(key, {msg, 15}), 0xa129ca6149be45e5ull);
}

TEST(SipHash24Test, KeyAndEveryByteMatter) {
  std::array<uint8_t, 16> key{}, other{};
  other[15] = 1;
  std::vector<uint8_t> msg(20, 0x5a);
  const uint64_t h = SipHash24(key, msg);
  EXPECT_NE(h, SipHash24(other, msg));
  for (size_t i = 0; i < msg.size(); ++i) {
    std::vector<uint8_t> m = msg;
    m[i] ^= 1;
    EXPECT_NE(h, SipHash24(key, m)) << i;
  }
  msg.push_back(0);
  EXPECT_NE(h, SipHash24(key, msg)) << "the length goes in";
}

}  // namespace
}  // namespace weir::common
