// IP addresses and networks as configuration and ACLs name them: one value
// type for both families, parsed from and printed as text.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace weir::common {

// An IPv4 or IPv6 address in network byte order. IPv4 uses bytes[0..3].
struct IpAddress {
  uint8_t family = 0;  // 4 or 6; 0 = unset
  std::array<uint8_t, 16> bytes{};

  static IpAddress V4(uint32_t host_order) {
    IpAddress a;
    a.family = 4;
    a.bytes[0] = static_cast<uint8_t>(host_order >> 24);
    a.bytes[1] = static_cast<uint8_t>(host_order >> 16);
    a.bytes[2] = static_cast<uint8_t>(host_order >> 8);
    a.bytes[3] = static_cast<uint8_t>(host_order);
    return a;
  }
  static IpAddress V6(const uint8_t* network_order16) {
    IpAddress a;
    a.family = 6;
    std::memcpy(a.bytes.data(), network_order16, 16);
    return a;
  }
  uint32_t v4() const {
    return uint32_t{bytes[0]} << 24 | uint32_t{bytes[1]} << 16 | uint32_t{bytes[2]} << 8 | bytes[3];
  }
  // ::ffff:a.b.c.d, as dual-stack sockets report IPv4 clients.
  bool IsV4Mapped() const {
    static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return family == 6 && std::memcmp(bytes.data(), kPrefix, 12) == 0;
  }
  friend bool operator==(const IpAddress&, const IpAddress&) = default;
};

// "192.0.2.1" or "2001:db8::1". Returns false for anything else.
bool ParseIp(std::string_view text, IpAddress* out);
std::string IpToString(const IpAddress& a);

struct Cidr {
  IpAddress address;  // host bits are zero
  uint8_t prefix = 0;

  // "10.0.0.0/8", "2001:db8::/32". Host bits beyond the prefix are an error
  // (the operator probably meant a different network).
  static absl::StatusOr<Cidr> Parse(std::string_view text);

  // Whether `a` lies in this network. Another family never does: turn an
  // IPv4-mapped IPv6 client into IPv4 first. Inline: ACLs run it per packet.
  bool Contains(const IpAddress& a) const {
    if (address.family != a.family) return false;
    const unsigned bits = std::min<unsigned>(prefix, a.family == 4 ? 32 : 128);
    const unsigned full = bits / 8;
    if (std::memcmp(a.bytes.data(), address.bytes.data(), full) != 0) return false;
    const unsigned rem = bits % 8;
    if (rem == 0) return true;
    const uint8_t mask = static_cast<uint8_t>(0xff00u >> rem);
    return ((a.bytes[full] ^ address.bytes[full]) & mask) == 0;
  }
};
// Cidr::Parse, writing into `out`.
absl::Status ParseCidr(std::string_view text, Cidr* out);

// A set of networks for membership tests on every packet (ACLs, trusted
// forwarders): the networks merged into disjoint, sorted address ranges per
// family, found by binary search, so a carrier's hundreds of subscriber
// prefixes cost a few comparisons. IPv4-mapped IPv6 addresses are IPv6 here,
// as for Cidr::Contains.
class CidrSet {
 public:
  CidrSet() = default;
  explicit CidrSet(std::span<const Cidr> networks);

  bool Contains(const IpAddress& a) const {
    if (a.family == 4) return In(v4_, a.v4());
    return a.family == 6 && In(v6_, V6Value(a));
  }
  bool empty() const { return v4_.empty() && v6_.empty(); }
  // Disjoint ranges after merging (tests and diagnostics).
  size_t ranges() const { return v4_.size() + v6_.size(); }

 private:
  using U128 = unsigned __int128;
  static U128 V6Value(const IpAddress& a) {
    U128 v = 0;
    for (uint8_t b : a.bytes) v = v << 8 | b;
    return v;
  }
  template <typename T>
  static bool In(const std::vector<std::pair<T, T>>& ranges, T x) {
    // The first range that ends at or after x; x is in the set when that
    // range starts at or before it.
    auto it = std::lower_bound(ranges.begin(), ranges.end(), x,
                               [](const std::pair<T, T>& r, T v) { return r.second < v; });
    return it != ranges.end() && it->first <= x;
  }
  template <typename T>
  static void Merge(std::vector<std::pair<T, T>>& ranges);

  std::vector<std::pair<uint32_t, uint32_t>> v4_;  // [first, last]
  std::vector<std::pair<U128, U128>> v6_;
};

}  // namespace weir::common
