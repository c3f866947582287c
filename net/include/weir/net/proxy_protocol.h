// The PROXY protocol, version 2 (HAProxy's proxy-protocol.txt, section 2.2):
// the binary header a load balancer in front of weir's TCP listeners (DNS
// over TCP, TLS, HTTPS) sends before the client's bytes, naming the client's
// address and port. Version 1 (the text form) is not accepted.
//
// Plain functions over the caller's bytes: no allocation, reentrant,
// callable from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "weir/common/socket_address.h"

namespace weir::net {

// The fixed part: the 12-byte signature, version and command, family and
// protocol, and the 16-bit length of the rest.
inline constexpr size_t kProxyV2FixedSize = 16;
// The longest rest accepted: the addresses (36 bytes for IPv6) and room for
// the TLVs load balancers add (ALPN, authority, unique ID, SSL, CRC32C).
// The format allows 65535; a longer header than this is refused.
inline constexpr size_t kProxyV2MaxRest = 536;
inline constexpr size_t kProxyV2MaxHeader = kProxyV2FixedSize + kProxyV2MaxRest;

struct ProxyHeader {
  bool local = false;  // LOCAL command (health check): use the connection's own addresses
  // The client (source) and the address it connected to (destination), with
  // their ports: set for the PROXY command, TCP over IPv4 or IPv6.
  common::SocketAddress source, destination;
  size_t length = 0;  // bytes of the header, to skip: the client's own bytes follow
};

enum class ProxyParse : uint8_t { kNeedMore, kDone, kInvalid };

// Parses the v2 header at the start of `bytes`.
//  * kNeedMore while `bytes` is a proper prefix of a header that could still
//    be valid: read more and call again with everything read so far.
//  * kInvalid as soon as the bytes cannot start a header this accepts: a bad
//    signature (a v1 "PROXY ..." line included), a version other than 2, a
//    command other than LOCAL or PROXY, PROXY with a family or protocol other
//    than TCP (STREAM) over IPv4 or IPv6, a length too short for the
//    addresses or over kProxyV2MaxRest, or TLVs that overrun the header.
//    LOCAL takes any family (UNSPEC is what senders use) and its address
//    block is skipped unread, as the specification says.
//  * kDone: `*out` holds the header; out->length <= bytes.size().
// Bytes after the header are not looked at.
ProxyParse ParseProxyV2(std::span<const uint8_t> bytes, ProxyHeader* out);

}  // namespace weir::net
