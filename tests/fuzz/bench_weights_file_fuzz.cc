// Fuzzes weir-bench's expected-weights CSV parser: any input either fails
// with a line-numbered InvalidArgument or gives lines with a name, a
// trimmed city, an address and a weight in range, no (name, city, address)
// twice.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <tuple>

#include "fuzz_check.h"
#include "weights_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 65536) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto ws = weir::bench::ParseWeightsFile(text, "fuzz.csv");
  if (!ws.ok()) {
    FUZZ_CHECK(ws.status().code() == absl::StatusCode::kInvalidArgument);
    FUZZ_CHECK(ws.status().message().substr(0, 8) == "fuzz.csv");
    return 0;
  }
  size_t lines = 1;
  for (char c : text) lines += c == '\n';
  FUZZ_CHECK(!ws->empty());
  FUZZ_CHECK(ws->size() <= lines);
  std::set<std::tuple<std::string, std::string, std::string>> seen;
  for (const weir::bench::WeightLine& w : *ws) {
    FUZZ_CHECK(w.name.len >= 1 && w.name.len <= weir::dns::kMaxNameWire);
    FUZZ_CHECK(w.name.bytes[w.name.len - 1] == 0);
    FUZZ_CHECK(w.weight >= 1 && w.weight <= 1000000);
    FUZZ_CHECK(!w.city.empty());
    FUZZ_CHECK(w.city.find_first_of(",#\n") == std::string::npos);
    FUZZ_CHECK(w.city.front() != ' ' && w.city.front() != '\t');
    FUZZ_CHECK(w.city.back() != ' ' && w.city.back() != '\t' && w.city.back() != '\r');
    FUZZ_CHECK(w.address.family == 4 || w.address.family == 6);
    const std::string addr = weir::common::IpToString(w.address);
    weir::common::IpAddress again;
    FUZZ_CHECK(weir::common::ParseIp(addr, &again) && again == w.address);
    FUZZ_CHECK(seen.emplace(weir::dns::NameKeyToText(w.name.span()), w.city, addr).second);
  }
  return 0;
}
