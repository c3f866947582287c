// Fuzzes the forwarder's checks of an upstream answer that need no socket
// (fastpath/include/weir/fastpath/upstream_guard.h): Message::Parse, then
// the COOKIE check (RFC 7873 5.3) against a fixed client cookie, the 0x20
// spelling compare and case randomisation of the answer's qname; and the
// port-range parser on the input taken as the two /proc files' text.
#include <cctype>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "fuzz_check.h"
#include "weir/common/socket_address.h"
#include "weir/dns/message.h"
#include "weir/fastpath/upstream_guard.h"

namespace {

using namespace weir;

void CheckAnswer(std::span<const uint8_t> pkt, fastpath::SecureRandom& rng) {
  dns::Message m;
  if (m.Parse(pkt, {}) != dns::ParseError::kOk) return;
  static const std::array<uint8_t, 16> kSecret{};
  static const common::SocketAddress kUpstream = *common::SocketAddress::Parse("192.0.2.1:53", 53);
  fastpath::UpstreamCookie cookie(kSecret, kUpstream);
  auto check = [&](const dns::Message& msg) {
    const fastpath::UpstreamCookie::Verdict v = cookie.Check(msg);
    const size_t sent = cookie.OptionData().size();
    FUZZ_CHECK(sent == 8 || (sent >= 16 && sent <= 40));
    if (v != fastpath::UpstreamCookie::Verdict::kOk) FUZZ_CHECK(sent == 8 || cookie.server_supports());
    FUZZ_CHECK(cookie.server_supports() == (sent > 8));
  };
  check(m);
  // The same answer carrying our client cookie (a fuzzer cannot guess it):
  // the paths that learn a server cookie.
  static uint8_t copy[65536];
  if (m.edns().has_cookie && m.edns().cookie_len >= 8 && pkt.size() <= sizeof(copy)) {
    std::memcpy(copy, pkt.data(), pkt.size());
    std::memcpy(copy + m.edns().cookie_offset, cookie.OptionData().data(), 8);
    dns::Message again;
    FUZZ_CHECK(again.Parse({copy, pkt.size()}, {}) == dns::ParseError::kOk);
    check(again);
  }

  // The question name sits at offset 12, uncompressed, m.qname().len bytes.
  const size_t qlen = m.qname().len;
  FUZZ_CHECK(fastpath::SameSpelling(pkt, pkt, qlen));
  uint8_t name[dns::kMaxNameWire];
  std::memcpy(name, pkt.data() + dns::kHeaderSize, qlen);
  const int letters = fastpath::RandomizeCase(name, qlen, rng);
  FUZZ_CHECK(letters >= 0 && static_cast<size_t>(letters) <= qlen);
  for (size_t i = 0; i < qlen; ++i) FUZZ_CHECK(std::tolower(name[i]) == m.qname().bytes[i]);
}

void CheckPorts(std::string_view text, fastpath::SecureRandom& rng) {
  const size_t half = text.size() / 2;
  const fastpath::PortRange r = fastpath::PortRange::FromProc(text.substr(0, half), text.substr(half));
  FUZZ_CHECK(r.low() >= 1024 && r.low() <= r.high());
  const uint16_t p = r.Draw(rng);
  if (p != 0) FUZZ_CHECK(p >= r.low() && p <= r.high() && !r.Reserved(p));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fastpath::SecureRandom rng;
  CheckAnswer({data, size}, rng);
  CheckPorts({reinterpret_cast<const char*>(data), size}, rng);
  return 0;
}
