// One UDP worker of the kernel backend: its SO_REUSEPORT socket per listen
// address, recvmmsg/sendmmsg bursts of 32 through its WorkerCore, and the
// client addresses of its misses in a route table until their answers come
// back.
//
// Threading: Run() on the worker's own thread; Wake() from the forwarder.
#pragma once

#include <atomic>
#include <memory>
#include <span>
#include <vector>

#include "kernel/socket_util.h"
#include "weir/fastpath/node.h"
#include "weir/fastpath/route_table.h"
#include "weir/fastpath/worker_core.h"

namespace weir::fastpath::kernel {

class UdpWorker final : public WorkerIo {
 public:
  // `fds`: the worker's bound sockets (owned by the caller).
  UdpWorker(Node& node, int slot, std::vector<int> fds);
  ~UdpWorker() override;
  UdpWorker(const UdpWorker&) = delete;
  UdpWorker& operator=(const UdpWorker&) = delete;

  // Until `running` turns false.
  void Run(const std::atomic<bool>& running);

  ClientRoute HoldRoute(size_t index) override;
  void SendHeld(const ClientRoute& route, std::span<const uint8_t> answer) override;

 private:
  struct Peer {
    SocketAddress addr;
    uint16_t socket = 0;  // index into fds_
  };
  // Receives and handles one burst from socket `f`; returns how many came.
  int Burst(size_t f, int flags);

  Node& node_;
  WorkerCore& core_;
  int slot_;
  std::vector<int> fds_;
  int wake_fd_ = -1;  // eventfd the forwarder writes when returns wait (several sockets only)
  RouteTable<Peer> routes_;
  size_t burst_socket_ = 0;  // the socket of the burst being handled
  struct Buffers;            // the burst's packet buffers and message headers
  std::unique_ptr<Buffers> b_;
};

}  // namespace weir::fastpath::kernel
