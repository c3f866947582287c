#include "front.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "query_router.h"
#include "weir/common/log.h"
#include "weir/common/text.h"
#include "weir/net/acceptor.h"
#include "weir/net/socket.h"

namespace weir::recursor {

using common::Cat;
using common::SocketAddress;

namespace {

constexpr size_t kMaxControlLine = 4096;
// Out of descriptors at accept: the listener is not polled for this long, so
// a full process table does not turn the loop into a busy spin.
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);

absl::StatusOr<int> BindSocket(const SocketAddress& a, int type) {
  return net::BindSocket(a, type, {.nonblocking = true, .listen_backlog = type == SOCK_STREAM ? 256 : 0});
}

// The largest UDP response gathered for a burst (answers are at most
// kMaxUdpAnswer bytes); a larger one is sent on its own.
constexpr size_t kTxSlot = 4096;

}  // namespace

struct Front::UdpBurst {
  // A whole datagram fits: a query is never cut short.
  uint8_t rx[kBurst][net::kMaxDnsMessage];
  sockaddr_storage rx_peers[kBurst];
  iovec riov[kBurst];
  mmsghdr rmsg[kBurst];
  uint8_t tx[kBurst][kTxSlot];
  sockaddr_storage tx_peers[kBurst];
  iovec siov[kBurst];
  mmsghdr smsg[kBurst];
};

common::IpAddress IpOf(const SocketAddress& a) {
  common::IpAddress ip;
  ip.family = a.family() == AF_INET ? 4 : 6;
  if (a.len != 0) std::memcpy(ip.bytes.data(), a.addr_bytes(), a.addr_len());
  return ip;
}

Front::Front(const RecursorConfig& cfg, net::EventLoop& loop)
    : cfg_(cfg), loop_(loop), table_(cfg.tcp_limits), udp_(new UdpBurst) {
  // Not zeroed (new, not make_unique): 2 MB of receive slots, touched as used.
  UdpBurst& b = *udp_;
  for (int i = 0; i < kBurst; ++i) {
    b.riov[i] = {b.rx[i], sizeof(b.rx[i])};
    b.rmsg[i].msg_hdr = {};
    b.rmsg[i].msg_hdr.msg_name = &b.rx_peers[i];
    b.rmsg[i].msg_hdr.msg_iov = &b.riov[i];
    b.rmsg[i].msg_hdr.msg_iovlen = 1;
    b.smsg[i].msg_hdr = {};
    b.smsg[i].msg_hdr.msg_name = &b.tx_peers[i];
    b.smsg[i].msg_hdr.msg_iov = &b.siov[i];
    b.smsg[i].msg_hdr.msg_iovlen = 1;
  }
}

Front::~Front() { CloseAll(); }

void Front::CloseAll() {
  for (auto& [id, c] : conns_) {
    if (c.stream) table_.Remove(c.handle, net::TcpCloseReason::kCount);  // not counted: the daemon stops
    close(c.fd);
  }
  conns_.clear();
  for (int fd : listen_fds_) close(fd);
  listen_fds_.clear();
}

void Front::WatchListener(int fd, bool tcp, bool control) {
  if (!tcp) return loop_.Watch(fd, EPOLLIN, [this, fd](uint32_t) { OnUdp(fd); });
  net::WatchListener(
      loop_, fd,
      {.on_connection = [this, control](const net::AcceptedConnection& c) { OnAccept(c, control); },
       .on_pause =
           [this, control](int err) {
             ++stats_.accept_paused;
             static common::RateLimitedLog accept_log({.component = "accept"});
             accept_log(control ? "control" : "TCP", " accept: ", std::strerror(err), " (pausing accepts)");
           },
       .backoff = kAcceptBackoff});
}

absl::Status Front::Listen() {
  for (const SocketAddress& want : cfg_.listen) {
    // Port 0: TCP takes the port UDP got; when that TCP port is taken, both
    // try another one.
    for (int attempt = 0;; ++attempt) {
      auto u = BindSocket(want, SOCK_DGRAM);
      if (!u.ok()) return u.status();
      const SocketAddress bound = net::LocalAddress(*u);
      std::optional<int> tcp_fd;
      if (cfg_.tcp) {
        SocketAddress same = want;
        same.set_port(bound.port());
        auto t = BindSocket(same, SOCK_STREAM);
        if (!t.ok()) {
          close(*u);
          if (want.port() == 0 && attempt < 16) continue;
          return t.status();
        }
        tcp_fd = *t;
      }
      int rcvbuf = 4 << 20;
      setsockopt(*u, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
      listen_fds_.push_back(*u);
      WatchListener(*u, false, false);
      std::string line = Cat("listening udp ", bound.ToString());
      if (tcp_fd) {
        listen_fds_.push_back(*tcp_fd);
        WatchListener(*tcp_fd, true, false);
        line += Cat(" tcp ", net::LocalAddress(*tcp_fd).ToString());
      }
      describe_.push_back(line);
      break;
    }
  }
  if (cfg_.control_enabled) {
    auto c = BindSocket(cfg_.control, SOCK_STREAM);
    if (!c.ok()) return c.status();
    listen_fds_.push_back(*c);
    WatchListener(*c, true, true);
    describe_.push_back(Cat("control ", net::LocalAddress(*c).ToString()));
  }
  return absl::OkStatus();
}

void Front::CloseIdle(SteadyClock::time_point now) {
  const auto idle = cfg_.tcp_limits.idle_timeout;
  std::vector<uint64_t> old, stuck;
  for (auto& [id, c] : conns_) {
    if (!c.stream) {
      if (now - c.last > idle) old.push_back(id);
      continue;
    }
    // A front that reads nothing while its answers pile up is closed after
    // the idle timeout too.
    if (c.stream->paused() && now - c.stream->paused_since() > idle) stuck.push_back(id);
  }
  for (uint64_t id : old) CloseConn(id, net::TcpCloseReason::kIdle);
  for (uint64_t id : stuck) {
    ++stats_.tcp_unsent_closed;
    CloseConn(id, net::TcpCloseReason::kUnsent);
  }
  // Idle (no answer owed, no whole query since: trickling bytes are not
  // activity) or open for the whole lifetime: drained (nothing more read,
  // closed once its answers are sent), then closed if the front does not
  // take them.
  expired_.clear();
  table_.Expired(now, &expired_);
  for (const auto& e : expired_) {
    auto it = conns_.find(e.id);
    if (it == conns_.end()) continue;
    if (!e.drain) {
      CloseConn(e.id, e.reason);
      continue;
    }
    it->second.stream->StopReading();
    if (!CloseIfDone(e.id, it->second)) WatchConn(it->second);
  }
}

size_t Front::unsent_bytes() const {
  size_t unsent = 0;
  for (const auto& [id, c] : conns_) unsent += c.stream ? c.stream->unsent() : c.out.size();
  return unsent;
}

// Up to two bursts per wake-up (64 datagrams), so one busy socket does not
// starve the others and the TCP connections.
void Front::OnUdp(int fd) {
  UdpBurst& b = *udp_;
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kBurst; ++i) b.rmsg[i].msg_hdr.msg_namelen = sizeof(b.rx_peers[i]);
    const int n = recvmmsg(fd, b.rmsg, kBurst, 0, nullptr);
    if (n <= 0) return;
    burst_fd_ = fd;
    for (int i = 0; i < n; ++i) {
      FrontRef to;
      to.udp_fd = fd;
      to.peer = SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&b.rx_peers[i]),
                                            b.rmsg[i].msg_hdr.msg_namelen);
      ++stats_.udp;
      const std::span<const uint8_t> query(b.rx[i], b.rmsg[i].msg_len);
      if (tap_ != nullptr) TapQuery(query, to);
      router_->HandleQuery(query, to);
    }
    FlushUdp();
    burst_fd_ = -1;
    if (n < kBurst) return;
  }
}

void Front::FlushUdp() {
  for (int i = 0; i < tx_count_;) {
    const int sent = sendmmsg(burst_fd_, udp_->smsg + i, static_cast<unsigned>(tx_count_ - i), 0);
    // A datagram the kernel refuses is dropped, as a sendto of it would be.
    i += sent > 0 ? sent : 1;
  }
  tx_count_ = 0;
}

void Front::OnAccept(const net::AcceptedConnection& ac, bool control) {
  const int c = ac.fd;
  const sockaddr_storage& ss = ac.peer;
  const socklen_t sl = ac.peer_len;
  const SocketAddress peer = SocketAddress::FromSockaddr(reinterpret_cast<const sockaddr*>(&ss), sl);
  if (control) {
    bool allowed = false;
    for (const common::Cidr& a : cfg_.control_allow) allowed = allowed || a.Contains(IpOf(peer));
    if (!allowed) {
      ++stats_.control_refused;
      static common::RateLimitedLog refused_log({.component = "control"});
      refused_log(peer.ToString(), ": refused (not in server.control_allow)");
      close(c);
      return;
    }
  }
  std::optional<uint64_t> evict;
  if (!control) {
    const net::TcpConnectionTable::Admission a = table_.Admit(peer, SteadyClock::now());
    if (!a.admitted) {
      static common::RateLimitedLog limit_log({.component = "accept"});
      limit_log(peer.ToString(), ": refused (", net::RefusalText(a.refused, "server.tcp_"), ")");
      close(c);
      return;
    }
    evict = a.evict;
  }
  if (evict) CloseConn(*evict, net::TcpCloseReason::kPressure);
  const uint64_t id = next_conn_++;
  Conn& conn = conns_[id];
  conn.fd = c;
  conn.control = control;
  conn.peer = peer;
  conn.last = SteadyClock::now();
  conn.events = EPOLLIN;
  if (!control) {
    conn.stream.emplace(c, static_cast<size_t>(cfg_.tcp_max_unsent_bytes), conn.last);
    conn.handle = table_.Add(id, peer, conn.last);
  }
  loop_.Watch(c, EPOLLIN, [this, id](uint32_t events) { OnConn(id, events); });
}

void Front::CloseConn(uint64_t id, net::TcpCloseReason why) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  if (it->second.stream) table_.Remove(it->second.handle, why);
  loop_.Unwatch(it->second.fd);
  close(it->second.fd);
  conns_.erase(it);
}

void Front::WatchConn(Conn& c) {
  uint32_t want = 0;
  if (c.stream) {
    want = c.stream->WantedEvents();
  } else {
    if (!c.closing) want |= EPOLLIN;
    if (!c.out.empty()) want |= EPOLLOUT;
  }
  if (want == c.events) return;
  c.events = want;
  loop_.Modify(c.fd, want);
}

bool Front::CloseIfDone(uint64_t id, Conn& c) {
  if (c.dispatching) return false;
  const bool done = c.stream ? c.stream->Done() : c.closing && c.out.empty();
  if (!done) return false;
  CloseConn(id, net::TcpCloseReason::kClient);
  return true;
}

void Front::OnConn(uint64_t id, uint32_t events) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn* c = &it->second;
  if (events & EPOLLERR) return CloseConn(id, net::TcpCloseReason::kClient);
  if (c->control) return OnControl(id, c, events);
  net::DnsTcpStream& s = *c->stream;
  if ((events & EPOLLOUT) && s.Flush() != net::DnsTcpStream::Status::kOpen) {
    return CloseConn(id, net::TcpCloseReason::kClient);
  }
  // EPOLLHUP without a readable half: the front is gone (reset), nothing
  // more can be delivered.
  if ((events & EPOLLHUP) && (s.read_closed() || s.paused()))
    return CloseConn(id, net::TcpCloseReason::kClient);
  if ((events & (EPOLLIN | EPOLLHUP)) && s.Read(SteadyClock::now()) != net::DnsTcpStream::Status::kOpen) {
    return CloseConn(id, net::TcpCloseReason::kClient);
  }
  DispatchFrames(id);
  it = conns_.find(id);  // a handler may have closed it
  if (it == conns_.end()) return;
  if (CloseIfDone(id, it->second)) return;
  WatchConn(it->second);
}

void Front::OnControl(uint64_t id, Conn* c, uint32_t events) {
  c->last = SteadyClock::now();
  if (events & EPOLLOUT) {
    while (!c->out.empty()) {
      const ssize_t n = send(c->fd, c->out.data(), c->out.size(), MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        return CloseConn(id, net::TcpCloseReason::kClient);
      if (n <= 0) break;
      c->out.erase(c->out.begin(), c->out.begin() + n);
    }
    if (CloseIfDone(id, *c)) return;
  }
  bool peer_closed = false;
  if ((events & (EPOLLIN | EPOLLHUP)) && !c->closing) {
    for (;;) {
      const ssize_t n = recv(c->fd, buf_, sizeof(buf_), 0);
      if (n == 0) {
        peer_closed = true;
        break;
      }
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EINTR) continue;
        return CloseConn(id, net::TcpCloseReason::kClient);
      }
      c->in.insert(c->in.end(), buf_, buf_ + n);
      if (c->in.size() > kMaxControlLine) return CloseConn(id, net::TcpCloseReason::kClient);
    }
  }
  const auto nl = std::find(c->in.begin(), c->in.end(), '\n');
  if (nl != c->in.end()) {
    std::string line(c->in.begin(), nl);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    c->in.clear();
    std::string reply = control_(line);
    // The command may have closed connections, not this one (only the
    // sweep and the front's own events close control connections).
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    c = &it->second;
    reply.push_back('\n');
    c->out.insert(c->out.end(), reply.begin(), reply.end());
    c->closing = true;
    return WatchConn(*c);
  }
  if (peer_closed) return CloseConn(id, net::TcpCloseReason::kClient);
  WatchConn(*c);
}

// RFC 7766: queries may be pipelined; each is answered when ready. The
// stream hands out no more while the answers queued for the front are over
// the limit.
void Front::DispatchFrames(uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn* c = &it->second;
  c->dispatching = true;
  std::span<const uint8_t> query;
  std::vector<uint8_t> frame;
  const SteadyClock::time_point now = SteadyClock::now();
  while (c->stream->NextQuery(&query, now)) {
    table_.QueryRead(c->handle, now);
    // A copy: the handler may close the connection, and with it the stream.
    frame.assign(query.begin(), query.end());
    FrontRef to;
    to.tcp = true;
    to.conn = id;
    to.peer = c->peer;
    ++stats_.tcp;
    if (tap_ != nullptr) TapQuery(frame, to);
    router_->HandleQuery(frame, to);
    it = conns_.find(id);  // the handler may have closed it
    if (it == conns_.end()) return;
    c = &it->second;
  }
  c->dispatching = false;
}

void Front::TapQuery(std::span<const uint8_t> query, FrontRef& to) {
  if (!tap_->Sample()) return;
  to.tapped_at = dnstap::Now();
  dnstap::Message m;
  m.type = dnstap::MessageType::kClientQuery;
  m.protocol = to.tcp ? dnstap::Protocol::kTcp : dnstap::Protocol::kUdp;
  m.query_address = dnstap::EndpointOf(to.peer);
  m.query_time = to.tapped_at;
  m.query_message = query;
  tap_->Send(m);
}

void Front::Send(const FrontRef& to, const uint8_t* data, size_t len) {
  if (tap_ != nullptr && len != 0 && (to.tapped_at.tv_sec != 0 || to.tapped_at.tv_nsec != 0)) {
    dnstap::Message m;
    m.type = dnstap::MessageType::kClientResponse;
    m.protocol = to.tcp ? dnstap::Protocol::kTcp : dnstap::Protocol::kUdp;
    m.query_address = dnstap::EndpointOf(to.peer);
    m.query_time = to.tapped_at;
    m.response_time = dnstap::Now();
    m.response_message = {data, len};
    tap_->Send(m);
  }
  if (!to.tcp) {
    if (len == 0) return;
    if (to.udp_fd == burst_fd_ && len <= kTxSlot) {
      if (tx_count_ == kBurst) FlushUdp();
      UdpBurst& b = *udp_;
      const int i = tx_count_++;
      std::memcpy(b.tx[i], data, len);
      b.siov[i] = {b.tx[i], len};
      std::memcpy(&b.tx_peers[i], to.peer.sa(), to.peer.len);
      b.smsg[i].msg_hdr.msg_namelen = to.peer.len;
      return;
    }
    if (to.udp_fd == burst_fd_) FlushUdp();  // the responses before it go first
    sendto(to.udp_fd, data, len, 0, to.peer.sa(), to.peer.len);
    return;
  }
  auto it = conns_.find(to.conn);
  if (it == conns_.end() || !it->second.stream) return;
  Conn& c = it->second;
  // Every TCP query gets one Send, len 0 when it is dropped.
  table_.QueryDone(c.handle, SteadyClock::now());
  const bool was_paused = c.stream->paused();
  switch (c.stream->Answer({data, len})) {
    case net::DnsTcpStream::Status::kOverflow:
      ++stats_.tcp_unsent_closed;  // a front that lets that much pile up is cut off
      return CloseConn(to.conn, net::TcpCloseReason::kUnsent);
    case net::DnsTcpStream::Status::kClose:
      return CloseConn(to.conn, net::TcpCloseReason::kClient);
    case net::DnsTcpStream::Status::kOpen:
      break;
  }
  if (!was_paused && c.stream->paused()) ++stats_.tcp_reads_paused;
  if (CloseIfDone(to.conn, c)) return;
  WatchConn(c);
}

void FrontReplies::Answer(const Waiter& w, const recursor::Answer& a, uint32_t age, int64_t fixed_ttl) {
  const ReplyContext ctx{w.packet(), &w.q, w.to.tcp, weight_option_code_, {w.cookie.data(), w.cookie_len}};
  const size_t len = WriteAnswer(ctx, a, age, fixed_ttl, out_, capacity());
  Deliver(w.to, len, len >= dns::kHeaderSize ? out_[3] & dns::flag::kRcodeMask : 0);
}

void FrontReplies::Error(const Waiter& w, dns::Rcode rcode) {
  if (rcode == dns::Rcode::kServFail) ++servfail_;
  const ReplyContext ctx{w.packet(), &w.q, w.to.tcp, weight_option_code_, {w.cookie.data(), w.cookie_len}};
  Deliver(w.to, WriteError(ctx, rcode, out_, capacity()), static_cast<unsigned>(rcode));
}

}  // namespace weir::recursor
