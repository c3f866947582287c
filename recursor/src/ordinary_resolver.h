// Ordinary names (no weight, ecs or forward tag covers them): resolved by
// libunbound behind Resolver, cached with their TTLs (bounded, serve-stale,
// prefetch), one fetch per (name, type, class) in flight with the later
// queries waiting on it. A CNAME chain that enters a tagged suffix makes
// the name tagged (docs/behaviour.md#domain-tags): its waiters move to the tagged resolver with
// the chain so far.
//
// Threading: the recursor's loop thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "front.h"
#include "weir/common/clock.h"
#include "weir/recursor/bounded_cache.h"
#include "weir/recursor/cache_policy.h"
#include "weir/recursor/config.h"
#include "weir/recursor/resolver.h"
#include "weir/recursor/tagged_resolver.h"
#include "weir/recursor/waiter.h"

namespace weir::recursor {

class OrdinaryResolver {
 public:
  struct Stats {
    WaitStats wait;
    uint64_t learned_tagged = 0;
    uint64_t resolver_queries = 0;  // the zone-cut finder counts its own
  };

  OrdinaryResolver(const RecursorConfig& cfg, const common::Clock& clock, Timers& timers,
                   const TaggedResolver::Tags& tags, Resolver& resolver, FrontReplies& replies,
                   InflightLimit& inflight, TaggedResolver& tagged, uint64_t seed);
  ~OrdinaryResolver();

  // Answers `w` from the cache or resolves it. The hot path: a hit copies
  // nothing of the query, allocates nothing (tests/recursor/
  // hit_path_alloc_test.cc) and reads no clock but the TTL clock.
  void Query(Waiter w);

  void EraseExpired(uint32_t now) { plain_.EraseExpired(now); }
  void Clear() { plain_.Clear(); }
  size_t entries() const { return plain_.size(); }
  uint64_t evictions() const { return plain_.evictions(); }
  size_t in_flight() const { return fetches_.size(); }
  const Stats& stats() const { return stats_; }
  // The answer cache, keyed by CacheKey(name, type, class), for weirctl's
  // cache commands (control_commands.h).
  using Cache = BoundedCache<std::string, PlainEntry>;
  Cache& cache() { return plain_; }
  const Cache& cache() const { return plain_; }

 private:
  struct Fetch;
  void OnResult(const std::string& key, const ResolverResult& result);
  void OnDeadline(const std::string& key);

  const RecursorConfig& cfg_;
  const CachePolicy policy_;
  dns::ParseOptions parse_options_;
  const common::Clock& clock_;
  Timers& timers_;
  const TaggedResolver::Tags& tags_;
  Resolver& resolver_;
  FrontReplies& replies_;
  InflightLimit& inflight_;
  TaggedResolver& tagged_;
  // Bounded ([cache] max_entries); entries expire at the end of their stale window.
  Cache plain_;
  absl::flat_hash_map<std::string, std::unique_ptr<Fetch>> fetches_;
  Stats stats_;
};

}  // namespace weir::recursor
