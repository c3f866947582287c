// Fuzzes the traffic feedback readers (weirctl traffic import's CSV,
// weir-mgmt's JSON endpoint): any input gives samples or errors, never a
// crash. What is accepted holds every documented rule (a named address at
// most once per sample, weights 1..65535, finite traffic >= 0, windows of 1 s
// to 1 day), and the Calibrator takes every accepted sample.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string_view>

#include "weir/mgmt/calibration.h"
#include "weir/mgmt/traffic_feedback.h"

namespace {

void Check(const std::vector<weir::mgmt::TrafficSample>& samples) {
  weir::mgmt::Calibrator c({});
  for (const weir::mgmt::TrafficSample& s : samples) {
    if (s.addresses.empty() || s.window_end <= s.window_start || s.window_end - s.window_start > 86400)
      __builtin_trap();
    std::set<std::string> seen;
    for (const weir::mgmt::TrafficObservation& o : s.addresses) {
      if (o.weight < 1 || o.weight > 65535 || !std::isfinite(o.traffic) || o.traffic < 0) __builtin_trap();
      if (!seen.insert(o.address).second) __builtin_trap();
    }
    // Taken, or (a sample of the same set whose window ends no later than
    // one taken before) refused as older.
    const absl::Status st = c.Observe(s.key, s.addresses, s.window_end, UINT32_MAX);
    if (!st.ok() && st.code() != absl::StatusCode::kFailedPrecondition) __builtin_trap();
  }
  c.Step(UINT32_MAX);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  weir::common::LineErrors errors;
  auto parsed =
      data[0] & 1 ? weir::mgmt::ParseTrafficJson(in, &errors) : weir::mgmt::ParseTrafficCsv(in, &errors);
  if (parsed.ok() != errors.empty()) __builtin_trap();
  if (parsed.ok()) Check(*parsed);
  return 0;
}
