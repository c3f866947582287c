#include "control.h"

#include <cstdlib>

#include "weir/common/text.h"

namespace weir::recursor {

using common::Cat;

namespace {

// ,"tcp_connections":N,"tcp_accepted":N,"tcp_closed_<reason>":N... (the
// front's connection table; docs/metrics.md).
std::string TcpStatsJson(const net::TcpConnectionTable::Stats& st) {
  std::string out = Cat(",\"tcp_connections\":", st.open.load(std::memory_order_relaxed),
                        ",\"tcp_accepted\":", st.accepted.load(std::memory_order_relaxed));
  for (size_t r = 0; r < st.closed.size(); ++r) {
    out += Cat(",\"tcp_closed_", net::TcpCloseReasonName(static_cast<net::TcpCloseReason>(r)),
               "\":", st.closed[r].load(std::memory_order_relaxed));
  }
  return out;
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
  return Cat(
      "{\"queries\":", q.queries, ",\"udp\":", f.udp, ",\"tcp\":", f.tcp, ",\"refused_acl\":", q.refused_acl,
      ",\"formerr\":", q.formerr, ",\"dropped\":", q.dropped, ",\"notimp\":", q.notimp,
      ",\"ordinary_hits\":", ow.hits, ",\"ordinary_misses\":", ow.misses, ",\"tagged_hits\":", tw.hits,
      ",\"tagged_misses\":", tw.misses, ",\"coalesced\":", ow.coalesced + tw.coalesced,
      ",\"stale_served\":", ow.stale_served + tw.stale_served,
      ",\"prefetches\":", ow.prefetches + tw.prefetches, ",\"servfail\":", p_.replies->servfail(),
      ",\"learned_tagged\":", o.learned_tagged, ",\"ub_queries\":", o.resolver_queries + z.resolver_queries,
      ",\"ub_restarts\":", p_.ub != nullptr ? p_.ub->restarts() : 0, ",\"cut_lookups\":", z.lookups,
      ",\"cut_cache_hits\":", z.cache_hits, ",\"upstream_queries\":", t.upstream_queries,
      ",\"upstream_tcp\":", l.upstream_tcp, ",\"upstream_timeouts\":", t.upstream_timeouts,
      ",\"ecs_sent\":", t.ecs_sent, ",\"ecs_retry_without\":", t.ecs_retry_without,
      ",\"ecs_forged\":", t.ecs_forged, ",\"ecs_unsolicited\":", t.ecs_unsolicited,
      ",\"spoofed_dropped\":", l.spoofed_dropped, ",\"malformed_replies\":", l.malformed_replies,
      ",\"unwanted_case\":", l.unwanted[2], ",\"unwanted_cookie\":", l.unwanted[3],
      ",\"unwanted_reactions\":", l.reactions[0] + l.reactions[1] + l.reactions[2] + l.reactions[3],
      ",\"case_fallbacks\":", l.case_fallbacks, ",\"cookies_sent\":", l.cookies_sent,
      ",\"out_of_bailiwick\":", t.out_of_bailiwick, ",\"truncated\":", l.truncated,
      ",\"weights_invalid\":", t.weights_invalid, ",\"referrals\":", t.referrals,
      ",\"inflight_limited\":", ow.inflight_limited + tw.inflight_limited,
      ",\"control_refused\":", f.control_refused, ",\"accept_paused\":", f.accept_paused,
      ",\"tcp_reads_paused\":", f.tcp_reads_paused, ",\"tcp_unsent_closed\":", f.tcp_unsent_closed,
      ",\"tcp_unsent_bytes\":", p_.front->unsent_bytes(), TcpStatsJson(p_.front->tcp_stats()),
      ",\"tagged_names\":", p_.tagged->tagged_names(), ",\"plain_entries\":", p_.ordinary->entries(),
      ",\"zero_source_entries\":", p_.tagged->zero_source_entries(), ",\"zone_cuts\":", p_.cuts->size(),
      ",\"evictions\":", p_.ordinary->evictions() + p_.tagged->evictions() + p_.cuts->evictions(),
      ",\"in_flight\":", p_.ordinary->in_flight() + p_.tagged->in_flight(),
      ",\"cname_loops\":", t.cname_loops, ",\"cname_chain_too_long\":", t.cname_chain_too_long,
      ",\"deadline_servfail\":", ow.deadline_servfail + tw.deadline_servfail,
      ",\"deadline_stale\":", ow.deadline_stale + tw.deadline_stale,
      ",\"negative_uncached\":", ow.negative_uncached + tw.negative_uncached,
      ",\"cut_failures\":", z.failures, ",\"log_suppressed\":", p_.log->suppressed(),
      ",\"dnstap_sent\":", tap.sent, ",\"dnstap_dropped\":", tap.dropped,
      ",\"dnstap_sampled_out\":", tap.sampled_out, "}");
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
