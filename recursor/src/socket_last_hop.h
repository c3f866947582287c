// The daemon's LastHopTransport: a fresh UDP socket per query (a random
// source port from the kernel), connected so only the server's address and
// port can answer; on TC the same question over TCP to the same server
// (RFC 7766, one message read with net::DnsTcpReader); a timeout per query
// on the event loop ([last_hop] timeout_ms, tcp_timeout_ms).
//
// Threading: every call on the loop's thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "weir/common/log.h"
#include "weir/dns/message.h"
#include "weir/dnstap/dnstap.h"
#include "weir/net/dns_tcp.h"
#include "weir/net/event_loop.h"
#include "weir/recursor/config.h"
#include "weir/recursor/last_hop.h"

namespace weir::recursor {

// The time from a query's first send to its genuine answer (one clock read
// each way, beside the socket's own syscalls). One histogram over every
// server: the authoritative servers a recursor talks to are unbounded in
// number, a series per server would be too.
struct UpstreamLatency {
  static constexpr std::array<double, 12> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                     0.1,   0.25,   0.5,   1,    2.5,   5};
  std::array<uint64_t, kBounds.size() + 1> buckets{};
  double sum_seconds = 0;
  void Observe(double seconds) {
    size_t i = 0;
    while (i < kBounds.size() && seconds > kBounds[i]) ++i;
    ++buckets[i];
    sum_seconds += seconds;
  }
};

class SocketLastHop final : public LastHopTransport {
 public:
  struct Stats {
    uint64_t upstream_tcp = 0, truncated = 0, spoofed_dropped = 0, malformed_replies = 0;
  };

  SocketLastHop(const RecursorConfig& cfg, net::EventLoop& loop);
  ~SocketLastHop() override;
  SocketLastHop(const SocketLastHop&) = delete;
  SocketLastHop& operator=(const SocketLastHop&) = delete;

  void SetSink(Sink* sink) { sink_ = sink; }
  // Taps each query as sent and its reply as received (RESOLVER_QUERY,
  // RESOLVER_RESPONSE) to `tap`; null taps nothing.
  void SetTap(dnstap::Producer* tap) { tap_ = tap; }
  SendResult Send(uint64_t token, const LastHopQuery& q) override;
  void Cancel(uint64_t token) override;
  // Closes every socket (the daemon stops).
  void CloseAll();
  const Stats& stats() const { return stats_; }
  const UpstreamLatency& latency() const { return latency_; }

 private:
  struct Query {
    int fd = -1;
    bool tcp = false;
    size_t tcp_sent = 0;
    net::DnsTcpReader tcp_in;
    std::vector<uint8_t> wire;  // the UDP form, or the framed TCP form
    LastHopQuery q;             // `message` unused: `wire` holds it
    uint64_t generation = 0;
    std::chrono::steady_clock::time_point sent;  // the first send (UDP)
    // dnstap: when the query was sent (zero: not tapped) and from where.
    timespec tapped_at{};
    dnstap::Endpoint local;
  };
  void OnEvents(uint64_t token, uint32_t events);
  void OnUdp(uint64_t token, Query& q);
  void OnTcp(uint64_t token, Query& q, uint32_t events);
  void ToTcp(uint64_t token, Query& q);
  void ArmTimeout(uint64_t token, const Query& q, int ms);
  bool Matches(const Query& q, const dns::Message& m) const;
  // The query is over: its socket is closed and the sink learns the outcome.
  void Deliver(uint64_t token, const dns::Message& m);
  void Fail(uint64_t token, Failure why);
  std::unique_ptr<Query> Take(uint64_t token);
  void Close(Query& q);
  // dnstap of the query just sent on q.fd (`message`: its unframed form),
  // and of the reply to a tapped one.
  void TapQuery(Query& q, std::span<const uint8_t> message);
  void TapReply(const Query& q, std::span<const uint8_t> reply);

  const int timeout_ms_;
  const int tcp_timeout_ms_;
  dns::ParseOptions parse_options_;
  net::EventLoop& loop_;
  Sink* sink_ = nullptr;
  dnstap::Producer* tap_ = nullptr;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Query>> queries_;
  uint64_t next_generation_ = 1;
  Stats stats_;
  UpstreamLatency latency_;
  // Each refused answer is counted and, rate-limited, logged with its reason.
  common::RateLimitedLog malformed_log_{{.component = "upstream"}};
  common::RateLimitedLog spoofed_log_{{.component = "upstream"}};
  uint8_t buf_[net::kMaxDnsMessage];
};

}  // namespace weir::recursor
