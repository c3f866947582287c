// String building for control-plane messages, on fmt (Debian's libfmt-dev:
// the library std::format was standardised from; Debian 12's GCC 12 has no
// <format>). Cat(a, b, ...) appends each argument as fmt's "{}" writes it,
// with two exceptions kept from the messages' first builder: floating point
// reads as std::to_string writes it ("0.500000"), and bool is refused (a
// message says "on"/"off" or "yes"/"no"). Debian's abseil has its own
// absl::string_view type (not std::string_view); fmt learns it below.
#pragma once

#include <fmt/format.h>

#include <iterator>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

#ifndef ABSL_USES_STD_STRING_VIEW
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  auto format(absl::string_view v, fmt::format_context& ctx) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(v.data(), v.size()), ctx);
  }
};
#endif

namespace weir::common {

template <typename... A>
void CatTo(std::string& s, const A&... a) {
  auto out = std::back_inserter(s);
  auto one = [&out](const auto& v) {
    using T = std::decay_t<decltype(v)>;
    static_assert(!std::is_same_v<T, bool>, "Cat: write what the bool means");
    if constexpr (std::is_floating_point_v<T>) {
      out = fmt::format_to(out, "{:f}", v);
    } else {
      out = fmt::format_to(out, "{}", v);
    }
  };
  (one(a), ...);
}

template <typename... A>
std::string Cat(const A&... a) {
  std::string s;
  CatTo(s, a...);
  return s;
}

// `s` without leading and trailing spaces, tabs and carriage returns.
inline std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Calls fn(line_number, content) for each line of a configuration or data
// file with its '#' comment removed and whitespace trimmed; empty lines are
// skipped. Stops at the first false. Control plane only.
template <typename Fn>
bool ForEachLine(std::string_view text, Fn fn) {
  int line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (const size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = Trim(line);
    if (line.empty()) continue;
    if (!fn(line_no, line)) return false;
  }
  return true;
}

inline std::string_view ToStd(absl::string_view v) { return {v.data(), v.size()}; }

// The fields of `s` between each `sep`, empty ones included (absl::StrSplit,
// over Debian's absl::string_view).
inline std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (absl::string_view f : absl::StrSplit(absl::string_view(s.data(), s.size()), sep))
    out.push_back(ToStd(f));
  return out;
}

}  // namespace weir::common
