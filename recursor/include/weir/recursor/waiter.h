// A front query waiting for its answer, and what every resolution path of
// weir-recursor shares about such waiters: where the response goes
// (Replies), when it is due (the answer deadline), what is served when the
// resolution fails or is refused (stale or SERVFAIL), and the bound on
// resolutions in flight.
//
// Threading: everything on the recursor's loop thread.
#pragma once

#include <time.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "weir/common/socket_address.h"
#include "weir/dns/message.h"
#include "weir/dns/server_cookies.h"
#include "weir/net/timers.h"
#include "weir/recursor/answer.h"

namespace weir::recursor {

using SteadyClock = std::chrono::steady_clock;

// Where a response to the front goes: a UDP socket and peer, or a TCP
// connection of the front (by id; `peer` is its address). Opaque above the
// front I/O, except that `peer` is the client address for the ACL and ECS.
struct FrontRef {
  bool tcp = false;
  int udp_fd = -1;
  common::SocketAddress peer;
  uint64_t conn = 0;
  // When the front received the query, if dnstap taps it (zero: it does
  // not); its response is then tapped when sent.
  timespec tapped_at{};
};

struct Waiter {
  FrontRef to;
  dns::Query q;
  // The query as received: a view of the front's receive buffer while it is
  // handled, a copy of its own once it waits (Hold), so a cache hit copies
  // nothing.
  std::span<const uint8_t> received;
  std::vector<uint8_t> kept;
  SteadyClock::time_point deadline;  // answered by then, whatever the resolution does (once held)
  // The COOKIE option of the response (RFC 7873): the client cookie and a
  // server cookie made when the query came; none when cookie_len is 0.
  uint8_t cookie_len = 0;
  dns::ServerCookies::OptionBytes cookie{};

  // A waiter without a front is a prefetch: nobody gets its answer.
  bool HasFront() const { return to.tcp || to.udp_fd >= 0; }
  std::span<const uint8_t> packet() const { return kept.empty() ? received : std::span<const uint8_t>(kept); }
  bool held() const { return !kept.empty(); }
  // The waiter waits for a resolution: keeps its packet and is due at
  // `deadline`. A waiter held already (a learned name moving from the
  // ordinary path to the tagged one) keeps its first deadline.
  void Hold(SteadyClock::time_point due) {
    if (held()) return;
    kept.assign(received.begin(), received.end());
    received = {};
    deadline = due;
  }
};

// Sends responses to the front.
class Replies {
 public:
  virtual ~Replies() = default;
  // The answer with TTLs reduced by `age`, or all set to `fixed_ttl` when it
  // is not negative (stale answers).
  virtual void Answer(const Waiter& w, const recursor::Answer& a, uint32_t age, int64_t fixed_ttl) = 0;
  virtual void Error(const Waiter& w, dns::Rcode rcode) = 0;
};

// Timers and the steady time for deadlines and server health: the event
// loop in the daemon, net::ManualTimers in unit tests.
using Timers = net::Timers;

// Resolutions in flight, ordinary and tagged together, against
// [server] max_inflight.
class InflightLimit {
 public:
  explicit InflightLimit(size_t max) : max_(max) {}
  bool Full() const { return count_ >= max_; }
  void Add() { ++count_; }
  void Remove() { --count_; }
  size_t count() const { return count_; }

 private:
  size_t max_;
  size_t count_ = 0;
};

// Counters every resolution path keeps about its waiters.
struct WaitStats {
  uint64_t hits = 0, misses = 0, coalesced = 0, stale_served = 0, prefetches = 0, inflight_limited = 0;
  uint64_t deadline_servfail = 0, deadline_stale = 0, negative_uncached = 0;
};

// The stale answer (TTL `stale_ttl`) when there is one, SERVFAIL otherwise.
void ServeStaleOrFail(Replies& replies, const Waiter& w, const recursor::Answer* stale, uint32_t stale_ttl,
                      WaitStats& stats);
// A query that would start a resolution beyond max_inflight: stale or
// SERVFAIL, at once.
void ServeOverloaded(Replies& replies, const Waiter& w, const recursor::Answer* stale, uint32_t stale_ttl,
                     WaitStats& stats);
// Answers (stale or SERVFAIL) and removes the waiters whose deadline has come.
void ExpireWaiters(Replies& replies, std::vector<Waiter>& waiters, const recursor::Answer* stale,
                   uint32_t stale_ttl, SteadyClock::time_point now, WaitStats& stats);

}  // namespace weir::recursor
