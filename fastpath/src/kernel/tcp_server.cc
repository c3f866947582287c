#include "kernel/tcp_server.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "kernel/socket_util.h"
#include "weir/common/log.h"
#include "weir/common/rcu.h"
#include "weir/net/acceptor.h"

namespace weir::fastpath::kernel {
namespace {

// Past this many unread answer bytes a connection is not read from; past
// four times it, it is closed.
constexpr size_t kTcpOutCap = 256 * 1024;

}  // namespace

TcpServer::TcpServer(Node& node, int slot, std::vector<int> listen_fds)
    : node_(node),
      core_(node.core(slot)),
      slot_(slot),
      listen_fds_(std::move(listen_fds)),
      table_(node.config().tcp_limits),
      out_(65535 + 2) {}

TcpServer::~TcpServer() {
  for (auto& [id, c] : conns_) close(c.stream->fd());
}

absl::Status TcpServer::Init() {
  if (absl::Status st = loop_.Init(); !st.ok()) return st;
  node_.channel(slot_).wake_worker = [this] { loop_.Wake(); };
  loop_.SetWakeHandler([this] {
    now_ = std::chrono::steady_clock::now();
    core_.DrainReturns(node_.NowSeconds(), *this);
  });
  return absl::OkStatus();
}

void TcpServer::SendHeld(const ClientRoute& route, std::span<const uint8_t> answer) {
  if (conns_.contains(route.token)) Answer(route.token, answer);  // else the client went away
}

void TcpServer::OnConn(uint64_t id, uint32_t ev) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  net::DnsTcpStream& stream = *it->second.stream;
  now_ = std::chrono::steady_clock::now();
  using Status = net::DnsTcpStream::Status;
  if ((ev & EPOLLOUT) && stream.Flush() != Status::kOpen) return Close(id, net::TcpCloseReason::kClient);
  // A reset while answers are still owed after a half-close ends them.
  if ((ev & (EPOLLHUP | EPOLLERR)) && stream.read_closed()) return Close(id, net::TcpCloseReason::kClient);
  if ((ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) && stream.Read(now_) != Status::kOpen) {
    return Close(id, net::TcpCloseReason::kClient);
  }
  const ClientInfo client{it->second.client, true, it->second.port};
  const ClientRoute route{slot_, Transport::kTcp, id};
  // Every whole query the stream has. A copy of each: answering one may
  // close the connection, and with it the stream's buffer.
  std::span<const uint8_t> query;
  bool open = true;
  while (open && (it = conns_.find(id)) != conns_.end() && it->second.stream->NextQuery(&query, now_)) {
    table_.QueryRead(it->second.handle, now_);
    msg_.assign(query.begin(), query.end());
    size_t out_len = 0;
    bool dropped = false;
    if (core_.HandleOne(msg_, client, route, node_.NowSeconds(), out_.data(), out_.size(), &out_len,
                        &dropped)) {
      open = Answer(id, {out_.data(), out_len});
    } else if (dropped) {
      open = Answer(id, {});
    }  // else the answer comes back from upstream
  }
  // Half-closed with everything owed written (RFC 7766 6.2.4): close.
  if (auto c = conns_.find(id); open && c != conns_.end()) {
    if (c->second.stream->Done()) {
      Close(id, net::TcpCloseReason::kClient);
    } else {
      Watch(id);
    }
  }
}

void TcpServer::OnAccept(const net::AcceptedConnection& ac) {
  const int cfd = ac.fd;
  const sockaddr_storage& ss = ac.peer;
  const socklen_t sl = ac.peer_len;
  now_ = std::chrono::steady_clock::now();
  const common::SocketAddress peer =
      common::SocketAddress::FromSockaddr(reinterpret_cast<const sockaddr*>(&ss), sl);
  const net::TcpConnectionTable::Admission a = table_.Admit(peer, now_);
  if (!a.admitted) {
    static common::RateLimitedLog limit_log({.component = "accept"});
    limit_log("TCP connection from ", peer.ToString(),
              " refused: ", net::RefusalText(a.refused, "server.tcp_"));
    close(cfd);
    return;
  }
  if (a.evict) Close(*a.evict, net::TcpCloseReason::kPressure);
  const uint64_t id = next_conn_++;
  conns_[id] = Conn{std::make_unique<net::DnsTcpStream>(cfd, kTcpOutCap, now_), ClientAddress(ss),
                    ClientPort(ss), EPOLLIN, table_.Add(id, peer, now_)};
  loop_.Watch(cfd, EPOLLIN, [this, id](uint32_t ev) { OnConn(id, ev); });
}

void TcpServer::Listen(int lfd) {
  net::WatchListener(loop_, lfd,
                     {.on_connection = [this](const net::AcceptedConnection& c) { OnAccept(c); },
                      .on_pause =
                          [this](int err) {
                            table_.AcceptPaused();
                            static common::RateLimitedLog accept_log({.component = "accept"});
                            accept_log("TCP accept: ", std::strerror(err), " (pausing accepts for 100 ms)");
                          }});
}

bool TcpServer::Answer(uint64_t id, std::span<const uint8_t> answer) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return false;  // the client went away
  table_.QueryDone(it->second.handle, now_);
  net::DnsTcpStream& stream = *it->second.stream;
  switch (stream.Answer(answer)) {
    case net::DnsTcpStream::Status::kOverflow:  // a client that never reads
      Close(id, net::TcpCloseReason::kUnsent);
      return false;
    case net::DnsTcpStream::Status::kClose:
      Close(id, net::TcpCloseReason::kClient);
      return false;
    case net::DnsTcpStream::Status::kOpen:
      break;
  }
  if (stream.Done()) {  // everything owed is sent after a half-close
    Close(id, net::TcpCloseReason::kClient);
    return false;
  }
  Watch(id);
  return true;
}

void TcpServer::Watch(uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& c = it->second;
  const uint32_t want = c.stream->WantedEvents();
  if (want == c.events) return;
  c.events = want;
  loop_.Modify(c.stream->fd(), want);
}

void TcpServer::Close(uint64_t id, net::TcpCloseReason why) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  table_.Remove(it->second.handle, why);
  loop_.Unwatch(it->second.stream->fd());
  close(it->second.stream->fd());
  conns_.erase(it);
}

void TcpServer::CloseExpired() {
  // Idle (RFC 7766 6.2.3: no answer owed, no whole query since) or open
  // for the whole lifetime: drained (nothing more read, closed once its
  // answers are sent), then closed if its client does not take them.
  now_ = std::chrono::steady_clock::now();
  expired_.clear();
  table_.Expired(now_, &expired_);
  for (const auto& e : expired_) {
    auto it = conns_.find(e.id);
    if (it == conns_.end()) continue;
    if (!e.drain) {
      Close(e.id, e.reason);
      continue;
    }
    it->second.stream->StopReading();
    if (it->second.stream->Done()) {
      Close(e.id, e.reason);
    } else {
      Watch(e.id);
    }
  }
}

void TcpServer::RenderMetrics(common::PrometheusWriter& w) const {
  const net::TcpConnectionTable::Stats& st = table_.stats();
  w.Counter("weir_tcp_connections_accepted_total",
            "TCP connections accepted (those refused at once included).")
      .Add({}, st.accepted.load(std::memory_order_relaxed));
  auto& closed = w.Counter("weir_tcp_connections_closed_total",
                           "TCP connections closed or refused at accept, by reason (docs/metrics.md).");
  for (size_t r = 0; r < st.closed.size(); ++r) {
    closed.Add({{"reason", net::TcpCloseReasonName(static_cast<net::TcpCloseReason>(r))}},
               st.closed[r].load(std::memory_order_relaxed));
  }
  w.Gauge("weir_tcp_connections", "TCP connections open.").Add({}, st.open.load(std::memory_order_relaxed));
  w.Counter("weir_tcp_accept_paused_total", "Times accepting TCP connections paused (descriptors exhausted).")
      .Add({}, st.accept_paused.load(std::memory_order_relaxed));
}

void TcpServer::Run(const std::atomic<bool>& running) {
  common::RcuThread rcu;
  // Readers are offline while the loop waits: a grace period never waits
  // for an idle TCP thread.
  loop_.SetWaitHooks([&rcu] { rcu.Offline(); }, [&rcu] { rcu.Online(); });
  for (int lfd : listen_fds_) Listen(lfd);
  while (running.load(std::memory_order_relaxed)) {
    core_.Turn();
    loop_.RunOnce(std::chrono::milliseconds(100));
    CloseExpired();
    rcu.Quiescent();
  }
  for (int lfd : listen_fds_) loop_.Unwatch(lfd);
}

}  // namespace weir::fastpath::kernel
