// The report as an operator reads it: a text summary on stdout, every
// figure as JSON (--json), and the live progress line.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "report.h"

namespace weir::bench {

std::string ReportText(const Report& r, const std::vector<std::string>& notes);
std::string ReportJson(const Report& r, const std::vector<std::string>& notes);
absl::Status WriteFile(const std::string& path, const std::string& text);
// One line: elapsed, QPS sent/answered in the last second, loss so far,
// p99 of the last second, worst share deviation so far.
std::string ProgressLine(const Report& r);

}  // namespace weir::bench
