// Ethernet / IP / UDP framing for the poll-mode backend: what a received
// frame is (a DNS query to an address this port owns, something for the
// kernel's exception path, or a drop), and the headers of the reply. Plain
// functions over bytes, no DPDK: unit-tested and fuzzed on their own.
//
// A DNS query is: Ethernet to the port's MAC, at most one 802.1Q tag (kept
// in the reply), IPv4 without options and not a fragment, or IPv6 without
// extension headers, UDP to the DNS port of an owned address. Incoming UDP
// checksums are not verified (as Knot and dnsdist do not).
//
// Threading: stateless; PortAddresses is read-only once built.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "weir/partitions/partition.h"

namespace weir::fastpath::frame {

inline constexpr size_t kEthHeader = 14;
inline constexpr size_t kVlanTag = 4;
inline constexpr size_t kIpv4Header = 20;
inline constexpr size_t kIpv6Header = 40;
inline constexpr size_t kUdpHeader = 8;
// The longest headers of a query we answer (Ethernet + tag + IPv6 + UDP).
inline constexpr size_t kMaxHeaders = kEthHeader + kVlanTag + kIpv6Header + kUdpHeader;

inline constexpr uint16_t kEtherIpv4 = 0x0800;
inline constexpr uint16_t kEtherIpv6 = 0x86dd;
inline constexpr uint16_t kEtherArp = 0x0806;
inline constexpr uint16_t kEtherVlan = 0x8100;

using Mac = std::array<uint8_t, 6>;

// What one port answers for: its MAC and the addresses it owns.
struct PortAddresses {
  Mac mac{};
  std::vector<std::array<uint8_t, 4>> v4;
  std::vector<std::array<uint8_t, 16>> v6;
  uint16_t dns_port = 53;

  bool Owns4(const uint8_t* addr) const;
  bool Owns6(const uint8_t* addr) const;
};

enum class FrameClass : uint8_t {
  kQuery,      // a DNS query for the handler: its message is at Parsed::dns_offset()
  kException,  // for the kernel: ARP, ND, ICMP, TCP, fragments, IP options, other ports or addresses
  kNotOurs,    // unicast to another MAC, or from a group MAC or a multicast/broadcast IP: dropped
  kMalformed,  // truncated, or lengths that do not add up: dropped
};

struct Parsed {
  FrameClass cls = FrameClass::kMalformed;
  bool ipv6 = false;
  bool vlan = false;
  uint8_t l2_len = 0;    // 14, or 18 with the tag
  uint8_t l3_len = 0;    // 20 or 40
  uint16_t dns_len = 0;  // the UDP payload (the DNS message)
  uint16_t dns_offset() const { return static_cast<uint16_t>(l2_len + l3_len + kUdpHeader); }
};

// Classifies a received frame of `len` bytes into *out (every field
// written; the worker has it written straight into its burst).
void Classify(const uint8_t* frame, size_t len, const PortAddresses& port, Parsed* out);
inline Parsed Classify(const uint8_t* frame, size_t len, const PortAddresses& port) {
  Parsed p;
  Classify(frame, len, port, &p);
  return p;
}

// The source address of a kQuery frame, as the handler sees the client:
// into *a (every byte of it written), or returned. Inline: the worker takes
// one for every query.
inline void ClientOf(const uint8_t* frame, const Parsed& p, common::IpAddress* a) {
  const uint8_t* ip = frame + p.l2_len;
  if (p.ipv6) {
    a->family = 6;
    std::memcpy(a->bytes.data(), ip + 8, 16);
  } else {
    a->family = 4;
    uint64_t head = 0;  // the address and the first 4 zero bytes after it, in one store
    std::memcpy(&head, ip + 12, 4);
    std::memcpy(a->bytes.data(), &head, 8);
    std::memset(a->bytes.data() + 8, 0, 8);
  }
}
inline common::IpAddress ClientOf(const uint8_t* frame, const Parsed& p) {
  common::IpAddress a;
  ClientOf(frame, p, &a);
  return a;
}
// Its source port.
inline uint16_t ClientPortOf(const uint8_t* frame, const Parsed& p) {
  const uint8_t* udp = frame + p.l2_len + p.l3_len;
  return static_cast<uint16_t>(udp[0] << 8 | udp[1]);
}

struct ReplyOptions {
  // False: IPv4 replies carry UDP checksum 0 (RFC 768 allows it; IPv6 always has one).
  bool udp_checksum_v4 = true;
  // The NIC computes the IPv4 header checksum (left 0 here).
  bool offload_ip_checksum = false;
  // The NIC computes the UDP checksum: the pseudo-header sum is written, as
  // DPDK's TX checksum offload expects.
  bool offload_udp_checksum = false;
};

// Writes the headers of the reply to `query` (the headers of a kQuery
// frame, p.dns_offset() bytes) into reply[0, p.dns_offset()): MACs,
// addresses and ports swapped, the VLAN tag kept, lengths and checksums for
// the `dns_len`-byte answer that must already be at reply + p.dns_offset().
// `reply` may be `query` (in place), or elsewhere clear of the query's
// headers. Returns the frame length.
size_t WriteReply(const uint8_t* query, const Parsed& p, const Mac& port_mac, uint8_t* reply, size_t dns_len,
                  const ReplyOptions& options);

// The RFC 1071 ones'-complement sum of `data` (big-endian 16-bit words, an
// odd last byte padded with zero), folded to 16 bits, not inverted. `sum`
// continues an earlier partial sum of an even number of bytes.
uint32_t ChecksumAdd(std::span<const uint8_t> data, uint32_t sum = 0);
uint16_t ChecksumFold(uint32_t sum);

}  // namespace weir::fastpath::frame
