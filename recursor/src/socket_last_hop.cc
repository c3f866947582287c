#include "socket_last_hop.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "weir/dns/writer.h"
#include "weir/recursor/cache_policy.h"

namespace weir::recursor {

namespace {

std::array<uint8_t, 16> CookieSecret(common::SecureRandom& random) {
  std::array<uint8_t, 16> secret{};
  random.Fill(secret.data(), secret.size());
  return secret;
}

}  // namespace

SocketLastHop::SocketLastHop(const RecursorConfig& cfg, net::EventLoop& loop)
    : timeout_ms_(cfg.timeout_ms),
      tcp_timeout_ms_(cfg.tcp_timeout_ms),
      use_0x20_(cfg.use_0x20),
      use_cookies_(cfg.cookies),
      unwanted_threshold_(static_cast<uint32_t>(cfg.unwanted_reply_threshold)),
      cookies_(CookieSecret(random_)),
      loop_(loop) {
  parse_options_.weight_option_code = cfg.weight_option_code;
}

SocketLastHop::~SocketLastHop() { CloseAll(); }

void SocketLastHop::CloseAll() {
  for (auto& [token, q] : queries_) Close(*q);
  queries_.clear();
}

void SocketLastHop::Close(Query& q) {
  if (q.fd < 0) return;
  loop_.Unwatch(q.fd);
  close(q.fd);
  q.fd = -1;
}

std::unique_ptr<SocketLastHop::Query> SocketLastHop::Take(uint64_t token) {
  auto it = queries_.find(token);
  if (it == queries_.end()) return nullptr;
  std::unique_ptr<Query> q = std::move(it->second);
  queries_.erase(it);
  return q;
}

void SocketLastHop::Cancel(uint64_t token) {
  if (std::unique_ptr<Query> q = Take(token)) Close(*q);
}

LastHopTransport::SendResult SocketLastHop::Send(uint64_t token, const LastHopQuery& lq) {
  Cancel(token);
  auto owned = std::make_unique<Query>();
  Query& q = *owned;
  q.q = lq;
  q.q.message = {};
  q.wire.assign(lq.message.begin(), lq.message.end());
  q.qname_len = lq.qname.len;
  if (q.wire.size() < dns::kHeaderSize + q.qname_len + 4u) return SendResult::kSendFailed;
  const auto now = std::chrono::steady_clock::now();
  if (use_0x20_ && case_memory_.Preserves(lq.server, now)) {
    q.caps = dns::RandomizeCase({q.wire.data() + dns::kHeaderSize, q.qname_len}, random_) > 0;
  }
  if (use_cookies_) {
    // The option goes at the end of the OPT, which must end the message
    // (what TaggedResolver writes); a query without one goes without.
    dns::Query parsed;
    if (dns::ParseQuery(q.wire, parse_options_, &parsed) == dns::ParseError::kOk && parsed.edns.present &&
        parsed.edns.rdata_offset + parsed.edns.rdata_len == q.wire.size()) {
      q.opt_rdlen_at = parsed.edns.rdata_offset - 2u;
    }
  }
  q.sent = now;
  auto [it, inserted] = queries_.insert_or_assign(token, std::move(owned));
  (void)inserted;
  const SendResult r = SendUdp(token, *it->second);
  if (r != SendResult::kSent) queries_.erase(token);
  return r;
}

// A fresh socket (a fresh random port) and a fresh ID for each UDP try.
LastHopTransport::SendResult SocketLastHop::SendUdp(uint64_t token, Query& q) {
  Close(q);
  const common::SocketAddress& server = q.q.server;
  const int fd = socket(server.family(), SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, server.sa(), server.len) != 0) {
    if (fd >= 0) close(fd);
    return SendResult::kNoSocket;
  }
  q.q.id = random_.Next16();
  dns::SetId(q.wire.data(), q.q.id);
  if (q.opt_rdlen_at != 0) {
    sockaddr_storage local{};
    socklen_t ll = sizeof(local);
    common::SocketAddress from;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) == 0)
      from = common::SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&local), ll);
    SetCookie(q, from);
  }
  if (send(fd, q.wire.data(), q.wire.size(), 0) < 0) {
    close(fd);
    return SendResult::kSendFailed;
  }
  if (q.cookie) ++stats_.cookies_sent;
  q.fd = fd;
  q.tcp = false;
  q.unwanted = 0;
  q.generation = next_generation_++;
  loop_.Watch(fd, EPOLLIN, [this, token](uint32_t events) { OnEvents(token, events); });
  ArmTimeout(token, q, q.q.timeout_ms > 0 ? q.q.timeout_ms : timeout_ms_);
  if (tap_ != nullptr && tap_->Sample()) TapQuery(q, q.wire);
  return SendResult::kSent;
}

// Writes (or rewrites) the COOKIE option at the end of the query's OPT.
void SocketLastHop::SetCookie(Query& q, const common::SocketAddress& local) {
  q.client_cookie = cookies_.ClientCookie(local, q.q.server);
  uint8_t data[dns::CookieJar::kMaxOption] = {};
  const size_t n = cookies_.OptionData(q.client_cookie, q.q.server, data);
  dns::SetTrailingOption(q.wire, q.opt_rdlen_at, &q.cookie_at, dns::option::kCookie, {data, n});
  q.cookie = true;
}

void SocketLastHop::TapQuery(Query& q, std::span<const uint8_t> message) {
  q.tapped_at = dnstap::Now();
  sockaddr_storage local{};
  socklen_t ll = sizeof(local);
  q.local = {};
  if (getsockname(q.fd, reinterpret_cast<sockaddr*>(&local), &ll) == 0)
    q.local =
        dnstap::EndpointOf(common::SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&local), ll));
  dnstap::Message m;
  m.type = dnstap::MessageType::kResolverQuery;
  m.protocol = q.tcp ? dnstap::Protocol::kTcp : dnstap::Protocol::kUdp;
  m.query_address = q.local;
  m.response_address = dnstap::EndpointOf(q.q.server);
  m.query_time = q.tapped_at;
  m.query_message = message;
  tap_->Send(m);
}

void SocketLastHop::TapReply(const Query& q, std::span<const uint8_t> reply) {
  if (tap_ == nullptr || (q.tapped_at.tv_sec == 0 && q.tapped_at.tv_nsec == 0)) return;
  dnstap::Message m;
  m.type = dnstap::MessageType::kResolverResponse;
  m.protocol = q.tcp ? dnstap::Protocol::kTcp : dnstap::Protocol::kUdp;
  m.query_address = q.local;
  m.response_address = dnstap::EndpointOf(q.q.server);
  m.query_time = q.tapped_at;
  m.response_time = dnstap::Now();
  m.response_message = reply;
  tap_->Send(m);
}

// The current query's timeout; a newer query (generation) makes it moot.
void SocketLastHop::ArmTimeout(uint64_t token, const Query& q, int ms) {
  loop_.After(std::chrono::milliseconds(ms), [this, token, gen = q.generation] {
    auto it = queries_.find(token);
    if (it != queries_.end() && it->second->generation == gen) Fail(token, Failure::kTimeout);
  });
}

void SocketLastHop::Deliver(uint64_t token, const dns::Message& m) {
  // The query leaves the table before the sink runs: the sink may send the
  // next one for the same token. `m` may point into the query's buffers,
  // which live until the sink returns.
  std::unique_ptr<Query> q = Take(token);
  if (q == nullptr) return;
  Close(*q);
  latency_.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - q->sent).count());
  if (sink_ != nullptr) sink_->OnReply(token, m);
}

void SocketLastHop::Fail(uint64_t token, Failure why) {
  std::unique_ptr<Query> q = Take(token);
  if (q == nullptr) return;
  Close(*q);
  // A server that answered in another case over UDP and cannot be asked
  // over TCP is asked without 0x20 next time: its answers then still need
  // the ID, the port, the question and the cookie.
  if (q->tcp && q->case_suspect) LearnNoCase(*q);
  if (sink_ != nullptr) sink_->OnFailure(token, why);
}

void SocketLastHop::LearnNoCase(const Query& q) {
  ++stats_.case_fallbacks;
  case_memory_.NotPreserved(q.q.server, std::chrono::steady_clock::now());
  case_log_(q.q.server.ToString(), ": does not preserve the case of the question (", NameText(q.q.qname),
            "): asked without 0x20 for ", dns::CaseMemory::kHold.count(), " s");
}

void SocketLastHop::OnEvents(uint64_t token, uint32_t events) {
  auto it = queries_.find(token);
  if (it == queries_.end()) return;
  Query& q = *it->second;
  if (!q.tcp) return OnUdp(token, q);
  OnTcp(token, q, events);
}

bool SocketLastHop::OnUnwanted(uint64_t token, Query& q, Unwanted why) {
  ++stats_.unwanted[static_cast<size_t>(why)];
  if (why == Unwanted::kId || why == Unwanted::kQuestion) ++stats_.spoofed_dropped;
  ++q.unwanted;
  if (unwanted_threshold_ == 0 || q.unwanted < unwanted_threshold_) return false;
  React(token, q, Reaction::kThreshold);
  return true;
}

// The UDP try is over (its socket closed, whatever else comes to it is
// dropped by the kernel): the question goes to the same server over TCP.
void SocketLastHop::React(uint64_t token, Query& q, Reaction why) {
  ++stats_.reactions[static_cast<size_t>(why)];
  static constexpr const char* kWhy[] = {"unwanted replies reached unwanted_reply_threshold",
                                         "a reply with the query's ID had the question in another case",
                                         "a reply with the query's ID had a wrong or no DNS cookie",
                                         "BADCOOKIE twice"};
  reaction_log_(q.q.server.ToString(), ": ", NameText(q.q.qname), ": ", kWhy[static_cast<size_t>(why)], " (",
                q.unwanted, " unwanted): possible spoofing, asking over TCP");
  q.case_suspect = why == Reaction::kCase;
  ToTcp(token, q);
}

dns::GuardOutcome SocketLastHop::Check(const Query& q, std::span<const uint8_t> reply, bool over_tcp,
                                       dns::Message* m) {
  dns::SentQuery sent;
  sent.id = q.q.id;
  sent.qname = &q.q.qname;
  sent.name = {q.wire.data() + dns::kHeaderSize, q.qname_len};
  sent.qtype = q.q.qtype;
  sent.qclass = dns::klass::kIn;
  sent.case_randomized = q.caps;
  sent.cookie = q.cookie ? &q.client_cookie : nullptr;
  sent.server = &q.q.server;
  return dns::CheckAnswer(sent, reply, over_tcp, q.badcookie_retried, &cookies_, parse_options_, m);
}

void SocketLastHop::OnUdp(uint64_t token, Query& q) {
  for (;;) {
    const ssize_t n = recv(q.fd, buf_, sizeof(buf_), 0);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      return Fail(token, Failure::kFailed);  // ICMP unreachable: next server
    }
    const std::span<const uint8_t> reply{buf_, static_cast<size_t>(n)};
    dns::Message m;
    const dns::GuardOutcome g = Check(q, reply, /*over_tcp=*/false, &m);
    switch (g.action) {
      case dns::GuardAction::kTake:
        TapReply(q, reply);
        return Deliver(token, m);
      case dns::GuardAction::kIgnore:
        // One line per query at most (rate-limited): a flood of forged
        // datagrams costs a counter each, not a formatted line.
        if (q.unwanted == 0) {
          if (g.reason == dns::GuardReason::kWrongId) {
            spoofed_log_(q.q.server.ToString(), ": answer for ", NameText(q.q.qname),
                         " with a wrong ID or no header (", n, " bytes): dropped");
          } else {
            spoofed_log_(q.q.server.ToString(), ": answer that does not match the question ",
                         NameText(q.q.qname), ": dropped");
          }
        }
        if (OnUnwanted(token, q,
                       g.reason == dns::GuardReason::kWrongId ? Unwanted::kId : Unwanted::kQuestion)) {
          return;
        }
        continue;  // keep waiting for the genuine answer until the timeout
      case dns::GuardAction::kFail:
        ++stats_.malformed_replies;
        malformed_log_(q.q.server.ToString(), ": malformed answer for ", NameText(q.q.qname), " (",
                       dns::ParseErrorName(g.parse_error), "): next server");
        return Fail(token, Failure::kFailed);
      case dns::GuardAction::kRetryUdp:
        // RFC 7873 5.3: once more with the server cookie just learnt.
        TapReply(q, reply);
        q.badcookie_retried = true;
        ++stats_.cookie_retries;
        if (SendUdp(token, q) != SendResult::kSent) return Fail(token, Failure::kFailed);
        return;
      case dns::GuardAction::kToTcp:
        break;
    }
    // The ID and the question match: a genuine answer, or a forgery that
    // guessed the ID. One that fails the case or the cookie ends the UDP
    // try at once: waiting on would leave the port open to more guesses.
    switch (g.reason) {
      case dns::GuardReason::kTruncated:
        TapReply(q, reply);
        ++stats_.truncated;
        return ToTcp(token, q);
      case dns::GuardReason::kCase:
        ++stats_.unwanted[static_cast<size_t>(Unwanted::kCase)];
        ++q.unwanted;
        return React(token, q, Reaction::kCase);
      case dns::GuardReason::kBadCookie:
        TapReply(q, reply);
        return React(token, q, Reaction::kBadCookie);
      default:
        ++stats_.unwanted[static_cast<size_t>(Unwanted::kCookie)];
        ++q.unwanted;
        return React(token, q, Reaction::kCookie);
    }
  }
}

// The same question over TCP to the same server (RFC 7766): after TC, or
// as the reaction to spoofing.
void SocketLastHop::ToTcp(uint64_t token, Query& q) {
  Close(q);
  q.fd = socket(q.q.server.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (q.fd < 0) return Fail(token, Failure::kFailed);
  int one = 1;
  setsockopt(q.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // Non-blocking: EINPROGRESS is the normal answer; anything else (no
  // route, no local port) fails the query now rather than at its timeout.
  if (connect(q.fd, q.q.server.sa(), q.q.server.len) != 0 && errno != EINPROGRESS) {
    close(q.fd);
    q.fd = -1;
    return Fail(token, Failure::kFailed);
  }
  q.tcp = true;
  q.tcp_sent = 0;
  q.tcp_in.Clear();
  // The same query again over TCP: tapped when its UDP form was.
  if (tap_ != nullptr && (q.tapped_at.tv_sec != 0 || q.tapped_at.tv_nsec != 0)) TapQuery(q, q.wire);
  q.tcp_out.clear();
  net::AppendFramed(q.wire, &q.tcp_out);
  ++stats_.upstream_tcp;
  q.generation = next_generation_++;
  loop_.Watch(q.fd, EPOLLIN | EPOLLOUT, [this, token](uint32_t events) { OnEvents(token, events); });
  ArmTimeout(token, q, tcp_timeout_ms_);
}

void SocketLastHop::OnTcp(uint64_t token, Query& q, uint32_t events) {
  if ((events & (EPOLLERR | EPOLLHUP)) && !(events & EPOLLIN)) return Fail(token, Failure::kFailed);
  if ((events & EPOLLOUT) && q.tcp_sent < q.tcp_out.size()) {
    const ssize_t n = send(q.fd, q.tcp_out.data() + q.tcp_sent, q.tcp_out.size() - q.tcp_sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINPROGRESS) return Fail(token, Failure::kFailed);
    if (n > 0) q.tcp_sent += static_cast<size_t>(n);
    if (q.tcp_sent == q.tcp_out.size()) loop_.Modify(q.fd, EPOLLIN);
  }
  if (!(events & EPOLLIN)) return;
  // Only the bytes of the one message expected are taken off the socket
  // (never more than 2 + 65535): whatever the server sends after it is
  // left unread and dropped with the socket.
  while (!q.tcp_in.Complete()) {
    const ssize_t n = recv(q.fd, buf_, std::min(sizeof(buf_), q.tcp_in.Want()), 0);
    if (n == 0) return Fail(token, Failure::kFailed);  // closed before the whole answer
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR) continue;
      return Fail(token, Failure::kFailed);
    }
    if (!q.tcp_in.Append({buf_, static_cast<size_t>(n)})) return Fail(token, Failure::kFailed);
  }
  dns::Message m;
  const dns::GuardOutcome g = Check(q, q.tcp_in.Message(), /*over_tcp=*/true, &m);
  if (g.action != dns::GuardAction::kTake) {
    if (g.reason == dns::GuardReason::kMalformed) {
      ++stats_.malformed_replies;
      malformed_log_(q.q.server.ToString(), ": malformed answer over TCP for ", NameText(q.q.qname), " (",
                     dns::ParseErrorName(g.parse_error), "): next server");
    } else if (g.reason == dns::GuardReason::kCookie) {
      ++stats_.unwanted[static_cast<size_t>(Unwanted::kCookie)];
      spoofed_log_(q.q.server.ToString(), ": answer over TCP for ", NameText(q.q.qname),
                   " with a wrong DNS cookie: next server");
    } else {
      ++stats_.spoofed_dropped;
      spoofed_log_(q.q.server.ToString(), ": answer over TCP that does not match the question ",
                   NameText(q.q.qname), ": next server");
    }
    return Fail(token, Failure::kFailed);
  }
  // Over TCP the answer comes from the server itself: another case says
  // it does not preserve the case.
  if (g.case_not_preserved) LearnNoCase(q);
  TapReply(q, q.tcp_in.Message());
  Deliver(token, m);
}

}  // namespace weir::recursor
