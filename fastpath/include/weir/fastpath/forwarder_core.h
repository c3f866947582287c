// The forwarder's logic, without a thread, a socket or a clock of its own
// (docs/architecture.md#the-forwarder): it takes the workers' misses from
// their MissChannels, coalesces identical questions (InflightTable), picks
// a recursor on the consistent-hash ring (UpstreamHealth), sends each try
// through an UpstreamTransport, judges each reply with the one answer guard
// (weir/dns/answer_guard.h), fills the cache (partitions::EntryFromAnswer)
// and hands every waiting client back to its worker. Time and timeouts come
// from a net::Timers.
//
// The daemon runs it on the forwarder thread's event loop (Forwarder);
// unit tests drive it with a fake transport and net::ManualTimers.
//
// Threading: one thread; the counters in ForwarderStats are read by the
// metrics thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "weir/common/log.h"
#include "weir/common/secure_random.h"
#include "weir/dns/answer_guard.h"
#include "weir/dns/case_randomization.h"
#include "weir/dns/cookies.h"
#include "weir/fastpath/config.h"
#include "weir/fastpath/handler.h"
#include "weir/fastpath/inflight_table.h"
#include "weir/fastpath/miss_channel.h"
#include "weir/fastpath/upstream_guard.h"
#include "weir/fastpath/upstream_health.h"
#include "weir/fastpath/upstream_transport.h"
#include "weir/net/timers.h"
#include "weir/partitions/entry_from_answer.h"

namespace weir::dnstap {
class Producer;
}  // namespace weir::dnstap

namespace weir::fastpath {

// What the forwarder counts (metrics thread reads, forwarder thread writes).
struct ForwarderStats {
  OwnedCounter coalesced;
  // Questions answered at once (stale or SERVFAIL) because every socket
  // allowed (upstream.max_inflight[_per_upstream]) was in use.
  OwnedCounter inflight_limited;
  // Misses answered at once because upstream.max_waiting_clients wait.
  OwnedCounter waiting_limited;
  // Upstream answers refused: wrong source, socket, ID, question, 0x20 case
  // or cookie (late answers are not among them).
  OwnedCounter spoofed;
  // Of those, the answers that matched no try in flight nor one ended
  // recently: what a blind forger's guesses look like.
  OwnedCounter unwanted;
  // Answers to tries that had already timed out or been abandoned.
  OwnedCounter late;
  // Questions moved to TCP after upstream.unwanted_reply_threshold
  // unwanted answers carrying them.
  OwnedCounter spoof_reactions;
  OwnedCounter case_mismatches;
  // Upstreams found not to keep the question's case: asked without 0x20
  // for a while.
  OwnedCounter case_fallbacks;
  OwnedCounter cookie_mismatches;
  // Queries sent again over UDP after a BADCOOKIE (RFC 7873 5.3).
  OwnedCounter cookie_retries;
  // Queries moved to TCP by a truncated answer.
  OwnedCounter truncated;
  OwnedCounter upstream_queries;
  OwnedCounter learned;
  OwnedCounter learned_overflow;
  // Active refresh (refresh=active tags): refreshes sent; scheduled ones
  // not sent because nobody asked for the answer since it was cached
  // (idle), it had left the cache (gone) or its name no longer has an
  // active tag (untagged); fills not scheduled because
  // cache.active_refresh_max were (overflow).
  OwnedCounter active_refresh_sent, active_refresh_idle, active_refresh_gone, active_refresh_untagged,
      active_refresh_overflow;
  std::atomic<uint64_t> active_refresh_scheduled{0};
  // Sibling prefetch: questions sent for a city's other subnets after a
  // subnet-level miss; misses whose siblings were not fetched because that
  // (city, name) had them fetched within the answer's TTL already (once).
  OwnedCounter sibling_prefetches, sibling_repeats;
  // level=adaptive answers whose ECS did not echo the subnet asked (RFC
  // 7871 7.3): cached for that subnet, no segment learned.
  OwnedCounter segment_mismatches;
  std::atomic<uint64_t> udp_sockets{0};
  // The TCP pool's connections open now and its counters (the transport's
  // TcpPoolStats, copied every turn).
  std::atomic<uint64_t> tcp_connections{0};
  std::atomic<uint64_t> tcp_opened{0};
  std::atomic<uint64_t> tcp_resent{0};
  std::atomic<uint64_t> tcp_queued{0};
  // TCP tries that timed out while still queued in the pool (not counted
  // against the recursor's health).
  OwnedCounter tcp_queue_timeouts;
  std::atomic<uint64_t> in_flight{0};  // distinct questions waiting for a recursor
  std::atomic<uint64_t> waiting{0};    // clients (and prefetches) waiting on them
  std::vector<std::unique_ptr<UpstreamStats>> ordinary;
  std::vector<std::unique_ptr<UpstreamStats>> weighted;
};

class ForwarderCore final : public UpstreamTransport::Sink {
 public:
  using Clock = std::chrono::steady_clock;
  // Answers the forwarder holds for one worker whose return ring is full
  // before it stops taking that worker's misses.
  static constexpr size_t kMaxHeldReturns = MissChannel::kSize;
  // How long a try's ID and port stay known after it ended, so that its
  // answer is counted as late rather than unwanted: four answer timeouts,
  // at least 5 s. The transport keeps a rotated socket open as long.
  static Clock::duration LateWindow(const FastpathConfig& config);

  // `channels`: one per worker (index = ClientRoute::worker). `stats` gets
  // one UpstreamStats per configured upstream. Every reference outlives
  // the core.
  ForwarderCore(const FastpathConfig& config, std::vector<MissChannel*> channels, SharedState* shared,
                net::Timers& timers, UpstreamTransport& transport, ForwarderStats& stats);
  ~ForwarderCore() override;

  // Opens the transport's pool for the families of the upstreams.
  absl::Status Open();
  void SetTap(dnstap::Producer* tap) { tap_ = tap; }

  // Takes the misses the workers pushed (respecting kMaxHeldReturns).
  void Drain();
  // One turn of upkeep: probes due, the transport's housekeeping, the
  // returns held back pushed and the workers woken (once each).
  void Tick();
  // Pushes held-back returns and wakes the workers that got some.
  void FlushReturns();
  // The share of the hash ring each upstream of the group owns now; any
  // thread (reads the ring's fixed points and the stats' up flags).
  std::vector<double> RingShares(bool weighted) const;

  // UpstreamTransport::Sink.
  void OnDatagram(UpstreamTransport::Handle socket, const common::SocketAddress& from,
                  std::span<const uint8_t> data) override;
  void OnTcpMessage(UpstreamTransport::Handle tcp, std::span<const uint8_t> message) override;
  void OnTcpFailed(UpstreamTransport::Handle tcp) override;
  void OnProbeReply(UpstreamTransport::Handle probe, const common::SocketAddress& from,
                    std::span<const uint8_t> data) override;

 private:
  struct Group {
    std::vector<UpstreamConfig> upstreams;
    std::vector<int> endpoint;  // index into endpoints_, per upstream
    std::vector<std::unique_ptr<UpstreamStats>>* stats = nullptr;
    std::unique_ptr<UpstreamHealth> health;
  };
  // A recursor's address, shared by the groups that list it: its cookie
  // and 0x20 state are the server's, whichever group asks.
  struct Endpoint {
    common::SocketAddress address;
    dns::CookieJar::ClientCookieBytes client_cookie{};
  };
  struct Probe {
    int group;
    int upstream;
    uint16_t id;
  };
  using Tries = TryTable<Pending*>;

  Group& GroupOf(const Pending* p) { return groups_[p->weighted_group ? 1 : 0]; }
  int EndpointOf(const common::SocketAddress& src) const;
  static std::string QuestionKey(int endpoint, uint16_t qtype, const dns::NameKey& qname);
  void Accept(PendingClient&& c);
  // The next try of `p`: the next recursor on the ring with room, over UDP.
  void Send(Pending* p);
  // Ends the try in flight (UDP or TCP). `expect_late`: its answer may
  // still come and is then counted as late, not as unwanted.
  void EndTry(Pending* p, bool expect_late);
  void SwitchToTcp(Pending* p, bool expect_late);
  // Registers the try just sent and arms its timeout.
  void ArmTry(Pending* p);
  void OnTimeout(Pending* p);
  // The try failed at its recursor (health counts it): the next one.
  void TryFailed(Pending* p);
  // After a 0x20 mismatch, a TCP try that failed: asks again over UDP
  // without 0x20 (true), or false when `p` is not such a try.
  bool CaseFallback(Pending* p);
  void LearnNoCase(const Endpoint& ep, std::string_view why);
  // An answer from endpoint `e` that matched no try: charged to the
  // question it carries.
  void NoteUnwanted(int e, std::span<const uint8_t> data);
  dns::GuardOutcome Check(const Pending* p, std::span<const uint8_t> reply, bool over_tcp, dns::Message* m);
  void Answered(Pending* p, const dns::Message& m);
  void Finish(Pending* p, const dns::Message& up);
  void Fail(Pending* p);
  void Release(Pending* p, bool expect_late);
  void Reply(PendingClient& c, HandleMode mode, std::shared_ptr<const RelayedAnswer> relay);
  // The worker serves a stale entry if it has one (RFC 8767), else SERVFAIL.
  void StaleOrServfail(PendingClient& c) { Reply(c, HandleMode::kStaleOk, nullptr); }
  // Fills the cache from a genuine answer; says how the waiters are handled again.
  HandleMode FillCache(const Pending& p, const dns::Message& up);
  // Active refresh: after `m` filled the cache with an answer of `ttl`
  // seconds, its refresh is due when prefetch_percent of the TTL is left
  // (if its name's tag says refresh=active). When due (on the cache's
  // clock, checked every Tick), it is asked again, as a prefetch, if a
  // client read the answer since it was cached.
  void ScheduleRefresh(const MissRequest& m, uint32_t ttl, uint32_t now);
  void RunDueRefreshes(uint32_t now);
  // Sends the refresh `c` (as its tag says now) if the answer is still
  // cached and was read; true when it went to Accept.
  bool Refresh(PendingClient&& c, uint32_t now);
  // The cache key of `m` as bytes: what the schedule is keyed by.
  static std::string RefreshKey(const MissRequest& m);
  // Whether a prefetch may start now (PrefetchRoom in forwarder_core.cc).
  bool PrefetchRoom() const;
  static constexpr size_t kRefreshesPerTick = 256;
  // Sibling prefetch: remembers the subnets of each city whose clients
  // missed (most recent first); after a subnet-level miss `m` was filled
  // with a `ttl`-second answer, asks the same question for the city's other
  // recent subnets that do not have it cached, once per (city, name) and TTL.
  void NoteSubnet(const MissRequest& m);
  void PrefetchSiblings(const MissRequest& m, uint32_t ttl, uint32_t now);
  // level=adaptive: learns the segment the answer `up` to `m` (asked with
  // the subscriber's subnet) was given for, from its ECS scope, and re-keys
  // `fill` (built from `in`) to the answer's partition (segments.h).
  void LearnSegment(const MissRequest& m, const dns::Message& up, partitions::AnswerToCache in,
                    partitions::CacheFill* fill);
  // The cached answer to `m`'s question (Cache::Peek: not a client's read):
  // under its partition, or for an adaptive miss the answer of the
  // segment its subnet lies in, while that segment is served (or, with
  // `expired_segments`, past its TTL too: a stale answer).
  const partitions::CacheEntry* Cached(const MissRequest& m, uint32_t now, partitions::Freshness* f,
                                       bool expired_segments = false) const;
  const partitions::Tag* TagOf(const dns::NameKey& qname, uint32_t now) const;
  void MarkResult(Group& g, int u, bool ok);
  void SendProbes();
  // The in-flight question a client timer was set for; null when it is done.
  Pending* TimerTarget(uint64_t generation);
  // Waiting clients accepted by `accepted_by` get their stale answer or
  // SERVFAIL now and stop waiting; the upstream query goes on.
  void AnswerEarly(Pending* p, Clock::time_point accepted_by);
  void ArmAnswerDeadline(Pending* p);
  void OnClientTimer(uint64_t generation);
  void OnAnswerDeadline(uint64_t generation);
  void Publish();
  void TapQuery(Pending* p, UpstreamTransport::Handle h, bool tcp);
  void TapResponse(const Pending* p, std::span<const uint8_t> answer);

  FastpathConfig config_;
  SharedState* shared_;
  std::vector<MissChannel*> channels_;
  net::Timers& timers_;
  UpstreamTransport& transport_;
  ForwarderStats& stats_;
  // Returns that found their worker's ring full, pushed again every turn
  // (never dropped: each one holds a route in its worker's backend).
  std::vector<std::deque<ReturnedQuery>> overflow_;
  std::vector<bool> wake_;
  Group groups_[2];  // 0 ordinary, 1 weighted
  std::vector<Endpoint> endpoints_;
  InflightTable inflight_;
  std::unique_ptr<Tries> tries_;
  absl::flat_hash_map<int, Pending*> by_tcp_;  // TCP tries, by handle
  // UDP tries in flight by question (endpoint, qtype, qname), to charge a
  // forger's unwanted answers to the question they target.
  absl::flat_hash_map<std::string, std::vector<Pending*>> by_question_;
  // Timers name their try by generation, never by pointer: a Pending may
  // be freed long before its old deadlines come up.
  absl::flat_hash_map<uint64_t, Pending*> by_generation_;
  // RFC 8767 client response timers and answer deadlines: generation ->
  // the question's key.
  absl::flat_hash_map<uint64_t, std::string> client_timers_;
  uint64_t next_generation_ = 1;
  struct ScheduledRefresh {
    MissRequest miss;
    uint32_t due = 0;  // the cache clock's seconds
  };
  // The scheduled active refreshes, by the cache key (RefreshKey), and
  // their due times, soonest first; a key
  // rescheduled before its turn leaves its older time in the queue, skipped
  // when it comes up (its due no longer matches).
  absl::flat_hash_map<std::string, ScheduledRefresh> refreshes_;
  using DueRefresh = std::pair<uint32_t, std::string>;
  std::priority_queue<DueRefresh, std::vector<DueRefresh>, std::greater<>> refresh_queue_;
  // Per city, its subnets whose clients missed most recently (at most
  // kHotSubnets, most recent first).
  static constexpr size_t kHotSubnets = 64;
  absl::flat_hash_map<partitions::PartitionId, std::vector<partitions::Partition>> hot_subnets_;
  // (city, question) whose siblings were fetched -> until when (cache
  // clock); at most kSiblingsDone, the expired ones dropped when full.
  static constexpr size_t kSiblingsDone = 65536;
  absl::flat_hash_map<std::string, uint32_t> siblings_done_;
  absl::flat_hash_map<int, Probe> probes_;  // by handle
  common::SecureRandom rng_;
  dns::CaseMemory case_memory_;
  std::optional<dns::CookieJar> cookies_;
  dns::ParseOptions parse_options_;
  dnstap::Producer* tap_ = nullptr;
  common::RateLimitedLog refused_log_{{.component = "upstream"}};
  common::RateLimitedLog reaction_log_{{.component = "upstream"}};
  common::RateLimitedLog down_log_{{.component = "upstream"}};
  common::RateLimitedLog up_log_{{.level = common::LogLevel::kInfo, .component = "upstream"}};
  common::RateLimitedLog case_log_{{.component = "upstream"}};
  std::vector<uint8_t> out_ = std::vector<uint8_t>(65535);
};

}  // namespace weir::fastpath
