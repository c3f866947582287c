#include "metrics_endpoint.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "weir/common/text.h"
#include "weir/partitions/rcu.h"

namespace weir::fastpath {

using common::Cat;

void MetricsEndpoint::Run(const std::atomic<bool>& running) {
  partitions::RcuThread rcu;  // reads the city map for partition names
  pollfd p{fd_, POLLIN, 0};
  while (running.load(std::memory_order_relaxed)) {
    rcu.Quiescent();
    int ready;
    {
      partitions::RcuOfflineScope offline;
      ready = poll(&p, 1, 100);
    }
    if (ready <= 0) continue;
    const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) continue;
    fcntl(c, F_SETFL, 0);  // blocking, bounded by the timeouts below
    timeval tv{1, 0};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    char req[2048];
    ssize_t r;
    {
      partitions::RcuOfflineScope offline;  // a slow client must not stall grace periods
      r = read(c, req, sizeof(req) - 1);
    }
    std::string body;
    std::string status = "200 OK";
    if (r > 0 && std::strncmp(req, "GET /metrics", 12) == 0) {
      body = node_.RenderMetrics();
    } else if (r > 0 && node_.test_clock() != nullptr &&
               std::strncmp(req, "GET /test/advance-clock?seconds=", 32) == 0) {
      node_.test_clock()->Advance(static_cast<uint32_t>(std::strtoul(req + 32, nullptr, 10)));
      body = Cat("clock ", node_.test_clock()->NowSeconds(), "\n");
    } else {
      status = "404 Not Found";
      body = "try /metrics\n";
    }
    const std::string resp = Cat(
        "HTTP/1.1 ", status, "\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: ", body.size(),
        "\r\nConnection: close\r\n\r\n", body);
    {
      // Offline while sending: a scraper that does not read must not stall
      // grace periods. MSG_NOSIGNAL: a reset connection is not a SIGPIPE.
      partitions::RcuOfflineScope offline;
      size_t sent = 0;
      while (sent < resp.size()) {
        const ssize_t w = send(c, resp.data() + sent, resp.size() - sent, MSG_NOSIGNAL);
        if (w <= 0) break;
        sent += static_cast<size_t>(w);
      }
    }
    close(c);
  }
}

}  // namespace weir::fastpath
