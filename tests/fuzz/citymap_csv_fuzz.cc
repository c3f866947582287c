// Fuzzes the city map CSV parser and builder: any input either fails with
// a line-numbered InvalidArgument or builds a map whose lookups stay in
// range. Keeps inputs small: each built map allocates the 32 MB IPv4 table.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "weir/partitions/citymap.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  std::string_view csv(reinterpret_cast<const char*>(data), size);
  auto m = weir::partitions::CityMap::FromCsv(csv, {.default_city = "default"});
  if (!m.ok()) {
    if (m.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  const weir::partitions::CityMap& map = **m;
  // Probe with addresses taken from the input and fixed corners.
  uint8_t addr[16] = {};
  for (size_t i = 0; i + 16 <= size && i < 256; i += 16) {
    std::memcpy(addr, data + i, 16);
    if (map.LookupV6(addr) >= map.city_count()) std::abort();
    uint32_t v4 = (uint32_t{addr[0]} << 24) | (uint32_t{addr[1]} << 16) | (uint32_t{addr[2]} << 8) | addr[3];
    if (map.LookupV4(v4) >= map.city_count()) std::abort();
  }
  const uint8_t ones[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  if (map.LookupV6(ones) >= map.city_count() || map.LookupV4(0xffffffff) >= map.city_count() ||
      map.LookupV4(0) >= map.city_count()) {
    std::abort();
  }
  return 0;
}
