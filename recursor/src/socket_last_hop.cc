#include "socket_last_hop.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "weir/recursor/cache_policy.h"

namespace weir::recursor {

SocketLastHop::SocketLastHop(const RecursorConfig& cfg, net::EventLoop& loop)
    : timeout_ms_(cfg.timeout_ms), tcp_timeout_ms_(cfg.tcp_timeout_ms), loop_(loop) {
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
  const common::SocketAddress& server = lq.server;
  const int fd = socket(server.family(), SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, server.sa(), server.len) != 0) {
    if (fd >= 0) close(fd);
    return SendResult::kNoSocket;
  }
  if (send(fd, lq.message.data(), lq.message.size(), 0) < 0) {
    close(fd);
    return SendResult::kSendFailed;
  }
  auto q = std::make_unique<Query>();
  q->sent = std::chrono::steady_clock::now();
  q->fd = fd;
  q->wire.assign(lq.message.begin(), lq.message.end());
  q->q = lq;
  q->q.message = {};
  q->generation = next_generation_++;
  loop_.Watch(fd, EPOLLIN, [this, token](uint32_t events) { OnEvents(token, events); });
  ArmTimeout(token, *q, timeout_ms_);
  if (tap_ != nullptr && tap_->Sample()) TapQuery(*q, q->wire);
  queries_[token] = std::move(q);
  return SendResult::kSent;
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

bool SocketLastHop::Matches(const Query& q, const dns::Message& m) const {
  return m.id() == q.q.id && (m.flags() & dns::flag::kQr) && m.qtype() == q.q.qtype &&
         m.qclass() == dns::klass::kIn && m.qname() == q.q.qname;
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
  if (sink_ != nullptr) sink_->OnFailure(token, why);
}

void SocketLastHop::OnEvents(uint64_t token, uint32_t events) {
  auto it = queries_.find(token);
  if (it == queries_.end()) return;
  Query& q = *it->second;
  if (!q.tcp) return OnUdp(token, q);
  OnTcp(token, q, events);
}

void SocketLastHop::OnUdp(uint64_t token, Query& q) {
  for (;;) {
    const ssize_t n = recv(q.fd, buf_, sizeof(buf_), 0);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      return Fail(token, Failure::kFailed);  // ICMP unreachable: next server
    }
    if (static_cast<size_t>(n) < dns::kHeaderSize || dns::Load16(buf_) != q.q.id) {
      ++stats_.spoofed_dropped;
      spoofed_log_(q.q.server.ToString(), ": answer for ", NameText(q.q.qname),
                   " with a wrong ID or no header (", n, " bytes): dropped");
      continue;
    }
    if (buf_[2] & (dns::flag::kTc >> 8)) {
      TapReply(q, {buf_, static_cast<size_t>(n)});
      return ToTcp(token, q);
    }
    dns::Message m;
    if (const dns::ParseError e = m.Parse({buf_, static_cast<size_t>(n)}, parse_options_);
        e != dns::ParseError::kOk) {
      ++stats_.malformed_replies;
      malformed_log_(q.q.server.ToString(), ": malformed answer for ", NameText(q.q.qname), " (",
                     dns::ParseErrorName(e), "): next server");
      return Fail(token, Failure::kFailed);
    }
    if (!Matches(q, m)) {
      ++stats_.spoofed_dropped;
      spoofed_log_(q.q.server.ToString(), ": answer that does not match the question ", NameText(q.q.qname),
                   ": dropped");
      continue;  // keep waiting for the genuine answer until the timeout
    }
    TapReply(q, {buf_, static_cast<size_t>(n)});
    return Deliver(token, m);
  }
}

// TC: the same question over TCP to the same server (RFC 7766).
void SocketLastHop::ToTcp(uint64_t token, Query& q) {
  ++stats_.truncated;
  Close(q);
  q.fd = socket(q.q.server.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (q.fd < 0) return Fail(token, Failure::kFailed);
  int one = 1;
  setsockopt(q.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  connect(q.fd, q.q.server.sa(), q.q.server.len);
  q.tcp = true;
  q.tcp_sent = 0;
  q.tcp_in.Clear();
  // The same query again over TCP: tapped when its UDP form was.
  if (tap_ != nullptr && (q.tapped_at.tv_sec != 0 || q.tapped_at.tv_nsec != 0)) TapQuery(q, q.wire);
  std::vector<uint8_t> framed;
  net::AppendFramed(q.wire, &framed);
  q.wire = std::move(framed);
  ++stats_.upstream_tcp;
  q.generation = next_generation_++;
  loop_.Watch(q.fd, EPOLLIN | EPOLLOUT, [this, token](uint32_t events) { OnEvents(token, events); });
  ArmTimeout(token, q, tcp_timeout_ms_);
}

void SocketLastHop::OnTcp(uint64_t token, Query& q, uint32_t events) {
  if ((events & (EPOLLERR | EPOLLHUP)) && !(events & EPOLLIN)) return Fail(token, Failure::kFailed);
  if ((events & EPOLLOUT) && q.tcp_sent < q.wire.size()) {
    const ssize_t n = send(q.fd, q.wire.data() + q.tcp_sent, q.wire.size() - q.tcp_sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINPROGRESS) return Fail(token, Failure::kFailed);
    if (n > 0) q.tcp_sent += static_cast<size_t>(n);
    if (q.tcp_sent == q.wire.size()) loop_.Modify(q.fd, EPOLLIN);
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
  if (const dns::ParseError e = m.Parse(q.tcp_in.Message(), parse_options_); e != dns::ParseError::kOk) {
    ++stats_.malformed_replies;
    malformed_log_(q.q.server.ToString(), ": malformed answer over TCP for ", NameText(q.q.qname), " (",
                   dns::ParseErrorName(e), "): next server");
    return Fail(token, Failure::kFailed);
  }
  if (!Matches(q, m)) {
    ++stats_.spoofed_dropped;
    spoofed_log_(q.q.server.ToString(), ": answer over TCP that does not match the question ",
                 NameText(q.q.qname), ": next server");
    return Fail(token, Failure::kFailed);
  }
  TapReply(q, q.tcp_in.Message());
  Deliver(token, m);
}

}  // namespace weir::recursor
