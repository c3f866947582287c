// Small text helpers shared by the CSV and tag parsers (control plane only).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "weir/common/text.h"

namespace weir::partitions::internal {

// The shared line walker and trimmer (weir/common/text.h).
using common::ForEachLine;
using common::Trim;

inline bool ValidName(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace weir::partitions::internal
