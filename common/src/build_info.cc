// The only file that includes the generated build_info.inc: a new commit
// recompiles this file alone (the generator rewrites the header only when
// its text changes).
#include "build_info.inc"
#include "weir/common/process_metrics.h"

#include <string>

namespace weir::common {

std::string_view BuildVersion() { return WEIR_BUILD_VERSION; }
std::string_view BuildCommit() { return WEIR_BUILD_COMMIT; }
std::string_view BuildType() { return WEIR_BUILD_TYPE; }
bool BuildHasDpdk() { return WEIR_BUILD_DPDK != 0; }

std::string VersionLine(std::string_view program) {
  std::string s(program);
  s += ' ';
  s += BuildVersion();
  s += " (commit ";
  s += BuildCommit();
  s += ", ";
  s += BuildType().empty() ? std::string_view("unknown") : BuildType();
  s += " build, DPDK ";
  s += BuildHasDpdk() ? "yes" : "no";
  s += ')';
  return s;
}

}  // namespace weir::common
