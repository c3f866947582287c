// Zone cuts of tagged names: which zone holds a name and the addresses of
// its servers, found through the resolver (never with ECS: these are derived
// queries) and cached by zone, so every name of a zone shares one entry.
//
// A lookup asks NS for the name; a NODATA/NXDOMAIN names the zone by its
// SOA (then NS of that zone); a CNAME, SERVFAIL or no answer moves one label
// up. Then A (and AAAA with do_ip6) of up to 6 NS names; at most 16
// addresses are kept. The cut is cached for min(NS and address TTLs,
// max_ttl). Concurrent lookups for one name share one walk.
//
// Threading: every call on the owning loop's thread; `done` callbacks run
// from Resolver callbacks (never inside Find()).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "weir/common/clock.h"
#include "weir/common/socket_address.h"
#include "weir/dns/message.h"
#include "weir/recursor/bounded_cache.h"
#include "weir/recursor/resolver.h"

namespace weir::recursor {

struct ZoneCut {
  dns::NameKey cut;
  std::vector<common::SocketAddress> servers;
  uint32_t expires = 0;  // clock seconds
};

class ZoneCutFinder {
 public:
  struct Options {
    bool do_ip6 = true;
    uint32_t max_ttl = 3600;
    size_t max_entries = 10000;
  };
  struct Stats {
    uint64_t lookups = 0;           // walks started (shared ones once)
    uint64_t failures = 0;          // walks that found no cut with addresses
    uint64_t resolver_queries = 0;  // NS and address queries sent
    uint64_t cache_hits = 0;
  };
  // nullptr: no cut with server addresses was found for the name.
  using Done = std::function<void(const ZoneCut* cut)>;
  using Log = std::function<void(const std::string& line)>;

  ZoneCutFinder(Resolver& resolver, const common::Clock& clock, Options options, Log log);
  ~ZoneCutFinder();

  // The deepest cached, unexpired cut at or above `name`, or nullptr.
  const ZoneCut* Cached(const dns::NameKey& name);
  // Looks up the cut of `name` (ignoring cached cuts above it: a referral
  // said they are not its zone) and caches what it finds.
  void Find(const dns::NameKey& name, Done done);

  void Clear() { cuts_.Clear(); }
  void EraseExpired(uint32_t now) { cuts_.EraseExpired(now); }
  size_t size() const { return cuts_.size(); }
  uint64_t evictions() const { return cuts_.evictions(); }
  const Stats& stats() const { return stats_; }
  // The cuts by zone (its name's canonical key), for weirctl's cache commands.
  using Cache = BoundedCache<std::string, ZoneCut>;
  Cache& cache() { return cuts_; }
  const Cache& cache() const { return cuts_; }

 private:
  struct Lookup;
  void QueryNs(const std::string& key);
  void OnNs(const std::string& key, const ResolverResult& result);
  void OnAddress(const std::string& key, const ResolverResult& result);
  void Finish(const std::string& key, bool ok);

  Resolver& resolver_;
  const common::Clock& clock_;
  const Options options_;
  Log log_;
  Cache cuts_;
  absl::flat_hash_map<std::string, std::unique_ptr<Lookup>> lookups_;
  Stats stats_;
};

}  // namespace weir::recursor
