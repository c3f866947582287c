#include "weir/fastpath/net.h"

#include <arpa/inet.h>

#include <charconv>

namespace weir::fastpath {

partitions::IpAddress ToIpAddress(const SocketAddress& a) {
  partitions::IpAddress ip;
  if (a.family() == AF_INET) {
    ip.family = 4;
    std::memcpy(ip.bytes.data(), a.addr_bytes(), 4);
  } else if (a.family() == AF_INET6) {
    ip.family = 6;
    std::memcpy(ip.bytes.data(), a.addr_bytes(), 16);
    if (ip.IsV4Mapped()) {
      std::memmove(ip.bytes.data(), ip.bytes.data() + 12, 4);
      std::memset(ip.bytes.data() + 4, 0, 12);
      ip.family = 4;
    }
  }
  return ip;
}

}  // namespace weir::fastpath
