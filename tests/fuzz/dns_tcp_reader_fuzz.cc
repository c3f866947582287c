// Fuzzes the client side of DNS over TCP (net::DnsTcpReader), as the
// fastpath's forwarder, the recursor's last hop and the tools read answers:
// a byte stream from the peer, taken in arbitrary chunks never larger than
// Want(), yields exactly the length-prefixed messages a reference splitter
// finds, in order; more than Want() is refused and changes nothing; the
// buffer never holds more than one message.
//
// Input: byte 0 seeds the chunk sizes, the rest is the stream.
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "fuzz_check.h"
#include "weir/net/dns_tcp.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  uint32_t rng = data[0] * 2654435761u + 1;
  auto next = [&rng] {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
  };
  const std::vector<uint8_t> stream(data + 1, data + size);

  // The reference: whole messages in the stream, in order.
  std::vector<std::span<const uint8_t>> want;
  for (size_t at = 0; at + 2 <= stream.size();) {
    const size_t len = (size_t{stream[at]} << 8) | stream[at + 1];
    if (at + 2 + len > stream.size()) break;
    want.emplace_back(stream.data() + at + 2, len);
    at += 2 + len;
  }

  weir::net::DnsTcpReader r;
  size_t got = 0;
  for (size_t pos = 0; pos < stream.size();) {
    const size_t w = r.Want();
    FUZZ_CHECK(w > 0);
    // A read past the message is refused and leaves the reader as it was.
    if (next() % 8 == 0 && pos + w + 1 <= stream.size()) {
      const size_t before = r.buffered();
      FUZZ_CHECK(!r.Append(std::span<const uint8_t>(stream.data() + pos, w + 1)));
      FUZZ_CHECK(r.buffered() == before);
    }
    size_t n = next() % 300 + 1;
    if (n > w) n = w;
    if (n > stream.size() - pos) n = stream.size() - pos;
    FUZZ_CHECK(r.Append(std::span<const uint8_t>(stream.data() + pos, n)));
    pos += n;
    FUZZ_CHECK(r.buffered() <= weir::net::DnsTcpReader::kMaxBytes);
    if (r.Complete()) {
      FUZZ_CHECK(got < want.size());
      const auto m = r.Message();
      FUZZ_CHECK(m.size() == want[got].size());
      FUZZ_CHECK(m.empty() || std::memcmp(m.data(), want[got].data(), m.size()) == 0);
      ++got;
      r.Clear();
    }
  }
  FUZZ_CHECK(got == want.size());
  return 0;
}
