#include "weir/fastpath/upstream_guard.h"

#include <algorithm>

namespace weir::fastpath {

namespace {

// "a b" or "a-b" or "a": the numbers of `text` at `*pos`; false at the end.
bool NextNumber(std::string_view text, size_t* pos, uint32_t* out) {
  while (*pos < text.size() && (text[*pos] < '0' || text[*pos] > '9')) ++*pos;
  if (*pos == text.size()) return false;
  uint32_t v = 0;
  while (*pos < text.size() && text[*pos] >= '0' && text[*pos] <= '9' && v <= 65535)
    v = v * 10 + static_cast<uint32_t>(text[(*pos)++] - '0');
  *out = v;
  return true;
}

}  // namespace

PortRange PortRange::FromProc(std::string_view range_text, std::string_view reserved_text) {
  PortRange r;
  size_t pos = 0;
  uint32_t lo = 0, hi = 0;
  if (NextNumber(range_text, &pos, &lo) && NextNumber(range_text, &pos, &hi) && lo >= 1024 && lo <= hi &&
      hi <= 65535) {
    r.low_ = static_cast<uint16_t>(lo);
    r.high_ = static_cast<uint16_t>(hi);
  }
  // "8080,9000-9100": ranges separated by commas.
  size_t i = 0;
  while (i < reserved_text.size()) {
    size_t end = reserved_text.find(',', i);
    if (end == std::string_view::npos) end = reserved_text.size();
    const std::string_view item = reserved_text.substr(i, end - i);
    size_t p = 0;
    uint32_t a = 0, b = 0;
    if (NextNumber(item, &p, &a) && a <= 65535) {
      if (!NextNumber(item, &p, &b) || b < a || b > 65535) b = a;
      r.reserved_.emplace_back(static_cast<uint16_t>(a), static_cast<uint16_t>(b));
    }
    i = end + 1;
  }
  return r;
}

bool PortRange::Reserved(uint16_t port) const {
  for (const auto& [a, b] : reserved_) {
    if (port >= a && port <= b) return true;
  }
  return false;
}

uint16_t PortRange::Draw(common::SecureRandom& rng) const {
  const uint32_t n = uint32_t{high_} - low_ + 1;
  // Rejection: a reserved draw is drawn again (bounded; a range that is
  // mostly reserved falls back to a walk from the last draw).
  uint16_t port = 0;
  for (int i = 0; i < 64; ++i) {
    port = static_cast<uint16_t>(low_ + rng.Below(n));
    if (!Reserved(port)) return port;
  }
  for (uint32_t i = 0; i < n; ++i) {
    const auto p = static_cast<uint16_t>(low_ + (port - low_ + i) % n);
    if (!Reserved(p)) return p;
  }
  return 0;
}

}  // namespace weir::fastpath
