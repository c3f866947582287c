// A copy for the short, variable-length byte runs of the hit path (names,
// answer templates, records: tens to a few hundred bytes). memcpy with a
// size known only at run time is a library call, or an inlined `rep movs`
// whose start-up costs more than such a copy; this is a few 16-byte moves,
// the last one overlapping the one before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace weir::common {

// dst[0, n) = src[0, n); the ranges must not overlap.
inline void CopyShort(uint8_t* dst, const uint8_t* src, size_t n) {
  if (n >= 16) {
    for (size_t i = 0; i + 16 < n; i += 16) std::memcpy(dst + i, src + i, 16);
    std::memcpy(dst + n - 16, src + n - 16, 16);
  } else if (n >= 8) {
    uint64_t a, b;
    std::memcpy(&a, src, 8);
    std::memcpy(&b, src + n - 8, 8);
    std::memcpy(dst, &a, 8);
    std::memcpy(dst + n - 8, &b, 8);
  } else if (n >= 4) {
    uint32_t a, b;
    std::memcpy(&a, src, 4);
    std::memcpy(&b, src + n - 4, 4);
    std::memcpy(dst, &a, 4);
    std::memcpy(dst + n - 4, &b, 4);
  } else if (n > 0) {
    dst[0] = src[0];
    dst[n / 2] = src[n / 2];
    dst[n - 1] = src[n - 1];
  }
}

}  // namespace weir::common
