// The only file that includes the generated build_info.inc: a new commit
// recompiles this file alone (the generator rewrites the header only when
// its text changes).
#include "build_info.inc"
#include "weir/common/process_metrics.h"

namespace weir::common {

std::string_view BuildVersion() { return WEIR_BUILD_VERSION; }
std::string_view BuildCommit() { return WEIR_BUILD_COMMIT; }

}  // namespace weir::common
