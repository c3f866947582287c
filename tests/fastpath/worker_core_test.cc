// WorkerCore without any socket: a fake backend (WorkerIo) holds routes and
// records what is sent to each, and the test plays the upstream side on the
// worker's MissChannel (takes misses, fills the cache, hands queries back).
// Hit, miss, coalesced miss, stale, relay, SERVFAIL, a full channel, and the
// retry of a name that became tagged through its chain.
#include "weir/fastpath/worker_core.h"

#include <fstrm.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "dns/test_util.h"
#include "dnstap.pb-c.h"
#include "partitions/test_util.h"
#include "test_util.h"
#include "weir/common/rcu.h"
#include "weir/dns/message.h"
#include "weir/dns/writer.h"
#include "weir/dnstap/dnstap.h"
#include "weir/fastpath/relay.h"

namespace weir::fastpath {
namespace {

using Bytes = std::vector<uint8_t>;

using dns::testing::Key;
using partitions::testing::Ip;

// A query with RD; `do_bit` adds OPT 1232 with DO.
Bytes Query(uint16_t id, std::string_view name, bool do_bit = false) {
  Bytes q(512);
  dns::ResponseWriter w(q.data(), q.size());
  const dns::NameKey k = Key(name);
  w.Begin(id, dns::flag::kRd, k.span(), dns::type::kA, dns::klass::kIn);
  if (do_bit) w.BeginOpt(1232, true);
  q.resize(w.Finish(q.size()));
  return q;
}

// What a client got: ID, RCODE, the A addresses, the TTL of the first.
struct Answer {
  uint16_t id = 0;
  uint16_t rcode = 0;
  std::vector<std::string> addrs;
  uint32_t ttl = 0;
};

Answer Read(const Bytes& msg) {
  Answer a;
  dns::Message m;
  EXPECT_EQ(m.Parse(msg, dns::ParseOptions{}), dns::ParseError::kOk);
  a.id = m.id();
  a.rcode = m.rcode();
  auto it = m.Records(dns::Section::kAnswer);
  dns::RrView rr;
  while (it.Next(&rr)) {
    if (rr.type != dns::type::kA || rr.rdlength != 4) continue;
    const uint8_t* p = msg.data() + rr.rdata_offset;
    if (a.addrs.empty()) a.ttl = rr.ttl;
    a.addrs.push_back(std::to_string(p[0]) + "." + std::to_string(p[1]) + "." + std::to_string(p[2]) + "." +
                      std::to_string(p[3]));
  }
  return a;
}

// The backend: a route per held packet (its client's name in the test), and
// every answer sent to a route.
class FakeIo : public WorkerIo {
 public:
  ClientRoute HoldRoute(size_t index) override {
    const uint64_t token = next_++;
    held_[token] = current_[index];
    return {0, Transport::kUdp, token};
  }
  void SendHeld(const ClientRoute& route, std::span<const uint8_t> answer) override {
    auto it = held_.find(route.token);
    ASSERT_NE(it, held_.end()) << "a route sent twice or never held";
    if (!answer.empty()) sent[it->second].push_back(Bytes(answer.begin(), answer.end()));
    held_.erase(it);
  }
  std::vector<std::string> current_;  // the client of each packet of the burst being handled
  std::map<std::string, std::vector<Bytes>> sent;
  size_t held() const { return held_.size(); }

 private:
  uint64_t next_ = 1;
  std::map<uint64_t, std::string> held_;
};

class WorkerCoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Published before this thread becomes an RCU reader.
    testing::PublishPartitions(&shared_, "cdn.example weight=on ecs=on answer=single level=city\n",
                               testing::kTwoCities);
    shared_.clock = &clock_;
    partitions::CacheOptions co;
    co.stale_window = 3600;
    shared_.cache = std::make_unique<partitions::Cache>(co, clock_);
    rcu_ = std::make_unique<common::RcuThread>();
    common::Cidr allow;
    ASSERT_TRUE(common::ParseCidr("198.18.0.0/15", &allow).ok());
    options_.allow = {allow};
    core_ = std::make_unique<WorkerCore>(0, options_, &shared_, &channel_, [this] { ++notified_; });
  }
  void TearDown() override {
    core_.reset();
    rcu_.reset();
  }

  // One burst of (client, query) packets; the replies sent at once by the
  // backend are recorded like held ones.
  void Burst(const std::vector<std::pair<std::string, Bytes>>& in) {
    std::vector<QueryHandler::BurstPacket> p(in.size());
    std::vector<Bytes> out(in.size(), Bytes(4096));
    io_.current_.clear();
    for (size_t i = 0; i < in.size(); ++i) {
      p[i].pkt = in[i].second.data();
      p[i].len = in[i].second.size();
      p[i].client = ClientInfo{Ip(in[i].first), false};
      p[i].out = out[i].data();
      p[i].out_cap = out[i].size();
      io_.current_.push_back(in[i].first);
    }
    core_->HandleBurst(p.data(), p.size(), clock_.NowSeconds(), io_);
    for (size_t i = 0; i < in.size(); ++i) {
      if (p[i].verdict == Verdict::kReply || p[i].verdict == Verdict::kReplyAndPrefetch) {
        io_.sent[in[i].first].push_back(Bytes(out[i].begin(), out[i].begin() + p[i].out_len));
      }
    }
  }

  // The upstream side: every miss the worker handed over.
  std::vector<PendingClient> TakeMisses() {
    std::vector<PendingClient> v;
    PendingClient c;
    while (channel_.misses.Pop(&c)) v.push_back(std::move(c));
    return v;
  }

  void Fill(const MissRequest& m, std::vector<std::array<uint8_t, 4>> addrs, uint32_t ttl,
            std::vector<uint8_t> weights = {}) {
    partitions::CacheEntryBuilder b({m.partition, m.qname.span(), m.qtype, m.qclass});
    for (const auto& a : addrs) b.AddAddress(m.qname.span(), a, ttl);
    if (!weights.empty()) b.SetWeights(weights);
    auto e = b.Build(partitions::EntryKind::kPositive, clock_.NowSeconds());
    ASSERT_TRUE(e.ok()) << e.status();
    shared_.cache->Insert(*std::move(e));
  }

  void Return(PendingClient&& c, HandleMode mode, std::shared_ptr<const RelayedAnswer> relay = nullptr) {
    ReturnedQuery r;
    r.client = std::move(c);
    r.mode = mode;
    r.relay = std::move(relay);
    ASSERT_TRUE(channel_.returns.Push(std::move(r)));
  }

  common::FakeClock clock_{1000};
  SharedState shared_;
  HandlerOptions options_;
  MissChannel channel_;
  FakeIo io_;
  int notified_ = 0;
  std::unique_ptr<common::RcuThread> rcu_;
  std::unique_ptr<WorkerCore> core_;
};

TEST_F(WorkerCoreTest, HitIsAnsweredInTheBurstWithoutGoingUpstream) {
  const dns::NameKey q = Key("plain.example");
  MissRequest m;
  m.qname = q;
  m.qtype = dns::type::kA;
  m.qclass = dns::klass::kIn;
  Fill(m, {{203, 0, 113, 7}}, 300);
  Burst({{"198.18.1.1", Query(7, "plain.example")}});
  ASSERT_EQ(io_.sent["198.18.1.1"].size(), 1u);
  const Answer a = Read(io_.sent["198.18.1.1"][0]);
  EXPECT_EQ(a.id, 7);
  EXPECT_EQ(a.addrs, std::vector<std::string>{"203.0.113.7"});
  EXPECT_TRUE(TakeMisses().empty());
  EXPECT_EQ(io_.held(), 0u);
  EXPECT_EQ(notified_, 0);
  EXPECT_EQ(core_->counters().hits.Read(), 1u);
}

TEST_F(WorkerCoreTest, MissGoesUpstreamAndIsAnsweredFromTheFilledCache) {
  Burst({{"198.18.1.1", Query(11, "www.cdn.example")}});
  EXPECT_TRUE(io_.sent.empty());
  EXPECT_EQ(io_.held(), 1u);
  EXPECT_EQ(notified_, 1);
  std::vector<PendingClient> misses = TakeMisses();
  ASSERT_EQ(misses.size(), 1u);
  const MissRequest m = misses[0].miss;
  // Tagged, per city, weighted, with alpha's own ECS source (never the subscriber's).
  EXPECT_TRUE(m.tagged && m.weighted && m.send_ecs);
  EXPECT_EQ(partitions::LevelOf(m.partition), partitions::CacheLevel::kCity);
  EXPECT_EQ(m.ecs.source_prefix, 24);
  EXPECT_EQ(m.ecs.address[0], 198);
  EXPECT_EQ(m.ecs.address[1], 18);
  EXPECT_EQ(m.ecs.address[2], 0);
  EXPECT_EQ(dns::NameKeyToText(misses[0].miss.qname.span()), "www.cdn.example.");
  Fill(m, {{192, 0, 2, 1}, {192, 0, 2, 2}}, 300, {1, 1});
  Return(std::move(misses[0]), HandleMode::kAfterFill);
  EXPECT_EQ(core_->DrainReturns(clock_.NowSeconds(), io_), 1u);
  ASSERT_EQ(io_.sent["198.18.1.1"].size(), 1u);
  const Answer a = Read(io_.sent["198.18.1.1"][0]);
  EXPECT_EQ(a.id, 11);
  EXPECT_EQ(a.rcode, 0);
  ASSERT_EQ(a.addrs.size(), 1u);  // answer=single: one address by SWRR
  EXPECT_EQ(io_.held(), 0u);
}

TEST_F(WorkerCoreTest, SwrrProbeIsAnsweredOnTheWorkersThreadBetweenBursts) {
  Burst({{"198.18.1.1", Query(31, "www.cdn.example")}});
  std::vector<PendingClient> misses = TakeMisses();
  ASSERT_EQ(misses.size(), 1u);
  const MissRequest m = misses[0].miss;
  const std::vector<uint8_t> weights = {5, 3, 1};
  Fill(m, {{192, 0, 2, 1}, {192, 0, 2, 2}, {192, 0, 2, 3}}, 300, weights);
  Return(std::move(misses[0]), HandleMode::kAfterFill);
  ASSERT_EQ(core_->DrainReturns(clock_.NowSeconds(), io_), 1u);
  partitions::Freshness f;
  const partitions::CacheEntry* e =
      shared_.cache->Find({m.partition, m.qname.span(), m.qtype, m.qclass}, clock_.NowSeconds(), &f);
  ASSERT_NE(e, nullptr);
  const SwrrProbe::Item item{e->lineage(), e->fingerprint(), 3, false, {}};

  // Nobody drains: the probe times out, is withdrawn, and a later pass of
  // the worker leaves it alone.
  SwrrProbe idle;
  idle.items = {item};
  EXPECT_FALSE(core_->ProbeSwrr(&idle, std::chrono::milliseconds(20), nullptr));
  core_->DrainReturns(clock_.NowSeconds(), io_);
  EXPECT_FALSE(idle.done.load());

  // A worker thread answers hits and passes through DrainReturns between
  // bursts while this thread probes: every state read is whole (nginx's
  // current values always sum to 0).
  std::atomic<bool> stop{false};
  std::thread worker([&] {
    common::RcuThread rcu;
    uint16_t id = 100;
    while (!stop.load()) {
      Burst({{"198.18.1.2", Query(id++, "www.cdn.example")}, {"198.18.1.3", Query(id++, "www.cdn.example")}});
      core_->DrainReturns(clock_.NowSeconds(), io_);
      rcu.Quiescent();
    }
  });
  int answered = 0;
  for (int i = 0; i < 200; ++i) {
    SwrrProbe p;
    p.items = {item};
    if (!core_->ProbeSwrr(&p, std::chrono::milliseconds(2000), nullptr)) continue;
    ++answered;
    ASSERT_TRUE(p.items[0].found);
    EXPECT_EQ(p.items[0].current[0] + p.items[0].current[1] + p.items[0].current[2], 0);
  }
  stop.store(true);
  worker.join();
  EXPECT_EQ(answered, 200);

  // The state after all those answers is nginx's after as many picks.
  const size_t picks = 1 + io_.sent["198.18.1.2"].size() + io_.sent["198.18.1.3"].size();
  partitions::SwrrTable model;
  for (size_t i = 0; i < picks; ++i) model.Pick(1, 1, weights);
  int16_t want[3];
  ASSERT_TRUE(model.Peek(1, 1, 3, want));
  SwrrProbe last;
  last.items = {item};
  std::thread drainer([&] {
    common::RcuThread rcu;
    while (!last.done.load()) core_->DrainReturns(clock_.NowSeconds(), io_);
  });
  EXPECT_TRUE(core_->ProbeSwrr(&last, std::chrono::milliseconds(2000), nullptr));
  drainer.join();
  EXPECT_EQ(std::vector<int16_t>(last.items[0].current.begin(), last.items[0].current.begin() + 3),
            std::vector<int16_t>(want, want + 3));
}

TEST_F(WorkerCoreTest, CoalescedMissAnswersEveryWaiterWithItsOwnIdAndSwrrTurn) {
  // Three subscribers of one city miss the same name; the upstream side
  // resolves it once and hands all three back.
  Burst({{"198.18.1.1", Query(21, "www.cdn.example")},
         {"198.18.1.2", Query(22, "www.cdn.example")},
         {"198.18.1.3", Query(23, "www.cdn.example")}});
  std::vector<PendingClient> misses = TakeMisses();
  ASSERT_EQ(misses.size(), 3u);
  for (const PendingClient& c : misses) EXPECT_EQ(c.miss.partition, misses[0].miss.partition);
  Fill(misses[0].miss, {{192, 0, 2, 1}, {192, 0, 2, 2}, {192, 0, 2, 3}}, 300, {1, 1, 1});
  for (PendingClient& c : misses) Return(std::move(c), HandleMode::kAfterFill);
  EXPECT_EQ(core_->DrainReturns(clock_.NowSeconds(), io_), 3u);
  std::map<std::string, int> seen;
  for (const auto& [client, id] : std::vector<std::pair<std::string, uint16_t>>{
           {"198.18.1.1", 21}, {"198.18.1.2", 22}, {"198.18.1.3", 23}}) {
    ASSERT_EQ(io_.sent[client].size(), 1u) << client;
    const Answer a = Read(io_.sent[client][0]);
    EXPECT_EQ(a.id, id);
    ASSERT_EQ(a.addrs.size(), 1u);
    ++seen[a.addrs[0]];
  }
  // Equal weights, three answers in a row: each address once.
  EXPECT_EQ(seen.size(), 3u);
}

TEST_F(WorkerCoreTest, FailedUpstreamServesTheStaleEntryElseServfail) {
  MissRequest m;
  m.qname = Key("plain.example");
  m.qtype = dns::type::kA;
  m.qclass = dns::klass::kIn;
  Fill(m, {{203, 0, 113, 9}}, 60);
  clock_.Advance(120);  // expired, inside the stale window
  Burst({{"198.18.1.1", Query(31, "plain.example")}, {"198.18.1.2", Query(32, "other.example")}});
  EXPECT_TRUE(io_.sent.empty()) << "a stale entry is not served before the upstream is asked";
  std::vector<PendingClient> misses = TakeMisses();
  ASSERT_EQ(misses.size(), 2u);
  for (PendingClient& c : misses) Return(std::move(c), HandleMode::kStaleOk);  // every upstream failed
  core_->DrainReturns(clock_.NowSeconds(), io_);
  ASSERT_EQ(io_.sent["198.18.1.1"].size(), 1u);
  const Answer stale = Read(io_.sent["198.18.1.1"][0]);
  EXPECT_EQ(stale.addrs, std::vector<std::string>{"203.0.113.9"});
  EXPECT_EQ(stale.ttl, options_.stale_answer_ttl);  // RFC 8767 4
  ASSERT_EQ(io_.sent["198.18.1.2"].size(), 1u);
  const Answer fail = Read(io_.sent["198.18.1.2"][0]);
  EXPECT_EQ(fail.id, 32);
  EXPECT_EQ(fail.rcode, static_cast<uint16_t>(dns::Rcode::kServFail));
  EXPECT_EQ(core_->counters().stale_served.Read(), 1u);
  EXPECT_EQ(core_->counters().errors[static_cast<size_t>(ErrorReason::kUpstreamFailure)].Read(), 1u);
  EXPECT_EQ(core_->counters().responses[0][static_cast<size_t>(dns::Rcode::kServFail)].Read(), 1u);
}

TEST_F(WorkerCoreTest, UncacheableAnswerIsRelayedWithTheClientsIdAndOpt) {
  // A DNSSEC-aware query is never answered from the cache: the upstream's
  // answer is relayed, its DNSSEC records kept for a client with DO.
  Burst({{"198.18.1.1", Query(41, "signed.example", /*do_bit=*/true)}});
  std::vector<PendingClient> misses = TakeMisses();
  ASSERT_EQ(misses.size(), 1u);
  EXPECT_TRUE(misses[0].miss.do_bit);
  Bytes up(512);
  dns::ResponseWriter w(up.data(), up.size());
  const dns::NameKey q = Key("signed.example");
  w.Begin(0x5555, dns::flag::kQr | dns::flag::kRd | dns::flag::kRa | dns::flag::kAd, q.span(), dns::type::kA,
          dns::klass::kIn);
  const uint8_t addr[4] = {192, 0, 2, 77};
  w.AppendRecord(dns::Section::kAnswer, q.span(), dns::type::kA, dns::klass::kIn, 120, addr);
  w.BeginOpt(1232, true);
  up.resize(w.Finish(up.size()));
  dns::Message m;
  ASSERT_EQ(m.Parse(up, dns::ParseOptions{}), dns::ParseError::kOk);
  Return(std::move(misses[0]), HandleMode::kAfterFill,
         PrepareRelay(m, dns::type::kA, /*strip_dnssec=*/false));
  core_->DrainReturns(clock_.NowSeconds(), io_);
  ASSERT_EQ(io_.sent["198.18.1.1"].size(), 1u);
  const Bytes& got = io_.sent["198.18.1.1"][0];
  const Answer a = Read(got);
  EXPECT_EQ(a.id, 41);
  EXPECT_EQ(a.addrs, std::vector<std::string>{"192.0.2.77"});
  dns::Message gm;
  ASSERT_EQ(gm.Parse(got, dns::ParseOptions{}), dns::ParseError::kOk);
  EXPECT_TRUE(gm.flags() & dns::flag::kAd) << "AD to a client that set DO";
  EXPECT_TRUE(gm.edns().present && gm.edns().do_bit);
  EXPECT_EQ(gm.edns().udp_size, 1232);
}

TEST_F(WorkerCoreTest, NameTaggedThroughItsChainIsAskedAgainAsTaggedThenAnswered) {
  Burst({{"198.19.4.4", Query(51, "alias.example")}});
  std::vector<PendingClient> first = TakeMisses();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_FALSE(first[0].miss.tagged);
  EXPECT_EQ(first[0].miss.partition, partitions::kCommonPartition);
  // The upstream side saw alias.example CNAME into cdn.example: it learns the tag.
  const partitions::TagTable* tags = shared_.tags.Get();
  const partitions::Tag* tag = tags->Lookup(Key("www.cdn.example").span());
  ASSERT_NE(tag, nullptr);
  const LearnedTags empty;
  shared_.learned.PublishDeferred(
      empty.With(Key("alias.example").span(), *tag, clock_.NowSeconds() + 300, clock_.NowSeconds(), 100));
  Return(std::move(first[0]), HandleMode::kRetry);
  EXPECT_EQ(core_->DrainReturns(clock_.NowSeconds(), io_), 1u);
  EXPECT_TRUE(io_.sent.empty());
  EXPECT_EQ(io_.held(), 1u) << "the client still waits, under the same route";
  std::vector<PendingClient> again = TakeMisses();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_TRUE(again[0].miss.tagged);
  EXPECT_EQ(partitions::LevelOf(again[0].miss.partition), partitions::CacheLevel::kCity);
  EXPECT_EQ(again[0].miss.ecs.address[1], 19) << "beta's ECS source";
  Fill(again[0].miss, {{192, 0, 2, 99}}, 300, {1});
  Return(std::move(again[0]), HandleMode::kAfterFill);
  core_->DrainReturns(clock_.NowSeconds(), io_);
  ASSERT_EQ(io_.sent["198.19.4.4"].size(), 1u);
  const Answer a = Read(io_.sent["198.19.4.4"][0]);
  EXPECT_EQ(a.id, 51);
  EXPECT_EQ(a.addrs, std::vector<std::string>{"192.0.2.99"});
  EXPECT_EQ(io_.held(), 0u);
}

TEST_F(WorkerCoreTest, FullChannelDropsTheMissAndForgetsItsRoute) {
  // Fill the ring the way a stalled upstream side would.
  size_t pushed = 0;
  for (;; ++pushed) {
    PendingClient c;
    if (!channel_.misses.Push(std::move(c))) break;
  }
  ASSERT_EQ(pushed, MissChannel::kSize);
  Burst({{"198.18.1.1", Query(61, "www.cdn.example")}});
  EXPECT_TRUE(io_.sent.empty());
  EXPECT_EQ(io_.held(), 0u) << "the route of a miss that could not go upstream is released";
  EXPECT_EQ(core_->counters().drops[static_cast<size_t>(DropReason::kMissQueueFull)].Read(), 1u);
  EXPECT_EQ(notified_, 0);
}

}  // namespace
}  // namespace weir::fastpath

namespace weir::fastpath {
namespace {

// A dnstap message as read back from the file: type, client address, and
// the DNS ID of the message it carries.
struct Tapped {
  int type = 0;
  std::string client;
  uint16_t id = 0;
};

std::vector<Tapped> ReadTapFile(const std::string& path) {
  std::vector<Tapped> out;
  fstrm_file_options* fopt = fstrm_file_options_init();
  fstrm_file_options_set_file_path(fopt, path.c_str());
  fstrm_reader* r = fstrm_file_reader_init(fopt, nullptr);
  fstrm_file_options_destroy(&fopt);
  EXPECT_NE(r, nullptr);
  if (r == nullptr) return out;
  EXPECT_EQ(fstrm_reader_open(r), fstrm_res_success);
  const uint8_t* data = nullptr;
  size_t len = 0;
  while (fstrm_reader_read(r, &data, &len) == fstrm_res_success) {
    Dnstap__Dnstap* d = dnstap__dnstap__unpack(nullptr, len, data);
    EXPECT_NE(d, nullptr);
    if (d == nullptr || d->message == nullptr) continue;
    const Dnstap__Message* m = d->message;
    Tapped t;
    t.type = m->type;
    if (m->has_query_address && m->query_address.len == 4) {
      const uint8_t* a = m->query_address.data;
      t.client = std::to_string(a[0]) + "." + std::to_string(a[1]) + "." + std::to_string(a[2]) + "." +
                 std::to_string(a[3]);
    }
    const ProtobufCBinaryData& msg = m->has_response_message ? m->response_message : m->query_message;
    if (msg.len >= 2) t.id = static_cast<uint16_t>(msg.data[0] << 8 | msg.data[1]);
    out.push_back(t);
    dnstap__dnstap__free_unpacked(d, nullptr);
  }
  fstrm_reader_destroy(&r);
  return out;
}

TEST_F(WorkerCoreTest, DnstapTapsSampledQueriesAndTheAnswersSent) {
  dnstap::Options o;
  o.file_path =
      (std::filesystem::temp_directory_path() / ("weir-core-tap-" + std::to_string(getpid()))).string();
  o.sample = 2;
  auto w = dnstap::Writer::Open(o, 1);
  ASSERT_TRUE(w.ok()) << w.status();
  dnstap::Producer& tap = (*w)->producer(0);
  core_->SetTap(&tap);
  MissRequest m;
  m.qname = Key("plain.example");
  m.qtype = dns::type::kA;
  m.qclass = dns::klass::kIn;
  Fill(m, {{203, 0, 113, 7}}, 300);
  // Packets 0, 2 and 4 are tapped: two hits, and a miss answered later.
  Burst({{"198.18.1.1", Query(41, "plain.example")},
         {"198.18.1.2", Query(42, "plain.example")},
         {"198.18.1.3", Query(43, "plain.example")},
         {"198.18.1.4", Query(44, "plain.example")},
         {"198.18.1.5", Query(45, "www.cdn.example")}});
  EXPECT_EQ(tap.sent(), 5u);
  EXPECT_EQ(tap.sampled_out(), 2u);
  std::vector<PendingClient> misses = TakeMisses();
  ASSERT_EQ(misses.size(), 1u);
  EXPECT_TRUE(misses[0].tapped());
  Fill(misses[0].miss, {{192, 0, 2, 1}}, 300, {1});
  Return(std::move(misses[0]), HandleMode::kAfterFill);
  EXPECT_EQ(core_->DrainReturns(clock_.NowSeconds(), io_), 1u);
  EXPECT_EQ(tap.sent(), 6u);
  EXPECT_EQ(tap.dropped(), 0u);
  core_->SetTap(nullptr);
  w->reset();  // written out and closed

  const std::vector<Tapped> got = ReadTapFile(o.file_path);
  std::remove(o.file_path.c_str());
  ASSERT_EQ(got.size(), 6u);
  const int q = DNSTAP__MESSAGE__TYPE__CLIENT_QUERY, r = DNSTAP__MESSAGE__TYPE__CLIENT_RESPONSE;
  const std::vector<std::tuple<int, std::string, uint16_t>> want = {
      {q, "198.18.1.1", 41}, {q, "198.18.1.3", 43}, {q, "198.18.1.5", 45},
      {r, "198.18.1.1", 41}, {r, "198.18.1.3", 43}, {r, "198.18.1.5", 45}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].type, std::get<0>(want[i])) << i;
    EXPECT_EQ(got[i].client, std::get<1>(want[i])) << i;
    EXPECT_EQ(got[i].id, std::get<2>(want[i])) << i;
  }
  // The response tapped is the one the client got.
  ASSERT_EQ(io_.sent["198.18.1.5"].size(), 1u);
  EXPECT_EQ(Read(io_.sent["198.18.1.5"][0]).addrs, std::vector<std::string>{"192.0.2.1"});
}

}  // namespace
}  // namespace weir::fastpath
