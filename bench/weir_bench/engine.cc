#include "engine.h"

#include <errno.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "sender.h"
#include "stream_engine.h"
#include "weir/common/hash.h"
#include "weir/common/text.h"
#include "weir/dns/writer.h"
#include "weir/net/dns_tcp.h"

namespace weir::bench {
namespace {

constexpr uint32_t kIds = 65536;
constexpr uint64_t kTcpBit = uint64_t{1} << 32;
// Segments per UDP GSO send (the kernel's UDP_MAX_SEGMENTS is 64 or more).
constexpr uint32_t kMaxGsoSegments = 64;

}  // namespace

namespace {

// Sends `plan` from `source` with up to 256 queries outstanding, each
// retried until `tries` are used, and returns the answers in plan order
// (empty when none came). Answers must match ID and question.
absl::StatusOr<std::vector<std::vector<uint8_t>>> Exchange(const Source& source,
                                                           const common::SocketAddress& server,
                                                           const std::vector<Planned>& plan,
                                                           uint32_t timeout_ms, int tries,
                                                           uint16_t weight_code) {
  auto fd = ConnectedSocket(source, server, SOCK_DGRAM, true);
  if (!fd.ok()) return fd.status();
  std::vector<std::vector<uint8_t>> answers(plan.size());
  dns::ParseOptions popts;
  popts.weight_option_code = weight_code;
  uint8_t buf[kAnswerCap];
  constexpr size_t kWindow = 256;
  uint16_t id_base = static_cast<uint16_t>(NowNs());
  for (size_t start = 0; start < plan.size(); start += kWindow) {
    const size_t end = std::min(plan.size(), start + kWindow);
    for (int attempt = 0; attempt < tries; ++attempt) {
      size_t waiting = 0;
      for (size_t i = start; i < end; ++i) {
        if (!answers[i].empty()) continue;
        const size_t n = WriteQuery(static_cast<uint16_t>(id_base + i), plan[i].qname.span(), plan[i].qtype,
                                    plan[i].qo, buf, sizeof buf);
        if (send(*fd, buf, n, 0) == static_cast<ssize_t>(n)) ++waiting;
      }
      const uint64_t deadline = NowNs() + uint64_t{timeout_ms} * 1000000u;
      while (waiting > 0) {
        const uint64_t now = NowNs();
        if (now >= deadline) break;
        pollfd p{*fd, POLLIN, 0};
        if (poll(&p, 1, static_cast<int>((deadline - now) / 1000000u) + 1) <= 0) continue;
        const ssize_t r = recv(*fd, buf, sizeof buf, 0);
        if (r < 12) continue;  // ECONNREFUSED (nobody listening) or a runt: wait for the deadline
        const size_t i = static_cast<uint16_t>(dns::Load16(buf) - id_base);
        if (i < start || i >= end || !answers[i].empty()) continue;
        dns::Message m;
        if (m.Parse({buf, static_cast<size_t>(r)}, popts) != dns::ParseError::kOk) continue;
        if (!(m.qname() == plan[i].qname) || m.qtype() != plan[i].qtype) continue;
        answers[i].assign(buf, buf + r);
        --waiting;
      }
      if (waiting == 0) break;
    }
  }
  close(*fd);
  return answers;
}

}  // namespace

// ------------------------------------------------------------ sender thread

struct Slot {
  uint64_t sent_ns = 0;
  uint64_t miss_seq = 0;
  uint32_t question = 0;
  uint32_t subnet = 0;  // --subscriber-ecs: the subscriber /24 it was asked for
  uint8_t busy = 0;
  uint8_t weight = 0;
  uint8_t subscriber = 0;
};

struct Sock {
  int fd = -1;
  uint32_t source = 0;
  uint32_t city = 0;
  std::unique_ptr<Slot[]> slots;
  uint16_t next_id = 0;
  uint16_t oldest = 0;
  uint32_t inflight = 0;
  // Its TCP connection, opened on the first TCP query.
  int tcp_fd = -1;
  bool tcp_connected = false;
  std::vector<uint8_t> tcp_out;
  size_t tcp_out_sent = 0;
  net::DnsTcpReader reader;
};

// The UDP (and --tcp-fraction TCP) sender.
struct Engine::Thread final : Sender {
  std::vector<Sock> socks;
  std::vector<std::vector<uint32_t>> socks_of_city;
  std::vector<uint32_t> city_rr;
  std::vector<double> city_owed;  // queries each city is owed (PickSocket)
  int ep = -1;
  uint32_t inflight = 0;
  bool gso = true;  // UDP GSO for groups of equal-length queries (cleared if the kernel refuses it)
  // Scratch of SendUdp, sized once.
  std::vector<uint32_t> order, singles;
  std::vector<uint8_t> unsent;
  std::vector<iovec> gso_iov;
  std::vector<mmsghdr> single_msgs;

  ~Thread() override {
    for (Sock& s : socks) {
      if (s.fd >= 0) close(s.fd);
      if (s.tcp_fd >= 0) close(s.tcp_fd);
    }
    if (ep >= 0) close(ep);
  }

  absl::Status Open() override {
    const common::SocketAddress& server = o->server;
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) return absl::InternalError(Errno("epoll_create1"));
    socks_of_city.resize(sources->cities().size());
    city_rr.assign(sources->cities().size(), 0);
    city_owed.assign(sources->cities().size(), 0.0);
    for (uint32_t si = 0; si < sources->sources().size(); ++si) {
      for (uint32_t k = 0; k < o->sockets; ++k) {
        auto fd = ConnectedSocket(sources->sources()[si], server, SOCK_DGRAM, true);
        if (!fd.ok()) return fd.status();
        Sock s;
        s.fd = *fd;
        s.source = si;
        s.city = sources->sources()[si].city;
        s.slots = std::make_unique<Slot[]>(kIds);
        s.next_id = static_cast<uint16_t>(rng());
        s.oldest = s.next_id;
        const uint32_t sock_index = static_cast<uint32_t>(socks.size());
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = sock_index;
        if (epoll_ctl(ep, EPOLL_CTL_ADD, s.fd, &ev) != 0) return absl::InternalError(Errno("epoll_ctl"));
        socks_of_city[s.city].push_back(sock_index);
        socks.push_back(std::move(s));
      }
    }
    return absl::OkStatus();
  }

  // The city of the next batch: the one owed the most queries, where each
  // city is owed its share of every query sent (smooth weighted round-robin
  // charged per query, not per batch). The split then stays within one batch
  // of exact at any moment, evenly interleaved, the same in every run.
  Sock& PickSocket() {
    uint32_t city = 0;
    for (uint32_t i = 1; i < city_owed.size(); ++i) {
      if (city_owed[i] > city_owed[city]) city = i;
    }
    const std::vector<uint32_t>& list = socks_of_city[city];
    return socks[list[city_rr[city]++ % list.size()]];
  }
  void ChargeCity(uint32_t city, uint32_t sent) {
    if (city_owed.size() < 2 || sent == 0) return;
    for (uint32_t i = 0; i < city_owed.size(); ++i) city_owed[i] += sources->cities()[i].share * sent;
    city_owed[city] -= sent;
  }

  // Allocates the socket's next ID for a query; false when all 65,536 are
  // outstanding on it.
  bool Allocate(Sock& s, const Draw& d, uint64_t now, uint16_t* id) {
    Slot& slot = s.slots[s.next_id];
    if (slot.busy) return false;
    slot.busy = 1;
    slot.sent_ns = now;
    slot.question = d.question;
    slot.weight = d.weight;
    slot.subscriber = d.subscriber;
    slot.subnet = d.subnet;
    slot.miss_seq = d.question == kMiss ? miss_seq++ : 0;
    *id = s.next_id++;
    ++s.inflight;
    ++inflight;
    return true;
  }
  void Release(Sock& s, uint16_t id) {
    s.slots[id].busy = 0;
    --s.inflight;
    --inflight;
  }

  size_t Write(const Sock& s, uint16_t id, const Draw& d, uint8_t* out) const {
    return WriteDraw(id, d, s.source, s.slots[id].miss_seq, out);
  }

  // Sends up to `budget` queries on one socket; returns how many were sent
  // (0 when the socket could take none now).
  uint32_t SendBatch(uint32_t budget, uint64_t now, uint8_t (*bufs)[kQueryCap], mmsghdr* msgs, iovec* iov) {
    Sock& s = PickSocket();
    const uint32_t n = std::min(budget, o->batch);
    uint32_t k = 0, tcp = 0;
    for (uint32_t i = 0; i < n; ++i) {
      // A query is drawn only when its ID slot is free, so a query file's
      // lines are each sent once per pass, none skipped.
      if (s.slots[s.next_id].busy) break;
      const Draw d = mix->Next(rng, &cursor);
      uint16_t id;
      if (!Allocate(s, d, now, &id)) break;
      if (d.tcp) {
        if (QueueTcp(s, id, d)) {
          ++tcp;
        } else {
          Release(s, id);
        }
        continue;
      }
      const size_t len = Write(s, id, d, bufs[k]);
      if (len == 0) {
        Release(s, id);
        continue;
      }
      iov[k] = {bufs[k], len};
      msgs[k] = {};
      msgs[k].msg_hdr.msg_iov = &iov[k];
      msgs[k].msg_hdr.msg_iovlen = 1;
      ++k;
    }
    const uint32_t sent = k > 0 ? SendUdp(s, k, msgs, iov) : 0;
    c.sent += sent + tcp;
    c.sent_tcp += tcp;
    ChargeCity(s.city, sent + tcp);
    return sent + tcp;
  }

  // Sends the k datagrams of msgs/iov on `s`. Datagrams of equal length go
  // out as one UDP GSO send (UDP_SEGMENT): the kernel routes and queues the
  // group once and splits it into separate datagrams before delivery, so the
  // server receives exactly what k sendmsg calls would have sent, at a
  // fraction of the sender's cost. The rest go in one sendmmsg. The IDs of
  // datagrams the socket did not take are released. Returns how many went.
  uint32_t SendUdp(Sock& s, uint32_t k, mmsghdr* msgs, iovec* iov) {
    uint32_t sent = 0;
    unsent.assign(k, 1);
    singles.clear();
    if (gso && k > 1) {
      order.resize(k);
      for (uint32_t i = 0; i < k; ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(),
                       [iov](uint32_t a, uint32_t b) { return iov[a].iov_len < iov[b].iov_len; });
      for (uint32_t g = 0; g < k;) {
        uint32_t e = g + 1;
        const size_t len = iov[order[g]].iov_len;
        while (e < k && e - g < kMaxGsoSegments && iov[order[e]].iov_len == len) ++e;
        if (e - g == 1 || !gso) {
          for (uint32_t i = g; i < e; ++i) singles.push_back(order[i]);
          g = e;
          continue;
        }
        gso_iov.resize(e - g);
        for (uint32_t i = g; i < e; ++i) gso_iov[i - g] = iov[order[i]];
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(uint16_t))] = {};
        msghdr mh{};
        mh.msg_iov = gso_iov.data();
        mh.msg_iovlen = e - g;
        mh.msg_control = control;
        mh.msg_controllen = sizeof control;
        cmsghdr* cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_UDP;
        cm->cmsg_type = UDP_SEGMENT;
        cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        const uint16_t segment = static_cast<uint16_t>(len);
        std::memcpy(CMSG_DATA(cm), &segment, sizeof segment);
        const ssize_t r = sendmsg(s.fd, &mh, MSG_DONTWAIT);
        if (r == static_cast<ssize_t>(len * (e - g))) {
          for (uint32_t i = g; i < e; ++i) unsent[order[i]] = 0;
          sent += e - g;
        } else if (r < 0 &&
                   (errno == EINVAL || errno == EIO || errno == ENOPROTOOPT || errno == EOPNOTSUPP)) {
          // No UDP GSO on this kernel or route: plain sends from now on.
          gso = false;
          for (uint32_t i = g; i < e; ++i) singles.push_back(order[i]);
        } else if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS) {
          c.send_errors += e - g;
        }
        g = e;
      }
    } else {
      for (uint32_t i = 0; i < k; ++i) singles.push_back(i);
    }
    if (!singles.empty()) {
      single_msgs.resize(singles.size());
      for (size_t i = 0; i < singles.size(); ++i) single_msgs[i] = msgs[singles[i]];
      const int r =
          sendmmsg(s.fd, single_msgs.data(), static_cast<unsigned>(single_msgs.size()), MSG_DONTWAIT);
      const uint32_t n = r > 0 ? static_cast<uint32_t>(r) : 0;
      if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS)
        c.send_errors += singles.size();
      for (uint32_t i = 0; i < n; ++i) unsent[singles[i]] = 0;
      sent += n;
    }
    if (sent < k) {
      for (uint32_t i = 0; i < k; ++i) {
        if (unsent[i]) Release(s, dns::Load16(static_cast<const uint8_t*>(iov[i].iov_base)));
      }
      RewindIds(s);
    }
    return sent;
  }

  // After unsent UDP queries were released, move next_id back over the free
  // IDs at the end so that IDs stay in send order (the timeout scan relies
  // on it).
  void RewindIds(Sock& s) {
    while (s.next_id != s.oldest && !s.slots[static_cast<uint16_t>(s.next_id - 1)].busy) --s.next_id;
    if (s.inflight == 0) s.oldest = s.next_id;
  }

  // ---------------------------------------------------------- TCP

  bool QueueTcp(Sock& s, uint16_t id, const Draw& d) {
    if (s.tcp_fd < 0) {
      auto fd = ConnectedSocket(sources->sources()[s.source], o->server, SOCK_STREAM, true);
      if (!fd.ok()) {
        ++c.tcp_errors;
        return false;
      }
      s.tcp_fd = *fd;
      s.tcp_connected = false;
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLOUT;
      ev.data.u64 = kTcpBit | static_cast<uint64_t>(&s - socks.data());
      epoll_ctl(ep, EPOLL_CTL_ADD, s.tcp_fd, &ev);
    }
    uint8_t buf[kQueryCap];
    const size_t len = Write(s, id, d, buf);
    if (len == 0) return false;
    net::AppendFramed({buf, len}, &s.tcp_out);
    if (s.tcp_connected) FlushTcp(s);
    return true;
  }

  void CloseTcp(Sock& s, bool error) {
    if (error) ++c.tcp_errors;
    epoll_ctl(ep, EPOLL_CTL_DEL, s.tcp_fd, nullptr);
    close(s.tcp_fd);
    s.tcp_fd = -1;
    s.tcp_connected = false;
    s.tcp_out.clear();
    s.tcp_out_sent = 0;
    s.reader.Clear();
  }

  void FlushTcp(Sock& s) {
    while (s.tcp_out_sent < s.tcp_out.size()) {
      const ssize_t r =
          send(s.tcp_fd, s.tcp_out.data() + s.tcp_out_sent, s.tcp_out.size() - s.tcp_out_sent, MSG_NOSIGNAL);
      if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        CloseTcp(s, true);
        return;
      }
      s.tcp_out_sent += static_cast<size_t>(r);
    }
    const bool idle = s.tcp_out_sent == s.tcp_out.size();
    if (idle) {
      s.tcp_out.clear();
      s.tcp_out_sent = 0;
    }
    epoll_event ev{};
    ev.events = EPOLLIN | (idle ? 0u : static_cast<uint32_t>(EPOLLOUT));
    ev.data.u64 = kTcpBit | static_cast<uint64_t>(&s - socks.data());
    epoll_ctl(ep, EPOLL_CTL_MOD, s.tcp_fd, &ev);
  }

  void OnTcp(Sock& s, uint32_t events, uint64_t now) {
    if (s.tcp_fd < 0) return;
    if (!s.tcp_connected && (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(s.tcp_fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        CloseTcp(s, true);
        return;
      }
      s.tcp_connected = true;
    }
    if (s.tcp_connected && (events & EPOLLOUT)) FlushTcp(s);
    if (s.tcp_fd < 0 || !(events & (EPOLLIN | EPOLLHUP | EPOLLERR))) return;
    uint8_t buf[net::DnsTcpReader::kMaxBytes];
    for (;;) {
      const ssize_t r = read(s.tcp_fd, buf, s.reader.Want());
      if (r > 0) {
        s.reader.Append({buf, static_cast<size_t>(r)});
        if (s.reader.Complete()) {
          const std::span<const uint8_t> m = s.reader.Message();
          OnAnswer(s, m.data(), m.size(), now);
          s.reader.Clear();
        }
        continue;
      }
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      // EOF or error. A server may close an idle connection; only one that
      // still owed answers (or failed) is an error.
      bool owed = s.reader.buffered() > 0 || !s.tcp_out.empty();
      CloseTcp(s, r < 0 || owed);
      return;
    }
  }

  // ---------------------------------------------------------- answers

  void OnAnswer(Sock& s, const uint8_t* data, size_t len, uint64_t now) {
    if (len < dns::kHeaderSize) {
      ++c.mismatched;
      return;
    }
    const uint16_t id = dns::Load16(data);
    Slot& slot = s.slots[id];
    if (!slot.busy) {
      ++c.mismatched;  // late (already timed out), duplicated or forged
      return;
    }
    dns::Message m;
    if (m.Parse({data, len}, popts) != dns::ParseError::kOk || !(m.flags() & dns::flag::kQr)) {
      ++c.mismatched;
      return;
    }
    if (!SameQuestion(m.qname(), m.qtype(), slot.question, slot.miss_seq)) {
      ++c.mismatched;
      return;
    }
    const uint64_t lat = now > slot.sent_ns ? now - slot.sent_ns : 0;
    const uint32_t question = slot.question;
    const bool weight = slot.weight;
    if (slot.subscriber) CheckSegments(question, slot.subnet, m);
    Release(s, id);
    CountAnswer(m.rcode(), (m.flags() & dns::flag::kTc) != 0, lat, question, weight, s.city,
                [&m](common::IpAddress* a) { return FirstAddress(m, a); });
  }

  void ReceiveUdp(Sock& s, uint8_t (*bufs)[kAnswerCap], mmsghdr* msgs, iovec* iov) {
    for (;;) {
      for (uint32_t i = 0; i < o->batch; ++i) {
        iov[i] = {bufs[i], kAnswerCap};
        msgs[i] = {};
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
      }
      const int r = recvmmsg(s.fd, msgs, o->batch, MSG_DONTWAIT, nullptr);
      if (r <= 0) {
        // ECONNREFUSED: the server's port is closed (ICMP); the queries time out.
        if (r < 0 && errno == ECONNREFUSED) ++c.send_errors;
        return;
      }
      const uint64_t now = NowNs();
      for (int i = 0; i < r; ++i) OnAnswer(s, bufs[i], msgs[i].msg_len, now);
      if (static_cast<uint32_t>(r) < o->batch) return;
    }
  }

  void Expire(uint64_t now, uint64_t timeout_ns, bool all) {
    for (Sock& s : socks) {
      while (s.inflight > 0) {
        Slot& slot = s.slots[s.oldest];
        if (!slot.busy) {
          ++s.oldest;
          continue;
        }
        if (!all && now - slot.sent_ns < timeout_ns) break;
        Release(s, s.oldest);
        ++c.timeouts;
        ++s.oldest;
      }
      if (s.inflight == 0) s.oldest = s.next_id;
    }
  }

  // Queries allowed by `now` in open loop, for this thread.
  double Allowed(uint64_t start, uint64_t now) const {
    const double t = static_cast<double>(now - start) / 1e9;
    const double r = *o->rate / o->threads;
    if (o->ramp_s > 0 && t < o->ramp_s) return r * t * t / (2 * o->ramp_s);
    return r * (t - o->ramp_s / 2);
  }

  void Loop(uint64_t start, uint64_t end, const std::atomic<bool>& stop) override {
    std::vector<uint8_t> mem(size_t{o->batch} * (kQueryCap + kAnswerCap));
    auto* qbufs = reinterpret_cast<uint8_t(*)[kQueryCap]>(mem.data());
    auto* abufs = reinterpret_cast<uint8_t(*)[kAnswerCap]>(mem.data() + size_t{o->batch} * kQueryCap);
    std::vector<mmsghdr> msgs(o->batch);
    std::vector<iovec> iov(o->batch);
    epoll_event events[64];
    const uint64_t timeout_ns = uint64_t{o->timeout_ms} * 1000000u;
    uint64_t last_expire = start;
    bool sending = true;
    uint64_t drain_deadline = 0;
    for (;;) {
      uint64_t now = NowNs();
      uint64_t wait_ns = 1000000;  // 1 ms at most between timeout scans
      {
        std::lock_guard<std::mutex> lock(shares.mutex());
        if (sending && (stop.load(std::memory_order_relaxed) || now >= end ||
                        (count_limit != 0 && c.sent >= count_limit))) {
          sending = false;
          send_end_ns = now;
          drain_deadline = now + timeout_ns;
        }
        if (sending) {
          // Several batches per pass at most, so answers are read in time.
          for (int round = 0; round < 8; ++round) {
            uint64_t budget;
            if (o->rate) {
              const double allowed = Allowed(start, now);
              budget = allowed > static_cast<double>(c.sent) ? static_cast<uint64_t>(allowed - c.sent) : 0;
            } else {
              budget = inflight < o->outstanding ? o->outstanding - inflight : 0;
            }
            if (count_limit != 0) budget = std::min(budget, count_limit - c.sent);
            if (budget == 0) break;
            if (SendBatch(static_cast<uint32_t>(std::min<uint64_t>(budget, o->batch)), now, qbufs,
                          msgs.data(), iov.data()) == 0) {
              break;
            }
          }
          if (o->rate) {
            // Until the next query is due.
            const double per_ns = *o->rate / o->threads / 1e9;
            const double due = (static_cast<double>(c.sent) + 1 - Allowed(start, now)) / per_ns;
            if (due < static_cast<double>(wait_ns)) wait_ns = due > 0 ? static_cast<uint64_t>(due) : 0;
          } else if (inflight > 0) {
            // Closed loop: spin. Never sleeping saves the wake-up of every
            // answer batch, on both sides of the exchange.
            wait_ns = 0;
          }
        } else if (inflight == 0 || now >= drain_deadline) {
          Expire(now, timeout_ns, true);
          break;
        }
      }
      timespec ts{static_cast<time_t>(wait_ns / 1000000000u), static_cast<long>(wait_ns % 1000000000u)};
      const int n = epoll_pwait2(ep, events, 64, &ts, nullptr);
      now = NowNs();
      std::lock_guard<std::mutex> lock(shares.mutex());
      for (int i = 0; i < n; ++i) {
        const uint64_t key = events[i].data.u64;
        Sock& s = socks[key & 0xffffffffu];
        if (key & kTcpBit) {
          OnTcp(s, events[i].events, now);
        } else {
          ReceiveUdp(s, abufs, msgs.data(), iov.data());
        }
      }
      if (now - last_expire >= 1000000) {
        Expire(now, timeout_ns, false);
        last_expire = now;
      }
    }
    if (send_end_ns == 0) send_end_ns = NowNs();
    done.store(true, std::memory_order_release);
  }
};

// ------------------------------------------------------------ engine

Engine::Engine(const Options& options, const QueryMix& mix, const Sources& sources)
    : o_(options), mix_(mix), sources_(sources) {
  if (mix_.subscribers() != nullptr) subscriber_ecs_ = SubscriberEcs(mix_.subscribers()->first());
}
Engine::~Engine() = default;

absl::StatusOr<std::vector<std::vector<uint8_t>>> Engine::Ask(uint32_t source,
                                                              const std::vector<Planned>& plan, int tries,
                                                              bool json) const {
  if (o_.transport == Transport::kUdp) {
    return Exchange(sources_.sources()[source], o_.server, plan, o_.timeout_ms, tries, o_.weight_option_code);
  }
  return StreamExchange(o_, mix_, sources_, source, plan, tries, json);
}

absl::Status Engine::Preflight() {
  const uint32_t source = sources_.cities()[0].sources[0];
  const Source& src = sources_.sources()[source];
  Planned p;
  if (mix_.questions().empty()) {
    MissName(0, 0xffff, mix_.miss_zone(), &p.qname);
    p.qtype = mix_.miss_qtype();
  } else {
    p.qname = mix_.questions()[0].qname;
    p.qtype = mix_.questions()[0].qtype;
  }
  // With the weight option: a weighted name's answer then carries every
  // address and does not count as an SWRR pick anywhere.
  p.qo.edns = true;
  p.qo.weight = true;
  p.qo.weight_option_code = o_.weight_option_code;
  p.qo.ecs = SubscriberEcsOrNull();
  // The JSON form cannot carry the option: its preflight is a plain JSON
  // query, the run's own kind.
  const bool json = o_.transport == Transport::kDohJson;
  auto answers = Ask(source, {p}, 3, json);
  if (!answers.ok()) return answers.status();
  if ((*answers)[0].empty()) {
    const std::string over =
        o_.transport == Transport::kUdp ? "" : common::Cat(" over ", TransportName(o_.transport));
    return absl::UnavailableError(common::Cat(
        "no answer from ", o_.server.ToString(), over, " to ", dns::NameKeyToText(p.qname.span()), " from ",
        src.text, " in 3 tries of ", o_.timeout_ms, " ms (is the server running and reachable?)"));
  }
  return absl::OkStatus();
}

absl::Status Engine::Probe(ExpectedWeights* expected) {
  dns::ParseOptions popts;
  popts.weight_option_code = o_.weight_option_code;
  for (uint32_t c = 0; c < sources_.cities().size(); ++c) {
    std::vector<Planned> plan;
    std::vector<uint32_t> qs;
    for (uint32_t q = 0; q < mix_.questions().size(); ++q) {
      if (!mix_.questions()[q].tagged) continue;
      Planned p;
      p.qname = mix_.questions()[q].qname;
      p.qtype = mix_.questions()[q].qtype;
      p.qo.edns = true;
      p.qo.weight = true;
      p.qo.weight_option_code = o_.weight_option_code;
      p.qo.ecs = SubscriberEcsOrNull();
      plan.push_back(p);
      qs.push_back(q);
    }
    if (plan.empty()) return absl::OkStatus();
    const BenchCity& city = sources_.cities()[c];
    auto answers = Ask(city.sources[0], plan, 3, false);
    if (!answers.ok()) return answers.status();
    for (size_t i = 0; i < plan.size(); ++i) {
      if (expected->Find(qs[i], c) != nullptr) continue;  // from --weights
      const std::vector<uint8_t>& a = (*answers)[i];
      const std::string& name = mix_.questions()[qs[i]].text;
      const std::string city_label = city.name.empty() ? "" : common::Cat(" for city ", city.name);
      if (a.empty()) {
        std::fprintf(stderr, "weir-bench: probe of %s%s got no answer; its shares have no expected weights\n",
                     name.c_str(), city_label.c_str());
        continue;
      }
      dns::Message m;
      if (m.Parse(a, popts) != dns::ParseError::kOk) continue;
      ExpectedSet set;
      set.from = "answer";
      dns::Message::Iterator it = m.Records(dns::Section::kAnswer);
      dns::RrView rr;
      while (it.Next(&rr)) {
        common::IpAddress ip;
        if (rr.type == dns::type::kA && rr.rdlength == 4) {
          ip.family = 4;
          std::memcpy(ip.bytes.data(), a.data() + rr.rdata_offset, 4);
        } else if (rr.type == dns::type::kAaaa && rr.rdlength == 16) {
          ip = common::IpAddress::V6(a.data() + rr.rdata_offset);
        } else {
          continue;
        }
        set.weights.emplace_back(ip, 1);
      }
      if (set.weights.empty()) {
        std::fprintf(stderr, "weir-bench: probe of %s%s: no address in the answer (rcode %s)\n", name.c_str(),
                     city_label.c_str(), RcodeName(m.rcode()).c_str());
        continue;
      }
      if (m.edns().has_weight) {
        const dns::WeightSet w =
            dns::DecodeWeights({a.data() + m.edns().weight_offset, m.edns().weight_len}, set.weights.size());
        if (w.valid()) {
          for (size_t k = 0; k < set.weights.size(); ++k) set.weights[k].second = w.weights[k];
        }
      }
      expected->Set(qs[i], c, std::move(set));
    }
  }
  return absl::OkStatus();
}

absl::Status Engine::Warmup() {
  for (const BenchCity& city : sources_.cities()) {
    std::vector<Planned> plan;
    for (const Question& q : mix_.questions()) {
      Planned p;
      p.qname = q.qname;
      p.qtype = q.qtype;
      // A weighted name is warmed with the weight option: its answer is not
      // an SWRR pick, so the server's pick counters match the run's.
      p.qo.edns = p.qo.weight = q.tagged;
      p.qo.weight_option_code = o_.weight_option_code;
      p.qo.ecs = SubscriberEcsOrNull();
      p.qo.edns = p.qo.edns || p.qo.ecs != nullptr;
      plan.push_back(p);
    }
    if (plan.empty()) return absl::OkStatus();
    auto answers = Ask(city.sources[0], plan, 2, false);
    if (!answers.ok()) return answers.status();
    size_t missing = 0;
    for (const auto& a : *answers) missing += a.empty();
    if (missing > 0) {
      std::fprintf(stderr, "weir-bench: warm-up: %zu of %zu names got no answer%s%s\n", missing, plan.size(),
                   city.name.empty() ? "" : " from city ", city.name.c_str());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Report> Engine::Run(const ExpectedWeights& expected, const ProgressFn& progress) {
  // Which questions' answers go into the shares.
  std::vector<uint8_t> tracked(mix_.questions().size(), 0);
  for (uint32_t q = 0; q < tracked.size(); ++q) {
    tracked[q] = mix_.questions()[q].tagged;
    for (uint32_t c = 0; c < sources_.cities().size() && !tracked[q]; ++c)
      tracked[q] = expected.Find(q, c) != nullptr;
  }
  std::vector<std::unique_ptr<Sender>> threads;
  for (uint32_t i = 0; i < o_.threads; ++i) {
    std::unique_ptr<Sender> t;
    if (o_.transport == Transport::kUdp) {
      auto udp = std::make_unique<Thread>();
      udp->gso = o_.gso;
      t = std::move(udp);
    } else {
      t = MakeStreamSender();
    }
    t->index = i;
    t->o = &o_;
    t->mix = &mix_;
    t->sources = &sources_;
    t->tracked = &tracked;
    t->segments = segments_;
    t->rng.seed(o_.seed * common::kGolden64 + i);  // one stream per thread
    t->popts.weight_option_code = o_.weight_option_code;
    if (o_.count != 0) t->count_limit = o_.count / o_.threads + (i < o_.count % o_.threads ? 1 : 0);
    if (o_.count != 0 && t->count_limit == 0) continue;
    if (absl::Status st = t->Open(); !st.ok()) return st;
    threads.push_back(std::move(t));
  }

  std::vector<std::string> names, cities;
  for (const Question& q : mix_.questions()) names.push_back(q.text);
  for (const BenchCity& c : sources_.cities()) cities.push_back(c.name.empty() ? "(all)" : c.name);

  Report r;
  r.server = o_.server.ToString();
  r.mode = o_.rate ? fmt::format("open loop, {:g} qps{}", *o_.rate,
                                 o_.ramp_s > 0 ? fmt::format(", ramp {:g} s", o_.ramp_s) : "")
                   : fmt::format("closed loop, {} outstanding per thread", o_.outstanding);
  r.threads = static_cast<unsigned>(threads.size());
  r.transport = TransportName(o_.transport);
  if (o_.transport != Transport::kUdp) {
    r.stream = true;
    StreamFigures& f = r.connections;
    f.detail = o_.transport == Transport::kDohJson ? "GET " + o_.doh_json_path
               : o_.transport == Transport::kDoh
                   ? (o_.doh_method == DohMethod::kGet ? "GET " : "POST ") + o_.doh_path
                   : "";
    f.queries_per_connection = o_.queries_per_connection;
    f.connections_per_thread = StreamConnectionsPerThread(o_, sources_);
    f.tls_resume = o_.tls_resume;
    if (o_.new_connections_per_second) {
      f.new_connections_per_second = *o_.new_connections_per_second;
      r.mode = fmt::format(
          "open loop of connections, {:g} new per second, {} quer{} each, {} open at most per thread",
          f.new_connections_per_second, o_.queries_per_connection,
          o_.queries_per_connection == 1 ? "y" : "ies", f.connections_per_thread);
    } else {
      r.mode += fmt::format(", {} connection{} per thread", f.connections_per_thread,
                            f.connections_per_thread == 1 ? "" : "s");
    }
  }

  std::atomic<bool> stop{false};
  const uint64_t start = NowNs();
  const uint64_t end = o_.count != 0 ? UINT64_MAX : start + static_cast<uint64_t>(o_.duration_s * 1e9);
  for (auto& t : threads) t->th = std::thread([&t, start, end, &stop] { t->Loop(start, end, stop); });

  // Per (pair, address): the cumulative share at each timeline second.
  std::map<std::pair<uint64_t, std::string>, std::vector<double>> share_series;
  Counters last{};
  uint64_t next_tick = start + 1000000000u;
  auto collect = [&](Counters* total, LatencyHistogram* interval, MergedTallies* tallies) {
    for (auto& t : threads) {
      std::lock_guard<std::mutex> lock(t->shares.mutex());
      total->Add(t->c);
      interval->Merge(t->interval);
      t->interval.Clear();
      MergeTallies(t->shares.tallies(), tallies);
    }
  };
  for (;;) {
    bool all_done = true;
    for (auto& t : threads) all_done = all_done && t->done.load(std::memory_order_acquire);
    const uint64_t now = NowNs();
    if (!all_done && now < next_tick) {
      std::this_thread::sleep_for(std::chrono::nanoseconds(std::min<uint64_t>(next_tick - now, 50000000u)));
      continue;
    }
    Counters total{};
    LatencyHistogram interval;
    MergedTallies tallies;
    collect(&total, &interval, &tallies);
    TimelinePoint p;
    p.t = static_cast<double>(now - start) / 1e9;
    p.sent = total.sent - last.sent;
    p.answered = total.answered - last.answered;
    p.timeouts = total.timeouts - last.timeouts;
    p.p99_us = interval.QuantileUs(0.99);
    std::vector<NameCityShare> rows = AnalyseShares(tallies, expected, names, cities);
    p.worst_pp = WorstDeviation(rows);
    last = total;
    if (p.sent + p.answered + p.timeouts > 0 || !all_done) {
      r.timeline.push_back(p);
      for (const auto& [key, t] : tallies) {
        for (const AddressCount& a : t.addresses) {
          std::vector<double>& v = share_series[{key, common::IpToString(a.address)}];
          v.resize(r.timeline.size() - 1, 0.0);
          v.push_back(t.total ? 100.0 * static_cast<double>(a.count) / static_cast<double>(t.total) : 0);
        }
      }
      // The live view: the counters so far.
      r.sent = total.sent;
      r.answered = total.answered;
      r.timeouts = total.timeouts;
      r.duration_s = p.t;
      r.worst_deviation_pp = p.worst_pp;
      if (progress && !all_done) progress(r);
    }
    if (all_done) break;
    next_tick += 1000000000u;
  }
  uint64_t send_end = start;
  for (auto& t : threads) {
    t->th.join();
    send_end = std::max(send_end, t->send_end_ns);
  }

  Counters total{};
  MergedTallies tallies;
  for (auto& t : threads) {
    total.Add(t->c);
    r.latency.Merge(t->latency);
    r.connections.handshake.Merge(t->handshake);
    if (r.connections.first_error.empty()) r.connections.first_error = t->first_error;
    MergeTallies(t->shares.tallies(), &tallies);
  }
  r.duration_s = static_cast<double>(send_end - start) / 1e9;
  r.sent = total.sent;
  r.sent_tcp = total.sent_tcp;
  r.answered = total.answered;
  r.timeouts = total.timeouts;
  r.mismatched = total.mismatched;
  r.truncated = total.truncated;
  r.send_errors = total.send_errors;
  r.tcp_errors = total.tcp_errors;
  if (r.stream) {
    StreamFigures& f = r.connections;
    f.opened = total.connections_opened;
    f.connect_failures = total.connect_failures;
    f.handshakes_full = total.handshakes_full;
    f.handshakes_resumed = total.handshakes_resumed;
    f.handshake_failures = total.handshake_failures;
    f.connection_errors = total.connection_errors;
    f.server_closes = total.server_closes;
    f.skipped = total.connections_skipped;
    f.http_errors = total.http_errors;
    f.stream_resets = total.stream_resets;
    for (size_t i = 0; i < total.http_status.size(); ++i) {
      if (total.http_status[i] != 0) f.http_status[static_cast<int>(i)] = total.http_status[i];
    }
  }
  for (int i = 0; i < 33; ++i) {
    if (total.rcodes[i] != 0)
      r.rcodes[i < 32 ? RcodeName(static_cast<uint16_t>(i)) : "OTHER"] += total.rcodes[i];
  }
  if (segments_ != nullptr) {
    r.segments_check = true;
    r.segments_model = segments_->description();
    r.segments_checked = total.segments_checked;
    r.segments_misscheduled = total.segments_misscheduled;
    r.segments_unanswered = total.segments_unanswered;
  }
  r.shares = AnalyseShares(tallies, expected, names, cities);
  for (NameCityShare& row : r.shares) {
    r.leaked_answers += row.leaked_answers;
    // Find the row's pair key again to attach its time series.
    uint32_t q = 0, c = 0;
    while (q < names.size() && names[q] != row.name) ++q;
    while (c < cities.size() && cities[c] != row.city) ++c;
    for (AddressShare& a : row.addresses) {
      auto it = share_series.find({PairKey(q, c), a.address});
      a.observed_pct_over_time = it != share_series.end() ? it->second : std::vector<double>();
      a.observed_pct_over_time.resize(
          r.timeline.size(), a.observed_pct_over_time.empty() ? 0.0 : a.observed_pct_over_time.back());
    }
  }
  r.worst_deviation_pp = WorstDeviation(r.shares);
  return r;
}

}  // namespace weir::bench
