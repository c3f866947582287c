// DNS over TCP for the kernel backend: one thread on a net::EventLoop with
// every listening socket and client connection (net::DnsTcpStream: framing,
// pipelining, half-close, unsent-bytes bound, idle time), its queries
// handled by its own WorkerCore slot. A miss's route is the connection id:
// an answer for a connection that is gone is dropped.
//
// Threading: Run() on the TCP thread; the forwarder wakes it through the
// loop's Wake().
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "weir/fastpath/node.h"
#include "weir/fastpath/worker_core.h"
#include "weir/net/dns_tcp.h"
#include "weir/net/event_loop.h"
#include "weir/partitions/partition.h"

namespace weir::fastpath::kernel {

class TcpServer final : public AnswerSink {
 public:
  // `listen_fds`: bound, listening, non-blocking (owned by the caller).
  TcpServer(Node& node, int slot, std::vector<int> listen_fds);
  ~TcpServer() override;

  absl::Status Init();
  void Run(const std::atomic<bool>& running);

  void SendHeld(const ClientRoute& route, std::span<const uint8_t> answer) override;

 private:
  struct Conn {
    std::unique_ptr<net::DnsTcpStream> stream;
    partitions::IpAddress client;
    uint16_t port = 0;
    uint32_t events = 0;  // what the loop watches
  };
  void OnAccept(int lfd);
  void Listen(int lfd);
  void OnConn(uint64_t id, uint32_t events);
  // Answers one query of the connection (empty: it is dropped); closes the
  // connection when that fails or it is done. False when it was closed.
  bool Answer(uint64_t id, std::span<const uint8_t> answer);
  void Close(uint64_t id);
  // The events a connection waits for in its current state.
  void Watch(uint64_t id);
  void CloseIdle();

  Node& node_;
  WorkerCore& core_;
  int slot_;
  std::vector<int> listen_fds_;
  net::EventLoop loop_;
  std::unordered_map<uint64_t, Conn> conns_;
  uint64_t next_conn_ = 1;
  std::vector<uint8_t> out_;
  std::vector<uint8_t> msg_;
};

}  // namespace weir::fastpath::kernel
