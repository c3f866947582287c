// Fuzzes the calibration state reader (what weir-mgmt reads back from its
// store and nodes will read from a push): any text is restored whole or
// refused with its errors, never a crash; a restored state formats to a text
// that restores to the same state, and the calibrator steps on it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "weir/mgmt/calibration.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  weir::mgmt::Calibrator c({});
  weir::common::LineErrors errors;
  const absl::Status st = c.RestoreState(in, &errors);
  if (st.ok() != errors.empty()) __builtin_trap();
  if (!st.ok()) {
    if (!c.FormatState().empty()) __builtin_trap();  // nothing half-applied
    return 0;
  }
  const std::string text = c.FormatState();
  weir::mgmt::Calibrator again({});
  weir::common::LineErrors errors2;
  if (!again.RestoreState(text, &errors2).ok() || again.FormatState() != text) __builtin_trap();
  c.Step(UINT32_MAX);
  return 0;
}
