// Fuzzes weir-mgmt's TOML config loader: any input yields a config or an
// error naming file:line (or the file), never a crash or hang.
#include <cstdint>
#include <string>

#include "weir/mgmt/server.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto c = weir::mgmt::ParseMgmtConfig(text, "fuzz.toml");
  if (!c.ok() && std::string(c.status().message()).rfind("fuzz.toml", 0) != 0) __builtin_trap();
  return 0;
}
