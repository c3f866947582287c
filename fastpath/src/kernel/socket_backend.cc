#include "kernel/socket_backend.h"

#include <sys/socket.h>
#include <unistd.h>

#include "weir/common/text.h"
#include "weir/net/socket.h"

namespace weir::fastpath::kernel {

using common::Cat;

SocketBackend::SocketBackend(const FastpathConfig& config) : config_(config), tls_(config) {}

SocketBackend::~SocketBackend() {
  Wait();
  udp_.clear();
  CloseUdp();
}

void SocketBackend::CloseUdp() {
  for (auto& v : worker_fds_)
    for (int fd : v) close(fd);
  worker_fds_.clear();
}

absl::Status SocketBackend::Init() {
  const int workers = config_.workers;
  worker_fds_.assign(workers, {});
  for (const common::SocketAddress& want : config_.listen) {
    // Port 0 takes the port the kernel gives the first UDP socket; when TCP
    // cannot have the same one (a connection uses it), try another.
    for (int attempt = 0;; ++attempt) {
      auto group = net::BindUdpGroup(want, workers);
      if (!group.ok()) {
        CloseUdp();
        return group.status();
      }
      const common::SocketAddress addr = net::LocalAddress(group->front());
      for (int w = 0; w < workers; ++w) {
        // Room for a burst while the worker is off its CPU: a full queue
        // drops hits and misses alike, so a miss flood would cost hits
        // (the kernel caps it at net.core.rmem_max).
        const int rcvbuf = 4 << 20;
        setsockopt((*group)[w], SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
        worker_fds_[w].push_back((*group)[w]);
      }
      if (config_.tcp) {
        absl::Status st = tcp_.Listen(addr);
        if (!st.ok() && want.port() == 0 && attempt < 16) {
          for (auto& v : worker_fds_) {
            close(v.back());
            v.pop_back();
          }
          continue;
        }
        if (!st.ok()) {
          CloseUdp();
          return st;
        }
      }
      if (tls_.enabled()) {
        if (absl::Status st = tls_.Listen(addr); !st.ok()) {
          CloseUdp();
          return st;
        }
      }
      bound_.push_back(addr);
      break;
    }
  }
  return absl::OkStatus();
}

absl::Status SocketBackend::Attach(Node& node) {
  for (int w = 0; w < workers(); ++w) udp_.push_back(std::make_unique<UdpWorker>(node, w, worker_fds_[w]));
  if (config_.tcp) {
    if (absl::Status st = tcp_.Attach(node, workers()); !st.ok()) return st;
  }
  if (tls_.enabled()) return tls_.Attach(node, workers() + 1);
  return absl::OkStatus();
}

absl::Status SocketBackend::Launch(const std::atomic<bool>& running) {
  for (auto& u : udp_) threads_.emplace_back([&running, w = u.get()] { w->Run(running); });
  tcp_.Launch(running);
  tls_.Launch(running);
  return absl::OkStatus();
}

void SocketBackend::Wait() {
  for (auto& t : threads_) t.join();
  threads_.clear();
  tcp_.Wait();
  tls_.Wait();
}

std::string SocketBackend::Describe() const {
  std::string out;
  for (const auto& a : bound_) {
    out +=
        Cat("listening udp ", a.ToString(), config_.tcp ? Cat(" tcp ", a.ToString()) : std::string(), "\n");
  }
  return out + tls_.Describe();
}

void SocketBackend::RenderMetrics(common::PrometheusWriter& w) const {
  tcp_.RenderMetrics(w);
  tls_.RenderMetrics(w);
}

}  // namespace weir::fastpath::kernel
