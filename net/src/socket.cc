#include "weir/net/socket.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "weir/common/text.h"

namespace weir::net {

using common::Cat;
using common::SocketAddress;

namespace {
#ifdef IPV6_FREEBIND
constexpr int kIpv6Freebind = IPV6_FREEBIND;
#else
constexpr int kIpv6Freebind = 78;  // linux/in6.h, not in glibc's <netinet/in.h> before 2.37
#endif
}  // namespace

absl::StatusOr<int> BindSocket(const SocketAddress& addr, int type, const BindOptions& options) {
  const int fd = socket(addr.family(), type | SOCK_CLOEXEC | (options.nonblocking ? SOCK_NONBLOCK : 0), 0);
  if (fd < 0) return absl::InternalError(Cat("socket: ", std::strerror(errno)));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (options.reuseport) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  if (addr.family() == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  if (options.freebind) {
    if (addr.family() == AF_INET6) {
      setsockopt(fd, IPPROTO_IPV6, kIpv6Freebind, &one, sizeof(one));
    } else {
      setsockopt(fd, IPPROTO_IP, IP_FREEBIND, &one, sizeof(one));
    }
  }
  if (bind(fd, addr.sa(), addr.len) != 0) {
    const int e = errno;
    close(fd);
    return absl::UnavailableError(Cat("bind ", addr.ToString(), ": ", std::strerror(e)));
  }
  if (options.listen_backlog > 0 && listen(fd, options.listen_backlog) != 0) {
    const int e = errno;
    close(fd);
    return absl::UnavailableError(Cat("listen ", addr.ToString(), ": ", std::strerror(e)));
  }
  return fd;
}

SocketAddress LocalAddress(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  return SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&ss), len);
}

}  // namespace weir::net
