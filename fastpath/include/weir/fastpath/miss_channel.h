// What travels between a worker and the upstream side (the forwarder): a
// miss one way, the query handed back the other, through one pair of
// lock-free rings per worker. Nothing here knows a socket: the client is
// named by an opaque ClientRoute whose address data stays in the worker's
// backend (kernel sockets, DPDK).
//
// Threading: a channel's `misses` ring is pushed by its worker only and
// popped by the forwarder only; `returns` the other way round.
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "weir/fastpath/handler.h"
#include "weir/fastpath/relay.h"
#include "weir/fastpath/spsc_ring.h"

namespace weir::fastpath {

enum class Transport : uint8_t { kUdp, kTcp };

// Where a miss's answer goes: which worker sends it, over what, and the
// backend's token for the client (a slot in its route table, a TCP
// connection id). Opaque to everything but the backend that issued it.
struct ClientRoute {
  static constexpr int32_t kNobody = -1;  // a prefetch: no client waits
  int32_t worker = kNobody;
  Transport transport = Transport::kUdp;
  uint64_t token = 0;
  bool waits() const { return worker >= 0; }
};

struct PendingClient {
  MissRequest miss;
  ClientRoute route;
  ClientInfo client;           // who asked: picks the partition when the query is handled again
  std::vector<uint8_t> query;  // the client's query bytes, for its ID/question/EDNS
  // When the forwarder first took the query (kept if it is asked again as a
  // learned tagged name): its answer deadline counts from here.
  std::chrono::steady_clock::time_point accepted{};
  // When the worker took the query (the client's miss latency counts from here).
  std::chrono::steady_clock::time_point received{};
  // When the worker received it, if dnstap taps this query (zero: it does
  // not); the worker then taps the answer it finally sends.
  timespec tapped_at{};
  std::string tap_extra;  // dnstap's extra field for its answer (HTTPDNS: the account)
  bool tapped() const { return tapped_at.tv_sec != 0 || tapped_at.tv_nsec != 0; }
};

// A miss handed back to its worker once the upstream side is done: the
// worker handles the query again in `mode` (so weighted answers come from the
// worker's own SWRR sequence); when the cache cannot answer it, it relays
// `relay` (the upstream's answer) or, without one, answers SERVFAIL.
struct ReturnedQuery {
  PendingClient client;
  HandleMode mode = HandleMode::kAfterFill;
  std::shared_ptr<const RelayedAnswer> relay;  // shared by every waiter of one upstream answer
};

struct MissChannel {
  static constexpr size_t kSize = 4096;
  SpscRing<PendingClient, kSize> misses;
  SpscRing<ReturnedQuery, kSize> returns;
  // Set by the backend before the forwarder starts; the forwarder calls it
  // (on its own thread, at most once per loop turn) after pushing returns.
  // Empty for a backend that polls its ring anyway.
  std::function<void()> wake_worker;
};

}  // namespace weir::fastpath
