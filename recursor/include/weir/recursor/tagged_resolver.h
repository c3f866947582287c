// Tagged names (weight and/or ecs in the tag table, or a forward tag) are
// resolved by weir's own last hop: the zone cut of the name and its servers
// come from the zone-cut finder (policy iterate) or from the tag (policy
// forward); weir queries them through a LastHopTransport with the front's
// ECS (only for steps an ecs tag covers) and the empty weight option,
// follows the CNAME chain (each step from its own cut) and caches the
// answer per ECS scope (RFC 7871 7.3), /0 answers apart.
//
// One Resolution per (name, type, ECS) in flight; later queries for it wait
// on it (coalesced). Each query to a server that times out or fails moves
// to the next server, up to [last_hop] attempts per step; servers that
// timed out lately go last (ServerHealth).
//
// Threading: every call on the owning loop's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "weir/common/clock.h"
#include "weir/common/log.h"
#include "weir/partitions/ecs_scope_cache.h"
#include "weir/partitions/tagtable.h"
#include "weir/recursor/answer.h"
#include "weir/recursor/bounded_cache.h"
#include "weir/recursor/cache_policy.h"
#include "weir/recursor/config.h"
#include "weir/recursor/last_hop.h"
#include "weir/recursor/last_hop_policy.h"
#include "weir/recursor/waiter.h"
#include "weir/recursor/zone_cuts.h"

namespace weir::recursor {

class TaggedResolver final : public LastHopTransport::Sink {
 public:
  struct Stats {
    WaitStats wait;
    uint64_t upstream_queries = 0, upstream_timeouts = 0, ecs_sent = 0, ecs_retry_without = 0;
    uint64_t ecs_forged = 0, ecs_unsolicited = 0, out_of_bailiwick = 0, weights_invalid = 0, referrals = 0;
    uint64_t cname_loops = 0, cname_chain_too_long = 0;
  };
  using Log = std::function<void(const std::string& line)>;
  // The current tag table; the owner replaces it between calls.
  using Tags = std::unique_ptr<const partitions::TagTable>;

  // `clock`: the TTL clock. `timers`: deadlines and the time of server
  // health. `seed`: server order and query IDs.
  TaggedResolver(const RecursorConfig& cfg, const common::Clock& clock, Timers& timers, const Tags& tags,
                 ZoneCutFinder& cuts, LastHopTransport& transport, Replies& replies, InflightLimit& inflight,
                 Log log, uint64_t seed);
  ~TaggedResolver() override;

  // Answers `w` from the cache or resolves it. `tag`: the tag of the name
  // (nullptr: the front marked it by sending ECS). `prefix`: a learned
  // name's chain so far (resolved by libunbound, docs/behaviour.md#domain-tags): the resolution
  // resumes at its target.
  void Query(Waiter w, const partitions::Tag* tag, std::vector<CachedRecord> prefix = {});

  void OnReply(uint64_t token, const dns::Message& reply) override;
  void OnFailure(uint64_t token, LastHopTransport::Failure why) override;

  // Drops expired cache entries (the periodic sweep).
  void EraseExpired(uint32_t now);
  void Clear();

  size_t tagged_names() const { return scoped_.size(); }
  size_t zero_source_entries() const { return zero_source_.size(); }
  uint64_t evictions() const { return scoped_.evictions() + zero_source_.evictions(); }
  size_t in_flight() const { return resolutions_.size(); }
  const Stats& stats() const { return stats_; }

  // The caches, keyed by CacheKey(name, type, 0), for weirctl's cache
  // commands: per name its answers by ECS scope, and the answers to ECS
  // source /0 queries.
  using ScopedCache = BoundedCache<std::string, partitions::EcsScopeCache<Answer>>;
  using ZeroSourceCache = BoundedCache<std::string, PlainEntry>;
  ScopedCache& scoped_cache() { return scoped_; }
  const ScopedCache& scoped_cache() const { return scoped_; }
  ZeroSourceCache& zero_source_cache() { return zero_source_; }
  const ZeroSourceCache& zero_source_cache() const { return zero_source_; }
  // Servers tried last for a while after a timeout.
  const ServerHealth& server_health() const { return server_health_; }

 private:
  struct Resolution;
  void Start(const dns::NameKey& qname, uint16_t qtype, const EcsChoice& ecs, Waiter* w, const Answer* stale,
             std::vector<CachedRecord> prefix);
  bool EcsTagCovers(const dns::NameKey& name) const;
  void StartStep(Resolution* r, bool force_iterate);
  void StartCut(Resolution* r);
  void BeginQueries(Resolution* r);
  void SendQuery(Resolution* r, bool same_server);
  void ProcessReply(Resolution* r, const dns::Message& m);
  void Complete(Resolution* r, uint16_t rcode, std::vector<CachedRecord> rrset,
                std::vector<CachedRecord> authority, bool weighted, std::vector<uint8_t> weights);
  void Fail(Resolution* r);
  void Erase(Resolution* r);
  void OnDeadline(uint64_t id);
  Resolution* Find(uint64_t id);

  const RecursorConfig& cfg_;
  const CachePolicy policy_;
  const EcsSettings ecs_settings_;
  const common::Clock& clock_;
  Timers& timers_;
  const Tags& tags_;
  ZoneCutFinder& cuts_;
  LastHopTransport& transport_;
  Replies& replies_;
  InflightLimit& inflight_;
  Log log_;
  // Refused answers, each reason on its own budget (log.h).
  common::RateLimitedLog timeout_log_{{.component = "upstream"}};
  common::RateLimitedLog bogus_log_{{.component = "upstream"}};
  common::RateLimitedLog forged_ecs_log_{{.component = "upstream"}};
  common::RateLimitedLog bailiwick_log_{{.component = "upstream"}};
  common::RateLimitedLog weights_log_{{.component = "upstream"}};
  std::mt19937_64 rng_;
  ServerHealth server_health_;
  // Per (qname, qtype): the scoped answers of that name (RFC 7871 7.3).
  ScopedCache scoped_;
  ZeroSourceCache zero_source_;  // answers for /0 queries only
  absl::flat_hash_map<uint64_t, std::unique_ptr<Resolution>> resolutions_;
  absl::flat_hash_map<std::string, uint64_t> resolution_by_key_;
  uint64_t next_id_ = 1;
  Stats stats_;
};

}  // namespace weir::recursor
