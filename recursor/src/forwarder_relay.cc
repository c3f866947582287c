#include "forwarder_relay.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "weir/common/text.h"
#include "weir/dns/writer.h"
#include "weir/net/socket.h"
#include "weir/recursor/cache_policy.h"

namespace weir::recursor {

using common::Cat;
using common::SocketAddress;

namespace {

// libunbound retransmits to a silent forwarder: a few askers per question
// are its retries; more are not worth keeping.
constexpr size_t kMaxAskersPerQuestion = 16;

}  // namespace

ForwarderRelay::ForwarderRelay(const RecursorConfig& cfg, net::EventLoop& loop, LastHopTransport& transport)
    : cfg_(cfg), loop_(loop), transport_(transport) {
  parse_options_.weight_option_code = cfg.weight_option_code;
}

ForwarderRelay::~ForwarderRelay() { CloseAll(); }

absl::Status ForwarderRelay::Bind() {
  const SocketAddress loopback = *SocketAddress::Parse("127.0.0.1", 0);
  for (size_t i = 0; i < cfg_.forwarders.size(); ++i) {
    auto fd = net::BindSocket(loopback, SOCK_DGRAM, {.nonblocking = true});
    if (!fd.ok()) {
      CloseAll();
      return absl::Status(fd.status().code(), Cat("forwarder relay: ", fd.status().message()));
    }
    const int rcvbuf = 4 << 20;
    setsockopt(*fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    fds_.push_back(*fd);
    addresses_.push_back(net::LocalAddress(*fd));
  }
  return absl::OkStatus();
}

void ForwarderRelay::Attach() {
  for (size_t i = 0; i < fds_.size(); ++i)
    loop_.Watch(fds_[i], EPOLLIN, [this, i](uint32_t) { OnReadable(i); });
}

void ForwarderRelay::CloseAll() {
  for (auto& [token, p] : pending_) transport_.Cancel(token);
  pending_.clear();
  by_key_.clear();
  for (int fd : fds_) {
    if (loop_.Watching(fd)) loop_.Unwatch(fd);
    close(fd);
  }
  fds_.clear();
}

void ForwarderRelay::OnReadable(size_t forwarder) {
  // A bounded batch per wake-up: the loop has other sockets to serve.
  for (int n = 0; n < 64; ++n) {
    sockaddr_storage ss{};
    socklen_t sl = sizeof(ss);
    const ssize_t len =
        recvfrom(fds_[forwarder], buf_, sizeof(buf_), 0, reinterpret_cast<sockaddr*>(&ss), &sl);
    if (len < 0) return;  // EAGAIN, or an ICMP error from an asker gone
    OnQuery(forwarder, {buf_, static_cast<size_t>(len)},
            SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&ss), sl));
  }
}

void ForwarderRelay::OnQuery(size_t forwarder, std::span<const uint8_t> wire, const SocketAddress& from) {
  dns::Query q;
  // Only libunbound's queries: one question, no answer of anyone's.
  if (wire.size() < dns::kHeaderSize || (wire[2] & 0x80) != 0 ||
      dns::ParseQuery(wire, parse_options_, &q) != dns::ParseError::kOk || q.opcode() != 0) {
    ++stats_.dropped;
    return;
  }
  ++stats_.queries;
  const uint8_t qname_len = q.qname.len;
  Asker asker{
      from, q.id, q.flags, {wire.begin() + dns::kHeaderSize, wire.begin() + dns::kHeaderSize + qname_len}};
  std::string key = Cat(forwarder, "/", CacheKey(q.qname, q.qtype, q.qclass), q.edns.do_bit ? "D" : "-",
                        q.cd() ? "C" : "-");
  if (auto it = by_key_.find(key); it != by_key_.end()) {
    Pending& p = *pending_[it->second];
    ++stats_.coalesced;
    if (p.askers.size() >= kMaxAskersPerQuestion) p.askers.erase(p.askers.begin());
    p.askers.push_back(std::move(asker));
    return;
  }
  if (pending_.size() >= static_cast<size_t>(cfg_.max_inflight)) {
    ++stats_.dropped;
    return;
  }
  auto p = std::make_unique<Pending>();
  p->key = key;
  p->forwarder = forwarder;
  p->message.assign(wire.begin(), wire.end());
  p->qname = q.qname;
  p->qtype = q.qtype;
  p->qclass = q.qclass;
  p->askers.push_back(std::move(asker));
  p->timeout_ms = cfg_.timeout_ms;
  const uint64_t token = kTokenBit | next_token_++;
  Pending& ref = *p;
  by_key_.emplace(key, token);
  pending_.emplace(token, std::move(p));
  if (!Send(token, ref)) ServFail(token);
}

bool ForwarderRelay::Send(uint64_t token, Pending& p) {
  ++p.tries;
  LastHopQuery lq{cfg_.forwarders[p.forwarder], p.message, dns::Load16(p.message.data()), p.qname, p.qtype};
  lq.timeout_ms = p.timeout_ms;
  return transport_.Send(token, lq) == LastHopTransport::SendResult::kSent;
}

void ForwarderRelay::OnReply(uint64_t token, const dns::Message& reply) {
  auto it = pending_.find(token);
  if (it == pending_.end()) return;
  std::unique_ptr<Pending> p = std::move(it->second);
  pending_.erase(it);
  by_key_.erase(p->key);
  const std::span<const uint8_t> bytes = reply.bytes();
  std::vector<uint8_t> out(bytes.begin(), bytes.end());
  for (const Asker& a : p->askers) {
    // The transport checked that the question is this one: only the ID and
    // the spelling (libunbound's own 0x20) are libunbound's again.
    if (!dns::SetQuestionSpelling(out, a.qname_wire)) continue;
    dns::SetId(out.data(), a.id);
    SendTo(p->forwarder, a.from, out);
  }
  stats_.answered += p->askers.size();
}

void ForwarderRelay::OnFailure(uint64_t token, LastHopTransport::Failure why) {
  auto it = pending_.find(token);
  if (it == pending_.end()) return;
  Pending& p = *it->second;
  // A forwarder resolves before it answers: a timeout is asked again (a
  // fresh port and ID) with twice the wait, while the waits add up to no
  // more than answer_deadline_ms.
  if (why == LastHopTransport::Failure::kTimeout) {
    p.waited_ms += p.timeout_ms;
    p.timeout_ms *= 2;
    if (p.waited_ms + p.timeout_ms <= cfg_.answer_deadline_ms) {
      ++stats_.retries;
      if (Send(token, p)) return;
    }
  }
  log_(cfg_.forwarders[p.forwarder].ToString(), ": ", NameText(p.qname),
       why == LastHopTransport::Failure::kTimeout ? ": no answer" : ": failed", " after ", p.tries,
       p.tries == 1 ? " try" : " tries", ": SERVFAIL to libunbound");
  ServFail(token);
}

void ForwarderRelay::ServFail(uint64_t token) {
  auto it = pending_.find(token);
  if (it == pending_.end()) return;
  std::unique_ptr<Pending> p = std::move(it->second);
  pending_.erase(it);
  by_key_.erase(p->key);
  transport_.Cancel(token);
  for (const Asker& a : p->askers) {
    uint8_t msg[dns::kHeaderSize + 256 + 4];
    dns::ResponseWriter w(msg, sizeof(msg));
    const uint16_t flags = static_cast<uint16_t>(dns::flag::kQr | dns::flag::kRa |
                                                 (a.flags & (dns::flag::kRd | dns::flag::kCd)) |
                                                 static_cast<uint16_t>(dns::Rcode::kServFail));
    if (w.Begin(a.id, flags, a.qname_wire, p->qtype, p->qclass) != dns::ParseError::kOk) continue;
    SendTo(p->forwarder, a.from, {msg, w.Finish(sizeof(msg))});
    ++stats_.servfail;
  }
}

void ForwarderRelay::SendTo(size_t forwarder, const SocketAddress& to, std::span<const uint8_t> msg) {
  if (forwarder >= fds_.size()) return;
  // Loopback takes any size up to 65,507 bytes; libunbound reads 65,552.
  if (sendto(fds_[forwarder], msg.data(), msg.size(), MSG_DONTWAIT, to.sa(), to.len) < 0) ++stats_.dropped;
}

}  // namespace weir::recursor
