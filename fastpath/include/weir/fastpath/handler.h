// The query handler: a function of (packet bytes, client address, worker
// state) -> answer bytes, or a miss handed to the upstream side. Both I/O
// backends (kernel sockets, DPDK) call it unchanged; it does no I/O, and on
// a cache hit no allocation and no lock.
//
// Threading: one QueryHandler per worker; all calls happen on the owning
// worker thread, which must be an RCU reader (partitions/rcu.h) and announce
// a quiescent state between bursts.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "weir/common/clock.h"
#include "weir/dns/message.h"
#include "weir/dns/writer.h"
#include "weir/fastpath/learned_tags.h"
#include "weir/fastpath/metrics.h"
#include "weir/fastpath/rate_limiter.h"
#include "weir/fastpath/relay.h"
#include "weir/partitions/cache.h"
#include "weir/partitions/citymap.h"
#include "weir/partitions/partition.h"
#include "weir/partitions/segments.h"
#include "weir/partitions/swrr.h"
#include "weir/partitions/tagtable.h"
#include "weir/partitions/weight_factors.h"

namespace weir::fastpath {

// Read-mostly state every worker shares: published snapshots and the cache.
struct SharedState {
  partitions::TagTableHolder tags;
  LearnedTagsHolder learned;  // names tagged through their CNAME chain
  partitions::CityMapHolder citymap;
  // The calibration's weight factors (docs/calibration.md), bound to the
  // city map's partitions; null or empty: none.
  common::RcuSnapshot<partitions::BoundWeightFactors> factors;
  std::unique_ptr<partitions::Cache> cache;
  // level=adaptive names' learned segments (written by the forwarder).
  std::unique_ptr<partitions::SegmentTable> segments;
  const common::Clock* clock = &common::SystemClock::Instance();
  partitions::CacheLimits limits;
};

// How a stream client reached us (dnstap's socket protocol; the metrics).
enum class StreamKind : uint8_t { kTcp, kDot, kDoh };

struct ClientInfo {
  common::IpAddress addr;
  bool tcp = false;                      // any stream transport: no truncation, no UDP limits
  uint16_t port = 0;                     // the source port, for dnstap only
  StreamKind stream = StreamKind::kTcp;  // which one, when `tcp`
  // HTTPDNS (docs/httpdns.md): a weighted set tagged answer=single is
  // answered as answer=ordered (every address, the SWRR pick first), and an
  // expired entry within the stale window is answered at once while it is
  // refreshed (the optimistic cache), not after the upstream failed.
  bool ordered = false;
  bool optimistic = false;
};

// What the cache answered with (HandleOne's `info`, for HTTPDNS).
struct AnswerInfo {
  bool cached = false;      // answered from the cache (else relayed, or an error written here)
  bool stale = false;       // past its TTL (RFC 8767)
  uint32_t origin_ttl = 0;  // the TTL the entry came with (cached answers)
};

enum class Verdict : uint8_t {
  kReply,             // `out` holds the response
  kReplyAndPrefetch,  // `out` holds the response; `miss` should be refreshed
  kDrop,              // say nothing (the reason is counted)
  kMiss,              // `miss` describes what to ask upstream
};

// How a query is handled: first time; again once the upstream side has
// filled the cache (no second miss); after every upstream failed (stale
// entries may be served); or again from the start because its name just
// became tagged (a second miss allowed, now as a tagged name).
enum class HandleMode : uint8_t { kNormal, kAfterFill, kStaleOk, kRetry };

// What the upstream side needs to resolve a miss and fill the cache.
struct MissRequest {
  partitions::Partition partition = partitions::kCommonPartition;
  uint16_t qtype = 0;
  uint16_t qclass = 0;
  dns::NameKey qname;
  bool tagged = false;
  bool weighted = false;  // ask for weights (weight-tagged name)
  // level=adaptive: `partition` is the subscriber's subnet partition, `ecs`
  // its /24 (/56); the answer's scope says which segment it is cached for.
  bool adaptive = false;
  bool send_ecs = false;  // add `ecs` upstream
  dns::ClientSubnet ecs;
  bool do_bit = false;
  bool cd_bit = false;
  // The client's city (CityMap id; tagged names): a subnet-level miss's
  // siblings are the city's other subnets (cache.sibling_prefetch).
  partitions::PartitionId city = 0;
  bool sibling = false;  // a sibling prefetch itself (sets off no more)
};

// What a miss asks upstream as `tag` says (null: untagged): its tagged,
// weighted and adaptive bits and its ECS source, the subnet of its
// partition (subnet and adaptive levels) or `city`'s source for a client of
// `family` (4 or 6; city level).
// m->partition must be set. The one place for it: the handler's misses,
// the forwarder's refreshes and sibling prefetches.
void SetUpstreamQuestion(const partitions::Tag* tag, const partitions::City* city, uint8_t family,
                         MissRequest* m);

// Answers per (tagged name, partition, address), so operators can compare
// the observed share with the weights. A fixed table per worker: the worker
// fills slots (publishing each with a release store), the metrics thread
// reads them. When it is full, answers are counted in `overflow`.
//
// Counting is on every weighted answer: the probe touches only a compact
// 16-byte slot (key, count) keyed by the cache entry's hash and the
// address, and the name and address for the metrics sit apart, written
// once when a slot is taken.
class AnswerCounters {
 public:
  static constexpr size_t kSlots = 16384;
  struct Slot {
    std::atomic<uint64_t> key{0};  // 0 = empty; published last
    OwnedCounter count;
  };
  struct Labels {
    partitions::Partition partition = 0;
    uint8_t qname_len = 0;
    uint8_t addr_len = 0;
    std::array<uint8_t, dns::kMaxNameWire> qname;
    std::array<uint8_t, 16> addr;
  };
  AnswerCounters() : slots_(new Slot[kSlots]), labels_(new Labels[kSlots]) {}
  // `entry_hash`: the hash of the answered cache entry's key (partition,
  // name, type, class), which the handler computed for the lookup.
  void Count(uint64_t entry_hash, partitions::Partition partition, std::span<const uint8_t> qname,
             const uint8_t* addr, uint8_t addr_len);
  const Slot* slots() const { return slots_.get(); }
  // What slot i counts; valid once slots()[i].key reads non-zero (acquire).
  const Labels& labels(size_t i) const { return labels_[i]; }
  uint64_t overflow() const { return overflow_.Read(); }

 private:
  std::unique_ptr<Slot[]> slots_;
  std::unique_ptr<Labels[]> labels_;
  OwnedCounter overflow_;
};

// The EDNS UDP size weir advertises to clients and upstreams, and the most
// it sends in one UDP answer (DNS flag day 2020: no fragments).
inline constexpr uint16_t kEdnsUdpSize = 1232;

// Where an adaptive-level lookup found the subscriber's answer: a learned
// segment, the name's scope-0 answer (the /0 segment: its global tier), or
// neither (no segment learned or still served: the subscriber's subnet is
// asked).
enum AdaptiveTier : uint8_t { kTierSegment = 0, kTierGlobal = 1, kTierNone = 2, kAdaptiveTiers = 3 };

struct HandlerOptions {
  uint16_t weight_option_code = dns::kDefaultWeightOptionCode;
  std::vector<common::Cidr> allow;
  std::vector<common::Cidr> trusted_forwarders;
  RateLimitOptions rate_limit;  // per source prefix and worker
  uint16_t edns_udp_size = kEdnsUdpSize;
  uint32_t stale_answer_ttl = 30;
  uint32_t prefetch_percent = 10;  // refresh when less than this share of the TTL is left
  // Weighted keys (partition, name, type) whose SWRR state each worker keeps.
  size_t swrr_states = partitions::SwrrTable::kDefaultCapacity;
};

class QueryHandler {
 public:
  QueryHandler(const HandlerOptions& options, SharedState* shared, WorkerCounters* counters);

  // Handles one received message. `now` is the worker's per-burst clock
  // reading. On kReply, out[0, *out_len) is the response.
  Verdict Handle(const uint8_t* pkt, size_t len, const ClientInfo& client, uint32_t now, uint8_t* out,
                 size_t out_cap, size_t* out_len, MissRequest* miss, HandleMode mode = HandleMode::kNormal,
                 AnswerInfo* info = nullptr);

  // A received datagram of a burst, and what Handle would say of it.
  struct BurstPacket {
    const uint8_t* pkt = nullptr;
    size_t len = 0;
    ClientInfo client;
    uint8_t* out = nullptr;  // the response buffer
    size_t out_cap = 0;
    MissRequest* miss = nullptr;  // filled on kMiss / kReplyAndPrefetch
    // Results.
    Verdict verdict = Verdict::kDrop;
    size_t out_len = 0;
  };
  // Handle (HandleMode::kNormal) for a burst of datagrams, in stages over
  // the whole burst (checks and parsing, tag lookups, partitions, cache
  // lookups, answers), so that the memory reads of its queries overlap.
  // Verdicts, responses and counters are those of Handle on each in order.
  void HandleBurst(BurstPacket* packets, size_t n, uint32_t now);
  static constexpr size_t kMaxBurst = 32;  // a stage's width (any n works)

  // A query the upstream side handed back: handled again in `mode`
  // (kAfterFill, kStaleOk, kRetry); when the cache cannot answer it, `relay`
  // (the upstream's answer) is written for this client, or SERVFAIL
  // without one. kReply (out holds the answer), kDrop, or kMiss in kRetry
  // only (ask again, `miss` filled).
  Verdict HandleReturned(const uint8_t* pkt, size_t len, const ClientInfo& client, uint32_t now,
                         HandleMode mode, const RelayedAnswer* relay, uint8_t* out, size_t out_cap,
                         size_t* out_len, MissRequest* miss, AnswerInfo* info = nullptr);

  const AnswerCounters& answer_counters() const { return answers_; }
  const RateLimiter& rate_limiter() const { return limiter_; }
  // Cache lookups and hits per partition slot: 0 the common partition,
  // 1 + city id for city partitions, kSubnetSlot for all subnet partitions.
  // kSegmentSlot for the lookups of adaptive-level names.
  static constexpr size_t kSubnetSlot = partitions::kMaxCities + 1;
  static constexpr size_t kSegmentSlot = kSubnetSlot + 1;
  static constexpr size_t kPartitionSlots = kSegmentSlot + 1;
  static size_t PartitionSlot(partitions::Partition p) {
    switch (partitions::LevelOf(p)) {
      case partitions::CacheLevel::kGlobal:
        return 0;
      case partitions::CacheLevel::kCity:
        return 1 + size_t{partitions::CityOf(p)};
      case partitions::CacheLevel::kAdaptive:
        return kSegmentSlot;
      case partitions::CacheLevel::kSubnet:
        break;
    }
    return kSubnetSlot;
  }
  // How adaptive-level lookups found their answer (AdaptiveTier).
  uint64_t adaptive_lookups(size_t tier) const { return tiers_[tier].Read(); }
  // The worker's SWRR states (read by the worker itself, for a control probe).
  const partitions::SwrrTable& swrr() const { return swrr_; }
  uint64_t partition_lookups(size_t slot) const { return lookups_[slot].Read(); }
  uint64_t partition_hits(size_t slot) const { return hits_[slot].Read(); }

 private:
  // One query from its arrival to its answer: what Begin reads from the
  // packet, what the stages add (tag, partition, cache entry) and what the
  // writers need (the answer's size limits). No handler member holds a
  // query's state: Handle uses one context, HandleBurst one per packet.
  // Cache-line aligned: written per packet by this worker only, never in
  // a line of another worker's.
  struct alignas(64) QueryContext {
    const uint8_t* pkt = nullptr;  // the query as received
    size_t len = 0;
    dns::Query query;
    bool tcp = false;                             // the client's transport
    bool ordered = false;                         // ClientInfo::ordered
    bool optimistic = false;                      // ClientInfo::optimistic
    bool stale = false;                           // answered from a stale entry
    size_t response_limit = 0;                    // the transport's / client's answer size
    size_t byte_budget = SIZE_MAX;                // its source's UDP bytes left (SIZE_MAX: no limit)
    size_t unlimited_size = 0;                    // the answer's size before any truncation
    const common::IpAddress* source = nullptr;    // the packet's source (rate limiting)
    uint32_t source_slot = RateLimiter::kNoSlot;  // its rate limiter slot
    uint32_t source_generation = 0;               // the limiter's generation then
    const partitions::Tag* tag = nullptr;
    common::IpAddress who;  // the address that picks the partition
    bool trusted_ecs = false;
    partitions::Partition partition = partitions::kCommonPartition;
    // level=adaptive: the subscriber's segment, when one is learned and
    // still served (then `partition` is its answer's).
    const partitions::Segment* segment = nullptr;
    bool expired_segments = false;  // a segment past its time still counts (stale answers)
    // Its lookup counters' slot (PartitionSlot; kSegmentSlot for every
    // lookup of an adaptive-level name) and its SWRR sequence (the
    // segment's id; 0: the entry's own).
    size_t slot = 0;
    uint64_t sequence = 0;
    const partitions::City* city = nullptr;
    partitions::PartitionId city_id = 0;
    bool dnssec = false;
    uint64_t hash = 0;  // of key()
    const partitions::CacheEntry* entry = nullptr;
    partitions::Freshness fresh = partitions::Freshness::kMiss;

    partitions::CacheKey key() const { return {partition, query.qname.span(), query.qtype, query.qclass}; }
    // The question's name as the client spelled it (its 0x20 case).
    std::span<const uint8_t> qname_wire() const { return {pkt + dns::kHeaderSize, query.qname.len}; }
    // The limit a writer gives ResponseWriter::Finish: the transport's and
    // the source's byte budget.
    size_t answer_limit() const { return std::min(response_limit, byte_budget); }
  };
  // Counts, checks and parses; false when the packet is done (*verdict
  // says how: a drop, or an error response in out).
  bool Begin(const uint8_t* pkt, size_t len, const ClientInfo& client, uint32_t now, uint8_t* out,
             size_t out_cap, size_t* out_len, HandleMode mode, QueryContext* c, Verdict* verdict);
  // Given c->tag from the tag table: learned tags, partition, cache key hash.
  void Classify(const ClientInfo& client, uint32_t now, QueryContext* c);
  // Classify's step for an adaptive-level name: the subscriber's segment.
  void ClassifyAdaptive(uint32_t now, QueryContext* c);
  // Given c->entry / c->fresh from the cache: the answer or the miss.
  Verdict Finish(QueryContext* c, uint32_t now, uint8_t* out, size_t out_cap, size_t* out_len,
                 MissRequest* miss, HandleMode mode);

  // The writers. Each returns the answer's length (0: not even the header
  // fitted `out_cap`).
  // The error response for `rcode`: the question echoed when it parsed
  // (`parsed`), else the header only.
  size_t WriteError(QueryContext& c, bool parsed, dns::Rcode rcode, uint8_t* out, size_t out_cap);
  // c's cache entry, its TTLs as `ttl` says.
  size_t WriteCached(QueryContext& c, partitions::AnswerTtl ttl, uint8_t* out, size_t out_cap);
  // Counts the address a weighted answer of c's entry picked (AnswerCounters).
  void CountPick(const QueryContext& c, partitions::AnswerMode mode, uint8_t picked);
  // The relayed upstream answer for c's query.
  size_t WriteRelayed(QueryContext& c, const RelayedAnswer& r, uint8_t* out, size_t out_cap);
  // The RFC 8482 answer to ANY over UDP.
  static constexpr uint32_t kMinimalAnyTtl = 3600;
  size_t WriteMinimalAny(QueryContext& c, uint8_t* out, size_t out_cap);
  // The end every answer shares, after its records (`fits`: they fitted the
  // buffer): the OPT when the query had one (our UDP size, the client's DO,
  // its subnet echoed at the partition's scope, to a client that asked the
  // weight option with `weights`, length 0 when the answer has none), then
  // TC when the answer is over c's answer limit. Counts truncations; sets
  // c.unlimited_size.
  size_t FinishAnswer(dns::ResponseWriter& w, QueryContext& c, bool fits, std::span<const uint8_t> weights);
  // Runs `write` (one of the writers) for c, charging what it wrote to the
  // source's byte budget when that is limited (rate_limit.bytes_per_second,
  // UDP only: TCP cannot be spoofed); the answer is cut to the budget.
  template <typename Write>
  size_t WriteBudgeted(QueryContext* c, uint32_t now, Write write);
  bool ShouldPrefetch(const partitions::CacheEntry& e, uint32_t now);
  // The same for a subscriber segment (its own TTL: segments sharing an
  // answer are learned apart).
  bool ShouldPrefetch(const partitions::Segment& s, uint32_t now);
  // One refresh per entry (or segment: `key` its id) per second (prefetches
  // and optimistic stale answers).
  bool ClaimRefresh(const partitions::CacheEntry& e, uint32_t now) { return ClaimRefresh(e.hash(), now); }
  bool ClaimRefresh(uint64_t key, uint32_t now);

  HandlerOptions options_;
  dns::ParseOptions parse_options_;
  SharedState* shared_;
  WorkerCounters* counters_;
  common::CidrSet allow_;               // options_.allow
  common::CidrSet trusted_forwarders_;  // options_.trusted_forwarders
  RateLimiter limiter_;
  partitions::SwrrTable swrr_;
  AnswerCounters answers_;
  std::unique_ptr<OwnedCounter[]> lookups_{new OwnedCounter[kPartitionSlots]};
  std::unique_ptr<OwnedCounter[]> hits_{new OwnedCounter[kPartitionSlots]};
  OwnedCounter tiers_[kAdaptiveTiers];
  // Prefetches asked for recently, by entry hash: at most one per entry per
  // second from this worker (the forwarder coalesces across workers).
  std::vector<std::pair<uint64_t, uint32_t>> prefetched_;
  // Reused per packet: no allocation. single_ for Handle, burst_ for the
  // slots of HandleBurst.
  QueryContext single_;
  std::unique_ptr<QueryContext[]> burst_{new QueryContext[kMaxBurst]};
};

}  // namespace weir::fastpath
