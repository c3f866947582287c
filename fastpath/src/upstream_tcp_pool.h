// The forwarder's DNS-over-TCP connections to the recursors (RFC 7766):
// a few persistent connections per recursor, each carrying many queries
// pipelined and answered in any order, told apart by their IDs.
//
// Why a pool: a truncated answer moves its question to TCP. A popular
// large answer truncates for every subscriber at once; one connection per
// question would open thousands towards one recursor, past its per-source
// limit, and each refusal would count against the recursor's health.
//
// A TCP try goes to the recursor's open connection with the fewest
// queries outstanding (at most kMaxPipelined each, never two outstanding
// with the same ID); a new connection is opened while the recursor has
// fewer than `connections`; past both the try waits in the recursor's
// queue, in order. A try the forwarder ends keeps its ID reserved on its
// connection until its answer comes (a late answer then matches nothing
// rather than a newer question). A connection is closed when it has been
// idle `idle`, retired (no new queries, closed once drained, or at once
// when it holds only ended tries' IDs and the pool needs its place) when it
// has been open `lifetime`, and closed when it owes answers and nothing has
// arrived for `stall`. When a connection that had connected closes (the
// recursor's idle or lifetime close racing a query), each try it still
// owed goes out once more on another connection; a second loss, or a
// connection that never connected, fails the try (the forwarder's health
// counts it).
//
// Threading: the forwarder's loop thread; the sink is called from the
// pool's event handling, never from inside Open() or Close().
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "weir/common/socket_address.h"
#include "weir/fastpath/upstream_transport.h"
#include "weir/net/event_loop.h"

namespace weir::fastpath {

class UpstreamTcpPool {
 public:
  using Clock = std::chrono::steady_clock;
  using Handle = UpstreamTransport::Handle;
  // Queries one connection carries outstanding at once.
  static constexpr size_t kMaxPipelined = 256;
  // Try handles are drawn from here up, above any descriptor.
  static constexpr Handle kFirstHandle = 1 << 30;

  struct Options {
    int connections = 4;  // per recursor
    Clock::duration idle = std::chrono::seconds(5);
    Clock::duration lifetime = std::chrono::seconds(60);
    Clock::duration stall = std::chrono::seconds(3);
  };

  UpstreamTcpPool(net::EventLoop& loop, Options options);
  ~UpstreamTcpPool();
  UpstreamTcpPool(const UpstreamTcpPool&) = delete;
  UpstreamTcpPool& operator=(const UpstreamTcpPool&) = delete;

  void SetSink(UpstreamTransport::Sink* sink) { sink_ = sink; }
  // A try of `message` (its first two bytes are its ID) to `to`: its
  // handle, or -1 when the recursor has no connection and none can be
  // opened.
  Handle Open(const common::SocketAddress& to, std::span<const uint8_t> message);
  // Ends a try (answered, timed out, abandoned); unknown handles are ignored.
  void Close(Handle h);
  bool Owns(Handle h) const { return tries_.contains(h); }
  // The try waits in the pool's queue (not yet sent to the recursor).
  bool Queued(Handle h) const;
  void Housekeep(Clock::time_point now);
  // The local address of the try's connection; empty while it is queued.
  common::SocketAddress LocalAddress(Handle h) const;
  size_t connections() const { return conns_.size(); }
  size_t tries() const { return tries_.size(); }
  TcpPoolStats stats() const;
  void CloseAll();

 private:
  struct Try {
    std::string dest;
    common::SocketAddress to;
    std::vector<uint8_t> query;
    int conn = -1;  // the connection it went out on; -1: queued; -2: answered or failed
    bool resent = false;
  };
  struct Conn {
    std::string dest;
    bool connected = false;
    bool retired = false;
    std::vector<uint8_t> out;  // framed queries not yet written
    size_t sent = 0;
    std::vector<uint8_t> in;  // bytes read, not yet whole messages
    // Outstanding IDs -> their try; 0: the try ended, the ID stays reserved
    // until its answer comes.
    absl::flat_hash_map<uint16_t, Handle> waiting;
    Clock::time_point opened, progress, idle_since;
    uint32_t events = 0;  // what the loop watches for
  };
  struct Dest {
    common::SocketAddress to;
    std::vector<int> conns;
    std::deque<Handle> queue;
  };
  enum class Placed : uint8_t { kSent, kQueued, kFailed };

  // Puts try `h` on a connection of its recursor, or opens one, or queues it.
  Placed Place(Handle h, bool may_queue);
  int OpenConn(Dest& d, const std::string& key);
  // Sends the queued tries of `key` while there is room.
  void Pump(const std::string& key);
  void OnEvent(int fd, uint32_t events);
  // Closes `fd`; tries it owed are sent again once, or added to `failed`
  // for the caller to tell the sink.
  void Drop(int fd, std::vector<Handle>* failed);
  void CloseConn(int fd);
  void UpdateEvents(int fd, Conn& c);

  net::EventLoop& loop_;
  const Options options_;
  UpstreamTransport::Sink* sink_ = nullptr;
  absl::flat_hash_map<Handle, Try> tries_;
  absl::flat_hash_map<int, Conn> conns_;
  absl::flat_hash_map<std::string, Dest> dests_;
  Handle next_ = kFirstHandle;
  TcpPoolStats stats_;
  uint8_t buf_[65536];
};

}  // namespace weir::fastpath
