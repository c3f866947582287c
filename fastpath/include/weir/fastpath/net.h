// Socket addresses and prefixes, parsed once at the control plane and used by
// value on the data path.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace weir::fastpath {

// An IPv4 or IPv6 address with a port, storable in a sockaddr_storage.
struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t len = 0;

  int family() const { return storage.ss_family; }
  uint16_t port() const;
  void set_port(uint16_t port);
  // Address bytes (4 or 16) in network order.
  const uint8_t* addr_bytes() const;
  size_t addr_len() const { return family() == AF_INET ? 4 : 16; }
  const sockaddr* sa() const { return reinterpret_cast<const sockaddr*>(&storage); }
  sockaddr* sa() { return reinterpret_cast<sockaddr*>(&storage); }
  std::string ToString() const;  // "1.2.3.4:53" or "[::1]:53"

  static SocketAddress FromSockaddr(const sockaddr* sa, socklen_t len);
  // Parses "1.2.3.4:53", "[::1]:53", or (with default_port) "1.2.3.4", "::1".
  static absl::StatusOr<SocketAddress> Parse(std::string_view text, int default_port = -1);
};

// An address prefix ("198.51.100.0/24", "2001:db8::/32").
struct Prefix {
  int family = AF_INET;
  std::array<uint8_t, 16> addr{};
  uint8_t len = 0;

  bool Contains(int fam, const uint8_t* a) const {
    if (fam != family) return false;
    const unsigned full = len / 8;
    if (std::memcmp(a, addr.data(), full) != 0) return false;
    const unsigned rem = len % 8;
    if (rem == 0) return true;
    const uint8_t mask = static_cast<uint8_t>(0xFF00 >> rem);
    return (a[full] & mask) == addr[full];
  }
  static absl::StatusOr<Prefix> Parse(std::string_view text);
};

}  // namespace weir::fastpath
