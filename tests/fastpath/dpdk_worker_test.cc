// The DPDK worker on real DPDK ports made of rings (rte_eth_from_rings): no
// root, no NIC. The test puts frames on the wire port's RX ring, polls the
// worker once, and reads what left on the wire port's and the exception
// port's TX rings: answers (checksums against the reference computation),
// frames for the kernel, drops; a miss answered through the worker's ring
// to the client's MAC/IP/port; the kernel's frames passed to the wire.
#include "dpdk/worker.h"

#include <gtest/gtest.h>
#include <rte_eal.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "dns/test_util.h"
#include "dpdk/port.h"
#include "frame_util.h"
#include "test_util.h"
#include "weir/common/rcu.h"
#include "weir/dns/message.h"
#include "weir/dns/writer.h"

namespace weir::fastpath::dpdk {
namespace {

using Bytes = std::vector<uint8_t>;
using dns::testing::Key;
using namespace frame::testing;

// One EAL for the whole test program, and the ring ports and pool it keeps.
struct Dpdk {
  rte_mempool* pool = nullptr;
  rte_ring* wire_rx = nullptr;    // the test enqueues received frames here
  rte_ring* wire_tx = nullptr;    // the worker's answers and passed kernel frames
  rte_ring* kernel_rx = nullptr;  // frames "the kernel" sends
  rte_ring* kernel_tx = nullptr;  // frames handed to the kernel
  uint16_t wire = 0;
  uint16_t kernel = 0;
  std::string prefix;
};
Dpdk* g_dpdk = nullptr;

class DpdkEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    g_dpdk = new Dpdk;
    g_dpdk->prefix = "weir-unit-" + std::to_string(getpid());
    std::vector<std::string> args = {"dpdk_worker_test",
                                     "-l",
                                     "0",
                                     "--no-huge",
                                     "-m",
                                     "128",
                                     "--no-pci",
                                     "--no-shconf",
                                     "--no-telemetry",
                                     "--log-level=error",
                                     "--file-prefix=" + g_dpdk->prefix};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    ASSERT_GE(rte_eal_init(static_cast<int>(argv.size()), argv.data()), 0) << rte_strerror(rte_errno);
    g_dpdk->pool =
        rte_pktmbuf_pool_create("test_pool", 2047, 64, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
    ASSERT_NE(g_dpdk->pool, nullptr);
    auto ring = [](const char* name) {
      return rte_ring_create(name, 1024, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
    };
    g_dpdk->wire_rx = ring("wire_rx");
    g_dpdk->wire_tx = ring("wire_tx");
    g_dpdk->kernel_rx = ring("kernel_rx");
    g_dpdk->kernel_tx = ring("kernel_tx");
    const int wire = rte_eth_from_rings("wire", &g_dpdk->wire_rx, 1, &g_dpdk->wire_tx, 1, SOCKET_ID_ANY);
    const int kernel =
        rte_eth_from_rings("kernel", &g_dpdk->kernel_rx, 1, &g_dpdk->kernel_tx, 1, SOCKET_ID_ANY);
    ASSERT_GE(wire, 0);
    ASSERT_GE(kernel, 0);
    g_dpdk->wire = static_cast<uint16_t>(wire);
    g_dpdk->kernel = static_cast<uint16_t>(kernel);
    PortSetup setup;
    setup.pool = g_dpdk->pool;
    setup.rx_descriptors = setup.tx_descriptors = 512;
    uint64_t offloads = 0;
    ASSERT_TRUE(StartPort("wire", g_dpdk->wire, setup, &offloads).ok());
    ASSERT_TRUE(StartPort("kernel", g_dpdk->kernel, setup, &offloads).ok());
  }
  void TearDown() override {
    rte_eth_dev_stop(g_dpdk->wire);
    rte_eth_dev_stop(g_dpdk->kernel);
    rte_eal_cleanup();
    std::error_code ec;
    for (const char* base : {"/var/run/dpdk/", "/tmp/dpdk/"})
      std::filesystem::remove_all(base + g_dpdk->prefix, ec);
    delete g_dpdk;
  }
};
const auto* const g_env = ::testing::AddGlobalTestEnvironment(new DpdkEnvironment);

Bytes Query(uint16_t id, std::string_view name) {
  Bytes q(512);
  dns::ResponseWriter w(q.data(), q.size());
  const dns::NameKey k = Key(name);
  w.Begin(id, dns::flag::kRd, k.span(), dns::type::kA, dns::klass::kIn);
  w.BeginOpt(1232, false);
  q.resize(w.Finish(q.size()));
  return q;
}

void Enqueue(rte_ring* ring, const Bytes& frame) {
  rte_mbuf* m = rte_pktmbuf_alloc(g_dpdk->pool);
  ASSERT_NE(m, nullptr);
  std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(frame.size())), frame.data(), frame.size());
  ASSERT_EQ(rte_ring_enqueue(ring, m), 0);
}

// Enqueues `frame` at the end of its buffer, `tailroom` bytes left after it.
rte_mbuf* EnqueueAtEnd(rte_ring* ring, const Bytes& frame, uint16_t tailroom) {
  rte_mbuf* m = rte_pktmbuf_alloc(g_dpdk->pool);
  EXPECT_NE(m, nullptr);
  m->data_off = static_cast<uint16_t>(m->buf_len - frame.size() - tailroom);
  m->data_len = static_cast<uint16_t>(frame.size());
  m->pkt_len = static_cast<uint32_t>(frame.size());
  std::memcpy(rte_pktmbuf_mtod(m, uint8_t*), frame.data(), frame.size());
  EXPECT_EQ(rte_ring_enqueue(ring, m), 0);
  return m;
}

std::vector<Bytes> Dequeue(rte_ring* ring) {
  std::vector<Bytes> out;
  void* obj;
  while (rte_ring_dequeue(ring, &obj) == 0) {
    auto* m = static_cast<rte_mbuf*>(obj);
    const uint8_t* d = rte_pktmbuf_mtod(m, const uint8_t*);
    out.emplace_back(d, d + m->data_len);
    rte_pktmbuf_free(m);
  }
  return out;
}

// The A addresses of a DNS message.
std::vector<std::string> Addresses(std::span<const uint8_t> msg, uint16_t* id) {
  dns::Message m;
  EXPECT_EQ(m.Parse(msg, dns::ParseOptions{}), dns::ParseError::kOk);
  *id = m.id();
  std::vector<std::string> out;
  auto it = m.Records(dns::Section::kAnswer);
  dns::RrView rr;
  while (it.Next(&rr)) {
    if (rr.type != dns::type::kA || rr.rdlength != 4) continue;
    const uint8_t* p = msg.data() + rr.rdata_offset;
    out.push_back(std::to_string(p[0]) + "." + std::to_string(p[1]) + "." + std::to_string(p[2]) + "." +
                  std::to_string(p[3]));
  }
  return out;
}

class DpdkWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(g_dpdk, nullptr);
    testing::PublishPartitions(&shared_, "cdn.example weight=on ecs=on answer=single level=city\n",
                               testing::kTwoCities);
    shared_.clock = &clock_;
    shared_.cache = std::make_unique<partitions::Cache>(partitions::CacheOptions{}, clock_);
    rcu_ = std::make_unique<common::RcuThread>();
    common::Cidr v4, v6;
    ASSERT_TRUE(common::ParseCidr("198.18.0.0/15", &v4).ok());
    ASSERT_TRUE(common::ParseCidr("2001:2::/48", &v6).ok());
    options_.allow = {v4, v6};
    core_ = std::make_unique<WorkerCore>(0, options_, &shared_, &channel_, [] {});
    port_ = Port();
    WorkerPort wp;
    wp.port = g_dpdk->wire;
    wp.exception = g_dpdk->kernel;
    wp.addresses = &port_;
    worker_ = std::make_unique<DpdkWorker>(*core_, clock_, 0, std::vector<WorkerPort>{wp}, g_dpdk->pool, 0);
    Dequeue(g_dpdk->wire_tx);
    Dequeue(g_dpdk->kernel_tx);
  }
  void TearDown() override {
    worker_.reset();
    core_.reset();
    rcu_.reset();
  }

  void Fill(std::string_view name, std::array<uint8_t, 4> addr) {
    const dns::NameKey q = Key(name);
    partitions::CacheEntryBuilder b({partitions::kCommonPartition, q.span(), dns::type::kA, dns::klass::kIn});
    b.AddAddress(q.span(), addr, 300);
    auto e = b.Build(partitions::EntryKind::kPositive, clock_.NowSeconds());
    ASSERT_TRUE(e.ok()) << e.status();
    shared_.cache->Insert(*std::move(e));
  }

  // A query frame for `name` with the spec's other fields.
  static Bytes QueryFrame(FrameSpec s, uint16_t id, std::string_view name) {
    s.payload = Query(id, name);
    return Build(s);
  }

  const PortCounters& counters() const { return worker_->counters(0); }

  common::FakeClock clock_{1000};
  SharedState shared_;
  HandlerOptions options_;
  MissChannel channel_;
  std::unique_ptr<common::RcuThread> rcu_;
  std::unique_ptr<WorkerCore> core_;
  frame::PortAddresses port_;
  std::unique_ptr<DpdkWorker> worker_;
};

// Checks an answer frame as the client's stack would, and returns its DNS message.
Bytes CheckAnswer(const Bytes& f, bool v6, int vlan) {
  const size_t l2 = vlan >= 0 ? 18 : 14;
  EXPECT_EQ(Slice(f, 0, 6), Bytes(kClientMac.begin(), kClientMac.end()));
  EXPECT_EQ(Slice(f, 6, 6), Bytes(kPortMac.begin(), kPortMac.end()));
  if (vlan >= 0) {
    EXPECT_EQ((f[12] << 8) | f[13], frame::kEtherVlan);
    EXPECT_EQ((f[14] << 8) | f[15], vlan);
  }
  const size_t udp = l2 + (v6 ? 40 : 20);
  if (!v6) {
    EXPECT_EQ(ReferenceChecksum(Slice(f, l2, 20)), 0) << "IPv4 header checksum";
  }
  EXPECT_EQ((f[udp + 6] << 8) | f[udp + 7], ReferenceUdpChecksum(f, l2, v6)) << "UDP checksum";
  EXPECT_EQ((f[udp] << 8) | f[udp + 1], 53);
  EXPECT_EQ((f[udp + 2] << 8) | f[udp + 3], 40000);
  return Bytes(f.begin() + udp + 8, f.end());
}

TEST_F(DpdkWorkerTest, CacheHitsAreAnsweredOutOfTheSamePortV4V6AndVlan) {
  Fill("plain.example", {203, 0, 113, 7});
  FrameSpec v4;
  FrameSpec v6;
  v6.v6 = true;
  FrameSpec tagged;
  tagged.v6 = true;
  tagged.vlan = 0x2064;
  Enqueue(g_dpdk->wire_rx, QueryFrame(v4, 1, "plain.example"));
  Enqueue(g_dpdk->wire_rx, QueryFrame(v6, 2, "plain.example"));
  Enqueue(g_dpdk->wire_rx, QueryFrame(tagged, 3, "plain.example"));
  EXPECT_EQ(worker_->Poll(), 3u);
  const std::vector<Bytes> out = Dequeue(g_dpdk->wire_tx);
  ASSERT_EQ(out.size(), 3u);
  const bool six[] = {false, true, true};
  const int vlan[] = {-1, -1, 0x2064};
  for (int i = 0; i < 3; ++i) {
    const Bytes msg = CheckAnswer(out[i], six[i], vlan[i]);
    uint16_t id = 0;
    EXPECT_EQ(Addresses(msg, &id), std::vector<std::string>{"203.0.113.7"}) << i;
    EXPECT_EQ(id, i + 1);
  }
  EXPECT_TRUE(Dequeue(g_dpdk->kernel_tx).empty());
  EXPECT_EQ(counters().rx_packets.Read(), 3u);
  EXPECT_EQ(counters().tx_packets.Read(), 3u);
  EXPECT_EQ(core_->counters().hits.Read(), 3u);
}

TEST_F(DpdkWorkerTest, WithoutIpv4UdpChecksumTheFieldIsZero) {
  Fill("plain.example", {203, 0, 113, 7});
  worker_.reset();
  WorkerPort wp;
  wp.port = g_dpdk->wire;
  wp.exception = g_dpdk->kernel;
  wp.addresses = &port_;
  wp.reply.udp_checksum_v4 = false;
  worker_ = std::make_unique<DpdkWorker>(*core_, clock_, 0, std::vector<WorkerPort>{wp}, g_dpdk->pool, 0);
  Enqueue(g_dpdk->wire_rx, QueryFrame({}, 9, "plain.example"));
  worker_->Poll();
  const std::vector<Bytes> out = Dequeue(g_dpdk->wire_tx);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ((out[0][40] << 8) | out[0][41], 0);
  EXPECT_EQ(ReferenceChecksum(Slice(out[0], 14, 20)), 0);
}

TEST_F(DpdkWorkerTest, EverythingElseForUsGoesToTheKernelUnchanged) {
  Bytes arp = Build({});
  arp[12] = 0x08;
  arp[13] = 0x06;
  FrameSpec icmp;
  icmp.proto = 1;
  FrameSpec tcp;
  tcp.proto = 6;
  FrameSpec frag;
  frag.frag = 0x2000;
  FrameSpec nd;
  nd.v6 = true;
  nd.proto = 58;
  nd.dst = {0x33, 0x33, 0xff, 0, 0, 1};
  const std::vector<Bytes> in = {arp, Build(icmp), Build(tcp), Build(frag), Build(nd)};
  for (const Bytes& f : in) Enqueue(g_dpdk->wire_rx, f);
  worker_->Poll();
  EXPECT_EQ(Dequeue(g_dpdk->kernel_tx), in);
  EXPECT_TRUE(Dequeue(g_dpdk->wire_tx).empty());
  EXPECT_EQ(counters().to_kernel.Read(), in.size());
  EXPECT_EQ(core_->counters().queries_udp.Read(), 0u) << "the handler saw none of them";
}

TEST_F(DpdkWorkerTest, WhatTheKernelSendsLeavesThroughTheWirePort) {
  const Bytes arp_reply = [] {
    Bytes f = Build({});
    f[12] = 0x08;
    f[13] = 0x06;
    return f;
  }();
  Enqueue(g_dpdk->kernel_rx, arp_reply);
  worker_->Poll();
  EXPECT_EQ(Dequeue(g_dpdk->wire_tx), std::vector<Bytes>{arp_reply});
  EXPECT_EQ(counters().from_kernel.Read(), 1u);
}

TEST_F(DpdkWorkerTest, BadFramesAndOtherMacsAreDroppedAndCounted) {
  FrameSpec other;
  other.dst = {0x02, 0, 0, 0, 0, 0x55};
  FrameSpec long_udp;
  long_udp.udp_len_delta = 4;
  FrameSpec long_ip;
  long_ip.ip_len_delta = 9;
  Bytes cut = Build({});
  cut.resize(20);
  for (const Bytes& f : {Build(other), Build(long_udp), Build(long_ip), cut}) Enqueue(g_dpdk->wire_rx, f);
  worker_->Poll();
  EXPECT_TRUE(Dequeue(g_dpdk->wire_tx).empty());
  EXPECT_TRUE(Dequeue(g_dpdk->kernel_tx).empty());
  EXPECT_EQ(counters().drops[static_cast<size_t>(FrameDrop::kNotOurs)].Read(), 1u);
  EXPECT_EQ(counters().drops[static_cast<size_t>(FrameDrop::kMalformed)].Read(), 3u);
  // Every mbuf went back to the pool.
  EXPECT_EQ(rte_mempool_in_use_count(g_dpdk->pool), 0u);
}

TEST_F(DpdkWorkerTest, TheKernelsShareIsRateLimited) {
  worker_.reset();
  WorkerPort wp;
  wp.port = g_dpdk->wire;
  wp.exception = g_dpdk->kernel;
  wp.addresses = &port_;
  wp.exception_pps = 3;  // a bucket of three, refilled 3 per second
  worker_ = std::make_unique<DpdkWorker>(*core_, clock_, 0, std::vector<WorkerPort>{wp}, g_dpdk->pool, 0);
  FrameSpec tcp;
  tcp.proto = 6;
  for (int i = 0; i < 8; ++i) Enqueue(g_dpdk->wire_rx, Build(tcp));
  Fill("plain.example", {203, 0, 113, 7});
  Enqueue(g_dpdk->wire_rx, QueryFrame({}, 5, "plain.example"));
  worker_->Poll();
  EXPECT_EQ(Dequeue(g_dpdk->kernel_tx).size(), 3u);
  EXPECT_EQ(counters().drops[static_cast<size_t>(FrameDrop::kExceptionRate)].Read(), 5u);
  EXPECT_EQ(Dequeue(g_dpdk->wire_tx).size(), 1u) << "queries are not limited";
  EXPECT_EQ(rte_mempool_in_use_count(g_dpdk->pool), 0u);
}

TEST_F(DpdkWorkerTest, WithoutAnExceptionPortTheKernelsFramesAreDropped) {
  worker_.reset();
  WorkerPort wp;
  wp.port = g_dpdk->wire;
  wp.addresses = &port_;
  worker_ = std::make_unique<DpdkWorker>(*core_, clock_, 0, std::vector<WorkerPort>{wp}, g_dpdk->pool, 0);
  FrameSpec icmp;
  icmp.proto = 1;
  Enqueue(g_dpdk->wire_rx, Build(icmp));
  worker_->Poll();
  EXPECT_TRUE(Dequeue(g_dpdk->kernel_tx).empty());
  EXPECT_EQ(counters().drops[static_cast<size_t>(FrameDrop::kNoException)].Read(), 1u);
}

TEST_F(DpdkWorkerTest, AMissIsAnsweredLaterToTheSameClient) {
  FrameSpec s;
  s.sport = 40000;
  s.vlan = 12;
  Enqueue(g_dpdk->wire_rx, QueryFrame(s, 77, "late.example"));
  worker_->Poll();
  EXPECT_TRUE(Dequeue(g_dpdk->wire_tx).empty());
  EXPECT_EQ(worker_->held(), 1u);
  // The upstream side: fill the cache, hand the query back.
  PendingClient miss;
  ASSERT_TRUE(channel_.misses.Pop(&miss));
  EXPECT_TRUE(miss.route.waits());
  Fill("late.example", {192, 0, 2, 44});
  ReturnedQuery r;
  r.client = std::move(miss);
  r.mode = HandleMode::kAfterFill;
  ASSERT_TRUE(channel_.returns.Push(std::move(r)));
  worker_->Poll();
  const std::vector<Bytes> out = Dequeue(g_dpdk->wire_tx);
  ASSERT_EQ(out.size(), 1u);
  const Bytes msg = CheckAnswer(out[0], false, 12);
  uint16_t id = 0;
  EXPECT_EQ(Addresses(msg, &id), std::vector<std::string>{"192.0.2.44"});
  EXPECT_EQ(id, 77);
  EXPECT_EQ(worker_->held(), 0u);
  EXPECT_EQ(rte_mempool_in_use_count(g_dpdk->pool), 0u);
}

// Where the mbuf has no room for the largest answer after the query, the
// answer goes over the query in place; without room for this answer
// either, the query is dropped and counted.
TEST_F(DpdkWorkerTest, AnMbufWithLittleRoomIsAnsweredInPlaceOrDropped) {
  Fill("plain.example", {203, 0, 113, 7});
  const Bytes query = QueryFrame({}, 21, "plain.example");
  EnqueueAtEnd(g_dpdk->wire_rx, query, 200);
  EnqueueAtEnd(g_dpdk->wire_rx, QueryFrame({}, 22, "plain.example"), 0);
  worker_->Poll();
  const std::vector<Bytes> out = Dequeue(g_dpdk->wire_tx);
  ASSERT_EQ(out.size(), 1u);
  uint16_t id = 0;
  EXPECT_EQ(Addresses(CheckAnswer(out[0], false, -1), &id), std::vector<std::string>{"203.0.113.7"});
  EXPECT_EQ(id, 21);
  EXPECT_EQ(counters().drops[static_cast<size_t>(FrameDrop::kTooBig)].Read(), 1u);
  EXPECT_EQ(counters().tx_packets.Read(), 1u);
  EXPECT_EQ(rte_mempool_in_use_count(g_dpdk->pool), 0u);
}

// A buffer the worker shares (another reference to it) is not written: the
// answer leaves in a new mbuf, and the query stays as it came.
TEST_F(DpdkWorkerTest, ASharedBufferIsAnsweredFromANewOne) {
  Fill("plain.example", {203, 0, 113, 7});
  FrameSpec v6;
  v6.v6 = true;
  v6.vlan = 9;
  const Bytes query = QueryFrame(v6, 31, "plain.example");
  rte_mbuf* m = EnqueueAtEnd(g_dpdk->wire_rx, query, 1800);
  rte_mbuf_refcnt_update(m, 1);
  worker_->Poll();
  const std::vector<Bytes> out = Dequeue(g_dpdk->wire_tx);
  ASSERT_EQ(out.size(), 1u);
  uint16_t id = 0;
  EXPECT_EQ(Addresses(CheckAnswer(out[0], true, 9), &id), std::vector<std::string>{"203.0.113.7"});
  EXPECT_EQ(id, 31);
  ASSERT_EQ(rte_mbuf_refcnt_read(m), 1u) << "the worker let its reference go";
  EXPECT_EQ(Bytes(rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_mtod(m, const uint8_t*) + m->data_len),
            query);
  rte_pktmbuf_free(m);
  EXPECT_EQ(rte_mempool_in_use_count(g_dpdk->pool), 0u);
}

TEST_F(DpdkWorkerTest, MoreThanABurstIsAnsweredOverTwoPolls) {
  Fill("plain.example", {203, 0, 113, 7});
  for (uint16_t i = 0; i < 40; ++i) Enqueue(g_dpdk->wire_rx, QueryFrame({}, i, "plain.example"));
  EXPECT_EQ(worker_->Poll(), 32u);
  EXPECT_EQ(worker_->Poll(), 8u);
  EXPECT_EQ(Dequeue(g_dpdk->wire_tx).size(), 40u);
  EXPECT_EQ(counters().rx_bursts.Read(), 2u);
}

}  // namespace
}  // namespace weir::fastpath::dpdk
