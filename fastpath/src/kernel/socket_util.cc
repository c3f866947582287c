#include "kernel/socket_util.h"

#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "weir/common/text.h"

namespace weir::fastpath::kernel {

using common::Cat;

absl::StatusOr<int> BindSocket(const SocketAddress& addr, int type, bool reuseport) {
  const int fd = socket(addr.family(), type | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(Cat("socket(): ", strerror(errno)));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (reuseport) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  if (addr.family() == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  if (bind(fd, addr.sa(), addr.len) != 0) {
    const int e = errno;
    close(fd);
    return absl::UnavailableError(Cat("bind ", addr.ToString(), ": ", strerror(e)));
  }
  return fd;
}

SocketAddress LocalAddress(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  return SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&ss), len);
}

partitions::IpAddress ClientAddress(const sockaddr_storage& ss) {
  partitions::IpAddress a;
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

}  // namespace weir::fastpath::kernel
