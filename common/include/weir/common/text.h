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

// A JSON string literal of `s`: quotes, backslashes and control characters
// escaped. Bytes from 0x7f up pass through (UTF-8 text stays readable) unless
// `escape_non_ascii`, for byte strings that are not UTF-8 (DNS names).
inline std::string JsonString(std::string_view s, bool escape_non_ascii = false) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || (escape_non_ascii && c >= 0x7f)) {
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

inline std::string_view ToStd(absl::string_view v) { return {v.data(), v.size()}; }

}  // namespace weir::common
