// The query string of an HTTP request target (RFC 3986 3.4) as the DoH
// (doh.cc) and HTTPDNS (httpdns.cc) parsers read it: '&'-separated
// name=value pairs, each part percent-decoded. One reader, so the two APIs
// cannot come to disagree about what a request says.
//
// Private to the dns library. Pure functions, no state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace weir::dns::internal {

inline int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// RFC 3986 2.1: "%XX" is the octet XX. A '%' without two hex digits after
// it is an error. '+' stays '+' (it means a space only in HTML forms, and
// is a base64 character).
inline bool PercentDecode(std::string_view in, std::string* out) {
  out->clear();
  out->reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    if (in.size() - i < 3) return false;
    const int hi = HexValue(in[i + 1]);
    const int lo = HexValue(in[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi << 4 | lo));
    i += 2;
  }
  return true;
}

// Takes the next pair off the front of `*query` ("a=1&b&c=3"): its name
// and value as sent, the value "" when there is no '='. Empty pairs
// ("a=1&&b") are skipped. False when none is left.
inline bool NextParam(std::string_view* query, std::string_view* name, std::string_view* value) {
  while (!query->empty()) {
    const size_t amp = query->find('&');
    const std::string_view pair = query->substr(0, amp);
    *query = amp == std::string_view::npos ? std::string_view() : query->substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    *name = pair.substr(0, eq);
    *value = eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    return true;
  }
  return false;
}

enum class Param : uint8_t { kAbsent, kFound, kBadEncoding };

// The first parameter named `key` in the query string `query` ("a=1&b"),
// its name and value percent-decoded. A parameter whose name does not
// decode is not `key`.
inline Param FindParam(std::string_view query, std::string_view key, std::string* value) {
  std::string name;
  std::string_view raw_name, raw_value;
  while (NextParam(&query, &raw_name, &raw_value)) {
    if (!PercentDecode(raw_name, &name) || name != key) continue;
    return PercentDecode(raw_value, value) ? Param::kFound : Param::kBadEncoding;
  }
  return Param::kAbsent;
}

// A boolean parameter: 0/1/false/true in any case; "" is false.
inline bool ParseFlag(std::string_view text, bool* out) {
  const absl::string_view t(text.data(), text.size());
  if (t.empty() || t == "0" || absl::EqualsIgnoreCase(t, "false")) {
    *out = false;
    return true;
  }
  if (t == "1" || absl::EqualsIgnoreCase(t, "true")) {
    *out = true;
    return true;
  }
  return false;
}

}  // namespace weir::dns::internal
