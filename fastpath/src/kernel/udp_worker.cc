#include "kernel/udp_worker.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "weir/common/rcu.h"

namespace weir::fastpath::kernel {
namespace {

constexpr int kBurst = static_cast<int>(QueryHandler::kMaxBurst);
constexpr size_t kUdpMax = 4096;  // larger datagrams are not queries we answer

// How long a worker with a single socket blocks in recvmmsg before it looks
// at its return ring when no query arrives (idle only: under load, returns
// are picked up after every burst).
constexpr timeval kIdleWake{0, 2000};

}  // namespace

struct UdpWorker::Buffers {
  uint8_t rx[kBurst][kUdpMax];
  uint8_t tx[kBurst][kUdpMax];
  mmsghdr rmsg[kBurst];
  iovec riov[kBurst];
  sockaddr_storage peers[kBurst];
  mmsghdr smsg[kBurst];
  iovec siov[kBurst];
  QueryHandler::BurstPacket packets[kBurst];
};

UdpWorker::UdpWorker(Node& node, int slot, std::vector<int> fds)
    : node_(node),
      core_(node.core(slot)),
      slot_(slot),
      fds_(std::move(fds)),
      b_(std::make_unique<Buffers>()) {
  for (int i = 0; i < kBurst; ++i) {
    b_->riov[i] = {b_->rx[i], kUdpMax};
    b_->rmsg[i].msg_hdr = {};
    b_->rmsg[i].msg_hdr.msg_name = &b_->peers[i];
    b_->rmsg[i].msg_hdr.msg_namelen = sizeof(b_->peers[i]);
    b_->rmsg[i].msg_hdr.msg_iov = &b_->riov[i];
    b_->rmsg[i].msg_hdr.msg_iovlen = 1;
    b_->smsg[i].msg_hdr = {};
    b_->smsg[i].msg_hdr.msg_iov = &b_->siov[i];
    b_->smsg[i].msg_hdr.msg_iovlen = 1;
  }
  if (fds_.size() == 1) {
    // One socket: the worker blocks in recvmmsg itself (one syscall per
    // wake-up instead of poll + recvmmsg) and looks at its returns at least
    // every kIdleWake, so the forwarder need not wake it.
    setsockopt(fds_[0], SOL_SOCKET, SO_RCVTIMEO, &kIdleWake, sizeof(kIdleWake));
  } else {
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    node.channel(slot).wake_worker = [fd = wake_fd_] {
      uint64_t one = 1;
      [[maybe_unused]] ssize_t n = write(fd, &one, sizeof(one));
    };
  }
}

UdpWorker::~UdpWorker() {
  if (wake_fd_ >= 0) close(wake_fd_);
}

ClientRoute UdpWorker::HoldRoute(size_t index) {
  Peer p;
  p.addr = SocketAddress::FromSockaddr(reinterpret_cast<const sockaddr*>(&b_->peers[index]),
                                       b_->rmsg[index].msg_hdr.msg_namelen);
  p.socket = static_cast<uint16_t>(burst_socket_);
  return {slot_, Transport::kUdp, routes_.Put(p)};
}

void UdpWorker::SendHeld(const ClientRoute& route, std::span<const uint8_t> answer) {
  Peer p;
  if (!routes_.Take(route.token, &p)) return;
  if (!answer.empty()) sendto(fds_[p.socket], answer.data(), answer.size(), 0, p.addr.sa(), p.addr.len);
}

int UdpWorker::Burst(size_t f, int flags) {
  Buffers& b = *b_;
  int n;
  if (flags & MSG_WAITFORONE) {
    common::RcuOfflineScope offline;  // blocking: let grace periods pass
    n = recvmmsg(fds_[f], b.rmsg, kBurst, flags, nullptr);
  } else {
    n = recvmmsg(fds_[f], b.rmsg, kBurst, flags, nullptr);
  }
  if (n <= 0) return 0;
  const uint32_t now = node_.NowSeconds();
  // Response i is written to tx[i] and sent in order.
  for (int i = 0; i < n; ++i) {
    QueryHandler::BurstPacket& p = b.packets[i];
    p.pkt = b.rx[i];
    p.len = b.rmsg[i].msg_len;
    p.client = ClientInfo{ClientAddress(b.peers[i]), false, ClientPort(b.peers[i])};
    p.out = b.tx[i];
    p.out_cap = kUdpMax;
  }
  burst_socket_ = f;
  core_.HandleBurst(b.packets, static_cast<size_t>(n), now, *this);
  int nsend = 0;
  for (int i = 0; i < n; ++i) {
    const Verdict v = b.packets[i].verdict;
    if (v == Verdict::kReply || v == Verdict::kReplyAndPrefetch) {
      b.siov[nsend] = {b.tx[i], b.packets[i].out_len};
      b.smsg[nsend].msg_hdr.msg_name = &b.peers[i];
      b.smsg[nsend].msg_hdr.msg_namelen = b.rmsg[i].msg_hdr.msg_namelen;
      ++nsend;
    }
  }
  if (nsend > 0) sendmmsg(fds_[f], b.smsg, nsend, 0);
  for (int i = 0; i < n; ++i) b.rmsg[i].msg_hdr.msg_namelen = sizeof(b.peers[i]);
  return n;
}

void UdpWorker::Run(const std::atomic<bool>& running) {
  common::RcuThread rcu;
  if (fds_.size() == 1) {
    while (running.load(std::memory_order_relaxed)) {
      core_.Turn();
      Burst(0, MSG_WAITFORONE);
      core_.DrainReturns(node_.NowSeconds(), *this);
      rcu.Quiescent();
    }
    return;
  }
  // Several sockets (IPv4 and IPv6): poll them and the wake descriptor.
  std::vector<pollfd> pfds;
  for (int fd : fds_) pfds.push_back({fd, POLLIN, 0});
  pfds.push_back({wake_fd_, POLLIN, 0});
  while (running.load(std::memory_order_relaxed)) {
    core_.Turn();
    int ready;
    {
      common::RcuOfflineScope offline;  // blocking: let grace periods pass
      ready = poll(pfds.data(), pfds.size(), 100);
    }
    if (ready <= 0) continue;
    if (pfds.back().revents & POLLIN) {
      uint64_t v;
      [[maybe_unused]] ssize_t r = read(wake_fd_, &v, sizeof(v));
    }
    for (size_t f = 0; f < fds_.size(); ++f) {
      if (!(pfds[f].revents & POLLIN)) continue;
      // Under a flood the socket never empties: take the returned answers
      // between bursts, or the clients waiting on misses are never answered
      // (and pile up at the forwarder).
      while (Burst(f, MSG_DONTWAIT) == kBurst) {
        core_.DrainReturns(node_.NowSeconds(), *this);
        rcu.Quiescent();
      }
    }
    core_.DrainReturns(node_.NowSeconds(), *this);
    rcu.Quiescent();
  }
}

}  // namespace weir::fastpath::kernel
