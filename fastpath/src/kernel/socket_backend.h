// The kernel-socket backend (server.backend = "kernel"): `workers` UDP
// workers, each with its own socket per listen address (one port shared by
// the group, recvmmsg/sendmmsg bursts), and DNS over TCP on the same
// addresses and ports.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kernel/tcp_front.h"
#include "kernel/udp_worker.h"
#include "tls/tls_front.h"
#include "weir/common/socket_address.h"
#include "weir/fastpath/backend.h"

namespace weir::fastpath::kernel {

class SocketBackend final : public Backend {
 public:
  explicit SocketBackend(const FastpathConfig& config);
  ~SocketBackend() override;

  absl::Status Init() override;
  int workers() const override { return static_cast<int>(worker_fds_.size()); }
  bool serves_tcp() const override { return config_.tcp; }
  bool serves_tls() const override { return tls_.enabled(); }
  absl::Status Reload(bool apply) override { return tls_.Reload(apply); }
  std::string Describe() const override;
  void RenderMetrics(common::PrometheusWriter& w) const override;
  absl::Status Attach(Node& node) override;
  absl::Status Launch(const std::atomic<bool>& running) override;
  void Wait() override;

 private:
  void CloseUdp();

  const FastpathConfig& config_;
  std::vector<std::vector<int>> worker_fds_;  // [worker][listen address]
  std::vector<common::SocketAddress> bound_;  // port 0 resolved
  TcpFront tcp_;
  tls::TlsFront tls_;
  std::vector<std::unique_ptr<UdpWorker>> udp_;
  std::vector<std::thread> threads_;
};

}  // namespace weir::fastpath::kernel
