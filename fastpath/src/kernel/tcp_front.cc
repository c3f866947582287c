#include "kernel/tcp_front.h"

#include <sys/socket.h>
#include <unistd.h>

#include "weir/net/socket.h"

namespace weir::fastpath::kernel {

TcpFront::~TcpFront() {
  Wait();
  server_.reset();
  for (int fd : fds_) close(fd);
}

absl::Status TcpFront::Listen(const common::SocketAddress& addr, bool freebind) {
  auto fd =
      net::BindSocket(addr, SOCK_STREAM, {.nonblocking = true, .listen_backlog = 1024, .freebind = freebind});
  if (!fd.ok()) return fd.status();
  fds_.push_back(*fd);
  return absl::OkStatus();
}

absl::Status TcpFront::Attach(Node& node, int slot) {
  server_ = std::make_unique<TcpServer>(node, slot, fds_);
  return server_->Init();
}

void TcpFront::Launch(const std::atomic<bool>& running) {
  if (server_) thread_ = std::thread([this, &running] { server_->Run(running); });
}

void TcpFront::Wait() {
  if (thread_.joinable()) thread_.join();
}

void TcpFront::RenderMetrics(common::PrometheusWriter& w) const {
  if (server_) server_->RenderMetrics(w);
}

}  // namespace weir::fastpath::kernel
