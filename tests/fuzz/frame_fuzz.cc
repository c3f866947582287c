// Fuzzes the poll-mode backend's frame classifier as a worker runs it: any
// frame is classified without reading past its end; a query's DNS message
// lies inside the frame, and the reply written for it classifies as a query
// again from the client's side with the same message. The same frame with
// an 802.1Q tag added classifies the same (untagged IPv4 queries take a
// shorter way through Classify than tagged ones). Replies under every
// ReplyOptions are the same in place and into another buffer, and their
// checksums verify.
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_check.h"
#include "weir/fastpath/frame.h"

namespace {

using namespace weir::fastpath::frame;

// RFC 1071 the slow way: big-endian words, an odd last byte padded, folded.
uint32_t Sum(const uint8_t* d, size_t n, uint32_t sum = 0) {
  for (size_t i = 0; i < n; i += 2) sum += (uint32_t{d[i]} << 8) | (i + 1 < n ? d[i + 1] : 0);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return sum;
}

uint16_t Field(const uint8_t* at) { return static_cast<uint16_t>(at[0] << 8 | at[1]); }

// The checksums of a reply `r` written with `o`.
void CheckSums(const std::vector<uint8_t>& r, const Parsed& p, const ReplyOptions& o) {
  const uint8_t* ip = r.data() + p.l2_len;
  const uint8_t* udp = ip + p.l3_len;
  const size_t udp_len = Field(udp + 4);
  FUZZ_CHECK(udp_len == r.size() - p.dns_offset() + kUdpHeader);
  if (!p.ipv6) FUZZ_CHECK(o.offload_ip_checksum ? Field(ip + 10) == 0 : Sum(ip, kIpv4Header) == 0xffff);
  if (!p.ipv6 && !o.udp_checksum_v4) {
    FUZZ_CHECK(Field(udp + 6) == 0);
    return;
  }
  // The pseudo-header: both addresses, the protocol and the UDP length.
  const uint32_t pseudo =
      Sum(p.ipv6 ? ip + 8 : ip + 12, p.ipv6 ? 32 : 8, 17 + static_cast<uint32_t>(udp_len));
  if (o.offload_udp_checksum) {
    FUZZ_CHECK(Field(udp + 6) == pseudo);
  } else {
    FUZZ_CHECK(Field(udp + 6) != 0);
    FUZZ_CHECK(Sum(udp, udp_len, pseudo) == 0xffff);
  }
}

PortAddresses OurPort() {
  PortAddresses p;
  p.mac = {0x02, 0, 0, 0, 0, 0x01};
  p.v4 = {{198, 18, 0, 1}};
  p.v6 = {{0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}};
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const PortAddresses port = OurPort();
  // A copy of exactly `size` bytes, so a read past the end is caught by ASan.
  std::vector<uint8_t> f(data, data + size);
  const Parsed p = Classify(f.data(), f.size(), port);
  // The frame with a tag after the MACs (when it has none already).
  if (size >= kEthHeader && !(f[12] == 0x81 && f[13] == 0x00)) {
    static constexpr uint8_t kTag[kVlanTag] = {0x81, 0x00, 0x20, 0x64};
    std::vector<uint8_t> tagged(size + kVlanTag);
    std::memcpy(tagged.data(), f.data(), 12);
    std::memcpy(tagged.data() + 12, kTag, kVlanTag);
    std::memcpy(tagged.data() + 12 + kVlanTag, f.data() + 12, size - 12);
    const Parsed t = Classify(tagged.data(), tagged.size(), port);
    FUZZ_CHECK(t.cls == p.cls && t.ipv6 == p.ipv6 && t.l3_len == p.l3_len && t.dns_len == p.dns_len);
    FUZZ_CHECK(p.l2_len == 0 ? t.l2_len == 0 && !t.vlan : t.l2_len == p.l2_len + kVlanTag && t.vlan);
  }
  if (p.cls != FrameClass::kQuery) return 0;
  FUZZ_CHECK(p.l2_len == 14 || p.l2_len == 18);
  FUZZ_CHECK(p.l3_len == (p.ipv6 ? 40 : 20));
  FUZZ_CHECK(size_t{p.dns_offset()} + p.dns_len <= size);
  // Every option: the same in place as into another buffer, and checksums
  // that verify.
  for (int bits = 0; bits < 8; ++bits) {
    const ReplyOptions o{(bits & 1) != 0, (bits & 2) != 0, (bits & 4) != 0};
    std::vector<uint8_t> in_place(f.begin(), f.begin() + p.dns_offset() + p.dns_len);
    FUZZ_CHECK(WriteReply(in_place.data(), p, port.mac, in_place.data(), p.dns_len, o) == in_place.size());
    std::vector<uint8_t> copy(in_place.size(), 0xee);
    std::memcpy(copy.data() + p.dns_offset(), f.data() + p.dns_offset(), p.dns_len);
    FUZZ_CHECK(WriteReply(f.data(), p, port.mac, copy.data(), p.dns_len, o) == copy.size());
    FUZZ_CHECK(copy == in_place);
    CheckSums(in_place, p, o);
  }

  // Reply with the query's own message as the answer; seen from the client
  // (its MAC, its address owned), the reply is a UDP frame to its port.
  std::vector<uint8_t> r(f.begin(), f.begin() + p.dns_offset() + p.dns_len);
  const size_t n = WriteReply(r.data(), p, port.mac, r.data(), p.dns_len, {});
  FUZZ_CHECK(n == r.size());
  PortAddresses client;
  std::memcpy(client.mac.data(), f.data() + 6, 6);
  const uint8_t* ip = f.data() + p.l2_len;
  if (p.ipv6) {
    std::array<uint8_t, 16> a;
    std::memcpy(a.data(), ip + 8, 16);
    client.v6 = {a};
  } else {
    std::array<uint8_t, 4> a;
    std::memcpy(a.data(), ip + 12, 4);
    client.v4 = {a};
  }
  client.dns_port = static_cast<uint16_t>((ip[p.l3_len] << 8) | ip[p.l3_len + 1]);
  const Parsed back = Classify(r.data(), r.size(), client);
  // A multicast client MAC makes the reply a group frame: the kernel's.
  if ((client.mac[0] & 1) != 0) return 0;
  FUZZ_CHECK(back.cls == FrameClass::kQuery || back.cls == FrameClass::kNotOurs);
  if (back.cls == FrameClass::kQuery) {
    FUZZ_CHECK(back.dns_len == p.dns_len);
    FUZZ_CHECK(std::memcmp(r.data() + back.dns_offset(), f.data() + p.dns_offset(), p.dns_len) == 0);
  }
  return 0;
}
