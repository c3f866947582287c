// Fuzzes the forwarder's port-range parser (fastpath/include/weir/fastpath/
// upstream_guard.h) on the input taken as the two /proc files' text
// (ip_local_port_range, ip_local_reserved_ports): the range stays sane and
// every port drawn is in it and not reserved.
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "weir/common/secure_random.h"
#include "weir/fastpath/upstream_guard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weir;
  static common::SecureRandom rng;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const size_t half = text.size() / 2;
  const fastpath::PortRange r = fastpath::PortRange::FromProc(text.substr(0, half), text.substr(half));
  FUZZ_CHECK(r.low() >= 1024 && r.low() <= r.high());
  const uint16_t p = r.Draw(rng);
  if (p != 0) FUZZ_CHECK(p >= r.low() && p <= r.high() && !r.Reserved(p));
  return 0;
}
