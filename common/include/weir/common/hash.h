// weir's 64-bit hashing primitives, in one place. Everything here is inline
// and branch-free apart from the byte loop, so the hot path's key hashes
// (partitions::HashCacheKey, the rate limiter, the answer counters) compile
// to the instructions they would have written by hand.
//
// Two kinds of output:
//  - Fnv1a64 and HashBytes are stable: the same bytes give the same value in
//    every process, on every node and in every release. They feed values
//    that leave the process (a stored snapshot's checksum, the fastpath's
//    consistent hashing of questions onto recursors, which every node must
//    compute alike); tests/common/hash_test.cc pins them. Changing one is a
//    format change. Mix64 is part of HashBytes, so it is stable too.
//  - FastMix64, CombineWords and HashWords only spread keys over in-process
//    tables; they may change between releases.
// For an in-process hash map of ordinary keys, absl::Hash is the tool; for a
// hash an attacker must not be able to steer, SipHash24 (siphash.h).
//
// Threading: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace weir::common {

// 2^64 / golden ratio, odd: multiplying by it spreads a key's bits into the
// high bits of the product (Fibonacci hashing, Knuth TAOCP 6.4), so the top
// bits of key * kGolden64 make a table index.
inline constexpr uint64_t kGolden64 = 0x9e3779b97f4a7c15ULL;

// FNV-1a, 64 bits (Fowler, Noll, Vo).
inline constexpr uint64_t kFnv1a64Basis = 0xcbf29ce484222325ULL;
inline constexpr uint64_t kFnv1a64Prime = 0x100000001b3ULL;

// FNV-1a over `len` bytes, starting from `h` (kFnv1a64Basis for the standard
// hash; pass a previous result to continue over more bytes). Stable. Alone it
// is a checksum, not a table hash: its high bits barely depend on the last
// bytes, so tables use HashBytes.
inline uint64_t Fnv1a64(const void* data, size_t len, uint64_t h = kFnv1a64Basis) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < len; ++i) h = (h ^ p[i]) * kFnv1a64Prime;
  return h;
}

// splitmix64's finaliser (Steele, Lea, Flood 2014; Stafford's "Mix13"): a
// bijection in which every output bit depends on every input bit. Stable.
constexpr uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// A cheaper finaliser, one multiply instead of Mix64's two, for a value whose
// bits a multiply already spread upwards (the last step of a multiplicative
// hash): folds the high bits down, multiplies, folds again. A bijection.
constexpr uint64_t FastMix64(uint64_t x) {
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 32;
  return x;
}

// Two words multiplied by two odd constants and xored. Only the high bits
// depend on every input bit: take the top bits as an index, or finish with
// FastMix64 (HashWords).
constexpr uint64_t CombineWords(uint64_t a, uint64_t b) { return a * kGolden64 ^ b * 0xc2b2ae3d27d4eb4fULL; }

// A hash of two words (an IPv6 address, say) for an in-process table.
constexpr uint64_t HashWords(uint64_t a, uint64_t b) { return FastMix64(CombineWords(a, b)); }

// A hash of `len` bytes that is the same in every process, on every node and
// in every release: FNV-1a from the basis xor `seed`, then Mix64 (FNV-1a
// alone clusters on short, similar keys). Byte at a time: for values other
// processes must compute alike; the per-packet cache index hashes a word at
// a time (partitions::HashCacheKey).
inline uint64_t HashBytes(const void* data, size_t len, uint64_t seed = 0) {
  return Mix64(Fnv1a64(data, len, kFnv1a64Basis ^ seed));
}

}  // namespace weir::common
