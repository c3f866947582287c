// DNS over TCP for the kernel backend: one thread on a net::EventLoop with
// every listening socket and client connection (net::DnsTcpStream: framing,
// pipelining, half-close, unsent-bytes bound), its queries handled by its
// own WorkerCore slot. A miss's route is the connection id: an answer for a
// connection that is gone is dropped. Who may connect and for how long
// (per-source and total limits, idle and lifetime timeouts, pressure) is
// net::TcpConnectionTable's, from server.tcp_* (docs/fastpath-config.md).
//
// Threading: Run() on the TCP thread; the forwarder wakes it through the
// loop's Wake().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "weir/common/prometheus.h"
#include "weir/fastpath/node.h"
#include "weir/fastpath/worker_core.h"
#include "weir/net/acceptor.h"
#include "weir/net/dns_tcp.h"
#include "weir/net/event_loop.h"
#include "weir/net/tcp_connections.h"
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

  // weir_tcp_connections*, weir_tcp_accept_paused_total (docs/metrics.md).
  // Any thread: the counters are the table's relaxed atomics.
  void RenderMetrics(common::PrometheusWriter& w) const;

 private:
  struct Conn {
    std::unique_ptr<net::DnsTcpStream> stream;
    common::IpAddress client;
    uint16_t port = 0;
    uint32_t events = 0;  // what the loop watches
    net::TcpConnectionTable::Handle handle = 0;
  };
  void OnAccept(const net::AcceptedConnection& c);
  void Listen(int lfd);
  void OnConn(uint64_t id, uint32_t events);
  // Answers one query of the connection (empty: it is dropped); closes the
  // connection when that fails or it is done. False when it was closed.
  bool Answer(uint64_t id, std::span<const uint8_t> answer);
  void Close(uint64_t id, net::TcpCloseReason why);
  // The events a connection waits for in its current state.
  void Watch(uint64_t id);
  // Closes the connections past their idle or lifetime timeout.
  void CloseExpired();

  Node& node_;
  WorkerCore& core_;
  int slot_;
  std::vector<int> listen_fds_;
  net::EventLoop loop_;
  std::unordered_map<uint64_t, Conn> conns_;
  net::TcpConnectionTable table_;
  std::vector<net::TcpConnectionTable::Expiry> expired_;
  std::chrono::steady_clock::time_point now_;  // read once per event
  uint64_t next_conn_ = 1;
  std::vector<uint8_t> out_;
  std::vector<uint8_t> msg_;
};

}  // namespace weir::fastpath::kernel
