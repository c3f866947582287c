// Fuzzes the poll-mode backend's frame classifier as a worker runs it: any
// frame is classified without reading past its end; a query's DNS message
// lies inside the frame, and the reply written for it classifies as a query
// again from the client's side with the same message.
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_check.h"
#include "weir/fastpath/frame.h"

namespace {

using namespace weir::fastpath::frame;

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
  if (p.cls != FrameClass::kQuery) return 0;
  FUZZ_CHECK(p.l2_len == 14 || p.l2_len == 18);
  FUZZ_CHECK(p.l3_len == (p.ipv6 ? 40 : 20));
  FUZZ_CHECK(size_t{p.dns_offset()} + p.dns_len <= size);

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
