// Frames for the DPDK backend's tests: a builder of query frames with every
// field a test may want wrong, and reference checksums written the slow,
// obvious way (independent of frame.cc).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "weir/fastpath/frame.h"

namespace weir::fastpath::frame::testing {

inline const Mac kPortMac = {0x02, 0, 0, 0, 0, 0x01};
inline const Mac kClientMac = {0x02, 0, 0, 0, 0, 0x02};
inline constexpr std::array<uint8_t, 4> kOwned4 = {198, 18, 0, 1};
inline constexpr std::array<uint8_t, 4> kClient4 = {198, 18, 1, 10};
inline constexpr std::array<uint8_t, 16> kOwned6 = {0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
inline constexpr std::array<uint8_t, 16> kClient6 = {0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};

inline PortAddresses Port() {
  PortAddresses p;
  p.mac = kPortMac;
  p.v4 = {kOwned4};
  p.v6 = {kOwned6};
  return p;
}

// RFC 1071 the slow, obvious way: 16-bit big-endian words, end-around carry.
inline uint16_t ReferenceChecksum(const std::vector<uint8_t>& bytes) {
  uint32_t sum = 0;
  for (size_t i = 0; i < bytes.size(); i += 2) {
    uint16_t w = static_cast<uint16_t>(bytes[i] << 8);
    if (i + 1 < bytes.size()) w |= bytes[i + 1];
    sum += w;
    sum = (sum & 0xffff) + (sum >> 16);
  }
  return static_cast<uint16_t>(~sum & 0xffff);
}

inline void Put16(std::vector<uint8_t>& v, uint16_t x) {
  v.push_back(static_cast<uint8_t>(x >> 8));
  v.push_back(static_cast<uint8_t>(x));
}
template <size_t N>
void PutBytes(std::vector<uint8_t>& v, const std::array<uint8_t, N>& a) {
  v.insert(v.end(), a.begin(), a.end());
}

struct FrameSpec {
  bool v6 = false;
  int vlan = -1;  // tag TCI, or none
  Mac dst = kPortMac;
  uint8_t proto = 17;
  uint16_t dport = 53;
  uint16_t sport = 40000;
  uint16_t frag = 0;  // IPv4 flags/offset field
  uint8_t ihl = 5;
  std::array<uint8_t, 4> dst4 = kOwned4;
  std::array<uint8_t, 4> src4 = kClient4;
  std::vector<uint8_t> payload = std::vector<uint8_t>(29, 0xab);
  int ip_len_delta = 0;   // added to the IP length field
  int udp_len_delta = 0;  // added to the UDP length field
  size_t pad = 0;         // Ethernet padding after the IP packet
};

inline std::vector<uint8_t> Build(const FrameSpec& s) {
  std::vector<uint8_t> f;
  PutBytes(f, s.dst);
  PutBytes(f, kClientMac);
  if (s.vlan >= 0) {
    Put16(f, kEtherVlan);
    Put16(f, static_cast<uint16_t>(s.vlan));
  }
  const size_t udp_len = 8 + s.payload.size();
  const size_t opts = (s.ihl - 5) * 4u;
  if (s.v6) {
    Put16(f, kEtherIpv6);
    Put16(f, 0x6000);
    Put16(f, 0);
    Put16(f, static_cast<uint16_t>(udp_len + s.ip_len_delta));
    f.push_back(s.proto);
    f.push_back(64);
    PutBytes(f, kClient6);
    PutBytes(f, kOwned6);
  } else {
    Put16(f, kEtherIpv4);
    f.push_back(static_cast<uint8_t>(0x40 | s.ihl));
    f.push_back(0);
    Put16(f, static_cast<uint16_t>(20 + opts + udp_len + s.ip_len_delta));
    Put16(f, 0x1234);
    Put16(f, s.frag);
    f.push_back(64);
    f.push_back(s.proto);
    Put16(f, 0);
    PutBytes(f, s.src4);
    PutBytes(f, s.dst4);
    f.insert(f.end(), opts, 1);  // NOP options
  }
  Put16(f, s.sport);
  Put16(f, s.dport);
  Put16(f, static_cast<uint16_t>(udp_len + s.udp_len_delta));
  Put16(f, 0);
  f.insert(f.end(), s.payload.begin(), s.payload.end());
  f.insert(f.end(), s.pad, 0);
  return f;
}

inline std::vector<uint8_t> Slice(const std::vector<uint8_t>& v, size_t from, size_t len) {
  return {v.begin() + from, v.begin() + from + len};
}

// The UDP checksum of a reply by the reference: pseudo-header + segment.
inline uint16_t ReferenceUdpChecksum(const std::vector<uint8_t>& f, size_t ip, bool v6) {
  const size_t udp = ip + (v6 ? 40 : 20);
  const size_t udp_len = (f[udp + 4] << 8) | f[udp + 5];
  std::vector<uint8_t> pseudo;
  const size_t alen = v6 ? 16 : 4;
  auto addrs = Slice(f, ip + (v6 ? 8 : 12), 2 * alen);
  pseudo.insert(pseudo.end(), addrs.begin(), addrs.end());
  if (v6) {
    Put16(pseudo, 0);
    Put16(pseudo, static_cast<uint16_t>(udp_len));
    Put16(pseudo, 0);
    Put16(pseudo, 17);
  } else {
    pseudo.push_back(0);
    pseudo.push_back(17);
    Put16(pseudo, static_cast<uint16_t>(udp_len));
  }
  auto seg = Slice(f, udp, udp_len);
  seg[6] = seg[7] = 0;
  pseudo.insert(pseudo.end(), seg.begin(), seg.end());
  const uint16_t c = ReferenceChecksum(pseudo);
  return c == 0 ? 0xffff : c;
}

}  // namespace weir::fastpath::frame::testing
