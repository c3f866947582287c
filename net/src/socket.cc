#include "weir/net/socket.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
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

// A socket of `type` for `addr` with the options set, bound; with `join`,
// SO_REUSEPORT before the bind (a member of a group that already holds the
// address).
absl::StatusOr<int> OpenAndBind(const SocketAddress& addr, int type, const BindOptions& options, bool join) {
  const int fd = socket(addr.family(), type | SOCK_CLOEXEC | (options.nonblocking ? SOCK_NONBLOCK : 0), 0);
  if (fd < 0) return absl::InternalError(Cat("socket: ", std::strerror(errno)));
  int one = 1;
  if (type == SOCK_STREAM) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (join) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
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
  return fd;
}

}  // namespace

absl::StatusOr<int> BindSocket(const SocketAddress& addr, int type, const BindOptions& options) {
  auto fd = OpenAndBind(addr, type, options, false);
  if (!fd.ok()) return fd.status();
  if (options.listen_backlog > 0 && listen(*fd, options.listen_backlog) != 0) {
    const int e = errno;
    close(*fd);
    return absl::UnavailableError(Cat("listen ", addr.ToString(), ": ", std::strerror(e)));
  }
  return fd;
}

absl::StatusOr<std::vector<int>> BindUdpGroup(const SocketAddress& addr, int count,
                                              const BindOptions& options) {
  std::vector<int> fds;
  auto fail = [&fds](absl::Status st) {
    for (int fd : fds) close(fd);
    return st;
  };
  auto first = OpenAndBind(addr, SOCK_DGRAM, options, false);
  if (!first.ok()) return first.status();
  fds.push_back(*first);
  if (count <= 1) return fds;
  // Sharing is allowed once the port is ours alone; the others join it.
  int one = 1;
  if (setsockopt(*first, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0)
    return fail(absl::InternalError(Cat("SO_REUSEPORT on ", addr.ToString(), ": ", std::strerror(errno))));
  const SocketAddress bound = LocalAddress(*first);
  for (int i = 1; i < count; ++i) {
    auto fd = OpenAndBind(bound, SOCK_DGRAM, options, true);
    if (!fd.ok()) return fail(fd.status());
    fds.push_back(*fd);
  }
  return fds;
}

SocketAddress LocalAddress(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  return SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&ss), len);
}

int ConnectWithin(int fd, const sockaddr* sa, socklen_t len, int timeout_ms) {
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int err = 0;
  if (connect(fd, sa, len) != 0) {
    err = errno;
    if (err == EINPROGRESS || err == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, timeout_ms) <= 0) {
        err = ETIMEDOUT;
      } else {
        socklen_t l = sizeof(err);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l);
      }
    }
  }
  fcntl(fd, F_SETFL, flags);
  return err;
}

}  // namespace weir::net
