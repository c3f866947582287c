#include "weir/fastpath/frame.h"

#include <bit>
#include <cstring>

#include "weir/dns/wire.h"

namespace weir::fastpath::frame {

using dns::Load16;
using dns::Store16;

namespace {

constexpr uint8_t kProtoUdp = 17;
constexpr uint8_t kReplyHopLimit = 64;

bool IsMulticastMac(const uint8_t* mac) { return (mac[0] & 1) != 0; }

// A query's source must be somewhere an answer can go: not multicast, not
// broadcast, not unspecified (a forged source there turns weir into a
// reflector towards a whole segment).
bool BadSource4(const uint8_t* a) {
  return a[0] >= 224 || a[0] == 0 || (a[0] == 255 && a[1] == 255 && a[2] == 255 && a[3] == 255);
}
bool BadSource6(const uint8_t* a) {
  if (a[0] == 0xff) return true;  // multicast
  static constexpr uint8_t kZero[16] = {};
  return std::memcmp(a, kZero, 16) == 0;
}

}  // namespace

bool PortAddresses::Owns4(const uint8_t* addr) const {
  for (const auto& a : v4)
    if (std::memcmp(a.data(), addr, 4) == 0) return true;
  return false;
}

bool PortAddresses::Owns6(const uint8_t* addr) const {
  for (const auto& a : v6)
    if (std::memcmp(a.data(), addr, 16) == 0) return true;
  return false;
}

Parsed Classify(const uint8_t* f, size_t len, const PortAddresses& port) {
  Parsed p;
  if (len < kEthHeader) return p;  // kMalformed
  const bool to_group = IsMulticastMac(f);
  // A group source MAC is never a station's: an answer would go to a group.
  if ((!to_group && std::memcmp(f, port.mac.data(), 6) != 0) || IsMulticastMac(f + 6)) {
    p.cls = FrameClass::kNotOurs;
    return p;
  }
  uint16_t ether = Load16(f + 12);
  p.l2_len = kEthHeader;
  if (ether == kEtherVlan) {
    if (len < kEthHeader + kVlanTag) return p;
    p.vlan = true;
    p.l2_len = kEthHeader + kVlanTag;
    ether = Load16(f + 16);
  }
  // Anything to a group address (ARP requests, ND, mDNS) is the kernel's.
  p.cls = FrameClass::kException;
  if (to_group) return p;
  const uint8_t* ip = f + p.l2_len;
  const size_t avail = len - p.l2_len;
  size_t ip_payload;
  const uint8_t* udp;
  if (ether == kEtherIpv4) {
    if (avail < kIpv4Header || (ip[0] >> 4) != 4) return p.cls = FrameClass::kMalformed, p;
    const size_t ihl = size_t{uint8_t(ip[0] & 0x0f)} * 4;
    const size_t total = Load16(ip + 2);
    if (ihl < kIpv4Header || total < ihl || total > avail) return p.cls = FrameClass::kMalformed, p;
    // Options, fragments, other protocols and other addresses: the kernel's.
    if (ihl != kIpv4Header) return p;
    if ((Load16(ip + 6) & 0x3fff) != 0) return p;  // MF set or a fragment offset
    if (ip[9] != kProtoUdp || !port.Owns4(ip + 16)) return p;
    if (BadSource4(ip + 12)) return p.cls = FrameClass::kNotOurs, p;
    p.l3_len = kIpv4Header;
    ip_payload = total - kIpv4Header;
  } else if (ether == kEtherIpv6) {
    if (avail < kIpv6Header || (ip[0] >> 4) != 6) return p.cls = FrameClass::kMalformed, p;
    const size_t payload = Load16(ip + 4);
    if (payload > avail - kIpv6Header) return p.cls = FrameClass::kMalformed, p;
    // Extension headers (fragments among them), ICMPv6, other addresses.
    if (ip[6] != kProtoUdp || !port.Owns6(ip + 24)) return p;
    if (BadSource6(ip + 8)) return p.cls = FrameClass::kNotOurs, p;
    p.ipv6 = true;
    p.l3_len = kIpv6Header;
    ip_payload = payload;
  } else {
    return p;  // ARP, LLDP, a second tag (QinQ), ...
  }
  udp = ip + p.l3_len;
  if (ip_payload < kUdpHeader) return p.cls = FrameClass::kMalformed, p;
  if (Load16(udp + 2) != port.dns_port) return p;  // another service on our address
  const size_t udp_len = Load16(udp + 4);
  if (udp_len < kUdpHeader || udp_len > ip_payload || Load16(udp) == 0)
    return p.cls = FrameClass::kMalformed, p;
  p.dns_len = static_cast<uint16_t>(udp_len - kUdpHeader);
  p.cls = FrameClass::kQuery;
  return p;
}

common::IpAddress ClientOf(const uint8_t* f, const Parsed& p) {
  const uint8_t* ip = f + p.l2_len;
  common::IpAddress a;
  if (p.ipv6) {
    a.family = 6;
    std::memcpy(a.bytes.data(), ip + 8, 16);
  } else {
    a.family = 4;
    std::memcpy(a.bytes.data(), ip + 12, 4);
  }
  return a;
}

uint16_t ClientPortOf(const uint8_t* f, const Parsed& p) { return dns::Load16(f + p.l2_len + p.l3_len); }

uint32_t ChecksumAdd(std::span<const uint8_t> data, uint32_t sum) {
  // Eight bytes per step in the host's byte order with end-around carry: the
  // ones'-complement sum commutes with swapping the bytes of every word
  // (RFC 1071 2.B), so one swap of the folded result gives the big-endian
  // sum. An odd last byte is the high byte of a zero-padded word.
  static_assert(std::endian::native == std::endian::little,
                "the byte swap below assumes a little-endian host");
  const uint8_t* d = data.data();
  size_t n = data.size();
  uint64_t acc = 0;
  for (; n >= 8; d += 8, n -= 8) {
    uint64_t w;
    std::memcpy(&w, d, 8);
    acc += w;
    acc += acc < w;  // the carry out of bit 63 goes back in
  }
  uint64_t tail = 0;
  if (n > 0) std::memcpy(&tail, d, n);  // the remaining 0-7 bytes, zero-padded in place
  acc += tail;
  acc += acc < tail;
  acc = (acc & 0xffffffff) + (acc >> 32);
  acc = (acc & 0xffffffff) + (acc >> 32);
  acc = (acc & 0xffff) + (acc >> 16);
  acc = (acc & 0xffff) + (acc >> 16);
  uint32_t be = __builtin_bswap16(static_cast<uint16_t>(acc));
  be += sum;
  be = (be & 0xffff) + (be >> 16);
  return (be & 0xffff) + (be >> 16);
}

uint16_t ChecksumFold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(sum);
}

size_t WriteReply(const uint8_t* q, const Parsed& p, const Mac& port_mac, uint8_t* r, size_t dns_len,
                  const ReplyOptions& o) {
  // Read everything that is swapped before writing: `r` may be `q`.
  uint8_t client_mac[6];
  std::memcpy(client_mac, q + 6, 6);
  const uint8_t* qip = q + p.l2_len;
  const uint8_t* qudp = qip + p.l3_len;
  const uint16_t client_port = Load16(qudp);
  const uint16_t our_port = Load16(qudp + 2);
  uint8_t src[16], dst[16];  // the reply's
  const size_t alen = p.ipv6 ? 16 : 4;
  std::memcpy(src, qip + (p.ipv6 ? 24 : 16), alen);
  std::memcpy(dst, qip + (p.ipv6 ? 8 : 12), alen);
  uint8_t tag[kVlanTag] = {};
  if (p.vlan) std::memcpy(tag, q + 12, kVlanTag);

  std::memcpy(r, client_mac, 6);
  std::memcpy(r + 6, port_mac.data(), 6);
  if (p.vlan) {
    std::memcpy(r + 12, tag, kVlanTag);
    Store16(r + 16, p.ipv6 ? kEtherIpv6 : kEtherIpv4);
  } else {
    Store16(r + 12, p.ipv6 ? kEtherIpv6 : kEtherIpv4);
  }
  uint8_t* ip = r + p.l2_len;
  uint8_t* udp = ip + p.l3_len;
  const size_t udp_len = kUdpHeader + dns_len;
  if (p.ipv6) {
    Store16(ip, 0x6000);  // version 6, traffic class and flow label 0
    Store16(ip + 2, 0);
    Store16(ip + 4, static_cast<uint16_t>(udp_len));
    ip[6] = kProtoUdp;
    ip[7] = kReplyHopLimit;
    std::memcpy(ip + 8, src, 16);
    std::memcpy(ip + 24, dst, 16);
  } else {
    ip[0] = 0x45;
    ip[1] = 0;
    Store16(ip + 2, static_cast<uint16_t>(kIpv4Header + udp_len));
    Store16(ip + 4, 0);       // identification: never fragmented
    Store16(ip + 6, 0x4000);  // don't fragment
    ip[8] = kReplyHopLimit;
    ip[9] = kProtoUdp;
    Store16(ip + 10, 0);
    std::memcpy(ip + 12, src, 4);
    std::memcpy(ip + 16, dst, 4);
    if (!o.offload_ip_checksum) {
      Store16(ip + 10, static_cast<uint16_t>(~ChecksumFold(ChecksumAdd({ip, kIpv4Header})) & 0xffff));
    }
  }
  Store16(udp, our_port);
  Store16(udp + 2, client_port);
  Store16(udp + 4, static_cast<uint16_t>(udp_len));
  Store16(udp + 6, 0);
  if (p.ipv6 || o.udp_checksum_v4) {
    // Pseudo-header: both addresses, the protocol and the UDP length.
    uint32_t sum = ChecksumAdd({ip + (p.ipv6 ? 8 : 12), 2 * alen});
    sum += kProtoUdp + static_cast<uint32_t>(udp_len);
    if (o.offload_udp_checksum) {
      Store16(udp + 6, ChecksumFold(sum));
    } else {
      sum = ChecksumAdd({udp, udp_len}, ChecksumFold(sum));
      uint16_t c = static_cast<uint16_t>(~ChecksumFold(sum) & 0xffff);
      if (c == 0) c = 0xffff;  // 0 means "no checksum" over IPv4 and is invalid over IPv6
      Store16(udp + 6, c);
    }
  }
  return p.l2_len + p.l3_len + udp_len;
}

}  // namespace weir::fastpath::frame
