// One worker lcore of the DPDK backend: for each of its ports, rx_burst of
// 32 from its queue, frames classified (frame.h), DNS queries through its
// WorkerCore, answers written into the received mbufs (after the query,
// the reply's headers just before them; or over the query) and sent back
// out of the same queue; the rest goes to the port's exception port
// (the kernel's tap) or is dropped and counted. What the kernel sends on the
// tap goes out of the wire port. Misses keep the query's headers in a route
// table; their answers come back through the core's ring and leave in a new
// mbuf to the same client MAC/IP/port.
//
// No allocation, lock or syscall per packet on the hit path.
//
// Threading: Poll/Run on the worker's lcore only, an RCU reader; counters
// are read by the metrics thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "weir/common/clock.h"
#include "weir/fastpath/frame.h"
#include "weir/fastpath/metrics.h"
#include "weir/fastpath/route_table.h"
#include "weir/fastpath/worker_core.h"

struct rte_mbuf;
struct rte_mempool;

namespace weir::fastpath::dpdk {

// Why a frame the worker received was not answered or passed on.
enum class FrameDrop : uint8_t {
  kNotOurs,        // another MAC, or a source no answer may go to
  kMalformed,      // truncated, inconsistent lengths, chained mbufs
  kTxFull,         // the TX queue took fewer than offered
  kNoMbuf,         // the pool was empty when an answer to a miss needed one
  kNoException,    // for the kernel, but the port has no exception path
  kTooBig,         // an answer larger than the mbuf it must go out in
  kExceptionRate,  // for the kernel, over the port's exception_pps (a flood at our addresses)
  kCount,
};
std::string_view FrameDropName(FrameDrop d);

struct alignas(64) PortCounters {
  OwnedCounter rx_packets;
  OwnedCounter rx_bursts;  // non-empty bursts
  OwnedCounter empty_polls;
  OwnedCounter tx_packets;   // answers sent
  OwnedCounter to_kernel;    // frames handed to the exception port
  OwnedCounter from_kernel;  // frames the kernel sent out through this port
  std::array<OwnedCounter, static_cast<size_t>(FrameDrop::kCount)> drops;
  void Drop(FrameDrop d, uint64_t n = 1) { drops[static_cast<size_t>(d)].Add(n); }
};

// One port as a worker sees it.
struct WorkerPort {
  uint16_t port = 0;       // the wire port
  uint16_t queue = 0;      // this worker's RX/TX queue on it (and on its exception port)
  int32_t exception = -1;  // the exception (tap) port, -1 for none
  const frame::PortAddresses* addresses = nullptr;
  frame::ReplyOptions reply;
  uint64_t tx_flags_v4 = 0;  // mbuf offload flags of an IPv4 answer (checksums the NIC computes)
  uint64_t tx_flags_v6 = 0;
  // Frames per second this worker hands the kernel from this port (the
  // kernel's path costs a syscall per frame on the worker); 0: no limit.
  uint32_t exception_pps = 0;
};

// Cache-line aligned: the workers are allocated one after another, and
// each writes its own members (burst_port_) on every burst.
class alignas(64) DpdkWorker final : public WorkerIo {
 public:
  static constexpr uint16_t kBurst = 32;

  // `pool`: where answers to misses get their mbufs.
  DpdkWorker(WorkerCore& core, const common::Clock& clock, int slot, std::vector<WorkerPort> ports,
             rte_mempool* pool, int idle_sleep_us);
  ~DpdkWorker() override;
  DpdkWorker(const DpdkWorker&) = delete;
  DpdkWorker& operator=(const DpdkWorker&) = delete;

  // One pass over every port and the returned misses; returns the frames
  // received (from the wire and from the kernel) and the misses answered.
  // The caller is an RCU reader.
  size_t Poll();
  // Polls until `running` turns false, a quiescent state after each pass
  // (and offline while it sleeps when idle).
  void Run(const std::atomic<bool>& running);

  ClientRoute HoldRoute(size_t index) override;
  void SendHeld(const ClientRoute& route, std::span<const uint8_t> answer) override;

  size_t ports() const { return ports_.size(); }
  const WorkerPort& port(size_t i) const { return ports_[i]; }
  const PortCounters& counters(size_t i) const { return counters_[i]; }
  size_t held() const { return routes_.held(); }
  int slot() const { return slot_; }

 private:
  // A miss's client: the query's headers (to write the answer's) and the port.
  struct Held {
    std::array<uint8_t, frame::kMaxHeaders> headers{};
    frame::Parsed parsed;
    uint16_t port_index = 0;
  };
  size_t PollPort(size_t i, uint32_t now);
  // One more frame for port i's exception path within its rate.
  bool ExceptionAllowed(size_t i);
  // Sends what the kernel sent on port i's exception port out of port i;
  // returns how many frames came.
  size_t PassFromKernel(size_t i);
  // Sets the answer's length and offload fields, for a frame of `len` bytes;
  // `own`: m is OwnBuffer (no flag of whose buffer it is to keep).
  void PrepareTx(rte_mbuf* m, const WorkerPort& wp, const frame::Parsed& p, size_t len, bool own);

  WorkerCore& core_;
  const common::Clock& clock_;
  int slot_;
  std::vector<WorkerPort> ports_;
  std::unique_ptr<PortCounters[]> counters_;
  rte_mempool* pool_;
  int idle_sleep_us_;
  struct Bucket {
    double tokens = 0;
    uint64_t last = 0;  // TSC of the last refill
  };
  std::vector<Bucket> buckets_;  // per port
  RouteTable<Held> routes_;
  size_t burst_port_ = 0;  // the port of the burst being handled
  struct Burst;            // the burst's mbufs, parse results and answer buffers
  std::unique_ptr<Burst> b_;
};

}  // namespace weir::fastpath::dpdk
