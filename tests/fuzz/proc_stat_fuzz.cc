// Fuzzes the /proc parsers behind every daemon's process metrics
// (common/process_metrics.h): any text is a reading or an error, never a
// crash; a reading's parts are absent, never guessed, when a text is bad.
//
// Input: byte 0 splits the rest into /proc/self/stat and /proc/stat texts.
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "weir/common/process_metrics.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t cut = rest.empty() ? 0 : data[0] % (rest.size() + 1);
  const std::string_view self_stat = rest.substr(0, cut), proc_stat = rest.substr(cut);
  const auto stat = weir::common::ParseProcSelfStat(self_stat);
  const auto boot = weir::common::ParseProcBootTime(proc_stat);
  const weir::common::ProcessSample s = weir::common::ProcessSampleFrom(self_stat, proc_stat, 100, 4096);
  FUZZ_CHECK(s.resident_bytes.has_value() == stat.ok());
  FUZZ_CHECK(s.start_time_seconds.has_value() == (stat.ok() && boot.ok()));
  if (stat.ok()) FUZZ_CHECK(*s.resident_bytes == stat->rss_pages * 4096);
  (void)weir::common::ParseProcSelfStat(rest);
  (void)weir::common::ParseProcBootTime(rest);
  return 0;
}
