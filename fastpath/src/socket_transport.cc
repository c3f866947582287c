#include "socket_transport.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "weir/common/log.h"

namespace weir::fastpath {
namespace {

using common::SocketAddress;

std::string ReadSmallFile(const char* path) {
  char text[4096];
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return {};
  const size_t n = std::fread(text, 1, sizeof(text), f);
  std::fclose(f);
  return std::string(text, n);
}

SocketAddress LocalOf(int fd) {
  sockaddr_storage local{};
  socklen_t ll = sizeof(local);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0) return {};
  return SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&local), ll);
}

int FamilyIndex(int family) { return family == AF_INET ? 0 : 1; }

}  // namespace

SocketTransport::SocketTransport(net::EventLoop& loop, common::SecureRandom& rng, int udp_sockets,
                                 int lifetime_s, Clock::duration late_window, UpstreamTcpPool::Options tcp)
    : loop_(loop),
      rng_(rng),
      udp_sockets_(udp_sockets),
      lifetime_s_(lifetime_s),
      late_window_(late_window),
      tcp_(loop, tcp) {}

SocketTransport::~SocketTransport() { CloseAll(); }

int SocketTransport::OpenPoolSocket(int family) {
  const int fd = socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (family == AF_INET6) {
    const int on = 1;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on));
  }
  // Room for a burst of answers while the loop is busy elsewhere.
  const int rcvbuf = 1 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  // A port of the ephemeral range (less the reserved ports) drawn from the
  // CSPRNG; taken ones are drawn again; after 32 misses the kernel picks.
  bool bound = false;
  for (int i = 0; i < 33 && !bound; ++i) {
    const uint16_t port = i < 32 ? ports_.Draw(rng_) : 0;
    sockaddr_storage ss{};
    socklen_t len = 0;
    if (family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      a->sin_family = AF_INET;
      a->sin_port = htons(port);
      len = sizeof(sockaddr_in);
    } else {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      a->sin6_family = AF_INET6;
      a->sin6_port = htons(port);
      len = sizeof(sockaddr_in6);
    }
    bound = bind(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0;
  }
  if (!bound) {
    close(fd);
    return -1;
  }
  sockets_[fd].family = family;
  loop_.Watch(fd, EPOLLIN, [this, fd](uint32_t) { OnPoolReadable(fd); });
  return fd;
}

absl::Status SocketTransport::Open(bool ipv4, bool ipv6) {
  ports_ = PortRange::FromProc(ReadSmallFile("/proc/sys/net/ipv4/ip_local_port_range"),
                               ReadSmallFile("/proc/sys/net/ipv4/ip_local_reserved_ports"));
  const bool want[2] = {ipv4, ipv6};
  for (int f = 0; f < 2; ++f) {
    if (!want[f] || !pool_[f].empty()) continue;
    for (int i = 0; i < udp_sockets_; ++i) {
      const int fd = OpenPoolSocket(f == 0 ? AF_INET : AF_INET6);
      if (fd < 0) {
        const int err = errno;
        CloseAll();
        return absl::UnavailableError(common::Cat("forwarder: cannot open upstream socket ", i + 1, " of ",
                                                  udp_sockets_, ": ", std::strerror(err)));
      }
      pool_[f].push_back(fd);
    }
  }
  if (lifetime_s_ > 0) next_rotation_ = Clock::now() + std::chrono::seconds(lifetime_s_) / udp_sockets_;
  return absl::OkStatus();
}

std::span<const UpstreamTransport::Handle> SocketTransport::Pool(int family) const {
  return pool_[FamilyIndex(family)];
}

int SocketTransport::SendUdp(Handle socket, const SocketAddress& to, std::span<const uint8_t> message) {
  if (sendto(socket, message.data(), message.size(), 0, to.sa(), to.len) < 0) return errno;
  return 0;
}

void SocketTransport::TryStarted(Handle socket) {
  auto it = sockets_.find(socket);
  if (it != sockets_.end()) ++it->second.tries;
}

void SocketTransport::TryEnded(Handle socket) {
  auto it = sockets_.find(socket);
  if (it != sockets_.end() && it->second.tries > 0) --it->second.tries;
}

void SocketTransport::Housekeep(Clock::time_point now) {
  if (now < next_housekeeping_) return;
  next_housekeeping_ = now + std::chrono::seconds(1);
  tcp_.Housekeep(now);
  std::vector<int> done;
  for (const auto& [fd, s] : sockets_) {
    if (s.retired && s.tries == 0 && now >= s.close_after) done.push_back(fd);
  }
  for (int fd : done) {
    loop_.Unwatch(fd);
    close(fd);
    sockets_.erase(fd);
  }
  if (lifetime_s_ <= 0 || now < next_rotation_) return;
  // One socket of each pool moves to a fresh random port; over a lifetime
  // every port is replaced, so a port that leaked (a packet capture, a
  // listing of the host's sockets) stops being useful. The old socket stays
  // open for its tries' answers, then closes.
  next_rotation_ = now + std::chrono::seconds(lifetime_s_) / udp_sockets_;
  for (int f = 0; f < 2; ++f) {
    if (pool_[f].empty()) continue;
    const int fresh = OpenPoolSocket(f == 0 ? AF_INET : AF_INET6);
    if (fresh < 0) continue;  // keep the old one until the next turn
    const uint32_t i = rng_.Below(static_cast<uint32_t>(pool_[f].size()));
    PoolSocket& old = sockets_[pool_[f][i]];
    old.retired = true;
    old.close_after = now + late_window_;
    pool_[f][i] = fresh;
  }
}

void SocketTransport::OnPoolReadable(int fd) {
  // A bounded batch per wake-up: a flood on one socket cannot starve the
  // others, the workers' misses or the timers.
  for (int i = 0; i < 256; ++i) {
    sockaddr_storage from{};
    socklen_t fl = sizeof(from);
    const ssize_t n = recvfrom(fd, buf_, sizeof(buf_), 0, reinterpret_cast<sockaddr*>(&from), &fl);
    if (n < 0) return;
    if (sink_ != nullptr) {
      sink_->OnDatagram(fd, SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&from), fl),
                        {buf_, static_cast<size_t>(n)});
    }
    if (!sockets_.contains(fd)) return;
  }
}

UpstreamTransport::Handle SocketTransport::OpenTcp(const SocketAddress& to,
                                                   std::span<const uint8_t> message) {
  return tcp_.Open(to, message);
}

void SocketTransport::CloseTcp(Handle tcp) { tcp_.Close(tcp); }

UpstreamTransport::Handle SocketTransport::SendProbe(const SocketAddress& to,
                                                     std::span<const uint8_t> message) {
  const int fd = socket(to.family(), SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (sendto(fd, message.data(), message.size(), 0, to.sa(), to.len) < 0) {
    close(fd);
    return -1;
  }
  loop_.Watch(fd, EPOLLIN, [this, fd](uint32_t) { OnProbe(fd); });
  probes_.push_back(fd);
  return fd;
}

void SocketTransport::CloseProbe(Handle probe) {
  auto it = std::find(probes_.begin(), probes_.end(), probe);
  if (it == probes_.end()) return;
  probes_.erase(it);
  loop_.Unwatch(probe);
  close(probe);
}

void SocketTransport::OnProbe(int fd) {
  sockaddr_storage from{};
  socklen_t fl = sizeof(from);
  const ssize_t n = recvfrom(fd, buf_, sizeof(buf_), 0, reinterpret_cast<sockaddr*>(&from), &fl);
  if (n < 0 || sink_ == nullptr) return;
  sink_->OnProbeReply(fd, SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&from), fl),
                      {buf_, static_cast<size_t>(n)});
}

SocketAddress SocketTransport::LocalAddress(Handle h) const {
  return tcp_.Owns(h) ? tcp_.LocalAddress(h) : LocalOf(h);
}

void SocketTransport::CloseAll() {
  tcp_.CloseAll();
  for (auto& [fd, s] : sockets_) {
    loop_.Unwatch(fd);
    close(fd);
  }
  sockets_.clear();
  pool_[0].clear();
  pool_[1].clear();
  for (int fd : probes_) {
    loop_.Unwatch(fd);
    close(fd);
  }
  probes_.clear();
}

}  // namespace weir::fastpath
