#include "weir/fastpath/worker_core.h"

#include <thread>

#include <algorithm>
#include <chrono>

#include "weir/dnstap/dnstap.h"

namespace weir::fastpath {
namespace {

constexpr size_t kMaxAnswer = 65535;
constexpr size_t kMaxUdpAnswer = 4096;  // a returned UDP answer is capped by the handler far below
static_assert(QueryHandler::kMaxBurst <= 64, "a burst's dnstap sampling is one bit per packet");

dnstap::Endpoint EndpointOf(const ClientInfo& c) {
  dnstap::Endpoint e;
  e.family = c.addr.family;
  e.bytes = c.addr.bytes;
  e.port = c.port;
  return e;
}

bool Answered(Verdict v) { return v == Verdict::kReply || v == Verdict::kReplyAndPrefetch; }

dnstap::Protocol ProtocolOf(const ClientInfo& client) {
  if (!client.tcp) return dnstap::Protocol::kUdp;
  switch (client.stream) {
    case StreamKind::kDot:
      return dnstap::Protocol::kDot;
    case StreamKind::kDoh:
      return dnstap::Protocol::kDoh;
    case StreamKind::kTcp:
      break;
  }
  return dnstap::Protocol::kTcp;
}

}  // namespace

void WorkerCore::TapQuery(std::span<const uint8_t> query, const ClientInfo& client, const timespec& at,
                          std::string_view extra) {
  dnstap::Message m;
  m.extra = extra;
  m.type = dnstap::MessageType::kClientQuery;
  m.protocol = ProtocolOf(client);
  m.query_address = EndpointOf(client);
  m.query_time = at;
  m.query_message = query;
  tap_->Send(m);
}

void WorkerCore::TapResponse(std::span<const uint8_t> response, const ClientInfo& client,
                             const timespec& query_at, std::string_view extra) {
  dnstap::Message m;
  m.extra = extra;
  m.type = dnstap::MessageType::kClientResponse;
  m.protocol = ProtocolOf(client);
  m.query_address = EndpointOf(client);
  m.query_time = query_at;
  m.response_time = dnstap::Now();
  m.response_message = response;
  tap_->Send(m);
}

uint64_t WorkerCore::TapQueries(const QueryHandler::BurstPacket* b, size_t n, timespec* at) {
  uint64_t tapped = 0;
  *at = dnstap::Now();  // one clock reading per burst
  for (size_t i = 0; i < n; ++i) {
    if (!tap_->Sample()) continue;
    tapped |= uint64_t{1} << i;
    TapQuery({b[i].pkt, b[i].len}, b[i].client, *at);
  }
  return tapped;
}

void WorkerCore::TapResponses(const QueryHandler::BurstPacket* b, size_t n, uint64_t tapped,
                              const timespec& at) {
  for (size_t i = 0; i < n; ++i) {
    if ((tapped & (uint64_t{1} << i)) == 0 || !Answered(b[i].verdict)) continue;
    TapResponse({b[i].out, b[i].out_len}, b[i].client, at);
  }
}

WorkerCore::WorkerCore(int index, const HandlerOptions& options, SharedState* shared, MissChannel* channel,
                       std::function<void()> notify_upstream)
    : handler_(options, shared, &counters_),
      index_(index),
      channel_(channel),
      notify_upstream_(std::move(notify_upstream)),
      misses_(new MissRequest[QueryHandler::kMaxBurst]),
      out_(new uint8_t[kMaxAnswer]) {}

bool WorkerCore::Submit(PendingClient&& p, bool waits) {
  if (channel_->misses.Push(std::move(p))) return true;
  if (waits) counters_.Drop(DropReason::kMissQueueFull);
  return false;
}

namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0, std::chrono::steady_clock::time_point t1) {
  return std::chrono::duration<double>(t1 - t0).count();
}

}  // namespace

void WorkerCore::HandleBurst(QueryHandler::BurstPacket* packets, size_t n, uint32_t now, WorkerIo& io) {
  // One clock reading a burst: its answers share the burst's time.
  const auto received = std::chrono::steady_clock::now();
  uint64_t answered = 0;
  bool submitted = false;
  for (size_t base = 0; base < n; base += QueryHandler::kMaxBurst) {
    const size_t m = std::min(n - base, QueryHandler::kMaxBurst);
    QueryHandler::BurstPacket* b = packets + base;
    for (size_t i = 0; i < m; ++i) b[i].miss = &misses_[i];
    // dnstap off: this branch and the one below, per burst.
    uint64_t tapped = 0;
    timespec tapped_at{};
    if (tap_ != nullptr) [[unlikely]]
      tapped = TapQueries(b, m, &tapped_at);
    handler_.HandleBurst(b, m, now);
    if (tapped != 0) [[unlikely]]
      TapResponses(b, m, tapped, tapped_at);
    for (size_t i = 0; i < m; ++i) {
      const Verdict v = b[i].verdict;
      answered += Answered(v);
      if (v != Verdict::kMiss && v != Verdict::kReplyAndPrefetch) continue;
      PendingClient pc;
      pc.miss = misses_[i];
      const bool waits = v == Verdict::kMiss;
      if (waits) {
        // The client waits: the backend keeps its address under a route.
        pc.route = io.HoldRoute(base + i);
        pc.client = b[i].client;
        pc.query.assign(b[i].pkt, b[i].pkt + b[i].len);
        pc.received = received;
        if (tapped & (uint64_t{1} << i)) pc.tapped_at = tapped_at;
      }  // else a refresh only: the client has its answer
      const ClientRoute route = pc.route;
      if (Submit(std::move(pc), waits)) {
        submitted = true;
      } else if (waits) {
        io.SendHeld(route, {});  // given up: the route is forgotten
      }
    }
  }
  if (answered != 0)
    counters_.hit_latency.Observe(SecondsSince(received, std::chrono::steady_clock::now()), answered);
  if (submitted) notify_upstream_();
}

bool WorkerCore::HandleOne(std::span<const uint8_t> query, const ClientInfo& client, const ClientRoute& route,
                           uint32_t now, uint8_t* out, size_t out_cap, size_t* out_len, bool* dropped,
                           AnswerInfo* info) {
  MissRequest miss;
  *dropped = false;
  const auto received = std::chrono::steady_clock::now();
  timespec tapped_at{};
  if (tap_ != nullptr && tap_->Sample()) [[unlikely]] {
    tapped_at = dnstap::Now();
    TapQuery(query, client, tapped_at, tap_extra_);
  }
  const Verdict v = handler_.Handle(query.data(), query.size(), client, now, out, out_cap, out_len, &miss,
                                    HandleMode::kNormal, info);
  if (Answered(v) && (tapped_at.tv_sec != 0 || tapped_at.tv_nsec != 0)) [[unlikely]]
    TapResponse({out, *out_len}, client, tapped_at, tap_extra_);
  if (v == Verdict::kMiss || v == Verdict::kReplyAndPrefetch) {
    PendingClient pc;
    pc.miss = miss;
    const bool waits = v == Verdict::kMiss;
    if (waits) {
      pc.route = route;
      pc.client = client;
      pc.query.assign(query.begin(), query.end());
      pc.received = received;
      pc.tapped_at = tapped_at;
      if (pc.tapped()) [[unlikely]]
        pc.tap_extra.assign(tap_extra_);
    }
    if (Submit(std::move(pc), waits)) {
      notify_upstream_();
    } else if (waits) {
      *dropped = true;  // given up: nothing is sent
      *out_len = 0;
      return false;
    }
  }
  if (Answered(v)) {
    counters_.hit_latency.Observe(SecondsSince(received, std::chrono::steady_clock::now()));
    return true;
  }
  *dropped = v == Verdict::kDrop;
  *out_len = 0;
  return false;
}

bool WorkerCore::ProbeSwrr(SwrrProbe* probe, std::chrono::milliseconds timeout,
                           const std::function<void()>& wake) {
  probe->done.store(false, std::memory_order_relaxed);
  probe_.store(probe, std::memory_order_release);
  if (wake) wake();
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!probe->done.load(std::memory_order_acquire)) {
    if (std::chrono::steady_clock::now() >= until) {
      SwrrProbe* expected = probe;
      // Withdrawn before the worker took it: it never will. Taken: it is
      // being answered now.
      if (probe_.compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel)) return false;
      while (!probe->done.load(std::memory_order_acquire)) std::this_thread::yield();
      return true;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

void WorkerCore::TestStall() {
  const uint32_t ms = test_stall_ms_.exchange(0, std::memory_order_relaxed);
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

void WorkerCore::AnswerProbe() {
  SwrrProbe* p = probe_.exchange(nullptr, std::memory_order_acq_rel);
  if (p == nullptr) return;
  for (SwrrProbe::Item& it : p->items) {
    it.found = handler_.swrr().Peek(it.lineage, it.fingerprint, it.n, it.current.data());
  }
  p->done.store(true, std::memory_order_release);
}

size_t WorkerCore::DrainReturns(uint32_t now, AnswerSink& io) {
  if (probe_.load(std::memory_order_relaxed) != nullptr) [[unlikely]]
    AnswerProbe();
  ReturnedQuery q;
  size_t handled = 0;
  bool resubmitted = false;
  std::chrono::steady_clock::time_point answered_at{};  // read once, at the first answer
  while (channel_->returns.Pop(&q)) {
    ++handled;
    PendingClient& c = q.client;
    const size_t cap = c.route.transport == Transport::kTcp ? kMaxAnswer : kMaxUdpAnswer;
    size_t len = 0;
    MissRequest again;
    const Verdict v = handler_.HandleReturned(c.query.data(), c.query.size(), c.client, now, q.mode,
                                              q.relay.get(), out_.get(), cap, &len, &again, &held_info_);
    if (v == Verdict::kMiss) {
      // The name became tagged through its chain: ask again, as a tagged name.
      c.miss = again;
      const ClientRoute route = c.route;
      if (Submit(std::move(c), true)) {
        resubmitted = true;
      } else {
        held_info_ = AnswerInfo{};
        io.SendHeld(route, {});
      }
      continue;
    }
    if (v == Verdict::kReply) {
      if (answered_at == std::chrono::steady_clock::time_point{})
        answered_at = std::chrono::steady_clock::now();
      counters_.miss_latency.Observe(SecondsSince(c.received, answered_at));
    }
    if (v == Verdict::kReply && c.tapped() && tap_ != nullptr) [[unlikely]]
      TapResponse({out_.get(), len}, c.client, c.tapped_at, c.tap_extra);
    io.SendHeld(c.route, {out_.get(), v == Verdict::kReply ? len : 0});
  }
  if (resubmitted) notify_upstream_();
  return handled;
}

}  // namespace weir::fastpath
