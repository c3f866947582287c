#include "weir/net/proxy_protocol.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

namespace weir::net {
namespace {

constexpr uint8_t kSignature[12] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};

// Byte 13: the version in the high nibble, the command in the low one.
constexpr uint8_t kVersion2 = 0x2;
constexpr uint8_t kCommandLocal = 0x0;
constexpr uint8_t kCommandProxy = 0x1;
// Byte 14: the address family in the high nibble, the protocol in the low one.
constexpr uint8_t kFamilyInet = 0x1;
constexpr uint8_t kFamilyInet6 = 0x2;
constexpr uint8_t kProtocolStream = 0x1;

// The address blocks: source and destination addresses, then their ports.
constexpr size_t kInetBlock = 4 + 4 + 2 + 2;
constexpr size_t kInet6Block = 16 + 16 + 2 + 2;
// A TLV: type (1 byte), length (2 bytes, big-endian), value.
constexpr size_t kTlvHeader = 3;

uint16_t Load16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }

common::SocketAddress Inet(const uint8_t* addr, const uint8_t* port) {
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  std::memcpy(&sin.sin_addr, addr, 4);
  std::memcpy(&sin.sin_port, port, 2);  // both in network order
  return common::SocketAddress::FromSockaddr(reinterpret_cast<const sockaddr*>(&sin), sizeof sin);
}

common::SocketAddress Inet6(const uint8_t* addr, const uint8_t* port) {
  sockaddr_in6 sin6{};
  sin6.sin6_family = AF_INET6;
  std::memcpy(&sin6.sin6_addr, addr, 16);
  std::memcpy(&sin6.sin6_port, port, 2);
  return common::SocketAddress::FromSockaddr(reinterpret_cast<const sockaddr*>(&sin6), sizeof sin6);
}

// The TLVs after the addresses must tile the rest of the header exactly.
bool TlvsFit(std::span<const uint8_t> tlvs) {
  while (!tlvs.empty()) {
    if (tlvs.size() < kTlvHeader) return false;
    const size_t len = Load16(tlvs.data() + 1);
    if (tlvs.size() - kTlvHeader < len) return false;
    tlvs = tlvs.subspan(kTlvHeader + len);
  }
  return true;
}

}  // namespace

ProxyParse ParseProxyV2(std::span<const uint8_t> bytes, ProxyHeader* out) {
  // Every byte is judged as soon as it is there, so a peer that sends no
  // PROXY header is refused on its first bytes, not left waiting.
  const size_t sig = bytes.size() < sizeof kSignature ? bytes.size() : sizeof kSignature;
  if (sig != 0 && std::memcmp(bytes.data(), kSignature, sig) != 0) return ProxyParse::kInvalid;
  if (bytes.size() <= 12) return ProxyParse::kNeedMore;
  const uint8_t version = bytes[12] >> 4;
  const uint8_t command = bytes[12] & 0x0F;
  if (version != kVersion2) return ProxyParse::kInvalid;
  if (command != kCommandLocal && command != kCommandProxy) return ProxyParse::kInvalid;
  if (bytes.size() <= 13) return ProxyParse::kNeedMore;
  const uint8_t family = bytes[13] >> 4;
  const uint8_t protocol = bytes[13] & 0x0F;
  size_t block = 0;
  if (command == kCommandProxy) {
    if (protocol != kProtocolStream) return ProxyParse::kInvalid;
    if (family == kFamilyInet) {
      block = kInetBlock;
    } else if (family == kFamilyInet6) {
      block = kInet6Block;
    } else {
      return ProxyParse::kInvalid;
    }
  }
  if (bytes.size() < kProxyV2FixedSize) return ProxyParse::kNeedMore;
  const size_t rest = Load16(bytes.data() + 14);
  if (rest < block || rest > kProxyV2MaxRest) return ProxyParse::kInvalid;
  const size_t length = kProxyV2FixedSize + rest;
  if (bytes.size() < length) return ProxyParse::kNeedMore;

  ProxyHeader h;
  h.length = length;
  if (command == kCommandLocal) {
    h.local = true;
    *out = h;
    return ProxyParse::kDone;
  }
  const uint8_t* a = bytes.data() + kProxyV2FixedSize;
  if (family == kFamilyInet) {
    h.source = Inet(a, a + 8);
    h.destination = Inet(a + 4, a + 10);
  } else {
    h.source = Inet6(a, a + 32);
    h.destination = Inet6(a + 16, a + 34);
  }
  if (!TlvsFit(bytes.subspan(kProxyV2FixedSize + block, rest - block))) return ProxyParse::kInvalid;
  *out = h;
  return ProxyParse::kDone;
}

}  // namespace weir::net
