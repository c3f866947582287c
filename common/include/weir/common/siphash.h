// SipHash-2-4 (Aumasson and Bernstein): a keyed pseudo-random function,
// fast on short inputs. The DNS client cookies are built with it (RFC 7873
// 4.1 asks for a keyed hash; RFC 9018 uses SipHash-2-4 for server cookies).
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace weir::common {

// SipHash-2-4 of `data` under the 16-byte `key`.
uint64_t SipHash24(const std::array<uint8_t, 16>& key, std::span<const uint8_t> data);

}  // namespace weir::common
