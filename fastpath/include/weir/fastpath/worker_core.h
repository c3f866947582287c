// One fastpath worker's query path, the same for every I/O backend (kernel
// sockets, DPDK): handle a burst -> dispatch each verdict -> hand misses and
// prefetches to the upstream side -> take back and answer what the upstream
// side returns. The backend owns receive, transmit and the client address
// data; the core sees clients only as ClientRoutes it asks the backend for.
//
// Threading: everything on the worker's thread, an RCU reader that announces
// a quiescent state between bursts.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "weir/common/heartbeat.h"
#include "weir/fastpath/handler.h"
#include "weir/fastpath/metrics.h"
#include "weir/fastpath/miss_channel.h"

namespace weir::dnstap {
class Producer;
}  // namespace weir::dnstap

namespace weir::fastpath {

// Where a backend takes the answers to clients whose queries went upstream.
class AnswerSink {
 public:
  virtual ~AnswerSink() = default;
  // Sends `answer` to the client behind `route` and forgets the route; an
  // empty answer only forgets it (the query is dropped).
  virtual void SendHeld(const ClientRoute& route, std::span<const uint8_t> answer) = 0;
};

// What a datagram backend (kernel UDP sockets, DPDK) does for its worker
// core. A stream backend (TCP) names its routes itself and is only an
// AnswerSink.
class WorkerIo : public AnswerSink {
 public:
  // Packet `index` of the burst being handled missed the cache: keep what
  // is needed to answer its client later and name it by a route. Called on
  // misses only, never on hits.
  virtual ClientRoute HoldRoute(size_t index) = 0;
};

// A control request (weirctl cache dump) for the SWRR states of some
// RRsets, answered by the worker between bursts: the states belong to its
// thread alone.
struct SwrrProbe {
  struct Item {
    uint64_t lineage = 0;  // CacheEntry::lineage
    uint64_t fingerprint = 0;
    uint8_t n = 0;       // addresses
    bool found = false;  // the worker holds a state (it has answered the RRset)
    std::array<int16_t, 64> current{};
  };
  std::vector<Item> items;
  std::atomic<bool> done{false};
};

class alignas(64) WorkerCore {
 public:
  // `channel` leads to the upstream side; `notify_upstream` wakes it after
  // a burst that handed it something.
  WorkerCore(int index, const HandlerOptions& options, SharedState* shared, MissChannel* channel,
             std::function<void()> notify_upstream);

  // Handles a burst of received datagrams: verdicts and answers as
  // QueryHandler::HandleBurst leaves them (the backend transmits those with
  // kReply / kReplyAndPrefetch), misses and refreshes handed upstream.
  // Packet i's miss request goes to misses[i] (reused storage).
  void HandleBurst(QueryHandler::BurstPacket* packets, size_t n, uint32_t now, WorkerIo& io);

  // One query of a stream transport (TCP): true when `out` holds an answer
  // to send now; false when there is none now (a miss handed upstream under
  // `route`, answered later through SendHeld, or a drop: *out_len is 0 and
  // `dropped` says which).
  bool HandleOne(std::span<const uint8_t> query, const ClientInfo& client, const ClientRoute& route,
                 uint32_t now, uint8_t* out, size_t out_cap, size_t* out_len, bool* dropped,
                 AnswerInfo* info = nullptr);

  // Answers every query the upstream side has handed back (through
  // io.SendHeld); returns how many. The common case, nothing, is one load.
  size_t DrainReturns(uint32_t now, AnswerSink& io);
  // Inside AnswerSink::SendHeld: what the answer being handed over was
  // answered from (the cache or not, stale, its original TTL).
  const AnswerInfo& held_answer_info() const { return held_info_; }

  // Taps client queries and responses to `tap` (dnstap); null, the
  // default, taps nothing. Before the worker runs.
  void SetTap(dnstap::Producer* tap) { tap_ = tap; }
  // Dnstap's extra field for the queries HandleOne handles next, and their
  // answers (HTTPDNS: which account asked); "" for none. Not copied: it
  // must outlive those HandleOne calls.
  void SetTapExtra(std::string_view extra) { tap_extra_ = extra; }

  // Control thread: has the worker fill `probe` at its next pass through
  // DrainReturns (`wake` wakes it); true once filled, false when the worker
  // did not take it within `timeout` (then it never will).
  bool ProbeSwrr(SwrrProbe* probe, std::chrono::milliseconds timeout, const std::function<void()>& wake);

  // Once per turn of the worker's loop (every backend's loop turns at least
  // every 100 ms): the heartbeat the systemd watchdog goes by (heartbeat.h).
  void Turn() {
    heartbeat_.Beat();
    if (test_stall_ms_.load(std::memory_order_relaxed) != 0) [[unlikely]]
      TestStall();
  }
  const common::Heartbeat& heartbeat() const { return heartbeat_; }
  // Tests only (--test-clock): the worker's loop stops for `ms` at its next
  // turn, as a wedged worker would.
  void StallForTest(uint32_t ms) { test_stall_ms_.store(ms, std::memory_order_relaxed); }

  int index() const { return index_; }
  QueryHandler& handler() { return handler_; }
  const QueryHandler& handler() const { return handler_; }
  const WorkerCounters& counters() const { return counters_; }
  WorkerCounters& counters() { return counters_; }

 private:
  // Hands `p` upstream; false (counted) when the channel is full.
  bool Submit(PendingClient&& p, bool waits);
  // dnstap, when tap_ is set: CLIENT_QUERY for the sampled packets of a
  // burst (before they are handled; their bits set in the result), then
  // CLIENT_RESPONSE for the sampled ones answered now.
  uint64_t TapQueries(const QueryHandler::BurstPacket* b, size_t n, timespec* at);
  void TapResponses(const QueryHandler::BurstPacket* b, size_t n, uint64_t tapped, const timespec& at);
  void TapQuery(std::span<const uint8_t> query, const ClientInfo& client, const timespec& at,
                std::string_view extra = {});
  void TapResponse(std::span<const uint8_t> response, const ClientInfo& client, const timespec& query_at,
                   std::string_view extra = {});

  WorkerCounters counters_;
  QueryHandler handler_;
  int index_;
  MissChannel* channel_;
  dnstap::Producer* tap_ = nullptr;
  std::string_view tap_extra_;
  std::function<void()> notify_upstream_;
  std::unique_ptr<MissRequest[]> misses_;
  AnswerInfo held_info_;            // the answer SendHeld is being given
  std::unique_ptr<uint8_t[]> out_;  // answers to returned queries (any transport)
  std::atomic<SwrrProbe*> probe_{nullptr};
  void AnswerProbe();
  void TestStall();
  common::Heartbeat heartbeat_;
  std::atomic<uint32_t> test_stall_ms_{0};
};

}  // namespace weir::fastpath
