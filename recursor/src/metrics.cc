#include "metrics.h"

#include <array>
#include <span>

#include "weir/dns/wire.h"

namespace weir::recursor {

namespace {

// One sample per tier: the ordinary (libunbound) and the tagged (weir's own
// last hop) resolution.
template <typename T>
void ByTier(common::PrometheusWriter::Family& f, T ordinary, T tagged) {
  f.Add({{"tier", "ordinary"}}, ordinary);
  f.Add({{"tier", "tagged"}}, tagged);
}

}  // namespace

void WriteRecursorMetrics(const Control::Parts& p, common::PrometheusWriter& w) {
  const QueryRouter::Stats& q = p.router->stats();
  const Front::Stats& f = p.front->stats();
  const OrdinaryResolver::Stats& o = p.ordinary->stats();
  const TaggedResolver::Stats& t = p.tagged->stats();
  const SocketLastHop::Stats& l = p.last_hop->stats();
  const ZoneCutFinder::Stats& z = p.cuts->stats();
  const WaitStats& ow = o.wait;
  const WaitStats& tw = t.wait;

  // The front.
  auto& queries = w.Counter("weir_recursor_queries_total", "Queries received from the fronts, by transport.");
  queries.Add({{"transport", "udp"}}, f.udp);
  queries.Add({{"transport", "tcp"}}, f.tcp);
  auto& responses = w.Counter("weir_recursor_responses_total",
                              "Responses sent, by RCODE (its name: NOERROR, SERVFAIL, ...).");
  const auto& rcodes = p.replies->responses();
  for (size_t r = 0; r < rcodes.size(); ++r) {
    // The RCODEs weir writes are always there, so that rate() sees their first one.
    const bool always = r <= 5 || r == static_cast<size_t>(dns::Rcode::kBadVers);
    if (always || rcodes[r] != 0)
      responses.Add({{"rcode", dns::RcodeName(static_cast<unsigned>(r))}}, rcodes[r]);
  }
  auto& drops =
      w.Counter("weir_recursor_drops_total",
                "Queries refused, answered with an error or dropped before any resolution, by reason.");
  drops.Add({{"reason", "acl"}}, q.refused_acl);
  drops.Add({{"reason", "formerr"}}, q.formerr);
  drops.Add({{"reason", "garbage"}}, q.dropped);
  drops.Add({{"reason", "notimp"}}, q.notimp);
  auto& cookies =
      w.Counter("weir_recursor_cookie_queries_total",
                "Parsed queries by the verdict on their DNS COOKIE option (server cookies, RFC 7873 and "
                "9018): none, client_only, valid, invalid, malformed.");
  static constexpr const char* kCookieVerdicts[] = {"none", "client_only", "valid", "invalid", "malformed"};
  static_assert(std::size(kCookieVerdicts) == dns::ServerCookies::kVerdicts);
  for (size_t i = 0; i < q.cookies.size(); ++i) cookies.Add({{"verdict", kCookieVerdicts[i]}}, q.cookies[i]);
  w.Counter(
       "weir_recursor_badcookie_total",
       "UDP queries answered BADCOOKIE with a fresh server cookie (require_cookies: no valid server cookie).")
      .Add({}, q.badcookie);
  w.Counter("weir_recursor_control_refused_total",
            "Control connections closed at accept: source not allowed.")
      .Add({}, f.control_refused);
  w.Counter("weir_recursor_accept_paused_total",
            "Times accepting TCP connections paused (descriptors exhausted).")
      .Add({}, f.accept_paused);
  w.Counter(
       "weir_recursor_tcp_reads_paused_total",
       "Times a front TCP connection stopped being read: its unsent answers passed tcp_max_unsent_bytes.")
      .Add({}, f.tcp_reads_paused);
  w.Counter("weir_recursor_tcp_unsent_closed_total",
            "Front TCP connections closed because they did not read their answers.")
      .Add({}, f.tcp_unsent_closed);
  w.Gauge("weir_recursor_tcp_unsent_bytes", "Answers queued for front TCP connections, in bytes.")
      .Add({}, p.front->unsent_bytes());
  const net::TcpConnectionTable::Stats& tcp = p.front->tcp_stats();
  w.Counter("weir_recursor_tcp_connections_accepted_total",
            "Front TCP connections accepted (those refused at once included).")
      .Add({}, tcp.accepted.load(std::memory_order_relaxed));
  auto& closed = w.Counter("weir_recursor_tcp_connections_closed_total",
                           "Front TCP connections closed or refused at accept, by reason (docs/metrics.md).");
  for (size_t r = 0; r < tcp.closed.size(); ++r) {
    closed.Add({{"reason", net::TcpCloseReasonName(static_cast<net::TcpCloseReason>(r))}},
               tcp.closed[r].load(std::memory_order_relaxed));
  }
  w.Gauge("weir_recursor_tcp_connections", "Front TCP connections open.")
      .Add({}, tcp.open.load(std::memory_order_relaxed));

  // The caches and the waits.
  ByTier(w.Counter("weir_recursor_cache_hits_total", "Queries answered from the cache, by tier."), ow.hits,
         tw.hits);
  ByTier(w.Counter("weir_recursor_cache_misses_total", "Queries the cache could not answer, by tier."),
         ow.misses, tw.misses);
  ByTier(w.Counter("weir_recursor_coalesced_total",
                   "Misses that joined a resolution already in flight, by tier."),
         ow.coalesced, tw.coalesced);
  ByTier(w.Counter("weir_recursor_stale_served_total", "Expired answers served (RFC 8767), by tier."),
         ow.stale_served, tw.stale_served);
  ByTier(w.Counter("weir_recursor_prefetches_total", "Resolutions started before an entry expired, by tier."),
         ow.prefetches, tw.prefetches);
  ByTier(
      w.Counter("weir_recursor_inflight_limited_total",
                "Queries answered stale or SERVFAIL at once because max_inflight resolutions were running."),
      ow.inflight_limited, tw.inflight_limited);
  auto& deadline = w.Counter("weir_recursor_deadline_total",
                             "Queries answered at answer_deadline_ms, by outcome and tier.");
  deadline.Add({{"outcome", "stale"}, {"tier", "ordinary"}}, ow.deadline_stale);
  deadline.Add({{"outcome", "stale"}, {"tier", "tagged"}}, tw.deadline_stale);
  deadline.Add({{"outcome", "servfail"}, {"tier", "ordinary"}}, ow.deadline_servfail);
  deadline.Add({{"outcome", "servfail"}, {"tier", "tagged"}}, tw.deadline_servfail);
  ByTier(w.Counter("weir_recursor_negative_uncached_total",
                   "Negative answers not cached (no usable SOA), by tier."),
         ow.negative_uncached, tw.negative_uncached);
  ByTier(w.Gauge("weir_recursor_in_flight", "Resolutions in flight, by tier."), p.ordinary->in_flight(),
         p.tagged->in_flight());
  auto& entries = w.Gauge("weir_recursor_cache_entries", "Entries in each cache.");
  entries.Add({{"cache", "ordinary"}}, p.ordinary->entries());
  entries.Add({{"cache", "tagged_zero_source"}}, p.tagged->zero_source_entries());
  entries.Add({{"cache", "zone_cuts"}}, p.cuts->size());
  w.Gauge("weir_recursor_tagged_names", "Names in the tagged tier's ECS-scope cache.")
      .Add({}, p.tagged->tagged_names());
  auto& evictions =
      w.Counter("weir_recursor_cache_evictions_total", "Entries evicted to make room, by cache.");
  evictions.Add({{"cache", "ordinary"}}, p.ordinary->evictions());
  evictions.Add({{"cache", "tagged"}}, p.tagged->evictions());
  evictions.Add({{"cache", "zone_cuts"}}, p.cuts->evictions());
  w.Counter("weir_recursor_learned_tagged_total",
            "Ordinary names whose CNAME chain led into a tagged suffix, resolved on by the tagged tier.")
      .Add({}, o.learned_tagged);

  // libunbound and the zone cuts.
  auto& resolver =
      w.Counter("weir_recursor_resolver_queries_total", "Queries handed to libunbound, by purpose.");
  resolver.Add({{"purpose", "answer"}}, o.resolver_queries);
  resolver.Add({{"purpose", "zone_cut"}}, z.resolver_queries);
  w.Counter(
       "weir_recursor_resolver_restarts_total",
       "Times libunbound's resolving process ended and a new one was started (lookups in flight failed).")
      .Add({}, p.ub != nullptr ? p.ub->restarts() : 0);
  w.Counter("weir_recursor_zone_cut_lookups_total", "Zone-cut walks started.").Add({}, z.lookups);
  w.Counter("weir_recursor_zone_cut_cache_hits_total", "Zone cuts found in the zone-cut cache.")
      .Add({}, z.cache_hits);
  w.Counter("weir_recursor_zone_cut_failures_total",
            "Zone-cut walks that found no cut with server addresses.")
      .Add({}, z.failures);

  // The tagged tier's last hop.
  w.Counter("weir_recursor_upstream_queries_total", "Queries sent to authoritative servers by the last hop.")
      .Add({}, t.upstream_queries);
  w.Counter("weir_recursor_upstream_timeouts_total", "Last-hop queries that timed out.")
      .Add({}, t.upstream_timeouts);
  w.Counter(
       "weir_recursor_upstream_tcp_total",
       "Last-hop queries asked again over TCP: after a truncated answer, or as the reaction to spoofing.")
      .Add({}, l.upstream_tcp);
  w.Counter("weir_recursor_upstream_truncated_total", "Truncated (TC) last-hop answers.")
      .Add({}, l.truncated);
  w.Counter("weir_recursor_upstream_malformed_total", "Last-hop answers that did not parse.")
      .Add({}, l.malformed_replies);
  w.Counter("weir_recursor_upstream_spoofed_total",
            "Last-hop answers dropped: wrong ID or question (possible spoofing).")
      .Add({}, l.spoofed_dropped);
  auto& unwanted = w.Counter("weir_recursor_unwanted_replies_total",
                             "Last-hop UDP replies that were not the answer to the query on their socket, by "
                             "what gave them away (id, question, case: 0x20, cookie: RFC 7873).");
  static constexpr const char* kUnwanted[] = {"id", "question", "case", "cookie"};
  for (size_t i = 0; i < l.unwanted.size(); ++i) unwanted.Add({{"reason", kUnwanted[i]}}, l.unwanted[i]);
  auto& reactions = w.Counter(
      "weir_recursor_unwanted_reply_reactions_total",
      "Last-hop UDP queries dropped in flight and asked again over TCP because of possible spoofing, by "
      "trigger (threshold: unwanted_reply_threshold reached; case, cookie: a reply with the query's ID "
      "failed 0x20 or its cookie; badcookie: BADCOOKIE twice).");
  static constexpr const char* kTriggers[] = {"threshold", "case", "cookie", "badcookie"};
  for (size_t i = 0; i < l.reactions.size(); ++i) reactions.Add({{"trigger", kTriggers[i]}}, l.reactions[i]);
  w.Counter("weir_recursor_upstream_0x20_fallbacks_total",
            "Times an authoritative server answered over TCP with the question in another case; it is then "
            "asked without 0x20 for 15 minutes.")
      .Add({}, l.case_fallbacks);
  w.Counter("weir_recursor_upstream_cookies_sent_total", "Last-hop UDP queries sent with a DNS cookie.")
      .Add({}, l.cookies_sent);
  w.Counter("weir_recursor_upstream_cookie_retries_total",
            "Last-hop queries sent again with a fresh server cookie after BADCOOKIE (RFC 7873 5.3).")
      .Add({}, l.cookie_retries);
  w.Gauge("weir_recursor_upstream_cookie_servers", "Authoritative servers known to answer DNS cookies.")
      .Add({}, p.last_hop->cookie_servers());
  w.Counter("weir_recursor_upstream_out_of_bailiwick_total",
            "Last-hop records outside the server's zone, ignored.")
      .Add({}, t.out_of_bailiwick);
  p.last_hop->latency().Render(
      w.Histogram("weir_recursor_upstream_latency_seconds",
                  "Time from a last-hop query's send to its genuine answer, every server together."),
      {});
  w.Counter("weir_recursor_ecs_sent_total", "Last-hop queries sent with a client subnet (ECS).")
      .Add({}, t.ecs_sent);
  w.Counter("weir_recursor_ecs_retried_without_total",
            "Last-hop queries retried without ECS after the server failed with it.")
      .Add({}, t.ecs_retry_without);
  w.Counter("weir_recursor_ecs_forged_total",
            "Last-hop answers whose ECS did not match the query's, retried without ECS.")
      .Add({}, t.ecs_forged);
  w.Counter("weir_recursor_ecs_unsolicited_total",
            "Last-hop answers carrying ECS to a query sent without it.")
      .Add({}, t.ecs_unsolicited);
  w.Counter("weir_recursor_weights_invalid_total",
            "Last-hop answers with an invalid weight option (its weights ignored).")
      .Add({}, t.weights_invalid);
  w.Counter("weir_recursor_referrals_total", "Referrals to a deeper zone cut the last hop followed.")
      .Add({}, t.referrals);
  w.Counter("weir_recursor_cname_loops_total", "CNAME chains that looped, answered SERVFAIL.")
      .Add({}, t.cname_loops);
  w.Counter("weir_recursor_cname_chain_too_long_total",
            "CNAME chains longer than max_cname_chain, answered SERVFAIL.")
      .Add({}, t.cname_chain_too_long);
  if (p.relay != nullptr) {
    // libunbound's forwarders through weir's last hop (forwarder_relay.h);
    // the upstream families above count those queries too.
    const ForwarderRelay::Stats& r = p.relay->stats();
    auto& queries_relayed =
        w.Counter("weir_recursor_forwarder_relay_queries_total",
                  "Queries libunbound sent to its forwarders through weir's relay, and of "
                  "them those whose question was already in flight (outcome=coalesced).");
    queries_relayed.Add({{"outcome", "asked"}}, r.queries - r.coalesced);
    queries_relayed.Add({{"outcome", "coalesced"}}, r.coalesced);
    auto& relayed =
        w.Counter("weir_recursor_forwarder_relay_answers_total",
                  "Answers the relay gave libunbound: the forwarder's (result=answer) or SERVFAIL "
                  "when the forwarder failed or stayed silent (result=servfail).");
    relayed.Add({{"result", "answer"}}, r.answered);
    relayed.Add({{"result", "servfail"}}, r.servfail);
    w.Counter("weir_recursor_forwarder_relay_retries_total",
              "Relayed questions asked again after a UDP try timed out.")
        .Add({}, r.retries);
    w.Counter("weir_recursor_forwarder_relay_dropped_total",
              "Datagrams to the relay that were not a query, or found it full (max_inflight).")
        .Add({}, r.dropped);
    w.Gauge("weir_recursor_forwarder_relay_in_flight", "Relayed questions waiting for their forwarder.")
        .Add({}, p.relay->in_flight());
  }

  w.Counter("weir_recursor_log_lines_suppressed_total",
            "Repeated log lines left out by the rate limit (docs/logging.md).")
      .Add({}, p.log->suppressed());
  if (const dnstap::Writer* tap = p.dnstap ? p.dnstap() : nullptr) tap->RenderMetrics(w);
}

}  // namespace weir::recursor
