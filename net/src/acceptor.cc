#include "weir/net/acceptor.h"

#include <sys/epoll.h>

#include <cerrno>
#include <memory>

namespace weir::net {
namespace {

void AcceptAll(EventLoop& loop, int lfd, const std::shared_ptr<const AcceptHandlers>& h) {
  for (;;) {
    AcceptedConnection c;
    c.peer_len = sizeof(c.peer);
    c.fd = accept4(lfd, reinterpret_cast<sockaddr*>(&c.peer), &c.peer_len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c.fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        const int err = errno;
        loop.Unwatch(lfd);
        loop.After(h->backoff, [&loop, lfd, h] {
          loop.Watch(lfd, EPOLLIN, [&loop, lfd, h](uint32_t) { AcceptAll(loop, lfd, h); });
        });
        if (h->on_pause) h->on_pause(err);
      }
      return;  // EAGAIN: all taken
    }
    h->on_connection(c);
  }
}

}  // namespace

void WatchListener(EventLoop& loop, int lfd, AcceptHandlers handlers) {
  auto h = std::make_shared<const AcceptHandlers>(std::move(handlers));
  loop.Watch(lfd, EPOLLIN, [&loop, lfd, h](uint32_t) { AcceptAll(loop, lfd, h); });
}

}  // namespace weir::net
