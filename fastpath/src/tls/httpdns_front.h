// HTTPDNS on the encrypted front's server (docs/httpdns.md): the HTTP API
// app SDKs ask for a host's addresses. TlsServer hands it the requests whose
// target is the API's (dns::httpdns::IsHttpDnsTarget), on the DoH port
// (HTTPS) and on [httpdns] http_port (plain HTTP/1.1 and HTTP/2).
//
// A request: parsed (dns::httpdns::ParseRequest), its account looked up in
// the node's accounts and its signature checked, the quotas taken (per
// source prefix, per account), then one DNS query per host and family on the
// front's WorkerCore slot, exactly as a DoH query: the partition is the
// requesting address's, or ip='s when the request is signed (HMAC form) or
// comes from a trusted caller; weighted sets are answered ordered (the SWRR
// pick first); an expired entry is answered at once, marked stale, while it
// is refreshed. Answers the cache has are added at once; misses come back
// through SendHeld with the sub-query's route token (the connection id, and
// a stream number with the top bit set: IsSubQuery). The JSON goes out when
// the last host is answered. A connection that closes drops its requests.
//
// Threading: the front's thread only, but Stats() copies made there and the
// latency histograms (read from any thread).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "weir/common/histogram.h"
#include "weir/common/ip.h"
#include "weir/common/prometheus.h"
#include "weir/dns/httpdns.h"
#include "weir/fastpath/config.h"
#include "weir/fastpath/metrics.h"
#include "weir/fastpath/node.h"
#include "weir/fastpath/rate_limiter.h"
#include "weir/fastpath/worker_core.h"
#include "weir/net/http_session.h"

namespace weir::fastpath::tls {

// A route token of the encrypted front: the connection id (high 32 bits)
// and the HTTP stream, or an HTTPDNS sub-query (low 32 bits; 0 for DoT).
inline uint64_t RouteToken(uint32_t conn, uint32_t stream) { return (uint64_t{conn} << 32) | stream; }

// `per_second` per source prefix, the prefixes those of the front's
// connection limits (TLS handshakes, HTTPDNS requests).
RateLimitOptions PerSourceRate(uint32_t per_second, const net::TcpConnectionLimits& prefixes);

// Per account (the name; "-" for anonymous requests, "?" for requests that
// named no account weir knows: never the name sent, so a scan cannot grow
// the label set).
struct HttpDnsAccountStats {
  std::array<uint64_t, 2> requests{};  // by dns::httpdns::Api
  uint64_t hosts = 0;                  // hosts asked in requests that were served
  std::array<uint64_t, static_cast<size_t>(dns::httpdns::ErrorCode::kCount)> errors{};
  std::map<std::string, uint64_t, std::less<>> results;  // per host: "ok", "nxdomain", "no_ip", ...
  uint64_t ip_honoured = 0, ip_ignored = 0;
  uint64_t stale = 0;  // hosts answered from a stale entry
  // Server time per API, in kResponseLatencyBounds buckets (not cumulative).
  std::array<std::array<uint64_t, kResponseLatencyBounds.size() + 1>, 2> latency{};
  std::array<double, 2> latency_sum{};
  void Observe(dns::httpdns::Api api, double seconds);
};

struct HttpDnsStats {
  std::map<std::string, HttpDnsAccountStats, std::less<>> accounts;
  uint64_t pending = 0;          // requests waiting for an upstream answer
  uint64_t pending_queries = 0;  // their DNS queries still out
};

class HttpDnsFront {
 public:
  // Sends the response to `stream` of connection `conn` (the server looks
  // the connection up; gone: nothing).
  using Responder = std::function<void(uint32_t conn, uint32_t stream, const net::HttpResponse& response)>;

  HttpDnsFront(Node& node, WorkerCore& core, int slot, const HttpDnsConfig& config,
               const net::TcpConnectionLimits& prefixes, Responder respond);

  // A stream number of a sub-query's route token (never an HTTP stream's:
  // HTTP/2 stream ids stay below 2^31, and TlsServer ends an HTTP/1.1
  // connection whose sequence numbers reach it).
  static bool IsSubQuery(uint32_t stream) { return (stream & kSubQueryBit) != 0; }

  // Request `request` on connection `conn` from `client` (port `port`;
  // behind a PROXY header, the header's). `tls`: over HTTPS.
  void OnRequest(uint32_t conn, const common::IpAddress& client, uint16_t port, bool tls,
                 const net::HttpRequest& request);
  // SendHeld's answer for sub-query `stream` of connection `conn`.
  void OnAnswer(uint32_t conn, uint32_t stream, std::span<const uint8_t> answer, const AnswerInfo& info);
  // Connection `conn` closed: its requests are dropped.
  void ConnectionClosed(uint32_t conn);

  HttpDnsStats Stats() const;

 private:
  static constexpr uint32_t kSubQueryBit = 0x80000000u;
  struct Pending {  // a request waiting for upstream answers
    uint32_t conn = 0;
    uint32_t stream = 0;
    dns::httpdns::Request request;
    std::vector<dns::httpdns::HostAnswer> answers;
    uint32_t outstanding = 0;
    common::IpAddress client_ip;  // whose partition
    bool ip_ignored = false;
    std::string account;  // the stats label
    std::chrono::steady_clock::time_point started;
    std::vector<uint64_t> subs;  // route tokens of the sub-queries still out
  };
  struct SubQuery {
    uint64_t request = 0;  // the Pending's key
    uint16_t host = 0;
    uint16_t qtype = 0;
  };
  struct Bucket {  // an account's requests per second
    double tokens = 0;
    std::chrono::steady_clock::time_point last{};
  };

  // The account `name` names in the node's current accounts (null: none).
  const dns::httpdns::Account* FindAccount(std::string_view name);
  bool TakeAccountToken(const std::string& name, uint32_t rps);
  void Fail(uint32_t conn, uint32_t stream, std::string_view account, dns::httpdns::ErrorCode code,
            std::string_view message, std::chrono::steady_clock::time_point started,
            dns::httpdns::Api api = dns::httpdns::Api::kSingle, int status = 0);  // 0: the code's
  void Finish(uint64_t key);
  HttpDnsAccountStats& AccountStats(std::string_view label);

  Node& node_;
  WorkerCore& core_;
  int slot_;
  const HttpDnsConfig& config_;
  Responder respond_;
  RateLimiter source_limiter_;
  std::shared_ptr<const std::vector<dns::httpdns::Account>> accounts_;  // the index's source
  std::unordered_map<std::string, const dns::httpdns::Account*> index_;
  std::unordered_map<std::string, Bucket> buckets_;
  std::unordered_map<uint64_t, Pending> pending_;
  std::unordered_map<uint64_t, SubQuery> subs_;  // by route token
  std::unordered_map<uint32_t, std::vector<uint64_t>> by_conn_;
  uint32_t next_sub_ = 0;
  std::vector<uint8_t> out_;
  std::string tap_extra_;  // dnstap's extra field while a request's queries are handled
  HttpDnsStats stats_;
};

}  // namespace weir::fastpath::tls
