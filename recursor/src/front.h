// weir-recursor's side towards the front tier: the UDP and TCP listeners,
// the front's DNS-over-TCP connections (net::DnsTcpStream: framing,
// pipelining, half-close, unsent-bytes bound; net::TcpConnectionTable: who
// may connect and for how long), and the control port (one line in, one
// reply out). Each query goes to the QueryRouter;
// responses come back through Send(), and FrontReplies writes them.
//
// Threading: everything on the recursor's loop thread, after Listen().
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "weir/dns/wire.h"
#include "weir/dnstap/dnstap.h"
#include "weir/net/acceptor.h"
#include "weir/net/dns_tcp.h"
#include "weir/net/event_loop.h"
#include "weir/net/tcp_connections.h"
#include "weir/partitions/partition.h"
#include "weir/recursor/config.h"
#include "weir/recursor/waiter.h"

namespace weir::recursor {

class QueryRouter;

// The peer as an IpAddress for the ACLs (an IPv4-mapped IPv6 peer stays
// IPv6, as the recursor has always matched it).
common::IpAddress IpOf(const common::SocketAddress& a);

class Front {
 public:
  struct Stats {
    uint64_t udp = 0, tcp = 0, control_refused = 0, accept_paused = 0, tcp_reads_paused = 0;
    uint64_t tcp_unsent_closed = 0;
  };
  // A control command line in, its reply (without the newline) out.
  using ControlHandler = std::function<std::string(const std::string& line)>;

  Front(const RecursorConfig& cfg, net::EventLoop& loop);
  ~Front();
  Front(const Front&) = delete;
  Front& operator=(const Front&) = delete;

  void SetHandlers(QueryRouter* router, ControlHandler control) {
    router_ = router;
    control_ = std::move(control);
  }
  // Taps front queries and responses (CLIENT_QUERY, CLIENT_RESPONSE) to
  // `tap`; null taps nothing. Before Listen.
  void SetTap(dnstap::Producer* tap) { tap_ = tap; }
  // Binds and watches the listeners of [server] listen and control.
  absl::Status Listen();
  // "listening udp A tcp A" lines, then "control A".
  const std::vector<std::string>& describe() const { return describe_; }
  // The response to one query (len 0: the query is dropped; a TCP front's
  // query is done with all the same).
  void Send(const FrontRef& to, const uint8_t* data, size_t len);
  // Closes front connections idle (or stuck unread) longer than
  // tcp_idle_timeout_ms or open longer than tcp_lifetime_ms, and control
  // connections idle longer than tcp_idle_timeout_ms.
  void CloseIdle(SteadyClock::time_point now);
  // Closes every socket (the daemon stops).
  void CloseAll();
  size_t unsent_bytes() const;
  const Stats& stats() const { return stats_; }
  // The front's DNS-over-TCP connections: open, accepted, closed by reason.
  const net::TcpConnectionTable::Stats& tcp_stats() const { return table_.stats(); }

 private:
  // A front's DNS-over-TCP connection or a control connection.
  struct Conn {
    int fd = -1;
    bool control = false;
    bool dispatching = false;                 // DispatchFrames is running for it: not closed under its feet
    uint32_t events = 0;                      // what the loop watches
    common::SocketAddress peer;               // as accepted
    std::optional<net::DnsTcpStream> stream;  // DNS connections
    net::TcpConnectionTable::Handle handle = 0;  // DNS connections: in `table_`
    // Control connections.
    bool closing = false;  // close once `out` is flushed
    std::vector<uint8_t> in;
    std::vector<uint8_t> out;
    SteadyClock::time_point last;
  };
  void WatchListener(int fd, bool tcp, bool control);
  void OnUdp(int fd);
  // Sends the responses gathered during a UDP burst, in order.
  void FlushUdp();
  void OnAccept(const net::AcceptedConnection& c, bool control);
  void OnConn(uint64_t id, uint32_t events);
  void OnControl(uint64_t id, Conn* c, uint32_t events);
  // `why`: for a DNS connection, counted in the table (control ones are not).
  void CloseConn(uint64_t id, net::TcpCloseReason why);
  void WatchConn(Conn& c);
  bool CloseIfDone(uint64_t id, Conn& c);
  void DispatchFrames(uint64_t id);
  // Samples a query just received; CLIENT_QUERY and to.tapped_at when tapped.
  void TapQuery(std::span<const uint8_t> query, FrontRef& to);

  const RecursorConfig& cfg_;
  net::EventLoop& loop_;
  QueryRouter* router_ = nullptr;
  dnstap::Producer* tap_ = nullptr;
  ControlHandler control_;
  std::vector<int> listen_fds_;
  std::vector<std::string> describe_;
  absl::flat_hash_map<uint64_t, Conn> conns_;
  net::TcpConnectionTable table_;
  std::vector<net::TcpConnectionTable::Expiry> expired_;
  uint64_t next_conn_ = 1;
  Stats stats_;
  uint8_t buf_[net::kMaxDnsMessage];  // control connections
  // UDP queries arrive in bursts (one recvmmsg); the responses written
  // while a burst is handled go out together (one sendmmsg) at its end.
  // Responses for other sockets or later (a resolution completing) are
  // sent at once.
  static constexpr int kBurst = 32;
  struct UdpBurst;
  std::unique_ptr<UdpBurst> udp_;
  int burst_fd_ = -1;  // the socket whose burst is being handled; -1: none
  int tx_count_ = 0;   // responses gathered in udp_
};

// Writes responses to the front (answer.h) and sends them.
class FrontReplies final : public Replies {
 public:
  FrontReplies(const RecursorConfig& cfg, Front& front)
      : weight_option_code_(cfg.weight_option_code), front_(front) {}
  void Answer(const Waiter& w, const recursor::Answer& a, uint32_t age, int64_t fixed_ttl) override;
  void Error(const Waiter& w, dns::Rcode rcode) override;
  // For responses written by hand (FORMERR, BADVERS): the buffer, of
  // capacity(), then Send() with the response's RCODE (extended: BADVERS).
  uint8_t* buffer() { return out_; }
  static constexpr size_t capacity() { return net::kMaxDnsMessage; }
  void Send(const FrontRef& to, size_t len, dns::Rcode rcode) {
    Deliver(to, len, static_cast<unsigned>(rcode));
  }
  // No response (a TCP front's query is done with all the same).
  void Drop(const FrontRef& to) { front_.Send(to, out_, 0); }
  uint64_t servfail() const { return servfail_; }
  // Responses sent, by RCODE (every response once; index 16 is BADVERS).
  static constexpr size_t kRcodes = 24;
  const std::array<uint64_t, kRcodes>& responses() const { return responses_; }

 private:
  void Deliver(const FrontRef& to, size_t len, unsigned rcode) {
    if (len != 0 && rcode < kRcodes) ++responses_[rcode];
    front_.Send(to, out_, len);
  }

  const uint16_t weight_option_code_;
  Front& front_;
  uint64_t servfail_ = 0;
  std::array<uint64_t, kRcodes> responses_{};
  uint8_t out_[net::kMaxDnsMessage + 2];
};

}  // namespace weir::recursor
