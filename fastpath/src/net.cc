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

bool CidrContains(const partitions::Cidr& cidr, const partitions::IpAddress& a) {
  if (cidr.address.family != a.family) return false;
  const unsigned full = cidr.prefix / 8;
  if (std::memcmp(a.bytes.data(), cidr.address.bytes.data(), full) != 0) return false;
  const unsigned rem = cidr.prefix % 8;
  if (rem == 0) return true;
  const uint8_t mask = static_cast<uint8_t>(0xFF00 >> rem);
  return (a.bytes[full] & mask) == cidr.address.bytes[full];
}

}  // namespace weir::fastpath
