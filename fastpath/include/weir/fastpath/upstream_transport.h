// How the forwarder's queries reach the recursors and their answers come
// back: the one seam between the forwarder's logic (ForwarderCore) and the
// sockets. The daemon's SocketTransport (fastpath/src/socket_transport.h)
// keeps a pool of UDP sockets on random ports shared by the tries, a few
// persistent pipelined TCP connections per recursor shared by the TCP tries
// (UpstreamTcpPool) and a fresh socket per health probe; unit tests put a
// fake in its place and play the recursors by hand.
//
// Handles name a pool socket (shared by many tries, told apart by the ID),
// a TCP try (not its connection), or a probe. A handle is never reused
// while the forwarder may still name it.
//
// Threading: the forwarder's thread; the sink is called from within the
// transport's event handling, never from inside one of its own calls.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "weir/common/socket_address.h"

namespace weir::fastpath {

// The TCP connections' counters (metrics thread reads copies).
struct TcpPoolStats {
  uint64_t connections = 0;     // open now
  uint64_t opened = 0;          // connections opened
  uint64_t resent = 0;          // tries sent again after their connection closed
  uint64_t queued = 0;          // tries that waited for room in the pool
  uint64_t unexpected = 0;      // answers whose ID no query on the connection had
  uint64_t connect_failed = 0;  // connections refused or unreachable
};

class UpstreamTransport {
 public:
  using Handle = int;
  using Clock = std::chrono::steady_clock;

  class Sink {
   public:
    virtual ~Sink() = default;
    // A datagram on pool socket `socket` from `from`.
    virtual void OnDatagram(Handle socket, const common::SocketAddress& from,
                            std::span<const uint8_t> data) = 0;
    // The whole message (unframed) with TCP try `tcp`'s ID on its
    // connection; end the try with CloseTcp.
    virtual void OnTcpMessage(Handle tcp, std::span<const uint8_t> message) = 0;
    // TCP try `tcp` failed (refused, reset, its connection lost twice, a
    // length that cannot be a message); end it with CloseTcp.
    virtual void OnTcpFailed(Handle tcp) = 0;
    // A datagram on probe socket `probe` from `from`.
    virtual void OnProbeReply(Handle probe, const common::SocketAddress& from,
                              std::span<const uint8_t> data) = 0;
  };

  virtual ~UpstreamTransport() = default;
  virtual void SetSink(Sink* sink) = 0;
  // Opens the UDP pool for the families asked; fails (nothing left open)
  // when a socket cannot be opened.
  virtual absl::Status Open(bool ipv4, bool ipv6) = 0;
  // The pool's sockets of `family` (AF_INET, AF_INET6) now.
  virtual std::span<const Handle> Pool(int family) const = 0;
  // Sends a datagram on pool socket `socket`; 0, or the errno.
  virtual int SendUdp(Handle socket, const common::SocketAddress& to, std::span<const uint8_t> message) = 0;
  // A UDP try started or ended on `socket` (a retired socket closes once
  // its tries are over).
  virtual void TryStarted(Handle socket) = 0;
  virtual void TryEnded(Handle socket) = 0;
  // Sends `message` framed (RFC 7766) over a connection to `to`, pipelined
  // with others, or queues it while every connection allowed is busy: a
  // handle, or -1 when no connection could even be started.
  virtual Handle OpenTcp(const common::SocketAddress& to, std::span<const uint8_t> message) = 0;
  // Ends a TCP try (its answer, if it still comes, matches nothing).
  virtual void CloseTcp(Handle tcp) = 0;
  // The TCP try still waits for room in the pool: its time is not the
  // recursor's (a timeout then does not count against its health).
  virtual bool TcpQueued(Handle tcp) const = 0;
  virtual TcpPoolStats tcp_pool() const = 0;
  // Sends `message` from a fresh socket (a health probe): a handle, or -1.
  virtual Handle SendProbe(const common::SocketAddress& to, std::span<const uint8_t> message) = 0;
  virtual void CloseProbe(Handle probe) = 0;
  // Periodic upkeep at `now` (retiring and closing pool sockets).
  virtual void Housekeep(Clock::time_point now) = 0;
  // The local address of a handle (dnstap); empty when unknown.
  virtual common::SocketAddress LocalAddress(Handle h) const = 0;
  // UDP sockets open now (the pool and the retired ones).
  virtual size_t udp_sockets() const = 0;
  // Closes everything (the forwarder stops).
  virtual void CloseAll() = 0;
};

}  // namespace weir::fastpath
