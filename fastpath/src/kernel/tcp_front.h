// DNS over TCP on kernel sockets for any backend: the listening sockets it
// owns, the TCP server over the node's TCP slot, and the thread that runs
// it. The kernel backend listens on its UDP addresses; the DPDK backend on
// the addresses its exception interfaces get.
//
// Threading: every call from the main thread; the server runs on its own
// thread between Launch and Wait; RenderMetrics from the metrics thread.
#pragma once

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "kernel/tcp_server.h"
#include "weir/common/prometheus.h"
#include "weir/common/socket_address.h"
#include "weir/fastpath/node.h"

namespace weir::fastpath::kernel {

class TcpFront {
 public:
  TcpFront() = default;
  ~TcpFront();  // the thread joined, the sockets closed
  TcpFront(const TcpFront&) = delete;
  TcpFront& operator=(const TcpFront&) = delete;

  // Binds a listening socket on `addr` (the address may be one the host
  // does not have yet: `freebind`).
  absl::Status Listen(const common::SocketAddress& addr, bool freebind = false);
  bool listening() const { return !fds_.empty(); }
  // The server over node.core(slot).
  absl::Status Attach(Node& node, int slot);
  void Launch(const std::atomic<bool>& running);
  void Wait();
  void RenderMetrics(common::PrometheusWriter& w) const;

 private:
  std::vector<int> fds_;
  std::unique_ptr<TcpServer> server_;
  std::thread thread_;
};

}  // namespace weir::fastpath::kernel
