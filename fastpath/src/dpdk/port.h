// Starting one ethdev port for the workers: every check that can refuse it
// with the device and the reason (queue count, RSS for several queues),
// one RX/TX queue pair per worker, the TX checksum offloads it offers.
//
// Threading: control plane, main thread, before the workers run.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

struct rte_mempool;

namespace weir::fastpath::dpdk {

struct PortSetup {
  uint16_t queues = 1;  // RX/TX queue pairs: one per worker lcore
  uint16_t rx_descriptors = 1024;
  uint16_t tx_descriptors = 1024;
  rte_mempool* pool = nullptr;  // receive buffers
  // Ask for the TX checksum offloads the device has (wire ports; an
  // exception port passes the kernel's frames as they are).
  bool checksum_offload = false;
};

// Configures and starts port `id` (`name` for messages). *tx_offloads gets
// the RTE_ETH_TX_OFFLOAD_* checksum flags enabled.
absl::Status StartPort(const std::string& name, uint16_t id, const PortSetup& setup, uint64_t* tx_offloads);

}  // namespace weir::fastpath::dpdk
