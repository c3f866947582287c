// Fuzzes weir-recursor's config parser: any input is accepted or rejected
// with a message, never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "weir/recursor/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto c =
      weir::recursor::ParseConfig(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.toml");
  if (!c.ok()) (void)c.status().message();
  return 0;
}
