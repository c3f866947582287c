// The encrypted front's server: DNS over TLS (RFC 7858) and DNS over HTTPS
// (RFC 8484: HTTP/2 and HTTP/1.1, the wire form on doh_path and the JSON
// form on json_path) on one thread with its own net::EventLoop, its queries
// handled by its own WorkerCore slot exactly as UDP and TCP queries are
// (the client's address picks the city partition, weighted names take the
// same SWRR, misses go upstream and come back through SendHeld).
//
// A connection goes through:
//   accept    the connection table admits it (per-source and total limits,
//             pressure), then the per-source handshake rate; refused: closed
//   proxy     from a [tls] proxy_protocol_from peer: the PROXY v2 header,
//             read byte-exact off the socket, names the client
//   handshake TLS, within handshake_timeout_ms; ALPN picks DoT or HTTP/2 vs
//             HTTP/1.1 on the DoH port
//   serving   DoT: net::DnsTcpStream over net::TlsStreamIo (pipelining,
//             out-of-order answers, half-close, unsent bound); DoH: a
//             net::HttpSession, its requests mapped by dns::doh
// Idle and lifetime timeouts are the connection table's, as for TCP.
// A miss's route token is the connection id (high 32 bits) and the HTTP
// stream (low 32 bits; 0 for DoT): an answer for a connection or stream
// that is gone is dropped.
//
// Threading: Run() on the front's thread; SwapContext and Snapshot from
// other threads through the loop's mailbox; the forwarder wakes the loop.
#pragma once

#include <openssl/ssl.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "tls/httpdns_front.h"
#include "weir/common/ip.h"
#include "weir/common/prometheus.h"
#include "weir/fastpath/node.h"
#include "weir/fastpath/rate_limiter.h"
#include "weir/fastpath/worker_core.h"
#include "weir/net/acceptor.h"
#include "weir/net/dns_tcp.h"
#include "weir/net/event_loop.h"
#include "weir/net/http_session.h"
#include "weir/net/loop_mailbox.h"
#include "weir/net/tcp_connections.h"
#include "weir/net/tls.h"

namespace weir::fastpath::tls {

// kHttp: plain HTTP (HTTP/1.1, or HTTP/2 with prior knowledge) for HTTPDNS.
enum class Listener : uint8_t { kDot, kDoh, kHttp };

// What the front has done, for metrics (docs/metrics.md). Read as a copy
// made on the front's thread.
struct TlsStats {
  static constexpr size_t kKinds = 3;  // Listener
  std::array<uint64_t, kKinds> handshakes_full{};
  std::array<uint64_t, kKinds> handshakes_resumed{};
  std::array<uint64_t, kKinds> handshakes_failed{};
  std::array<uint64_t, kKinds> handshakes_timed_out{};
  std::array<uint64_t, kKinds> handshakes_rate_limited{};
  std::array<uint64_t, kKinds> proxy_headers_invalid{};
  std::array<uint64_t, kKinds> queries{};
  uint64_t http2_connections = 0;
  uint64_t http1_connections = 0;
  uint64_t doh_json_requests = 0;
  net::HttpCounters http;
  uint64_t open = 0;
  std::array<uint64_t, static_cast<size_t>(net::TcpCloseReason::kCount)> closed{};
  uint64_t accepted = 0;
  uint64_t context_generation = 0;  // certificate reloads applied
  HttpDnsStats httpdns;
};

struct TlsServerOptions {
  net::TcpConnectionLimits limits;
  uint32_t handshakes_per_second_per_source = 0;
  std::chrono::milliseconds handshake_timeout{5000};
  size_t connection_buffer_bytes = 65536;
  bool padding = true;
  std::string doh_path = "/dns-query";
  std::string json_path = "/resolve";
  net::HttpLimits http;
  std::vector<common::Cidr> proxy_protocol_from;
  // [httpdns]: its API on the DoH port and the plain HTTP port (null or not
  // enabled: those targets are DoH's or 404).
  const HttpDnsConfig* httpdns = nullptr;
};

class TlsServer final : public AnswerSink {
 public:
  // Closed sessions' sockets kept reading before their close (Linger).
  static constexpr size_t kMaxLingering = 256;
  static constexpr std::chrono::milliseconds kLingerTime{2000};
  static constexpr size_t kLingerBytes = 256 * 1024;
  struct ListenFd {
    int fd;
    Listener kind;
  };
  // `listen_fds`: bound, listening, non-blocking (owned by the caller).
  // `tickets`: the ring `context` seals with; this thread rotates it.
  TlsServer(Node& node, int slot, std::vector<ListenFd> listen_fds, TlsServerOptions options,
            std::shared_ptr<const net::TlsServerContext> context, net::TicketKeyRing* tickets);
  ~TlsServer() override;

  absl::Status Init();
  void Run(const std::atomic<bool>& running);

  void SendHeld(const ClientRoute& route, std::span<const uint8_t> answer) override;

  // New connections handshake with `context` from now on; those already
  // open keep the one they started with. From any thread; false when the
  // front's loop did not take it in time (then it still uses the old one).
  bool SwapContext(std::shared_ptr<const net::TlsServerContext> context);
  // The counters, copied on the front's thread (zeros when it is stuck).
  TlsStats Snapshot() const;
  void RenderMetrics(common::PrometheusWriter& w) const;

 private:
  void RenderHttpDnsMetrics(common::PrometheusWriter& w, const HttpDnsStats& s) const;
  // kSniff: plain HTTP, its first bytes not read yet (HTTP/1.1 or HTTP/2).
  enum class Phase : uint8_t { kProxy, kHandshake, kSniff, kDot, kHttp };
  struct Stream {  // a DoH request waiting for its answer
    bool json = false;
  };
  struct Conn {
    uint32_t id = 0;
    int fd = -1;
    Listener kind = Listener::kDot;
    Phase phase = Phase::kHandshake;
    SSL* ssl = nullptr;
    common::SocketAddress peer;  // the socket's (the proxy, behind one)
    common::IpAddress client;    // who asked: the PROXY header's source, else the peer
    uint16_t port = 0;
    uint32_t events = 0;
    bool pads = false;  // the client pads its queries: pad the answers (RFC 8467)
    net::TcpConnectionTable::Handle handle = 0;
    net::EventLoop::TimerId handshake_timer = 0;
    std::unique_ptr<net::StreamIo> io;  // TLS, or the socket (plain HTTP)
    std::vector<uint8_t> sniff;         // plain HTTP: the first bytes, until they tell the version
    std::unique_ptr<net::DnsTcpStream> dot;
    std::unique_ptr<net::HttpSession> http;
    std::unordered_map<uint32_t, Stream> streams;
    std::vector<uint8_t> out;  // HTTP bytes not yet taken by SSL_write
    size_t out_off = 0;
    bool want_write = false;  // the TLS layer waits for the socket to be writable
    // The last serve used up its read rounds while reads still returned
    // data: OpenSSL may hold whole records no socket event will announce.
    bool rounds_out = false;
  };

  void Listen(int lfd, Listener kind);
  void OnAccept(const net::AcceptedConnection& c, Listener kind);
  void OnEvent(uint32_t id, uint32_t events);
  bool ReadProxyHeader(Conn& c);
  bool Handshake(Conn& c);
  bool ServeDot(Conn& c, uint32_t events);
  bool Sniff(Conn& c);
  // The HTTP session, HTTP/2 or HTTP/1.1, then `first` (bytes already read).
  bool StartHttp(Conn& c, bool http2, std::span<const uint8_t> first);
  bool ServeHttp(Conn& c, uint32_t events);
  void OnHttpRequest(uint32_t id, net::HttpRequest&& request);
  // Sends the DNS `answer` to stream `stream` of HTTP connection `c`.
  void RespondDns(Conn& c, uint32_t stream, std::span<const uint8_t> answer);
  void RespondError(Conn& c, uint32_t stream, int status, std::string_view why);
  // Writes what the HTTP session has for the client; false when the
  // connection failed or left too much unread (closed by the caller).
  bool FlushHttp(Conn& c);
  bool AnswerDot(Conn& c, std::span<const uint8_t> answer);
  // `answer`, padded when the connection's client pads (a copy in pad_).
  std::span<const uint8_t> MaybePad(const Conn& c, std::span<const uint8_t> answer);
  void NotePadding(Conn& c, std::span<const uint8_t> query);
  void Watch(Conn& c);
  // Queues `c` to be read again next turn when OpenSSL holds input for it.
  void ReadAgainIfBuffered(const Conn& c);
  // Not read from because its client leaves its answers unread.
  bool Paused(const Conn& c) const;
  // Past four times the unsent bound: closed (kUnsent).
  bool Overflowed(const Conn& c) const;
  void Close(uint32_t id, net::TcpCloseReason why);
  // A closed session's socket: its write side shut, what the client still
  // sends read and dropped until it closes, kLingerTime passes or
  // kLingerBytes came, then closed. A close with unread data would reset
  // the connection and the client could lose the response it has not read
  // yet (a 413 sent while the body still arrives; RFC 9112 section 9.6).
  // Past kMaxLingering sockets lingering, closed at once.
  void Linger(int fd);
  void EndLinger(int fd);
  void CloseExpired();
  // Writes what SendHeld queued for each connection (after a batch of returns).
  void FlushHeld();
  Conn* Find(uint32_t id);

  Node& node_;
  WorkerCore& core_;
  int slot_;
  std::vector<ListenFd> listen_fds_;
  TlsServerOptions options_;
  std::shared_ptr<const net::TlsServerContext> context_;
  net::TicketKeyRing* tickets_;
  net::EventLoop loop_;
  net::LoopMailbox mailbox_{loop_};
  std::unordered_map<uint32_t, std::unique_ptr<Conn>> conns_;
  net::TcpConnectionTable table_;
  RateLimiter handshake_limiter_;
  std::vector<net::TcpConnectionTable::Expiry> expired_;
  std::chrono::steady_clock::time_point now_;
  uint32_t next_conn_ = 1;
  TlsStats stats_;
  std::vector<uint8_t> out_;  // an answer handled now
  std::vector<uint8_t> msg_;  // a copy of the query being handled
  std::vector<uint8_t> pad_;
  std::vector<uint32_t> held_;  // connections SendHeld queued answers for
  std::unique_ptr<HttpDnsFront> httpdns_;
  std::vector<uint32_t> again_;  // connections to read again next turn (ReadAgainIfBuffered)
  struct Lingering {
    net::EventLoop::TimerId timer = 0;
    size_t dropped = 0;  // bytes read and dropped
  };
  std::unordered_map<int, Lingering> lingering_;  // by socket
};

}  // namespace weir::fastpath::tls
