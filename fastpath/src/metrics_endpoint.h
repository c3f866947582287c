// The metrics HTTP endpoint: GET /metrics (Prometheus text), and with a
// test clock GET /test/advance-clock?seconds=N. One connection at a time,
// each bounded by one-second socket timeouts.
//
// Threading: Run() on its own thread, an RCU reader (the metrics read the
// city map for partition names).
#pragma once

#include <atomic>

#include "weir/fastpath/node.h"

namespace weir::fastpath {

class MetricsEndpoint {
 public:
  // `fd`: a bound, listening TCP socket (owned by the caller).
  MetricsEndpoint(Node& node, int fd) : node_(node), fd_(fd) {}
  void Run(const std::atomic<bool>& running);

 private:
  Node& node_;
  int fd_;
};

}  // namespace weir::fastpath
