// libunbound's own log lines, in weir's log (component "unbound").
// Debian 12's libunbound (1.17) has no log callback: ub_ctx_debugout() takes
// a FILE*. UnboundLogStream() is a FILE* from fopencookie(3) whose writes are
// cut into lines, each handed to the log with the level libunbound gave it.
//
// Threading: libunbound writes from its resolving thread (and from
// ub_process() on the event loop); a line costs one write(2) or journal send
// on the writing thread, and no lock is held while it is written.
#pragma once

#include <cstdio>
#include <string_view>

#include "weir/common/log.h"

namespace weir::recursor {

// One line as libunbound writes it when not on syslog,
// "[1764638625] libunbound[1234:0] info: resolving example. A IN":
// the level its type names (error, warning; notice and info are info;
// debug) and the text after the type. A line of another shape is info, whole.
struct UnboundLine {
  common::LogLevel level = common::LogLevel::kInfo;
  std::string_view message;
};
UnboundLine ParseUnboundLine(std::string_view line);

// The process's stream for ub_ctx_debugout(); created on first use and
// never closed (libunbound's log file is process-wide and may be written
// until the last context is gone).
FILE* UnboundLogStream();

}  // namespace weir::recursor
