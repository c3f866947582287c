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

// dst[0, n) = src[0, n) for sizeof(W) <= n <= 2 * sizeof(W): the first and
// the last word, overlapping in the middle. Both are loaded before either is
// stored.
template <typename W>
inline void CopyTwoWords(uint8_t* dst, const uint8_t* src, size_t n) {
  W a, b;
  std::memcpy(&a, src, sizeof(W));
  std::memcpy(&b, src + n - sizeof(W), sizeof(W));
  std::memcpy(dst, &a, sizeof(W));
  std::memcpy(dst + n - sizeof(W), &b, sizeof(W));
}

// dst[0, n) = src[0, n); the ranges must not overlap.
inline void CopyShort(uint8_t* dst, const uint8_t* src, size_t n) {
  if (n >= 16) {
    for (size_t i = 0; i + 16 < n; i += 16) std::memcpy(dst + i, src + i, 16);
    std::memcpy(dst + n - 16, src + n - 16, 16);
  } else if (n >= 8) {
    CopyTwoWords<uint64_t>(dst, src, n);
  } else if (n >= 4) {
    CopyTwoWords<uint32_t>(dst, src, n);
  } else if (n > 0) {
    dst[0] = src[0];
    dst[n / 2] = src[n / 2];
    dst[n - 1] = src[n - 1];
  }
}

}  // namespace weir::common
