// String building for control-plane messages. Debian's abseil is built with
// its own absl::string_view (not std::string_view), so absl::StrCat does not
// take std::string_view; this small fold covers what the messages need.
#pragma once

#include <string>
#include <string_view>
#include <type_traits>

#include "absl/strings/string_view.h"

namespace weir::common {

inline void AppendText(std::string& s, std::string_view v) { s.append(v); }
inline void AppendText(std::string& s, absl::string_view v) { s.append(v.data(), v.size()); }
inline void AppendText(std::string& s, const char* v) { s.append(v); }
inline void AppendText(std::string& s, const std::string& v) { s.append(v); }
template <typename T>
requires std::is_arithmetic_v<T>
inline void AppendText(std::string& s, T v) {
  if constexpr (std::is_same_v<T, char>) {
    s.push_back(v);
  } else if constexpr (std::is_same_v<T, uint8_t>) {
    s.append(std::to_string(static_cast<unsigned>(v)));
  } else {
    s.append(std::to_string(v));
  }
}

template <typename... A>
std::string Cat(const A&... a) {
  std::string s;
  (AppendText(s, a), ...);
  return s;
}

template <typename... A>
void CatTo(std::string& s, const A&... a) {
  (AppendText(s, a), ...);
}

inline std::string_view ToStd(absl::string_view v) { return {v.data(), v.size()}; }

}  // namespace weir::common
