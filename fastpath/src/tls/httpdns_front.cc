#include "tls/httpdns_front.h"

#include <algorithm>
#include <ctime>
#include <utility>

#include "weir/common/log.h"
#include "weir/common/text.h"
#include "weir/dns/wire.h"

namespace weir::fastpath::tls {
namespace {

using common::Cat;
using dns::httpdns::ErrorCode;

constexpr std::string_view kAnonymous = "-";
constexpr std::string_view kUnknownAccount = "?";

uint64_t WallSeconds() { return static_cast<uint64_t>(std::time(nullptr)); }

double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

RateLimitOptions PerSourceRate(uint32_t per_second, const net::TcpConnectionLimits& prefixes) {
  RateLimitOptions r;
  r.qps = per_second;
  r.burst = per_second;
  r.ipv4_prefix = static_cast<uint8_t>(prefixes.source_prefix_v4);
  r.ipv6_prefix = static_cast<uint8_t>(prefixes.source_prefix_v6);
  r.table_size = 65536;
  return r;
}

void HttpDnsAccountStats::Observe(dns::httpdns::Api api, double seconds) {
  const auto a = static_cast<size_t>(api);
  size_t i = 0;
  while (i < kResponseLatencyBounds.size() && seconds > kResponseLatencyBounds[i]) ++i;
  ++latency[a][i];
  latency_sum[a] += seconds;
}

HttpDnsFront::HttpDnsFront(Node& node, WorkerCore& core, int slot, const HttpDnsConfig& config,
                           const net::TcpConnectionLimits& prefixes, Responder respond)
    : node_(node),
      core_(core),
      slot_(slot),
      config_(config),
      respond_(std::move(respond)),
      source_limiter_(PerSourceRate(config.rps_per_source, prefixes)),
      out_(65535 + 2) {}

HttpDnsAccountStats& HttpDnsFront::AccountStats(std::string_view label) {
  auto it = stats_.accounts.find(label);
  if (it == stats_.accounts.end())
    it = stats_.accounts.emplace(std::string(label), HttpDnsAccountStats{}).first;
  return it->second;
}

const dns::httpdns::Account* HttpDnsFront::FindAccount(std::string_view name) {
  std::shared_ptr<const std::vector<dns::httpdns::Account>> now = node_.accounts();
  if (now != accounts_) {
    accounts_ = std::move(now);
    index_.clear();
    for (const dns::httpdns::Account& a : *accounts_) index_[a.name] = &a;
    // Quotas carry over a push (a tag edit must not refill every account);
    // a removed account's bucket goes, a changed rps caps the bucket at once.
    std::erase_if(buckets_,
                  [&](const auto& kv) { return kv.first != kAnonymous && !index_.contains(kv.first); });
    // Metrics of accounts that are gone go with them.
    std::erase_if(stats_.accounts, [&](const auto& kv) {
      return kv.first != kAnonymous && kv.first != kUnknownAccount && !index_.contains(kv.first);
    });
  }
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : it->second;
}

bool HttpDnsFront::TakeAccountToken(const std::string& name, uint32_t rps) {
  if (rps == 0) return true;
  const auto now = std::chrono::steady_clock::now();
  auto [it, fresh] = buckets_.try_emplace(name);
  Bucket& b = it->second;
  b.tokens = fresh ? rps : std::min<double>(rps, b.tokens + Seconds(now - b.last) * rps);
  b.last = now;
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  return true;
}

void HttpDnsFront::Fail(uint32_t conn, uint32_t stream, std::string_view account, ErrorCode code,
                        std::string_view message, std::chrono::steady_clock::time_point started,
                        dns::httpdns::Api api, int status) {
  HttpDnsAccountStats& st = AccountStats(account);
  ++st.errors[static_cast<size_t>(code)];
  const std::string body = dns::httpdns::RenderError(code, message, WallSeconds());
  net::HttpResponse resp;
  resp.status = status != 0 ? status : dns::httpdns::ErrorStatus(code);
  resp.content_type = dns::httpdns::kJsonType;
  resp.cache_control = "no-store";
  if (code == ErrorCode::kQuotaExceeded) resp.retry_after = "1";
  resp.body = {reinterpret_cast<const uint8_t*>(body.data()), body.size()};
  respond_(conn, stream, resp);
  st.Observe(api, Seconds(std::chrono::steady_clock::now() - started));
}

void HttpDnsFront::OnRequest(uint32_t conn, const common::IpAddress& client, uint16_t port, bool tls,
                             const net::HttpRequest& http) {
  const auto started = std::chrono::steady_clock::now();
  const uint64_t wall = WallSeconds();
  if (http.target.size() > static_cast<size_t>(config_.max_url_bytes)) {
    return Fail(conn, http.id, kUnknownAccount, ErrorCode::kInvalidArgument,
                Cat("request target longer than ", config_.max_url_bytes, " bytes"), started,
                dns::httpdns::Api::kSingle, 414);
  }
  dns::httpdns::Request req =
      dns::httpdns::ParseRequest(http.method, http.target, static_cast<size_t>(config_.max_batch));
  // Quotas first: a flood of bad requests costs no parsing of accounts.
  if (source_limiter_.enabled()) {
    const uint32_t s = source_limiter_.Track(client, node_.NowSeconds());
    if (!source_limiter_.TakeQuery(s)) {
      return Fail(conn, http.id, kUnknownAccount, ErrorCode::kQuotaExceeded,
                  "too many requests from this source", started);
    }
  }
  if (req.error != ErrorCode::kNone) {
    const dns::httpdns::Account* a = req.account.empty() ? nullptr : FindAccount(req.account);
    return Fail(conn, http.id,
                req.account.empty() ? kAnonymous : (a != nullptr ? req.account : kUnknownAccount), req.error,
                req.message, started);
  }
  // Who is asking, and may they.
  std::string label(kAnonymous);
  dns::httpdns::SignatureForm form = dns::httpdns::SignatureForm::kUnsigned;
  uint32_t rps = config_.anonymous_rps;
  if (req.account.empty()) {
    if (!config_.anonymous) {
      return Fail(conn, http.id, kAnonymous, ErrorCode::kInvalidAccount,
                  "this server answers accounts only: name one in the path (/ACCOUNT/d)", started, req.api);
    }
    if (req.sign_path) {
      return Fail(conn, http.id, kAnonymous, ErrorCode::kInvalidAccount,
                  "a signed request needs an account: /ACCOUNT/sign_d", started, req.api);
    }
  } else {
    const dns::httpdns::Account* a = FindAccount(req.account);
    if (a == nullptr) {
      return Fail(conn, http.id, kUnknownAccount, ErrorCode::kInvalidAccount,
                  Cat("no account named \"", req.account, "\""), started, req.api);
    }
    const dns::httpdns::AuthResult auth = dns::httpdns::Authenticate(req, a, wall);
    if (auth.error != ErrorCode::kNone)
      return Fail(conn, http.id, a->name, auth.error, auth.message, started, req.api);
    label = a->name;
    form = auth.form;
    rps = a->rps;
  }
  if (!TakeAccountToken(label, rps)) {
    return Fail(conn, http.id, label, ErrorCode::kQuotaExceeded,
                "the account's requests per second are used up", started, req.api);
  }
  HttpDnsAccountStats& st = AccountStats(label);
  ++st.requests[static_cast<size_t>(req.api)];
  st.hosts += req.hosts.size();

  // Whose partition: ip= only when it is vouched for.
  Pending p;
  p.conn = conn;
  p.stream = http.id;
  p.client_ip = client;
  p.account = label;
  p.started = started;
  if (req.ip) {
    bool trusted = form == dns::httpdns::SignatureForm::kHmac;
    for (const common::Cidr& c : config_.trusted_callers) trusted = trusted || c.Contains(client);
    if (trusted) {
      p.client_ip = *req.ip;
      ++st.ip_honoured;
    } else {
      p.ip_ignored = true;
      ++st.ip_ignored;
    }
  }
  p.answers.resize(req.hosts.size());
  for (size_t i = 0; i < req.hosts.size(); ++i) {
    p.answers[i].host = req.hosts[i];
    if (!req.host_valid[i]) p.answers[i].code = "invalid_host";
  }
  p.request = std::move(req);
  const uint64_t key = RouteToken(conn, http.id);
  auto [slot, inserted] = pending_.insert_or_assign(key, std::move(p));
  Pending& pend = slot->second;
  by_conn_[conn].push_back(key);

  const uint16_t weight_code = node_.config().weight_option_code;
  ClientInfo info{pend.client_ip, true, port, tls ? StreamKind::kDoh : StreamKind::kTcp};
  info.ordered = true;
  info.optimistic = config_.optimistic;
  const uint32_t now = node_.NowSeconds();
  // dnstap: which account asked (never a secret).
  tap_extra_ = Cat("httpdns account=", label, " api=", dns::httpdns::ApiName(pend.request.api));
  core_.SetTapExtra(tap_extra_);
  for (size_t i = 0; i < pend.request.hosts.size(); ++i) {
    if (!pend.request.host_valid[i]) continue;
    for (const uint16_t qtype : {dns::type::kA, dns::type::kAaaa}) {
      if ((qtype == dns::type::kA && !pend.request.v4) || (qtype == dns::type::kAaaa && !pend.request.v6))
        continue;
      const std::vector<uint8_t> query =
          dns::httpdns::BuildQuery(pend.request.hosts[i], qtype, pend.request.weights, weight_code);
      uint32_t sub = 0;
      do {
        sub = kSubQueryBit | (next_sub_++ & ~kSubQueryBit);
      } while (subs_.contains(RouteToken(conn, sub)));
      const ClientRoute route{slot_, Transport::kTcp, RouteToken(conn, sub)};
      size_t out_len = 0;
      bool dropped = false;
      AnswerInfo ai;
      if (core_.HandleOne(query, info, route, now, out_.data(), out_.size(), &out_len, &dropped, &ai)) {
        dns::httpdns::AddAnswer({out_.data(), out_len}, qtype, weight_code, pend.request.weights,
                                ai.cached ? ai.origin_ttl : 0, ai.stale, &pend.answers[i]);
      } else if (dropped) {
        dns::httpdns::AddAnswer({}, qtype, weight_code, pend.request.weights, 0, false, &pend.answers[i]);
      } else {
        subs_[RouteToken(conn, sub)] = SubQuery{key, static_cast<uint16_t>(i), qtype};
        pend.subs.push_back(RouteToken(conn, sub));
        ++pend.outstanding;
      }
    }
  }
  core_.SetTapExtra({});
  if (pend.outstanding == 0) Finish(key);
}

void HttpDnsFront::OnAnswer(uint32_t conn, uint32_t stream, std::span<const uint8_t> answer,
                            const AnswerInfo& info) {
  auto s = subs_.find(RouteToken(conn, stream));
  if (s == subs_.end()) return;
  const SubQuery sub = s->second;
  subs_.erase(s);
  auto it = pending_.find(sub.request);
  if (it == pending_.end()) return;
  Pending& p = it->second;
  dns::httpdns::AddAnswer(answer, sub.qtype, node_.config().weight_option_code, p.request.weights,
                          info.cached ? info.origin_ttl : 0, info.stale, &p.answers[sub.host]);
  if (--p.outstanding == 0) Finish(sub.request);
}

void HttpDnsFront::Finish(uint64_t key) {
  auto it = pending_.find(key);
  if (it == pending_.end()) return;
  Pending p = std::move(it->second);
  pending_.erase(it);
  auto c = by_conn_.find(p.conn);
  if (c != by_conn_.end()) {
    std::erase(c->second, key);
    if (c->second.empty()) by_conn_.erase(c);
  }
  HttpDnsAccountStats& st = AccountStats(p.account);
  for (const dns::httpdns::HostAnswer& a : p.answers) {
    ++st.results[a.code.empty() ? "ok" : a.code];
    if (a.stale) ++st.stale;
  }
  const uint64_t wall = WallSeconds();
  const std::string body =
      p.request.api == dns::httpdns::Api::kSingle
          ? dns::httpdns::RenderSingle(p.answers.front(), p.request.v6, p.client_ip, p.ip_ignored, wall)
          : dns::httpdns::RenderBatch(p.answers, p.request.v6, p.client_ip, p.ip_ignored, wall);
  net::HttpResponse resp;
  resp.status = 200;
  resp.content_type = dns::httpdns::kJsonType;
  resp.cache_control = "no-store";  // answers are per client: no shared cache may keep them
  resp.body = {reinterpret_cast<const uint8_t*>(body.data()), body.size()};
  respond_(p.conn, p.stream, resp);
  st.Observe(p.request.api, Seconds(std::chrono::steady_clock::now() - p.started));
}

void HttpDnsFront::ConnectionClosed(uint32_t conn) {
  auto c = by_conn_.find(conn);
  if (c == by_conn_.end()) return;
  for (uint64_t key : c->second) {
    auto p = pending_.find(key);
    if (p == pending_.end()) continue;
    // Their answers find no connection (SendHeld drops them): forget them now.
    for (uint64_t token : p->second.subs) subs_.erase(token);
    pending_.erase(p);
  }
  by_conn_.erase(c);
}

HttpDnsStats HttpDnsFront::Stats() const {
  HttpDnsStats copy = stats_;
  copy.pending = pending_.size();
  copy.pending_queries = subs_.size();
  return copy;
}

}  // namespace weir::fastpath::tls
