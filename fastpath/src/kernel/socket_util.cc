#include "kernel/socket_util.h"

#include <netinet/in.h>

#include <cstring>

namespace weir::fastpath::kernel {

common::IpAddress ClientAddress(const sockaddr_storage& ss) {
  common::IpAddress a;
  if (ss.ss_family == AF_INET) {
    a.family = 4;
    std::memcpy(a.bytes.data(), &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, 4);
  } else if (ss.ss_family == AF_INET6) {
    const uint8_t* b =
        reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr);
    static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(b, kMapped, 12) == 0) {
      a.family = 4;
      std::memcpy(a.bytes.data(), b + 12, 4);
    } else {
      a.family = 6;
      std::memcpy(a.bytes.data(), b, 16);
    }
  }
  return a;
}

uint16_t ClientPort(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

}  // namespace weir::fastpath::kernel
