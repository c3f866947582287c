// Small text helpers shared by the CSV and tag parsers (control plane only).
#pragma once

#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/strings/string_view.h"

namespace weir::partitions::internal {

// String concatenation for error messages. (Debian's abseil has its own
// string_view type, so absl::StrCat does not take std::string_view.)
inline void CatOne(std::string& out, std::string_view s) { out.append(s); }
inline void CatOne(std::string& out, const char* s) { out.append(s); }
inline void CatOne(std::string& out, const std::string& s) { out.append(s); }
inline void CatOne(std::string& out, absl::string_view s) { out.append(s.data(), s.size()); }
inline void CatOne(std::string& out, char c) { out.push_back(c); }
template <typename T>
requires std::is_integral_v<T>
inline void CatOne(std::string& out, T v) {
  out.append(
      std::to_string(static_cast<std::conditional_t<std::is_signed_v<T>, long long, unsigned long long>>(v)));
}
template <typename... Args>
void CatTo(std::string& out, const Args&... args) {
  (CatOne(out, args), ...);
}
template <typename... Args>
std::string Cat(const Args&... args) {
  std::string out;
  (CatOne(out, args), ...);
  return out;
}

inline std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Calls fn(line_number, content) for each line with its comment removed and
// whitespace trimmed; empty lines are skipped. Stops at the first false.
template <typename Fn>
bool ForEachLine(std::string_view text, Fn fn) {
  int line_no = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    size_t hash = line.find('#');
    if (hash != std::string_view::npos) line = line.substr(0, hash);
    line = Trim(line);
    if (line.empty()) continue;
    if (!fn(line_no, line)) return false;
  }
  return true;
}

inline std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  while (true) {
    size_t p = s.find(sep);
    out.push_back(s.substr(0, p));
    if (p == std::string_view::npos) break;
    s = s.substr(p + 1);
  }
  return out;
}

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
