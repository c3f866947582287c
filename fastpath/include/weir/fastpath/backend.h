// A weir-fastpath backend: how queries arrive and answers leave. The node
// (cache, handler, forwarder, worker cores) is the same for every backend;
// a backend owns receive, transmit and its address data, and drives
// node.core(0..workers()-1), plus node.core(workers()) for its DNS-over-TCP
// server when it has one and node.core(workers() + 1) for the encrypted
// front (DoT, DoH) when [tls] is configured.
//
// The server calls, from the main thread, in this order: Init (before the
// node exists), Attach (the node prepared for workers() + 1 slots), Launch,
// and after `running` turned false, Wait; then the node stops and the
// backend is destroyed (every socket, port and lcore it opened goes with
// it). Describe and RenderMetrics may come from other threads once Attach
// returned.
//
// Adding a backend: a folder under fastpath/src/ with a class derived from
// this one, and one line in MakeBackend (fastpath/src/backends.cc).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "weir/common/prometheus.h"
#include "weir/fastpath/config.h"

namespace weir::fastpath {

class Node;

class Backend {
 public:
  virtual ~Backend() = default;

  // What must come before the node: the EAL, the listening sockets. On
  // error nothing it opened stays open.
  virtual absl::Status Init() = 0;
  // The worker slots it drives (valid after Init).
  virtual int workers() const = 0;
  // Whether it runs a DNS-over-TCP server (on slot workers()).
  virtual bool serves_tcp() const = 0;
  // Whether it runs the encrypted front (on slot workers() + 1).
  virtual bool serves_tls() const = 0;
  // What a reload re-reads that the backend holds: the TLS certificates.
  // On error what was in use stays; `apply` false only checks them.
  virtual absl::Status Reload(bool apply) = 0;
  // The per-worker objects, ports and the TCP server over `node`.
  virtual absl::Status Attach(Node& node) = 0;
  // Starts every worker; they run until `running` turns false. An error
  // means one did not start (those that did run until Wait).
  virtual absl::Status Launch(const std::atomic<bool>& running) = 0;
  // Waits for every worker to return (after `running` turned false).
  virtual void Wait() = 0;
  // The start-up lines: "listening udp ADDR [tcp ADDR]" per address,
  // "listening dot|doh ADDR" per encrypted listener, and the backend's own
  // (DPDK: one line per port).
  virtual std::string Describe() const = 0;
  // The backend's own metric families (docs/metrics.md).
  virtual void RenderMetrics(common::PrometheusWriter& w) const = 0;
};

// The backends this build has, by their server.backend name ("kernel",
// and "dpdk" when built with DPDK).
const std::vector<std::string>& BuiltBackends();

// The backend config.backend names; an error for one this build lacks.
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const FastpathConfig& config);

}  // namespace weir::fastpath
