#include "weir/fastpath/frame.h"

#include <bit>
#include <cstring>

#include "weir/dns/wire.h"

namespace weir::fastpath::frame {

using dns::Load16;
using dns::Store16;

namespace {

static_assert(std::endian::native == std::endian::little,
              "the host-order loads and the byte swaps below assume a little-endian host");

constexpr uint8_t kProtoUdp = 17;
constexpr uint8_t kReplyHopLimit = 64;

// The bytes at `p` as they lie in memory (no byte order conversion).
template <typename T>
T LoadHost(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename T>
void StoreHost(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

// ---- Ones'-complement sums (RFC 1071).
//
// Bytes are summed as they lie in memory, eight at a time in the host's byte
// order, with end-around carry. The ones'-complement sum commutes with
// swapping the bytes of every 16-bit word (RFC 1071 2.B), and a word's place
// inside a wider word does not matter (2^16 is 1 modulo 2^16 - 1): the sum
// folded to 16 bits and stored as it is, in the host's order, is the
// big-endian sum. A big-endian field enters such a sum as its host-order
// image (Image16). Every step adds with end-around carry, so a sum is 0
// only when every word is.

// a + b, the carry out of bit 63 added back in.
inline uint64_t AddCarry(uint64_t a, uint64_t b) {
  a += b;
  return a + (a < b);
}

// To 16 bits: the high half of x + (x rotated by half its width) is
// hi + lo plus the carry out of lo + hi.
inline uint16_t Fold32(uint32_t x) { return static_cast<uint16_t>((x + std::rotr(x, 16)) >> 16); }
inline uint16_t Fold64(uint64_t x) { return Fold32(static_cast<uint32_t>((x + std::rotr(x, 32)) >> 32)); }

// The host-order image of a big-endian 16-bit field: the value a host-order
// load of its two bytes gives.
constexpr uint16_t Image16(uint16_t v) { return static_cast<uint16_t>(v << 8 | v >> 8); }

// The host-order sum of d[0, n) added to `acc`; an even number of bytes
// came before d in the same sum. With kReadsBefore, the 8 bytes before d
// are readable too, and the last 1-7 bytes are one load. Inlined: the
// answer's sum is most of a reply's cost, and a call would cost WriteReply
// its registers.
template <bool kReadsBefore = false>
[[gnu::always_inline]] inline uint64_t SumBytes(const uint8_t* d, size_t n, uint64_t acc) {
  uint64_t carries = 0;  // out of bit 63, added back at the end
  auto add = [&](uint64_t w) {
    acc += w;
    carries += acc < w;
  };
  const uint8_t* const end = d + n;
  for (const uint8_t* const words_end = d + (n & ~size_t{31}); d != words_end; d += 32) {
    add(LoadHost<uint64_t>(d));
    add(LoadHost<uint64_t>(d + 8));
    add(LoadHost<uint64_t>(d + 16));
    add(LoadHost<uint64_t>(d + 24));
  }
  if (n & 16) {
    add(LoadHost<uint64_t>(d));
    add(LoadHost<uint64_t>(d + 8));
    d += 16;
  }
  if (n & 8) {
    add(LoadHost<uint64_t>(d));
    d += 8;
  }
  // The last 0-7 bytes as one word, from where they start (8 bytes on from
  // the last word): an odd last byte is the first (big-endian high) byte of
  // a zero-padded 16-bit word.
  const size_t k = n & 7;
  if constexpr (kReadsBefore) {
    // The 8 bytes that end at `end`, the k of them at the top shifted down
    // (in two steps, as k = 0 shifts by 64).
    add(LoadHost<uint64_t>(end - 8) >> (63 - 8 * k) >> 1);
  } else {
    uint64_t tail = 0;
    if (k & 4) tail = LoadHost<uint32_t>(d);
    if (k & 2) tail |= uint64_t{LoadHost<uint16_t>(d + (k & 4))} << 32;
    if (k & 1) tail |= uint64_t{end[-1]} << 48;
    add(tail);
  }
  return AddCarry(acc, carries);
}

// The constant fields of the reply's IPv4 header, summed as images: version
// and header length, DF, TTL and protocol (identification, TOS and the
// checksum itself are 0).
constexpr uint64_t kIpv4ConstantSum =
    Image16(0x4500) + Image16(0x4000) + Image16(uint16_t{kReplyHopLimit} << 8 | kProtoUdp);
// The protocol's word of the UDP pseudo-header.
constexpr uint64_t kPseudoProto = Image16(kProtoUdp);

// ---- The reply's headers. Each part reads what it takes from the query
// before it writes: the reply may be the query. Swapped pairs (addresses,
// ports) move as one word.

// The UDP header at `udp` for a dns_len-byte answer after it. `ports`: the
// reply's, as they lie in memory; `addr_sum`: the host-order sum of both
// addresses. `checksum`: false for none (IPv4 only); `offload`: the
// pseudo-header sum only, for the NIC. Returns the UDP length.
[[gnu::always_inline]] inline size_t WriteUdp(uint8_t* udp, uint32_t ports, uint64_t addr_sum, size_t dns_len,
                                              bool checksum, bool offload) {
  const size_t udp_len = kUdpHeader + dns_len;
  const uint16_t len_image = Image16(static_cast<uint16_t>(udp_len));
  StoreHost(udp, ports);
  StoreHost(udp + 4, len_image);
  uint16_t check = 0;
  if (checksum) {
    // The pseudo-header: both addresses, the protocol and the UDP length.
    const uint64_t pseudo = AddCarry(addr_sum, kPseudoProto + len_image);
    if (offload) {
      check = Fold64(pseudo);
    } else {
      // And the UDP header (its checksum 0) and the answer.
      // (The header before it makes the answer's last bytes one load.)
      const uint64_t sum =
          SumBytes<true>(udp + kUdpHeader, dns_len, AddCarry(pseudo, uint64_t{ports} + len_image));
      check = static_cast<uint16_t>(~Fold64(sum));
      if (check == 0) check = 0xffff;  // 0 means "no checksum" over IPv4 and is invalid over IPv6
    }
  }
  StoreHost(udp + 6, check);
  return udp_len;
}

// The IPv4 and UDP headers at `ip` of the reply to the query's at `qip`.
// Returns the IP length.
size_t WriteIpv4Udp(const uint8_t* qip, uint8_t* ip, size_t dns_len, const ReplyOptions& o) {
  const uint64_t addrs = std::rotr(LoadHost<uint64_t>(qip + 12), 32);           // ours, then the client's
  const uint32_t ports = std::rotr(LoadHost<uint32_t>(qip + kIpv4Header), 16);  // likewise
  const uint16_t total_image = Image16(static_cast<uint16_t>(kIpv4Header + kUdpHeader + dns_len));
  ip[0] = 0x45;
  ip[1] = 0;
  StoreHost(ip + 2, total_image);
  Store16(ip + 4, 0);       // identification: never fragmented
  Store16(ip + 6, 0x4000);  // don't fragment
  ip[8] = kReplyHopLimit;
  ip[9] = kProtoUdp;
  StoreHost(ip + 12, addrs);
  // Every other field is a constant: the header is not read back.
  const uint16_t sum = Fold64(AddCarry(addrs, kIpv4ConstantSum + total_image));
  StoreHost(ip + 10, o.offload_ip_checksum ? uint16_t{0} : static_cast<uint16_t>(~sum));
  return kIpv4Header +
         WriteUdp(ip + kIpv4Header, ports, addrs, dns_len, o.udp_checksum_v4, o.offload_udp_checksum);
}

// The same for IPv6, which always carries a UDP checksum.
size_t WriteIpv6Udp(const uint8_t* qip, uint8_t* ip, size_t dns_len, const ReplyOptions& o) {
  uint64_t addrs[4];  // the client's, then ours
  std::memcpy(addrs, qip + 8, 32);
  const uint32_t ports = std::rotr(LoadHost<uint32_t>(qip + kIpv6Header), 16);  // ours, then the client's
  Store16(ip, 0x6000);  // version 6, traffic class and flow label 0
  Store16(ip + 2, 0);
  Store16(ip + 4, static_cast<uint16_t>(kUdpHeader + dns_len));
  ip[6] = kProtoUdp;
  ip[7] = kReplyHopLimit;
  std::memcpy(ip + 8, addrs + 2, 16);
  std::memcpy(ip + 24, addrs, 16);
  const uint64_t addr_sum = AddCarry(AddCarry(addrs[0], addrs[1]), AddCarry(addrs[2], addrs[3]));
  return kIpv6Header + WriteUdp(ip + kIpv6Header, ports, addr_sum, dns_len, true, o.offload_udp_checksum);
}

// ---- Classification.

bool IsMulticastMac(const uint8_t* mac) { return (mac[0] & 1) != 0; }

// A query's source must be somewhere an answer can go: not multicast, not
// broadcast, not unspecified (a forged source there turns weir into a
// reflector towards a whole segment). 255.255.255.255 is among 224/3.
bool BadSource4(const uint8_t* a) { return a[0] >= 224 || a[0] == 0; }
bool BadSource6(const uint8_t* a) {
  if (a[0] == 0xff) return true;  // multicast
  return (LoadHost<uint64_t>(a) | LoadHost<uint64_t>(a + 8)) == 0;
}

inline bool OwnedV4(const PortAddresses& port, const uint8_t* addr) {
  const uint32_t a = LoadHost<uint32_t>(addr);
  for (const auto& owned : port.v4)
    if (LoadHost<uint32_t>(owned.data()) == a) return true;
  return false;
}

inline bool OwnedV6(const PortAddresses& port, const uint8_t* addr) {
  const uint64_t hi = LoadHost<uint64_t>(addr), lo = LoadHost<uint64_t>(addr + 8);
  for (const auto& owned : port.v6)
    if (LoadHost<uint64_t>(owned.data()) == hi && LoadHost<uint64_t>(owned.data() + 8) == lo) return true;
  return false;
}

// IPv4 flags and fragment offset, TTL and protocol (bytes 6-9 of the
// header) as a host-order word: what a UDP datagram that is not a fragment
// has there under kFragmentProtoMask (MF, the offset and the protocol).
constexpr uint32_t kFragmentProtoMask = 0xff00ff3f;
constexpr uint32_t kUnfragmentedUdp = uint32_t{kProtoUdp} << 24;

// The common frame, checked with few loads: an untagged IPv4 UDP datagram
// with a 20-byte header, to our MAC. True if it is a query (`p` filled);
// false for anything else or any doubt, left to ClassifyInto, which
// classifies every frame this takes the same way.
bool CommonQuery(const uint8_t* f, size_t len, const PortAddresses& port, Parsed& p) {
  constexpr size_t kShortest = kEthHeader + kIpv4Header + kUdpHeader;
  if (len < kShortest) return false;
  // IPv4 (08 00), version 4 with a 20-byte header (45).
  if ((LoadHost<uint32_t>(f + 12) & 0x00ffffff) != 0x00450008) return false;
  // To our MAC (a station's), from a station.
  const uint8_t* mac = port.mac.data();
  if (LoadHost<uint32_t>(f) != LoadHost<uint32_t>(mac) ||
      LoadHost<uint16_t>(f + 4) != LoadHost<uint16_t>(mac + 4) || IsMulticastMac(mac) ||
      IsMulticastMac(f + 6))
    return false;
  const uint8_t* ip = f + kEthHeader;
  const size_t total = Load16(ip + 2);
  // Room for the UDP header, and within the frame.
  if (total - (kIpv4Header + kUdpHeader) > len - kShortest) return false;
  if ((LoadHost<uint32_t>(ip + 6) & kFragmentProtoMask) != kUnfragmentedUdp || !OwnedV4(port, ip + 16) ||
      BadSource4(ip + 12))
    return false;
  const uint8_t* udp = ip + kIpv4Header;
  const size_t dns_len = size_t{Load16(udp + 4)} - kUdpHeader;
  if (Load16(udp + 2) != port.dns_port || Load16(udp) == 0 || dns_len > total - kIpv4Header - kUdpHeader)
    return false;
  p = Parsed{FrameClass::kQuery, false, false, kEthHeader, kIpv4Header, static_cast<uint16_t>(dns_len)};
  return true;
}

// What the frame is; the other fields of `p` (all zero before) are filled
// on the way.
FrameClass ClassifyInto(const uint8_t* f, size_t len, const PortAddresses& port, Parsed& p) {
  if (len < kEthHeader) return FrameClass::kMalformed;
  const bool to_group = IsMulticastMac(f);
  // A group source MAC is never a station's: an answer would go to a group.
  if ((!to_group && std::memcmp(f, port.mac.data(), 6) != 0) || IsMulticastMac(f + 6))
    return FrameClass::kNotOurs;
  uint16_t ether = Load16(f + 12);
  size_t l2 = kEthHeader;
  p.l2_len = kEthHeader;
  if (ether == kEtherVlan) {
    if (len < kEthHeader + kVlanTag) return FrameClass::kMalformed;
    l2 = kEthHeader + kVlanTag;
    p.vlan = true;
    p.l2_len = kEthHeader + kVlanTag;
    ether = Load16(f + 16);
  }
  // Anything to a group address (ARP requests, ND, mDNS) is the kernel's.
  if (to_group) return FrameClass::kException;
  const uint8_t* ip = f + l2;
  const size_t avail = len - l2;
  const uint8_t* udp;
  size_t ip_payload;
  if (ether == kEtherIpv4) {
    if (avail < kIpv4Header) return FrameClass::kMalformed;
    const size_t total = Load16(ip + 2);
    if (ip[0] != 0x45) {  // not version 4, or options (the kernel's)
      const size_t ihl = size_t{uint8_t(ip[0] & 0x0f)} * 4;
      const bool bad = (ip[0] >> 4) != 4 || ihl < kIpv4Header || total < ihl || total > avail;
      return bad ? FrameClass::kMalformed : FrameClass::kException;
    }
    // Shorter than its header (wrapping round) or longer than the frame.
    if (total - kIpv4Header > avail - kIpv4Header) return FrameClass::kMalformed;
    // Fragments (MF set or an offset), other protocols and other addresses:
    // the kernel's.
    if ((LoadHost<uint32_t>(ip + 6) & kFragmentProtoMask) != kUnfragmentedUdp || !OwnedV4(port, ip + 16))
      return FrameClass::kException;
    if (BadSource4(ip + 12)) return FrameClass::kNotOurs;
    p.l3_len = kIpv4Header;
    udp = ip + kIpv4Header;
    ip_payload = total - kIpv4Header;
  } else if (ether == kEtherIpv6) {
    if (avail < kIpv6Header || (ip[0] >> 4) != 6) return FrameClass::kMalformed;
    const size_t payload = Load16(ip + 4);
    if (payload > avail - kIpv6Header) return FrameClass::kMalformed;
    // Extension headers (fragments among them), ICMPv6, other addresses.
    if (ip[6] != kProtoUdp || !OwnedV6(port, ip + 24)) return FrameClass::kException;
    if (BadSource6(ip + 8)) return FrameClass::kNotOurs;
    p.ipv6 = true;
    p.l3_len = kIpv6Header;
    udp = ip + kIpv6Header;
    ip_payload = payload;
  } else {
    return FrameClass::kException;  // ARP, LLDP, a second tag (QinQ), ...
  }
  if (ip_payload < kUdpHeader) return FrameClass::kMalformed;
  if (Load16(udp + 2) != port.dns_port) return FrameClass::kException;  // another service on our address
  // Below its own header (wrapping round) or beyond the IP payload.
  const size_t dns_len = size_t{Load16(udp + 4)} - kUdpHeader;
  if (dns_len > ip_payload - kUdpHeader || Load16(udp) == 0) return FrameClass::kMalformed;
  p.dns_len = static_cast<uint16_t>(dns_len);
  return FrameClass::kQuery;
}

// Classify for the frames CommonQuery leaves, in a function of its own:
// CommonQuery, inlined alone into Classify, gets all the registers.
[[gnu::noinline]] void ClassifyOther(const uint8_t* f, size_t len, const PortAddresses& port, Parsed* out) {
  *out = Parsed{};
  out->cls = ClassifyInto(f, len, port, *out);
}

}  // namespace

bool PortAddresses::Owns4(const uint8_t* addr) const { return OwnedV4(*this, addr); }

bool PortAddresses::Owns6(const uint8_t* addr) const { return OwnedV6(*this, addr); }

void Classify(const uint8_t* f, size_t len, const PortAddresses& port, Parsed* out) {
  if (CommonQuery(f, len, port, *out)) return;
  ClassifyOther(f, len, port, out);
}

uint32_t ChecksumAdd(std::span<const uint8_t> data, uint32_t sum) {
  return Fold64(uint64_t{Image16(Fold64(SumBytes(data.data(), data.size(), 0)))} + sum);
}

uint16_t ChecksumFold(uint32_t sum) { return Fold32(sum); }

size_t WriteReply(const uint8_t* q, const Parsed& p, const Mac& port_mac, uint8_t* r, size_t dns_len,
                  const ReplyOptions& o) {
  const size_t l2 = p.l2_len;
  const bool ipv6 = p.ipv6;
  // To the client's MAC (8 bytes copied, the last 2 overwritten with ours),
  // from ours, the tag kept.
  StoreHost(r, LoadHost<uint64_t>(q + 6));
  std::memcpy(r + 6, port_mac.data(), 6);
  if (p.vlan) StoreHost(r + 12, LoadHost<uint32_t>(q + 12));  // (a copy onto itself in place)
  Store16(r + l2 - 2, ipv6 ? kEtherIpv6 : kEtherIpv4);
  return l2 + (ipv6 ? WriteIpv6Udp(q + l2, r + l2, dns_len, o) : WriteIpv4Udp(q + l2, r + l2, dns_len, o));
}

}  // namespace weir::fastpath::frame
