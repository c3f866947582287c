// The daemon's LastHopTransport: a fresh UDP socket per query (a random
// source port from the kernel), connected so only the server's address and
// port can answer; on TC the same question over TCP to the same server
// (RFC 7766, one message read with net::DnsTcpReader); a timeout per query
// on the event loop ([last_hop] timeout_ms, tcp_timeout_ms).
//
// Against blind spoofing (weir/dns/case_randomization.h, weir/dns/cookies.h) every query also gets its own ID
// from the kernel's random source, the question name in random case (0x20)
// and a COOKIE option (RFC 7873). Over UDP an answer must echo all of them.
// A reply with the query's ID that fails the case or the cookie, or more
// than unwanted_reply_threshold replies that do not match, end the UDP try:
// the question goes to the same server over TCP, which a blind attacker
// cannot answer. The rule is weir/dns/answer_guard.h, shared with the
// fastpath's forwarder. A TCP answer in another case teaches that the server does
// not preserve it (CaseMemory); a TCP answer without a cookie, that it
// stopped doing cookies. BADCOOKIE is answered as RFC 7873 5.3 says: once
// again over UDP with the new server cookie, then over TCP.
//
// Threading: every call on the loop's thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "weir/common/histogram.h"
#include "weir/common/log.h"
#include "weir/common/secure_random.h"
#include "weir/dns/answer_guard.h"
#include "weir/dns/case_randomization.h"
#include "weir/dns/cookies.h"
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
inline constexpr std::array<double, 12> kLastHopLatencyBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                                 0.1,   0.25,   0.5,   1,    2.5,   5};
using UpstreamLatency = common::FixedHistogram<kLastHopLatencyBounds>;

class SocketLastHop final : public LastHopTransport {
 public:
  // Why a datagram on a query's socket was not its answer.
  enum class Unwanted : uint8_t { kId, kQuestion, kCase, kCookie, kCount };
  // What made a UDP try end and the question go over TCP.
  enum class Reaction : uint8_t { kThreshold, kCase, kCookie, kBadCookie, kCount };
  struct Stats {
    uint64_t upstream_tcp = 0, truncated = 0, spoofed_dropped = 0, malformed_replies = 0;
    std::array<uint64_t, static_cast<size_t>(Unwanted::kCount)> unwanted{};
    std::array<uint64_t, static_cast<size_t>(Reaction::kCount)> reactions{};
    uint64_t case_fallbacks = 0;  // servers found not to preserve the case
    uint64_t cookies_sent = 0, cookie_retries = 0;
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
  size_t cookie_servers() const { return cookies_.servers(); }

 private:
  struct Query {
    int fd = -1;
    bool tcp = false;
    size_t tcp_sent = 0;
    net::DnsTcpReader tcp_in;
    std::vector<uint8_t> wire;     // the query as sent (its own ID, case and cookie)
    std::vector<uint8_t> tcp_out;  // `wire` framed, once over TCP
    LastHopQuery q;                // `message` unused: `wire` holds it; `id` is wire's
    uint8_t qname_len = 0;         // the question name at offset 12 of `wire`
    bool caps = false;             // the name went out in random case
    // The COOKIE option: our client cookie, where the option starts in `wire`
    // (0: none) and where the OPT's RDLENGTH is (0: no OPT, no cookie).
    bool cookie = false;
    dns::CookieJar::ClientCookieBytes client_cookie{};
    size_t cookie_at = 0;
    size_t opt_rdlen_at = 0;
    uint32_t unwanted = 0;  // replies on this UDP try that were not its answer
    bool badcookie_retried = false;
    bool case_suspect = false;  // over TCP because a UDP reply had another case
    uint64_t generation = 0;
    std::chrono::steady_clock::time_point sent;  // the first send (UDP)
    // dnstap: when the query was sent (zero: not tapped) and from where.
    timespec tapped_at{};
    dnstap::Endpoint local;
  };
  // Opens a fresh UDP socket for `q` (already in the table) and sends it.
  SendResult SendUdp(uint64_t token, Query& q);
  void SetCookie(Query& q, const common::SocketAddress& local);
  // Counts a reply that was not `q`'s answer; true when that reached the
  // threshold and the question went over TCP (the caller returns).
  bool OnUnwanted(uint64_t token, Query& q, Unwanted why);
  void React(uint64_t token, Query& q, Reaction why);
  void LearnNoCase(const Query& q);
  // The one answer guard (weir/dns/answer_guard.h) applied to a reply to `q`.
  dns::GuardOutcome Check(const Query& q, std::span<const uint8_t> reply, bool over_tcp, dns::Message* m);
  void OnEvents(uint64_t token, uint32_t events);
  void OnUdp(uint64_t token, Query& q);
  void OnTcp(uint64_t token, Query& q, uint32_t events);
  void ToTcp(uint64_t token, Query& q);
  void ArmTimeout(uint64_t token, const Query& q, int ms);
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
  const bool use_0x20_;
  const bool use_cookies_;
  const uint32_t unwanted_threshold_;  // 0: off
  common::SecureRandom random_;
  dns::CaseMemory case_memory_;
  dns::CookieJar cookies_;
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
  common::RateLimitedLog reaction_log_{{.component = "upstream"}};
  common::RateLimitedLog case_log_{{.component = "upstream"}};
  uint8_t buf_[net::kMaxDnsMessage];
};

}  // namespace weir::recursor
