#include "dpdk/worker.h"

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "weir/common/rcu.h"

namespace weir::fastpath::dpdk {
namespace {

// The room the handler gets for an answer: after the query in the mbuf it
// came in, or (a buffer without that room, or not ours to write) in
// Burst::answers, to be copied (the handler reads the query while it
// writes).
constexpr size_t kAnswerMax = 1500;
// Empty passes in a row before an idle worker sleeps (with idle_sleep_us).
constexpr int kIdlePasses = 100;

// A buffer we may write: neither the device's (external) nor shared.
bool OwnBuffer(const rte_mbuf* m) { return RTE_MBUF_DIRECT(m) && rte_mbuf_refcnt_read(m) == 1; }

}  // namespace

std::string_view FrameDropName(FrameDrop d) {
  switch (d) {
    case FrameDrop::kNotOurs:
      return "not_ours";
    case FrameDrop::kMalformed:
      return "malformed";
    case FrameDrop::kTxFull:
      return "tx_full";
    case FrameDrop::kNoMbuf:
      return "no_mbuf";
    case FrameDrop::kNoException:
      return "no_exception_path";
    case FrameDrop::kTooBig:
      return "too_big";
    case FrameDrop::kExceptionRate:
      return "exception_rate";
    case FrameDrop::kCount:
      break;
  }
  return "unknown";
}

struct DpdkWorker::Burst {
  rte_mbuf* rx[kBurst];
  rte_mbuf* queries[kBurst];  // the DNS queries of rx, in order
  frame::Parsed parsed[kBurst];
  rte_mbuf* exceptions[kBurst];
  rte_mbuf* tx[kBurst];
  QueryHandler::BurstPacket packets[kBurst];
  alignas(64) uint8_t answers[kBurst][kAnswerMax];
};

DpdkWorker::DpdkWorker(WorkerCore& core, const common::Clock& clock, int slot, std::vector<WorkerPort> ports,
                       rte_mempool* pool, int idle_sleep_us)
    : core_(core),
      clock_(clock),
      slot_(slot),
      ports_(std::move(ports)),
      counters_(new PortCounters[ports_.size()]),
      pool_(pool),
      idle_sleep_us_(idle_sleep_us),
      buckets_(ports_.size()),
      b_(std::make_unique<Burst>()) {}

DpdkWorker::~DpdkWorker() = default;

bool DpdkWorker::ExceptionAllowed(size_t i) {
  const uint32_t rate = ports_[i].exception_pps;
  if (rate == 0) return true;
  Bucket& k = buckets_[i];
  const uint64_t now = rte_rdtsc();
  if (k.last == 0) {
    k.last = now;
    k.tokens = rate;
  }
  // Refilled at `rate` per second, at most one second's worth banked.
  const double add = static_cast<double>(now - k.last) * rate / static_cast<double>(rte_get_tsc_hz());
  if (add >= 1.0) {
    k.tokens = std::min<double>(rate, k.tokens + add);
    k.last = now;
  }
  if (k.tokens < 1.0) return false;
  k.tokens -= 1.0;
  return true;
}

void DpdkWorker::PrepareTx(rte_mbuf* m, const WorkerPort& wp, const frame::Parsed& p, size_t len, bool own) {
  m->data_len = static_cast<uint16_t>(len);
  m->pkt_len = static_cast<uint32_t>(len);
  // The receive flags go, except what says whose buffer this is (nothing,
  // in one of ours).
  m->ol_flags = (own ? 0 : m->ol_flags & (RTE_MBUF_F_EXTERNAL | RTE_MBUF_F_INDIRECT)) |
                (p.ipv6 ? wp.tx_flags_v6 : wp.tx_flags_v4);
  if ((p.ipv6 ? wp.tx_flags_v6 : wp.tx_flags_v4) != 0) {
    m->l2_len = p.l2_len;
    m->l3_len = p.l3_len;
  }
}

ClientRoute DpdkWorker::HoldRoute(size_t index) {
  Held h;
  const frame::Parsed& p = b_->parsed[index];
  h.parsed = p;
  h.port_index = static_cast<uint16_t>(burst_port_);
  std::memcpy(h.headers.data(), rte_pktmbuf_mtod(b_->queries[index], const uint8_t*), p.dns_offset());
  return {slot_, Transport::kUdp, routes_.Put(h)};
}

void DpdkWorker::SendHeld(const ClientRoute& route, std::span<const uint8_t> answer) {
  Held h;
  if (!routes_.Take(route.token, &h) || answer.empty()) return;
  const WorkerPort& wp = ports_[h.port_index];
  PortCounters& c = counters_[h.port_index];
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (m == nullptr) return c.Drop(FrameDrop::kNoMbuf);
  const size_t off = h.parsed.dns_offset();
  if (off + answer.size() > rte_pktmbuf_tailroom(m)) {
    rte_pktmbuf_free(m);
    return c.Drop(FrameDrop::kTooBig);  // larger than any UDP answer the handler writes
  }
  uint8_t* data = rte_pktmbuf_mtod(m, uint8_t*);
  std::memcpy(data + off, answer.data(), answer.size());
  const size_t len =
      frame::WriteReply(h.headers.data(), h.parsed, wp.addresses->mac, data, answer.size(), wp.reply);
  PrepareTx(m, wp, h.parsed, len, false);
  if (rte_eth_tx_burst(wp.port, wp.queue, &m, 1) == 1) {
    c.tx_packets.Add();
  } else {
    rte_pktmbuf_free(m);
    c.Drop(FrameDrop::kTxFull);
  }
}

size_t DpdkWorker::PollPort(size_t i, uint32_t now) {
  const WorkerPort& wp = ports_[i];
  PortCounters& c = counters_[i];
  Burst& b = *b_;
  const uint16_t n = rte_eth_rx_burst(wp.port, wp.queue, b.rx, kBurst);
  if (n == 0) {
    c.empty_polls.Add();
    return 0;
  }
  c.rx_bursts.Add();
  c.rx_packets.Add(n);
  const frame::PortAddresses& addresses = *wp.addresses;
  size_t nq = 0, nexc = 0, nfree = 0;
  // b.packets + nq, as a pointer: cheaper than indexing 80-byte slots.
  QueryHandler::BurstPacket* next = b.packets;
  rte_mbuf* drop[kBurst];
  for (uint16_t j = 0; j < n; ++j) {
    rte_mbuf* m = b.rx[j];
    if (m->nb_segs != 1) [[unlikely]] {
      c.Drop(FrameDrop::kMalformed);
      drop[nfree++] = m;
      continue;
    }
    // A device that strips tags whatever we asked: the tag goes back in
    // place, so the frame is classified and answered as it came.
    if ((m->ol_flags & RTE_MBUF_F_RX_VLAN_STRIPPED) != 0 && rte_vlan_insert(&m) != 0) [[unlikely]] {
      c.Drop(FrameDrop::kMalformed);
      drop[nfree++] = m;
      continue;
    }
    uint8_t* data = rte_pktmbuf_mtod(m, uint8_t*);
    // Into the next query's slot (only a query keeps it), and a copy that
    // the stores below cannot change.
    frame::Classify(data, m->data_len, addresses, &b.parsed[nq]);
    const frame::Parsed p = b.parsed[nq];
    if (p.cls == frame::FrameClass::kQuery) [[likely]] {
      b.queries[nq] = m;
      QueryHandler::BurstPacket& q = *next++;
      const size_t off = p.dns_offset();
      q.pkt = data + off;
      q.len = p.dns_len;
      ClientInfo& client = q.client;
      client = ClientInfo{};  // every field a new datagram's, then its address and port
      frame::ClientOf(data, p, &client.addr);
      client.port = frame::ClientPortOf(data, p);
      // Where our own mbuf has room after the query for the reply's
      // headers and the largest answer, the handler writes the answer there
      // and the headers go just before it: no copy, and the query stays
      // whole (its message, and its headers to swap) while the handler
      // reads it.
      const size_t query_end = off + p.dns_len;
      q.out = OwnBuffer(m) && query_end + off + kAnswerMax <= size_t{m->buf_len} - m->data_off
                  ? data + query_end + off
                  : b.answers[nq];
      q.out_cap = kAnswerMax;
      ++nq;
      continue;
    }
    switch (p.cls) {
      case frame::FrameClass::kQuery:  // above
        break;
      case frame::FrameClass::kException:
        if (wp.exception >= 0 && ExceptionAllowed(i)) {
          b.exceptions[nexc++] = m;
        } else if (wp.exception >= 0) {
          c.Drop(FrameDrop::kExceptionRate);
          drop[nfree++] = m;
        } else {
          c.Drop(FrameDrop::kNoException);
          drop[nfree++] = m;
        }
        break;
      case frame::FrameClass::kNotOurs:
        c.Drop(FrameDrop::kNotOurs);
        drop[nfree++] = m;
        break;
      case frame::FrameClass::kMalformed:
        c.Drop(FrameDrop::kMalformed);
        drop[nfree++] = m;
        break;
    }
  }
  if (nexc > 0) {
    const uint16_t sent = rte_eth_tx_burst(static_cast<uint16_t>(wp.exception), wp.queue, b.exceptions,
                                           static_cast<uint16_t>(nexc));
    c.to_kernel.Add(sent);
    if (sent < nexc) {
      c.Drop(FrameDrop::kTxFull, nexc - sent);
      rte_pktmbuf_free_bulk(b.exceptions + sent, static_cast<unsigned>(nexc - sent));
    }
  }
  if (nq > 0) {
    burst_port_ = i;
    core_.HandleBurst(b.packets, nq, now, *this);
    size_t ntx = 0;
    for (size_t j = 0; j < nq; ++j) {
      rte_mbuf* m = b.queries[j];
      const QueryHandler::BurstPacket& q = b.packets[j];
      const frame::Parsed& p = b.parsed[j];
      const bool reply = q.verdict == Verdict::kReply || q.verdict == Verdict::kReplyAndPrefetch;
      if (!reply) [[unlikely]] {
        drop[nfree++] = m;  // a miss (its headers are held), a drop the handler counted
        continue;
      }
      if (q.out != b.answers[j]) [[likely]] {
        // The answer is in the mbuf after the query: the headers before it,
        // and the frame starts there.
        const uint8_t* data = rte_pktmbuf_mtod(m, const uint8_t*);
        uint8_t* reply_at = q.out - p.dns_offset();
        m->data_off = static_cast<uint16_t>(reply_at - static_cast<uint8_t*>(m->buf_addr));
        PrepareTx(m, wp, p, frame::WriteReply(data, p, addresses.mac, reply_at, q.out_len, wp.reply), true);
        b.tx[ntx++] = m;
        continue;
      }
      if (size_t{p.dns_offset()} + q.out_len > size_t{m->buf_len} - m->data_off) {
        c.Drop(FrameDrop::kTooBig);
        drop[nfree++] = m;
        continue;
      }
      uint8_t* data = rte_pktmbuf_mtod(m, uint8_t*);
      if (OwnBuffer(m)) {
        // Ours, without that room: the answer over the query, then the
        // swapped headers.
        std::memcpy(data + p.dns_offset(), q.out, q.out_len);
        const size_t len = frame::WriteReply(data, p, addresses.mac, data, q.out_len, wp.reply);
        PrepareTx(m, wp, p, len, true);
        b.tx[ntx++] = m;
        continue;
      }
      // The device lent us its buffer (external or shared): answer from one of ours.
      rte_mbuf* a = rte_pktmbuf_alloc(pool_);
      drop[nfree++] = m;
      if (a == nullptr) {
        c.Drop(FrameDrop::kNoMbuf);
        continue;
      }
      uint8_t* out = rte_pktmbuf_mtod(a, uint8_t*);
      std::memcpy(out + p.dns_offset(), q.out, q.out_len);
      PrepareTx(a, wp, p, frame::WriteReply(data, p, addresses.mac, out, q.out_len, wp.reply), false);
      b.tx[ntx++] = a;
    }
    if (ntx > 0) {
      const uint16_t sent = rte_eth_tx_burst(wp.port, wp.queue, b.tx, static_cast<uint16_t>(ntx));
      c.tx_packets.Add(sent);
      if (sent < ntx) {
        c.Drop(FrameDrop::kTxFull, ntx - sent);
        rte_pktmbuf_free_bulk(b.tx + sent, static_cast<unsigned>(ntx - sent));
      }
    }
  }
  if (nfree > 0) rte_pktmbuf_free_bulk(drop, static_cast<unsigned>(nfree));
  return n;
}

size_t DpdkWorker::PassFromKernel(size_t i) {
  const WorkerPort& wp = ports_[i];
  if (wp.exception < 0) return 0;
  rte_mbuf* m[kBurst];
  const uint16_t n = rte_eth_rx_burst(static_cast<uint16_t>(wp.exception), wp.queue, m, kBurst);
  if (n == 0) return 0;
  const uint16_t sent = rte_eth_tx_burst(wp.port, wp.queue, m, n);
  counters_[i].from_kernel.Add(sent);
  if (sent < n) {
    counters_[i].Drop(FrameDrop::kTxFull, n - sent);
    rte_pktmbuf_free_bulk(m + sent, n - sent);
  }
  return n;
}

size_t DpdkWorker::Poll() {
  const uint32_t now = clock_.NowSeconds();
  size_t received = 0;
  for (size_t i = 0; i < ports_.size(); ++i) {
    received += PollPort(i, now);
    received += PassFromKernel(i);
  }
  received += core_.DrainReturns(now, *this);
  return received;
}

void DpdkWorker::Run(const std::atomic<bool>& running) {
  common::RcuThread rcu;
  int idle = 0;
  while (running.load(std::memory_order_relaxed)) {
    core_.Turn();
    const size_t n = Poll();
    rcu.Quiescent();
    if (n > 0 || idle_sleep_us_ == 0) {
      idle = 0;
      continue;
    }
    if (++idle >= kIdlePasses) {
      common::RcuOfflineScope offline;
      usleep(static_cast<useconds_t>(idle_sleep_us_));
    }
  }
}

}  // namespace weir::fastpath::dpdk
