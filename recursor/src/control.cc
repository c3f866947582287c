#include "control.h"

#include <cstdlib>

#include <nlohmann/json.hpp>

#include "weir/common/text.h"

namespace weir::recursor {

using common::Cat;

namespace {

using Json = nlohmann::ordered_json;

// "tcp_connections", "tcp_accepted", "tcp_closed_<reason>"... (the front's
// connection table; docs/metrics.md).
void AddTcpStats(Json& out, const net::TcpConnectionTable::Stats& st) {
  out["tcp_connections"] = st.open.load(std::memory_order_relaxed);
  out["tcp_accepted"] = st.accepted.load(std::memory_order_relaxed);
  for (size_t r = 0; r < st.closed.size(); ++r) {
    out[Cat("tcp_closed_", net::TcpCloseReasonName(static_cast<net::TcpCloseReason>(r)))] =
        st.closed[r].load(std::memory_order_relaxed);
  }
}

}  // namespace

dnstap::Writer::Totals Control::DnstapTotals() const {
  const dnstap::Writer* w = p_.dnstap ? p_.dnstap() : nullptr;
  return w != nullptr ? w->totals() : dnstap::Writer::Totals{};
}

std::string Control::StatsJson() const {
  const dnstap::Writer::Totals tap = DnstapTotals();
  const QueryRouter::Stats& q = p_.router->stats();
  const Front::Stats& f = p_.front->stats();
  const OrdinaryResolver::Stats& o = p_.ordinary->stats();
  const TaggedResolver::Stats& t = p_.tagged->stats();
  const SocketLastHop::Stats& l = p_.last_hop->stats();
  const ZoneCutFinder::Stats& z = p_.cuts->stats();
  const WaitStats& ow = o.wait;
  const WaitStats& tw = t.wait;
  Json j;
  j["queries"] = q.queries;
  j["udp"] = f.udp;
  j["tcp"] = f.tcp;
  j["refused_acl"] = q.refused_acl;
  j["formerr"] = q.formerr;
  static constexpr const char* kCookieVerdicts[] = {"cookie_none", "cookie_client_only", "cookie_valid",
                                                    "cookie_invalid", "cookie_malformed"};
  for (size_t i = 0; i < q.cookies.size(); ++i) j[kCookieVerdicts[i]] = q.cookies[i];
  j["badcookie"] = q.badcookie;
  j["dropped"] = q.dropped;
  j["notimp"] = q.notimp;
  j["ordinary_hits"] = ow.hits;
  j["ordinary_misses"] = ow.misses;
  j["tagged_hits"] = tw.hits;
  j["tagged_misses"] = tw.misses;
  j["coalesced"] = ow.coalesced + tw.coalesced;
  j["stale_served"] = ow.stale_served + tw.stale_served;
  j["prefetches"] = ow.prefetches + tw.prefetches;
  j["servfail"] = p_.replies->servfail();
  j["learned_tagged"] = o.learned_tagged;
  j["ub_queries"] = o.resolver_queries + z.resolver_queries;
  j["ub_restarts"] = p_.ub != nullptr ? p_.ub->restarts() : 0;
  j["cut_lookups"] = z.lookups;
  j["cut_cache_hits"] = z.cache_hits;
  j["upstream_queries"] = t.upstream_queries;
  j["upstream_tcp"] = l.upstream_tcp;
  j["upstream_timeouts"] = t.upstream_timeouts;
  j["ecs_sent"] = t.ecs_sent;
  j["ecs_retry_without"] = t.ecs_retry_without;
  j["ecs_forged"] = t.ecs_forged;
  j["ecs_unsolicited"] = t.ecs_unsolicited;
  j["spoofed_dropped"] = l.spoofed_dropped;
  j["malformed_replies"] = l.malformed_replies;
  j["unwanted_case"] = l.unwanted[2];
  j["unwanted_cookie"] = l.unwanted[3];
  j["unwanted_reactions"] = l.reactions[0] + l.reactions[1] + l.reactions[2] + l.reactions[3];
  j["case_fallbacks"] = l.case_fallbacks;
  j["cookies_sent"] = l.cookies_sent;
  j["out_of_bailiwick"] = t.out_of_bailiwick;
  j["truncated"] = l.truncated;
  j["weights_invalid"] = t.weights_invalid;
  j["referrals"] = t.referrals;
  j["inflight_limited"] = ow.inflight_limited + tw.inflight_limited;
  j["control_refused"] = f.control_refused;
  j["accept_paused"] = f.accept_paused;
  j["tcp_reads_paused"] = f.tcp_reads_paused;
  j["tcp_unsent_closed"] = f.tcp_unsent_closed;
  j["tcp_unsent_bytes"] = p_.front->unsent_bytes();
  AddTcpStats(j, p_.front->tcp_stats());
  j["tagged_names"] = p_.tagged->tagged_names();
  j["plain_entries"] = p_.ordinary->entries();
  j["zero_source_entries"] = p_.tagged->zero_source_entries();
  j["zone_cuts"] = p_.cuts->size();
  j["evictions"] = p_.ordinary->evictions() + p_.tagged->evictions() + p_.cuts->evictions();
  j["in_flight"] = p_.ordinary->in_flight() + p_.tagged->in_flight();
  j["cname_loops"] = t.cname_loops;
  j["cname_chain_too_long"] = t.cname_chain_too_long;
  j["deadline_servfail"] = ow.deadline_servfail + tw.deadline_servfail;
  j["deadline_stale"] = ow.deadline_stale + tw.deadline_stale;
  j["negative_uncached"] = ow.negative_uncached + tw.negative_uncached;
  j["cut_failures"] = z.failures;
  j["log_suppressed"] = p_.log->suppressed();
  j["dnstap_sent"] = tap.sent;
  j["dnstap_dropped"] = tap.dropped;
  j["dnstap_sampled_out"] = tap.sampled_out;
  return j.dump();
}

std::string Control::Handle(const std::string& line) {
  if (line == "stats") return StatsJson();
  if (line.rfind("advance-clock ", 0) == 0) {
    if (p_.test_clock == nullptr) return "error: not started with --test-clock";
    p_.test_clock->Advance(static_cast<uint32_t>(std::strtoul(line.c_str() + 14, nullptr, 10)));
    return "ok";
  }
  if (line == "flush") {
    p_.ordinary->Clear();
    p_.tagged->Clear();
    p_.cuts->Clear();
    return "ok";
  }
  if (line == "reload-tags") {
    const absl::Status st = p_.reload_tags();
    return st.ok() ? "ok" : Cat("error: ", common::ToStd(st.message()));
  }
  return "commands: stats | advance-clock N | flush | reload-tags";
}

}  // namespace weir::recursor
