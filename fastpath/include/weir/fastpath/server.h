// weir-fastpath: the node (cache, handler, forwarder) over the backend
// server.backend names (backend.h: kernel sockets, or DPDK poll mode), the
// metrics HTTP endpoint and weirctl's control channel.
//
// Threading: Start/Stop/Reload from the main thread only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "weir/common/clock.h"
#include "weir/common/heartbeat.h"
#include "weir/fastpath/config.h"

namespace weir::fastpath {

class Server {
 public:
  explicit Server(FastpathConfig config);
  // Test hook: every TTL decision uses `clock`, and the metrics endpoint
  // accepts GET /test/advance-clock?seconds=N. Never for production.
  Server(FastpathConfig config, common::FakeClock* test_clock);
  ~Server();

  // Binds every socket and starts the threads. Fails (nothing left running)
  // when a socket cannot be bound.
  absl::Status Start();
  void Stop();
  // Re-reads the city map and tag files and swaps them in atomically; on any
  // error the running ones stay and the error is returned.
  absl::Status Reload();
  // The bound addresses (ports resolved when the config asked for port 0).
  std::string DescribeListeners() const;
  // Every loop the watchdog goes by: each worker, the TCP thread, the
  // forwarder (after Start).
  std::vector<common::NamedHeart> Hearts() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir::fastpath
