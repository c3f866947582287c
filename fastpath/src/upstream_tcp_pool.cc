#include "upstream_tcp_pool.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <utility>

#include "weir/dns/wire.h"
#include "weir/net/dns_tcp.h"

namespace weir::fastpath {
namespace {

using common::SocketAddress;

// Read calls per wake-up: a recursor streaming answers cannot starve the
// forwarder's other sockets.
constexpr int kReadsPerWake = 16;

uint16_t IdOf(std::span<const uint8_t> message) { return dns::Load16(message.data()); }

}  // namespace

UpstreamTcpPool::UpstreamTcpPool(net::EventLoop& loop, Options options) : loop_(loop), options_(options) {}

UpstreamTcpPool::~UpstreamTcpPool() { CloseAll(); }

UpstreamTcpPool::Handle UpstreamTcpPool::Open(const SocketAddress& to, std::span<const uint8_t> message) {
  if (message.size() < dns::kHeaderSize || message.size() > net::kMaxDnsMessage) return -1;
  std::string key = to.ToString();
  Dest& d = dests_[key];
  d.to = to;
  Handle h = next_;
  while (tries_.contains(h)) h = h == INT_MAX ? kFirstHandle : h + 1;
  next_ = h == INT_MAX ? kFirstHandle : h + 1;
  Try& t = tries_[h];
  t.dest = std::move(key);
  t.to = to;
  t.query.assign(message.begin(), message.end());
  if (Place(h, /*may_queue=*/true) == Placed::kFailed) {
    tries_.erase(h);
    return -1;
  }
  return h;
}

void UpstreamTcpPool::Close(Handle h) {
  auto it = tries_.find(h);
  if (it == tries_.end()) return;
  const Try& t = it->second;
  if (t.conn >= 0) {
    // The ID stays reserved on the connection until its answer comes.
    auto c = conns_.find(t.conn);
    if (c != conns_.end()) {
      auto w = c->second.waiting.find(IdOf(t.query));
      if (w != c->second.waiting.end() && w->second == h) w->second = 0;
    }
  }
  // A queued try is skipped when its turn comes (Pump).
  tries_.erase(it);
}

TcpPoolStats UpstreamTcpPool::stats() const {
  TcpPoolStats s = stats_;
  s.connections = conns_.size();
  return s;
}

bool UpstreamTcpPool::Queued(Handle h) const {
  auto it = tries_.find(h);
  return it != tries_.end() && it->second.conn == -1;
}

SocketAddress UpstreamTcpPool::LocalAddress(Handle h) const {
  auto it = tries_.find(h);
  if (it == tries_.end() || it->second.conn < 0) return {};
  sockaddr_storage local{};
  socklen_t ll = sizeof(local);
  if (getsockname(it->second.conn, reinterpret_cast<sockaddr*>(&local), &ll) != 0) return {};
  return SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&local), ll);
}

int UpstreamTcpPool::OpenConn(Dest& d, const std::string& key) {
  const int fd = socket(d.to.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (connect(fd, d.to.sa(), d.to.len) != 0 && errno != EINPROGRESS) {
    close(fd);
    ++stats_.connect_failed;
    return -1;
  }
  const auto now = Clock::now();
  Conn& c = conns_[fd];
  c.dest = key;
  c.opened = c.progress = c.idle_since = now;
  c.events = EPOLLOUT;  // until connected
  loop_.Watch(fd, c.events, [this, fd](uint32_t events) { OnEvent(fd, events); });
  d.conns.push_back(fd);
  ++stats_.opened;
  return fd;
}

UpstreamTcpPool::Placed UpstreamTcpPool::Place(Handle h, bool may_queue) {
  Try& t = tries_.at(h);
  Dest& d = dests_.at(t.dest);
  const uint16_t id = IdOf(t.query);
  // The open connection with the fewest queries outstanding that can take
  // this ID.
  int best = -1;
  size_t best_n = SIZE_MAX;
  for (int fd : d.conns) {
    const Conn& c = conns_.at(fd);
    if (c.retired || c.waiting.size() >= kMaxPipelined || c.waiting.contains(id)) continue;
    if (c.waiting.size() < best_n) {
      best = fd;
      best_n = c.waiting.size();
    }
  }
  // No room, and a retired connection holds only the IDs of tries that
  // ended (their answers late): it goes now, a fresh one takes its place.
  if (best < 0 && d.conns.size() >= static_cast<size_t>(options_.connections)) {
    for (int fd : d.conns) {
      const Conn& c = conns_.at(fd);
      if (c.retired && c.out.empty() &&
          std::all_of(c.waiting.begin(), c.waiting.end(), [](const auto& w) { return w.second == 0; })) {
        CloseConn(fd);
        break;
      }
    }
  }
  // Every connection busy and room for one more: spread the load.
  if ((best < 0 || best_n > 0) && d.conns.size() < static_cast<size_t>(options_.connections)) {
    const int fd = OpenConn(d, t.dest);
    if (fd >= 0) {
      best = fd;
    } else if (d.conns.empty()) {
      return Placed::kFailed;
    }
  }
  if (best < 0) {
    if (may_queue) {
      t.conn = -1;
      d.queue.push_back(h);
      ++stats_.queued;
    }
    return Placed::kQueued;
  }
  Conn& c = conns_.at(best);
  if (c.waiting.empty()) c.progress = Clock::now();
  c.waiting[id] = h;
  t.conn = best;
  net::AppendFramed(t.query, &c.out);
  if (c.connected && c.sent == 0 && c.out.size() == t.query.size() + 2) {
    // Nothing else queued on it: written at once, the rest on EPOLLOUT. An
    // error shows up as an event.
    const ssize_t n = send(best, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) c.sent = static_cast<size_t>(n);
    if (c.sent == c.out.size()) {
      c.out.clear();
      c.sent = 0;
    }
  }
  UpdateEvents(best, c);
  return Placed::kSent;
}

void UpstreamTcpPool::Pump(const std::string& key) {
  auto dit = dests_.find(key);
  if (dit == dests_.end()) return;
  while (!dit->second.queue.empty()) {
    const Handle h = dit->second.queue.front();
    auto t = tries_.find(h);
    if (t == tries_.end() || t->second.conn != -1) {
      dit->second.queue.pop_front();  // ended while it waited
      continue;
    }
    if (Place(h, /*may_queue=*/false) != Placed::kSent) break;
    dit = dests_.find(key);
    dit->second.queue.pop_front();
  }
}

void UpstreamTcpPool::UpdateEvents(int fd, Conn& c) {
  uint32_t want = EPOLLIN;
  if (!c.connected || c.sent < c.out.size()) want |= EPOLLOUT;
  if (want == c.events) return;
  c.events = want;
  loop_.Modify(fd, want);
}

void UpstreamTcpPool::OnEvent(int fd, uint32_t events) {
  std::vector<std::pair<Handle, std::vector<uint8_t>>> answers;
  std::vector<Handle> failed;
  std::string key;
  bool drop = false;
  {
    auto it = conns_.find(fd);
    if (it == conns_.end()) return;
    Conn& c = it->second;
    key = c.dest;
    const auto now = Clock::now();
    if (!c.connected && (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
      int err = 0;
      socklen_t len = sizeof(err);
      if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
        ++stats_.connect_failed;
        drop = true;
      } else {
        c.connected = true;
        c.progress = now;
      }
    }
    if (!drop && c.connected) {
      if ((events & (EPOLLERR | EPOLLHUP)) && !(events & EPOLLIN)) drop = true;
      if (!drop && c.sent < c.out.size()) {
        const ssize_t n = send(fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN && errno != EINTR) drop = true;
        if (n > 0) c.sent += static_cast<size_t>(n);
        if (c.sent == c.out.size()) {
          c.out.clear();
          c.sent = 0;
        }
      }
      for (int i = 0; !drop && (events & EPOLLIN) && i < kReadsPerWake; ++i) {
        const ssize_t n = recv(fd, buf_, sizeof(buf_), 0);
        if (n < 0 && errno == EAGAIN) break;
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          drop = true;  // closed or reset: what it still owes goes again
          break;
        }
        c.in.insert(c.in.end(), buf_, buf_ + n);
        c.progress = now;
        size_t off = 0;
        while (c.in.size() - off >= 2) {
          const size_t len = (size_t{c.in[off]} << 8) | c.in[off + 1];
          if (len < dns::kHeaderSize) {
            drop = true;  // cannot be a DNS message: the stream is lost
            break;
          }
          if (c.in.size() - off < 2 + len) break;
          const std::span<const uint8_t> m(c.in.data() + off + 2, len);
          auto w = c.waiting.find(IdOf(m));
          if (w == c.waiting.end()) {
            ++stats_.unexpected;
          } else {
            if (w->second != 0) {
              auto t = tries_.find(w->second);
              if (t != tries_.end()) t->second.conn = -2;  // answered
              answers.emplace_back(w->second, std::vector<uint8_t>(m.begin(), m.end()));
            }
            c.waiting.erase(w);
            if (c.waiting.empty()) c.idle_since = now;
          }
          off += 2 + len;
        }
        c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(off));
        if (static_cast<size_t>(n) < sizeof(buf_)) break;
      }
    }
    // A retired connection closes as soon as it owes nothing.
    if (!drop && c.retired && c.waiting.empty() && c.out.empty()) {
      CloseConn(fd);
    } else if (!drop) {
      UpdateEvents(fd, c);
    }
  }
  if (drop) Drop(fd, &failed);
  Pump(key);
  // The sink last: it may open and close tries, and connections with them.
  for (auto& [h, m] : answers) {
    if (sink_ != nullptr) sink_->OnTcpMessage(h, m);
  }
  for (Handle h : failed) {
    if (sink_ != nullptr && tries_.contains(h)) sink_->OnTcpFailed(h);
  }
}

void UpstreamTcpPool::Drop(int fd, std::vector<Handle>* failed) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  const bool had_connected = it->second.connected;
  const absl::flat_hash_map<uint16_t, Handle> waiting = std::move(it->second.waiting);
  CloseConn(fd);
  std::vector<Handle> again;
  for (const auto& [id, h] : waiting) {
    auto t = tries_.find(h);
    if (h == 0 || t == tries_.end()) continue;
    t->second.conn = -1;
    if (had_connected && !t->second.resent) {
      // RFC 7766 6.2.1: the server may close a connection at any time; a
      // query it had not answered goes out once more.
      t->second.resent = true;
      ++stats_.resent;
      again.push_back(h);
    } else {
      t->second.conn = -2;
      failed->push_back(h);
    }
  }
  for (Handle h : again) {
    if (Place(h, /*may_queue=*/true) == Placed::kFailed) {
      tries_.at(h).conn = -2;
      failed->push_back(h);
    }
  }
}

void UpstreamTcpPool::CloseConn(int fd) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  auto d = dests_.find(it->second.dest);
  if (d != dests_.end()) std::erase(d->second.conns, fd);
  loop_.Unwatch(fd);
  close(fd);
  conns_.erase(it);
}

void UpstreamTcpPool::Housekeep(Clock::time_point now) {
  std::vector<int> close_now, drop;
  for (auto& [fd, c] : conns_) {
    if (now - c.opened >= options_.lifetime) c.retired = true;
    if (c.waiting.empty() && c.out.empty()) {
      if (c.retired || now - c.idle_since >= options_.idle) close_now.push_back(fd);
    } else if (now - c.progress >= options_.stall) {
      drop.push_back(fd);  // owes answers and sends nothing
    }
  }
  std::vector<Handle> failed;
  std::vector<std::string> keys;
  for (int fd : close_now) {
    keys.push_back(conns_.at(fd).dest);
    CloseConn(fd);
  }
  for (int fd : drop) {
    keys.push_back(conns_.at(fd).dest);
    Drop(fd, &failed);
  }
  for (const std::string& k : keys) Pump(k);
  for (Handle h : failed) {
    if (sink_ != nullptr && tries_.contains(h)) sink_->OnTcpFailed(h);
  }
}

void UpstreamTcpPool::CloseAll() {
  for (auto& [fd, c] : conns_) {
    loop_.Unwatch(fd);
    close(fd);
  }
  conns_.clear();
  dests_.clear();
  tries_.clear();
}

}  // namespace weir::fastpath
