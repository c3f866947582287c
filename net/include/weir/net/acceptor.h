// Accepting connections on a listening socket, for every server on a
// net::EventLoop (the fastpath's TCP server and encrypted front, the
// recursor's front): every connection waiting is taken at each readiness
// (non-blocking, close-on-exec). When the process is out of descriptors
// (EMFILE, ENFILE, ENOBUFS, ENOMEM) the connection stays in the backlog and
// the listener stays readable, so watching it would spin: it is unwatched
// for `backoff`, the owner is told (to count and log it), then it is watched
// again.
//
// Threading: the loop's thread.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <functional>

#include "weir/net/event_loop.h"

namespace weir::net {

struct AcceptedConnection {
  int fd = -1;  // non-blocking, close-on-exec; the callback owns it
  sockaddr_storage peer{};
  socklen_t peer_len = 0;
};

struct AcceptHandlers {
  std::function<void(const AcceptedConnection&)> on_connection;
  // Accepting paused for `backoff`; `err` is accept(2)'s errno.
  std::function<void(int err)> on_pause;
  std::chrono::milliseconds backoff{100};
};

// Watches `lfd` (bound, listening, non-blocking) on `loop` until the owner
// unwatches it.
void WatchListener(EventLoop& loop, int lfd, AcceptHandlers handlers);

}  // namespace weir::net
