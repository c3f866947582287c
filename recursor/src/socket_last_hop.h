// The daemon's LastHopTransport: a fresh UDP socket per query (a random
// source port from the kernel), connected so only the server's address and
// port can answer; on TC the same question over TCP to the same server
// (RFC 7766, one message read with net::DnsTcpReader); a timeout per query
// on the event loop ([last_hop] timeout_ms, tcp_timeout_ms).
//
// Threading: every call on the loop's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "weir/common/log.h"
#include "weir/dns/message.h"
#include "weir/net/dns_tcp.h"
#include "weir/net/event_loop.h"
#include "weir/recursor/config.h"
#include "weir/recursor/last_hop.h"

namespace weir::recursor {

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
  SendResult Send(uint64_t token, const LastHopQuery& q) override;
  void Cancel(uint64_t token) override;
  // Closes every socket (the daemon stops).
  void CloseAll();
  const Stats& stats() const { return stats_; }

 private:
  struct Query {
    int fd = -1;
    bool tcp = false;
    size_t tcp_sent = 0;
    net::DnsTcpReader tcp_in;
    std::vector<uint8_t> wire;  // the UDP form, or the framed TCP form
    LastHopQuery q;             // `message` unused: `wire` holds it
    uint64_t generation = 0;
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

  const int timeout_ms_;
  const int tcp_timeout_ms_;
  dns::ParseOptions parse_options_;
  net::EventLoop& loop_;
  Sink* sink_ = nullptr;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Query>> queries_;
  uint64_t next_generation_ = 1;
  Stats stats_;
  // Each refused answer is counted and, rate-limited, logged with its reason.
  common::RateLimitedLog malformed_log_{{.component = "upstream"}};
  common::RateLimitedLog spoofed_log_{{.component = "upstream"}};
  uint8_t buf_[net::kMaxDnsMessage];
};

}  // namespace weir::recursor
