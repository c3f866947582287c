// Fuzzes the PROXY protocol v2 parser (net::ParseProxyV2) over arbitrary
// bytes: it never reads past them, kDone names a header within them that
// parses the same again on its own, and every prefix of a header it accepts
// asks for more rather than failing.
#include <sys/socket.h>

#include <cstdint>
#include <span>

#include "fuzz_check.h"
#include "weir/net/proxy_protocol.h"

using weir::net::kProxyV2FixedSize;
using weir::net::kProxyV2MaxHeader;
using weir::net::ParseProxyV2;
using weir::net::ProxyHeader;
using weir::net::ProxyParse;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> in(data, size);
  ProxyHeader h;
  const ProxyParse r = ParseProxyV2(in, &h);
  FUZZ_CHECK(r == ProxyParse::kNeedMore || r == ProxyParse::kDone || r == ProxyParse::kInvalid);
  if (r == ProxyParse::kNeedMore) {
    FUZZ_CHECK(size < kProxyV2MaxHeader);
  }
  if (r != ProxyParse::kDone) return 0;
  FUZZ_CHECK(h.length <= size);
  FUZZ_CHECK(h.length >= kProxyV2FixedSize && h.length <= kProxyV2MaxHeader);
  if (h.local) {
    FUZZ_CHECK(h.source.len == 0 && h.destination.len == 0);
  } else {
    FUZZ_CHECK(h.source.family() == AF_INET || h.source.family() == AF_INET6);
    FUZZ_CHECK(h.destination.family() == h.source.family());
  }
  // The header alone parses the same; every shorter prefix needs more.
  ProxyHeader again;
  FUZZ_CHECK(ParseProxyV2(in.first(h.length), &again) == ProxyParse::kDone);
  FUZZ_CHECK(again.length == h.length && again.local == h.local && again.source.len == h.source.len);
  for (size_t n = 0; n < h.length; ++n) {
    ProxyHeader part;
    FUZZ_CHECK(ParseProxyV2(in.first(n), &part) == ProxyParse::kNeedMore);
  }
  return 0;
}
