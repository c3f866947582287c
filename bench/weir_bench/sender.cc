#include "sender.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "weir/common/text.h"

namespace weir::bench {

std::string Errno(const char* what) { return common::Cat(what, ": ", std::strerror(errno)); }

absl::StatusOr<int> ConnectedSocket(const Source& source, const common::SocketAddress& server, int type,
                                    bool nonblocking) {
  const int fd = socket(server.family(), type | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0), 0);
  if (fd < 0) return absl::InternalError(Errno("socket"));
  if (type == SOCK_DGRAM) {
    const int size = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
  }
  if (bind(fd, source.address.sa(), source.address.len) != 0) {
    const std::string why = Errno(common::Cat("bind to source ", source.text).c_str());
    close(fd);
    return absl::InternalError(
        common::Cat(why, " (a source must be a local address: on loopback any 127.x.y.z)"));
  }
  if (connect(fd, server.sa(), server.len) != 0 && errno != EINPROGRESS) {
    const std::string why = Errno(common::Cat("connect to ", server.ToString()).c_str());
    close(fd);
    return absl::InternalError(why);
  }
  return fd;
}

}  // namespace weir::bench
