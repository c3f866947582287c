// Random bits from the kernel's CSPRNG (getrandom), a buffer at a time, for
// what a blind forger must not predict: query IDs, source ports, the 0x20
// case bits, cookie secrets. A seeded PRNG would not do: what one server
// sees of its own queries would tell the next ID or case sent to another
// (unbound takes the same bits from arc4random for the same reason).
//
// Not for the hit path: a refill is a syscall (one per 4 KiB of bits).
// Threading: an object belongs to one thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace weir::common {

class SecureRandom {
 public:
  // A UniformRandomBitGenerator, so <random> and the templates that take
  // one (dns::RandomizeCase) accept it.
  using result_type = uint64_t;
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return ~result_type{0}; }
  result_type operator()() { return Next64(); }

  uint64_t Next64();
  uint16_t Next16() { return static_cast<uint16_t>(Next64()); }
  // Uniform in [0, n), n > 0 (rejection sampling: no modulo bias).
  uint32_t Below(uint32_t n);
  void Fill(uint8_t* out, size_t len);

 private:
  void Refill();
  std::array<uint8_t, 4096> buf_{};
  size_t pos_ = sizeof(buf_);
};

}  // namespace weir::common
