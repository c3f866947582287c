#include "weir/common/hash.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string_view>
#include <vector>

namespace weir::common {
namespace {

uint64_t Fnv(std::string_view s, uint64_t h = kFnv1a64Basis) { return Fnv1a64(s.data(), s.size(), h); }
uint64_t Bytes(std::string_view s, uint64_t seed = 0) { return HashBytes(s.data(), s.size(), seed); }

// The published FNV-1a 64 test vectors; continuing from a result is the
// hash of the concatenation.
TEST(HashTest, Fnv1a64IsTheStandardOne) {
  EXPECT_EQ(Fnv(""), 0xcbf29ce484222325u);
  EXPECT_EQ(Fnv("a"), 0xaf63dc4c8601ec8cu);
  EXPECT_EQ(Fnv("foobar"), 0x85944171f73967e8u);
  EXPECT_EQ(Fnv("bar", Fnv("foo")), Fnv("foobar"));
}

// splitmix64 from state 0: its first output is Mix64 of the golden gamma.
TEST(HashTest, Mix64IsSplitmix64sFinaliser) {
  EXPECT_EQ(Mix64(kGolden64), 0xe220a8397b1dcdafu);
  static_assert(Mix64(0) == 0);
}

// HashBytes leaves the process: the fastpath's ring places questions on
// recursors by it, and every node of every release must agree. These values
// were computed by the fastpath's StableHash before it moved here.
TEST(HashTest, HashBytesValuesArePinned) {
  EXPECT_EQ(Bytes(""), 0xf52a15e9a9b5e89bu);
  EXPECT_EQ(Bytes("a"), 0x02c0bdbf481420f8u);
  EXPECT_EQ(Bytes("foobar"), 0x404da9e3b74078c2u);
  EXPECT_EQ(Bytes("name0"), 0x740139bc8c121b83u);
  EXPECT_EQ(Bytes("www.example.com", 0x77656972), 0x8a2d0b0e46d583c7u);
  EXPECT_EQ(Bytes("www.example.com"), Mix64(Fnv("www.example.com")));
}

// The in-process finalisers are bijections on their own and HashWords takes
// every bit of both words: any one flipped input bit changes the output.
TEST(HashTest, EveryInputBitCounts) {
  const uint64_t a = 0x0123456789abcdefu, b = 0xfedcba9876543210u;
  for (int i = 0; i < 64; ++i) {
    const uint64_t bit = uint64_t{1} << i;
    EXPECT_NE(FastMix64(a), FastMix64(a ^ bit)) << i;
    EXPECT_NE(Mix64(a), Mix64(a ^ bit)) << i;
    EXPECT_NE(HashWords(a, b), HashWords(a ^ bit, b)) << i;
    EXPECT_NE(HashWords(a, b), HashWords(a, b ^ bit)) << i;
  }
}

// A table index from the high bits of HashWords: consecutive IPv4 addresses
// (the low word only) spread over a 4096-slot table about as random keys do.
TEST(HashTest, HashWordsSpreadsConsecutiveKeys) {
  std::vector<int> slots(4096);
  for (uint64_t addr = 0; addr < 4096; ++addr) ++slots[HashWords(0xc0000200u + addr, 4) >> 52];
  int used = 0;
  for (int n : slots) used += n > 0 ? 1 : 0;
  // Random keys fill 1 - 1/e of the slots (63 %).
  EXPECT_GT(used, 4096 * 55 / 100);
}

}  // namespace
}  // namespace weir::common
