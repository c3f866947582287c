// The DPDK poll-mode backend of weir-fastpath (server.backend = "dpdk"):
// EAL start, every [[dpdk.port]] probed by its devargs, checked and
// configured with one RX/TX queue pair per worker lcore, its exception tap
// (the kernel's interface with the port's MAC and addresses), and one
// DpdkWorker per lcore over the Node's worker cores. No DPDK type leaks out
// of this header: the rest of the fastpath builds without DPDK's flags.
//
// Threading: every call from the main thread; the workers run on their
// lcores between Launch and Wait; RenderMetrics from the metrics thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "weir/fastpath/backend.h"
#include "weir/fastpath/config.h"
#include "weir/fastpath/node.h"

namespace weir::fastpath::dpdk {

class Backend final : public fastpath::Backend {
 public:
  explicit Backend(const FastpathConfig& config);
  ~Backend() override;  // ports stopped and closed, EAL cleaned up
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  // Starts the EAL and picks the worker lcores (once per process), then
  // binds the kernel's DNS-over-TCP sockets on the addresses the exception
  // interfaces will get.
  absl::Status Init() override;
  int workers() const override;
  bool serves_tcp() const override;
  // DoT and DoH on the exception interfaces' addresses, as DNS over TCP.
  bool serves_tls() const override;
  absl::Status Reload(bool apply) override;
  // Probes, checks and starts every port and its exception tap, then makes
  // one worker per lcore over node.core(0..workers-1), and the TCP server.
  // On error every port opened so far is closed again.
  absl::Status Attach(Node& node) override;
  // Starts the workers on their lcores and the TCP thread; they run until
  // `running` is false.
  absl::Status Launch(const std::atomic<bool>& running) override;
  void Wait() override;

  // "dpdk port NAME mac M queues N exception E" and "listening udp ADDR ..."
  // lines for the start-up output.
  std::string Describe() const override;
  // The TCP server's families and weir_dpdk_*: the per-port, per-lcore
  // counters and the ports' own statistics.
  void RenderMetrics(common::PrometheusWriter& w) const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir::fastpath::dpdk
