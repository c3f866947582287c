// The forwarder's UpstreamTransport on kernel sockets and the event loop:
// a pool of UDP sockets per address family bound to random ports of the
// ephemeral range (drawn from the CSPRNG, reserved ports skipped), one
// socket of each pool moved to a fresh port every lifetime / pool size (the
// old one stays open for its tries' late answers, then closes); a few
// persistent pipelined TCP connections per recursor (UpstreamTcpPool); a
// fresh UDP socket per health probe.
//
// Threading: the loop's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "upstream_tcp_pool.h"
#include "weir/common/secure_random.h"
#include "weir/fastpath/upstream_guard.h"
#include "weir/fastpath/upstream_transport.h"
#include "weir/net/event_loop.h"

namespace weir::fastpath {

class SocketTransport final : public UpstreamTransport {
 public:
  // `udp_sockets` per family; `lifetime_s` 0: never rotated; a retired
  // socket stays open `late_window` after it retired.
  SocketTransport(net::EventLoop& loop, common::SecureRandom& rng, int udp_sockets, int lifetime_s,
                  Clock::duration late_window, UpstreamTcpPool::Options tcp = {});
  ~SocketTransport() override;

  void SetSink(Sink* sink) override {
    sink_ = sink;
    tcp_.SetSink(sink);
  }
  absl::Status Open(bool ipv4, bool ipv6) override;
  std::span<const Handle> Pool(int family) const override;
  int SendUdp(Handle socket, const common::SocketAddress& to, std::span<const uint8_t> message) override;
  void TryStarted(Handle socket) override;
  void TryEnded(Handle socket) override;
  Handle OpenTcp(const common::SocketAddress& to, std::span<const uint8_t> message) override;
  void CloseTcp(Handle tcp) override;
  bool TcpQueued(Handle tcp) const override { return tcp_.Queued(tcp); }
  TcpPoolStats tcp_pool() const override { return tcp_.stats(); }
  Handle SendProbe(const common::SocketAddress& to, std::span<const uint8_t> message) override;
  void CloseProbe(Handle probe) override;
  void Housekeep(Clock::time_point now) override;
  common::SocketAddress LocalAddress(Handle h) const override;
  size_t udp_sockets() const override { return sockets_.size(); }
  void CloseAll() override;

 private:
  struct PoolSocket {
    int family = 0;
    uint32_t tries = 0;  // UDP tries in flight on it
    bool retired = false;
    Clock::time_point close_after;  // retired: once its late answers can no longer come
  };
  // A socket bound to a random port of the family; -1 when none could be.
  int OpenPoolSocket(int family);
  void OnPoolReadable(int fd);
  void OnProbe(int fd);

  net::EventLoop& loop_;
  common::SecureRandom& rng_;
  const int udp_sockets_;
  const int lifetime_s_;
  const Clock::duration late_window_;
  Sink* sink_ = nullptr;
  PortRange ports_;
  absl::flat_hash_map<int, PoolSocket> sockets_;
  std::vector<Handle> pool_[2];  // [0] IPv4, [1] IPv6
  UpstreamTcpPool tcp_;
  std::vector<int> probes_;
  Clock::time_point next_housekeeping_{};
  Clock::time_point next_rotation_{};
  uint8_t buf_[65535];
};

}  // namespace weir::fastpath
