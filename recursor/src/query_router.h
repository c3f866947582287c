// Query routing: every front query is parsed, checked against the ACL and
// answered with an error (FORMERR, BADVERS, REFUSED, NOTIMP) or routed by
// its tag: a name a weight, ecs or forward tag covers goes to the tagged
// resolver, any other to the ordinary one. Only a tag decides: ECS or the
// weight option in a query does not make a name tagged. Its COOKIE option
// is judged first (front_cookies.h): every response to a query with a
// cookie carries a fresh server cookie; a malformed one is FORMERR, and
// with require_cookies a UDP query without a valid server cookie gets
// BADCOOKIE.
//
// Threading: the recursor's loop thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>

#include "front.h"
#include "front_cookies.h"
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
    // Parsed queries by the verdict on their COOKIE option (none with
    // server cookies off), and BADCOOKIE responses (require_cookies).
    std::array<uint64_t, dns::ServerCookies::kVerdicts> cookies{};
    uint64_t badcookie = 0;
  };

  QueryRouter(const RecursorConfig& cfg, const TaggedResolver::Tags& tags, FrontReplies& replies,
              OrdinaryResolver& ordinary, TaggedResolver& tagged);

  // `pkt` is valid during the call only.
  void HandleQuery(std::span<const uint8_t> pkt, const FrontRef& to);
  const Stats& stats() const { return stats_; }
  // The server cookies' secrets: Load before the first query, Reload on
  // the operator's reload.
  FrontCookies& cookies() { return cookies_; }
  const FrontCookies& cookies() const { return cookies_; }

 private:
  const common::CidrSet allow_;  // cfg_.allow
  dns::ParseOptions parse_options_;
  const TaggedResolver::Tags& tags_;
  FrontReplies& replies_;
  OrdinaryResolver& ordinary_;
  TaggedResolver& tagged_;
  FrontCookies cookies_;
  Stats stats_;
};

}  // namespace weir::recursor
