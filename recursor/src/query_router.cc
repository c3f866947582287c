#include "query_router.h"

#include <cstring>
#include <utility>

#include "weir/dns/writer.h"

namespace weir::recursor {

QueryRouter::QueryRouter(const RecursorConfig& cfg, const TaggedResolver::Tags& tags, FrontReplies& replies,
                         OrdinaryResolver& ordinary, TaggedResolver& tagged)
    : allow_(cfg.allow), tags_(tags), replies_(replies), ordinary_(ordinary), tagged_(tagged), cookies_(cfg) {
  parse_options_.weight_option_code = cfg.weight_option_code;
}

void QueryRouter::HandleQuery(std::span<const uint8_t> pkt, const FrontRef& to) {
  ++stats_.queries;
  Waiter w;
  w.to = to;
  w.received = pkt;
  const dns::ParseError err = dns::ParseQuery(pkt, parse_options_, &w.q);
  const bool allowed = allow_.Contains(IpOf(w.to.peer));
  if (err != dns::ParseError::kOk) {
    uint8_t* out = replies_.buffer();
    if (err == dns::ParseError::kBadEdnsVersion) {
      // The ACL comes first: a source that is not a front learns nothing,
      // not even which EDNS versions weir speaks.
      dns::ResponseWriter rw(out, replies_.capacity());
      rw.BeginResponse(pkt, w.q, allowed ? dns::Rcode::kNoError : dns::Rcode::kRefused);
      if (allowed) {
        rw.BeginOpt(1232, false, 1);  // BADVERS (RFC 6891 6.1.3)
      } else {
        ++stats_.refused_acl;
      }
      replies_.Send(to, rw.Finish(to.tcp ? 65535 : 512),
                    allowed ? dns::Rcode::kBadVers : dns::Rcode::kRefused);
      return;
    }
    // A bare FORMERR header for anything that looks like a query from a
    // front; garbage, and anything from others, is dropped.
    if (pkt.size() < dns::kHeaderSize || (pkt[2] & 0x80) || !allowed) {
      ++stats_.dropped;
      replies_.Drop(to);
      return;
    }
    ++stats_.formerr;
    replies_.Send(to, dns::WriteHeaderOnly(pkt, dns::Rcode::kFormErr, /*ra=*/false, out, dns::kHeaderSize),
                  dns::Rcode::kFormErr);
    return;
  }
  using Verdict = FrontCookies::Verdict;
  Verdict cookie = Verdict::kNone;
  if (cookies_.enabled()) {
    // The wall clock is read only for queries with a cookie.
    cookie = cookies_.Judge(w.q, pkt, to.peer, w.q.edns.has_cookie ? WallSeconds() : 0, &w.cookie);
    ++stats_.cookies[static_cast<size_t>(cookie)];
    if (cookie != Verdict::kNone && cookie != Verdict::kMalformed) w.cookie_len = dns::ServerCookies::kOption;
  }
  if (!allowed) {
    ++stats_.refused_acl;
    return replies_.Error(w, dns::Rcode::kRefused);
  }
  if (cookie == Verdict::kMalformed) {
    ++stats_.formerr;  // RFC 7873 5.2.2
    return replies_.Error(w, dns::Rcode::kFormErr);
  }
  // RFC 7873 5.2.3/5.2.4: a client that sends cookies but not a valid
  // server cookie is told the one to use. Over TCP the address is proven,
  // and a query without any cookie is a client that does not do them:
  // both are answered.
  if (cookies_.required() && !to.tcp && (cookie == Verdict::kClientOnly || cookie == Verdict::kInvalid)) {
    ++stats_.badcookie;
    return replies_.Error(w, dns::Rcode::kBadCookie);
  }
  if (w.q.opcode() != 0) {
    ++stats_.notimp;
    return replies_.Error(w, dns::Rcode::kNotImp);
  }
  if (w.q.qclass != dns::klass::kIn) return replies_.Error(w, dns::Rcode::kRefused);
  // Only a tag decides: a name no tag covers is resolved by libunbound and
  // never sends ECS anywhere, whatever the query carried (a subscriber's
  // subnet goes only where the operator sent it). A forward tag sends its
  // names to its targets even without weight or ecs.
  const partitions::Tag* tag =
      tags_->Lookup(w.q.qname.span(), w.q.qname_labels.span());  // labels found by the parse
  const bool tagged =
      tag != nullptr &&
      (tag->weight || tag->ecs || (tag->policy == partitions::Policy::kForward && !tag->targets.empty()));
  if (tagged) return tagged_.Query(std::move(w), tag);
  ordinary_.Query(std::move(w));
}

}  // namespace weir::recursor
