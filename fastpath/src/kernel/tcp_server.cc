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
#include "weir/partitions/rcu.h"

namespace weir::fastpath::kernel {
namespace {

// Past this many unread answer bytes a connection is not read from; past
// four times it, it is closed.
constexpr size_t kTcpOutCap = 256 * 1024;

}  // namespace

TcpServer::TcpServer(Node& node, int slot, std::vector<int> listen_fds)
    : node_(node), core_(node.core(slot)), slot_(slot), listen_fds_(std::move(listen_fds)), out_(65535 + 2) {}

TcpServer::~TcpServer() {
  for (auto& [id, c] : conns_) close(c.stream->fd());
}

absl::Status TcpServer::Init() {
  if (absl::Status st = loop_.Init(); !st.ok()) return st;
  node_.channel(slot_).wake_worker = [this] { loop_.Wake(); };
  loop_.SetWakeHandler([this] { core_.DrainReturns(node_.NowSeconds(), *this); });
  return absl::OkStatus();
}

void TcpServer::SendHeld(const ClientRoute& route, std::span<const uint8_t> answer) {
  if (conns_.contains(route.token)) Answer(route.token, answer);  // else the client went away
}

void TcpServer::OnConn(uint64_t id, uint32_t ev) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  net::DnsTcpStream& stream = *it->second.stream;
  const auto now = std::chrono::steady_clock::now();
  if ((ev & EPOLLOUT) && stream.Flush() != net::DnsTcpStream::Status::kOpen) return Close(id);
  // A reset while answers are still owed after a half-close ends them.
  if ((ev & (EPOLLHUP | EPOLLERR)) && stream.read_closed()) return Close(id);
  if ((ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) && stream.Read(now) != net::DnsTcpStream::Status::kOpen) {
    return Close(id);
  }
  const ClientInfo client{it->second.client, true, it->second.port};
  const ClientRoute route{slot_, Transport::kTcp, id};
  // Every whole query the stream has. A copy of each: answering one may
  // close the connection, and with it the stream's buffer.
  std::span<const uint8_t> query;
  bool open = true;
  while (open && (it = conns_.find(id)) != conns_.end() && it->second.stream->NextQuery(&query, now)) {
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
      Close(id);
    } else {
      Watch(id);
    }
  }
}

void TcpServer::OnAccept(int lfd) {
  for (;;) {
    const int cfd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (cfd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: stop listening for a moment instead of
        // spinning on a listener that stays readable.
        static common::RateLimitedLog accept_log({.component = "accept"});
        accept_log("TCP accept: ", std::strerror(errno), " (pausing accepts for 100 ms)");
        loop_.Unwatch(lfd);
        loop_.After(std::chrono::milliseconds(100), [this, lfd] { Listen(lfd); });
      }
      return;
    }
    if (static_cast<int>(conns_.size()) >= node_.config().tcp_max_connections) {
      static common::RateLimitedLog limit_log({.component = "accept"});
      limit_log("TCP connection refused: server.tcp_max_connections ", node_.config().tcp_max_connections,
                " reached");
      close(cfd);
      continue;
    }
    const uint64_t id = next_conn_++;
    sockaddr_storage ss{};
    socklen_t sl = sizeof(ss);
    getpeername(cfd, reinterpret_cast<sockaddr*>(&ss), &sl);
    conns_[id] = Conn{std::make_unique<net::DnsTcpStream>(cfd, kTcpOutCap, std::chrono::steady_clock::now()),
                      ClientAddress(ss), ClientPort(ss), EPOLLIN};
    loop_.Watch(cfd, EPOLLIN, [this, id](uint32_t ev) { OnConn(id, ev); });
  }
}

void TcpServer::Listen(int lfd) {
  loop_.Watch(lfd, EPOLLIN, [this, lfd](uint32_t) { OnAccept(lfd); });
}

bool TcpServer::Answer(uint64_t id, std::span<const uint8_t> answer) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return false;  // the client went away
  net::DnsTcpStream& stream = *it->second.stream;
  if (stream.Answer(answer) != net::DnsTcpStream::Status::kOpen || stream.Done()) {
    Close(id);  // failed, a client that never reads, or everything owed is sent after a half-close
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

void TcpServer::Close(uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  loop_.Unwatch(it->second.stream->fd());
  close(it->second.stream->fd());
  conns_.erase(it);
}

void TcpServer::CloseIdle() {
  // Idle connections are closed (RFC 7766 6.2.3): idle since the last whole
  // query, with no answer owed.
  const auto now = std::chrono::steady_clock::now();
  const auto idle = std::chrono::milliseconds(node_.config().tcp_idle_timeout_ms);
  for (auto it = conns_.begin(); it != conns_.end();) {
    const net::DnsTcpStream& st = *it->second.stream;
    if (st.pending() == 0 && now - st.last_activity() > idle) {
      loop_.Unwatch(st.fd());
      close(st.fd());
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
}

void TcpServer::Run(const std::atomic<bool>& running) {
  partitions::RcuThread rcu;
  // Readers are offline while the loop waits: a grace period never waits
  // for an idle TCP thread.
  loop_.SetWaitHooks([&rcu] { rcu.Offline(); }, [&rcu] { rcu.Online(); });
  for (int lfd : listen_fds_) Listen(lfd);
  while (running.load(std::memory_order_relaxed)) {
    loop_.RunOnce(std::chrono::milliseconds(100));
    CloseIdle();
    rcu.Quiescent();
  }
  for (int lfd : listen_fds_) loop_.Unwatch(lfd);
}

}  // namespace weir::fastpath::kernel
