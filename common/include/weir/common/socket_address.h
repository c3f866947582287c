// Socket addresses, parsed once at the control plane and used by value on
// the data path.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace weir::common {

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

}  // namespace weir::common
