// Byte-level helpers for DNS wire format: big-endian loads and stores and the
// protocol constants the rest of weir needs. Header-only, no allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace weir::dns {

inline constexpr size_t kHeaderSize = 12;
inline constexpr size_t kMaxNameWire = 255;  // RFC 1035 2.3.4, including the root byte
inline constexpr size_t kMaxLabel = 63;
inline constexpr size_t kMaxUdpWithoutEdns = 512;
inline constexpr uint16_t kDefaultWeightOptionCode = 65001;

namespace type {
inline constexpr uint16_t kA = 1;
inline constexpr uint16_t kNs = 2;
inline constexpr uint16_t kCname = 5;
inline constexpr uint16_t kSoa = 6;
inline constexpr uint16_t kPtr = 12;
inline constexpr uint16_t kHinfo = 13;
inline constexpr uint16_t kMx = 15;
inline constexpr uint16_t kTxt = 16;
inline constexpr uint16_t kAaaa = 28;
inline constexpr uint16_t kOpt = 41;
inline constexpr uint16_t kRrsig = 46;
inline constexpr uint16_t kNsec = 47;
inline constexpr uint16_t kNsec3 = 50;
inline constexpr uint16_t kAny = 255;
}  // namespace type

namespace klass {
inline constexpr uint16_t kIn = 1;
}

namespace option {
inline constexpr uint16_t kNsid = 3;
inline constexpr uint16_t kEcs = 8;
inline constexpr uint16_t kCookie = 10;
inline constexpr uint16_t kPadding = 12;
}  // namespace option

enum class Rcode : uint16_t {
  kNoError = 0,
  kFormErr = 1,
  kServFail = 2,
  kNxDomain = 3,
  kNotImp = 4,
  kRefused = 5,
  kBadVers = 16,    // extended: needs the OPT RR to carry the upper bits
  kBadCookie = 23,  // extended (RFC 7873 8)
};

// The RCODE's mnemonic (RFC 6895 and the IANA registry: "NOERROR",
// "SERVFAIL", "BADVERS", ...), "RCODE<n>" for unassigned values.
std::string RcodeName(unsigned rcode);

// Header flag bits (second 16-bit word of the header).
namespace flag {
inline constexpr uint16_t kQr = 0x8000;
inline constexpr uint16_t kAa = 0x0400;
inline constexpr uint16_t kTc = 0x0200;
inline constexpr uint16_t kRd = 0x0100;
inline constexpr uint16_t kRa = 0x0080;
inline constexpr uint16_t kAd = 0x0020;
inline constexpr uint16_t kCd = 0x0010;
inline constexpr uint16_t kOpcodeMask = 0x7800;
inline constexpr uint16_t kRcodeMask = 0x000f;
}  // namespace flag

inline uint16_t Load16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }
inline uint32_t Load32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}
inline void Store16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
inline void Store32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}

// Header field offsets.
inline constexpr size_t kOffId = 0;
inline constexpr size_t kOffFlags = 2;
inline constexpr size_t kOffQdcount = 4;
inline constexpr size_t kOffAncount = 6;
inline constexpr size_t kOffNscount = 8;
inline constexpr size_t kOffArcount = 10;

}  // namespace weir::dns
