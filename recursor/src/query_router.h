// Query routing: every front query is parsed, checked against the ACL and
// answered with an error (FORMERR, BADVERS, REFUSED, NOTIMP) or routed by
// its tag: a name a weight, ecs or forward tag covers goes to the tagged
// resolver, any other to the ordinary one. Only a tag decides: ECS or the
// weight option in a query does not make a name tagged.
//
// Threading: the recursor's loop thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "front.h"
#include "ordinary_resolver.h"
#include "weir/common/ip.h"
#include "weir/partitions/tagtable.h"
#include "weir/recursor/config.h"
#include "weir/recursor/tagged_resolver.h"

namespace weir::recursor {

class QueryRouter {
 public:
  struct Stats {
    uint64_t queries = 0, refused_acl = 0, formerr = 0, dropped = 0, notimp = 0;
  };

  QueryRouter(const RecursorConfig& cfg, const TaggedResolver::Tags& tags, FrontReplies& replies,
              OrdinaryResolver& ordinary, TaggedResolver& tagged);

  // `pkt` is valid during the call only.
  void HandleQuery(std::span<const uint8_t> pkt, const FrontRef& to);
  const Stats& stats() const { return stats_; }

 private:
  const RecursorConfig& cfg_;
  const common::CidrSet allow_;  // cfg_.allow
  dns::ParseOptions parse_options_;
  const TaggedResolver::Tags& tags_;
  FrontReplies& replies_;
  OrdinaryResolver& ordinary_;
  TaggedResolver& tagged_;
  Stats stats_;
};

}  // namespace weir::recursor
