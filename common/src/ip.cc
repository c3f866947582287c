#include "weir/common/ip.h"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <string>

#include "weir/common/text.h"

namespace weir::common {

bool ParseIp(std::string_view text, IpAddress* out) {
  if (text.empty() || text.size() >= INET6_ADDRSTRLEN) return false;
  char buf[INET6_ADDRSTRLEN];
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  IpAddress a;
  if (text.find(':') == std::string_view::npos) {
    if (inet_pton(AF_INET, buf, a.bytes.data()) != 1) return false;
    a.family = 4;
  } else {
    if (inet_pton(AF_INET6, buf, a.bytes.data()) != 1) return false;
    a.family = 6;
  }
  *out = a;
  return true;
}

std::string IpToString(const IpAddress& a) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (a.family == 4) {
    inet_ntop(AF_INET, a.bytes.data(), buf, sizeof buf);
  } else if (a.family == 6) {
    inet_ntop(AF_INET6, a.bytes.data(), buf, sizeof buf);
  } else {
    return "-";
  }
  return buf;
}

absl::StatusOr<Cidr> Cidr::Parse(std::string_view text) {
  size_t slash = text.find('/');
  if (slash == std::string_view::npos) return absl::InvalidArgumentError(Cat("'", text, "' is not a CIDR"));
  IpAddress a;
  if (!ParseIp(text.substr(0, slash), &a)) {
    return absl::InvalidArgumentError(Cat("bad address '", text.substr(0, slash), "'"));
  }
  std::string_view len_text = text.substr(slash + 1);
  unsigned len = 0;
  auto [ptr, ec] = std::from_chars(len_text.data(), len_text.data() + len_text.size(), len);
  const unsigned max = a.family == 4 ? 32 : 128;
  if (len_text.empty() || ec != std::errc() || ptr != len_text.data() + len_text.size() || len > max) {
    return absl::InvalidArgumentError(Cat("bad prefix length '", len_text, "'"));
  }
  const size_t nbytes = a.family == 4 ? 4 : 16;
  for (size_t bit = len; bit < nbytes * 8; ++bit) {
    if (a.bytes[bit / 8] & (0x80u >> (bit % 8))) {
      return absl::InvalidArgumentError(Cat("host bits set in '", text, "'"));
    }
  }
  return Cidr{a, static_cast<uint8_t>(len)};
}

absl::Status ParseCidr(std::string_view text, Cidr* out) {
  absl::StatusOr<Cidr> c = Cidr::Parse(text);
  if (!c.ok()) return c.status();
  *out = *c;
  return absl::OkStatus();
}

template <typename T>
void CidrSet::Merge(std::vector<std::pair<T, T>>& ranges) {
  std::sort(ranges.begin(), ranges.end());
  size_t n = 0;
  for (const auto& r : ranges) {
    // Overlapping or adjacent (the last one ends right before r starts).
    if (n > 0 && (ranges[n - 1].second >= r.first || ranges[n - 1].second + 1 == r.first)) {
      ranges[n - 1].second = std::max(ranges[n - 1].second, r.second);
    } else {
      ranges[n++] = r;
    }
  }
  ranges.resize(n);
}

CidrSet::CidrSet(std::span<const Cidr> networks) {
  for (const Cidr& c : networks) {
    if (c.address.family == 4) {
      const unsigned host = 32 - std::min<unsigned>(c.prefix, 32);
      const uint32_t mask = host == 32 ? ~uint32_t{0} : (uint32_t{1} << host) - 1;
      const uint32_t first = c.address.v4() & ~mask;
      v4_.emplace_back(first, first | mask);
    } else if (c.address.family == 6) {
      const unsigned host = 128 - std::min<unsigned>(c.prefix, 128);
      const U128 mask = host == 128 ? ~U128{0} : (U128{1} << host) - 1;
      const U128 first = V6Value(c.address) & ~mask;
      v6_.emplace_back(first, first | mask);
    }
  }
  Merge(v4_);
  Merge(v6_);
}

}  // namespace weir::common
