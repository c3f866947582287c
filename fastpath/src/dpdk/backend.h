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
#include "weir/fastpath/config.h"
#include "weir/fastpath/node.h"

namespace weir::fastpath::dpdk {

class Backend {
 public:
  explicit Backend(const FastpathConfig& config);
  ~Backend();  // ports stopped and closed, EAL cleaned up
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  // Starts the EAL and picks the worker lcores. Once per process.
  absl::Status InitEal();
  int workers() const;
  // Probes, checks and starts every port and its exception tap, then makes
  // one worker per lcore over node.core(0..workers-1). On error every port
  // opened so far is closed again.
  absl::Status OpenPorts(Node& node);
  // Starts the workers on their lcores; they poll until `running` is false.
  // An error means a worker did not start (those that did run until Wait).
  absl::Status Launch(const std::atomic<bool>& running);
  // Waits for every worker to return (after `running` turned false).
  void Wait();

  // "dpdk port NAME mac M queues N exception E" and "listening udp ADDR ..."
  // lines for the start-up output.
  std::string Describe(bool tcp) const;
  // Adds the weir_dpdk_* families to `w`: the per-port, per-lcore counters
  // and the ports' own statistics.
  void RenderMetrics(common::PrometheusWriter& w) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir::fastpath::dpdk
