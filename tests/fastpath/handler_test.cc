// QueryHandler::HandleBurst against QueryHandler::Handle: the staged burst
// path (tag lookups and cache lookups over the whole burst) must give every
// packet the verdict, response bytes and miss that Handle gives it alone,
// and leave the same counters, on a mix of hits (weighted, per city, plain),
// misses, DNSSEC queries, errors and garbage, over bursts wider than a stage.
#include "weir/fastpath/handler.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "dns/test_util.h"
#include "partitions/test_util.h"
#include "test_util.h"
#include "weir/common/rcu.h"
#include "weir/dns/writer.h"

namespace weir::fastpath {
namespace {

using Bytes = std::vector<uint8_t>;

using dns::testing::Key;
using partitions::testing::Ip;

// A query for `name`/`qtype`; flags_extra ORed into the header flags;
// `do_bit` adds an OPT record with DO set.
Bytes Query(uint16_t id, std::string_view name, uint16_t qtype, uint16_t flags_extra = 0,
            bool do_bit = false) {
  Bytes q = {static_cast<uint8_t>(id >> 8),
             static_cast<uint8_t>(id),
             static_cast<uint8_t>(0x01 | (flags_extra >> 8)),
             static_cast<uint8_t>(flags_extra),
             0,
             1,
             0,
             0,
             0,
             0,
             0,
             static_cast<uint8_t>(do_bit ? 1 : 0)};
  const dns::NameKey k = Key(name);
  q.insert(q.end(), k.bytes.begin(), k.bytes.begin() + k.len);
  q.insert(q.end(), {static_cast<uint8_t>(qtype >> 8), static_cast<uint8_t>(qtype), 0, 1});
  if (do_bit) q.insert(q.end(), {0, 0, 41, 0x04, 0xd0, 0, 0, 0x80, 0, 0, 0});  // OPT 1232, DO
  return q;
}

struct Packet {
  Bytes bytes;
  std::string source;
};

struct Outcome {
  Verdict verdict;
  Bytes response;    // on kReply / kReplyAndPrefetch
  std::string miss;  // a summary of the MissRequest on kMiss / kReplyAndPrefetch
};

std::string Summary(const MissRequest& m) {
  return dns::NameKeyToText(m.qname.span()) + " " + std::to_string(m.qtype) +
         " p=" + std::to_string(m.partition) + " tagged=" + std::to_string(m.tagged) +
         " weighted=" + std::to_string(m.weighted) + " ecs=" + std::to_string(m.send_ecs) + "/" +
         std::to_string(m.ecs.family) + "/" + std::to_string(m.ecs.source_prefix) +
         " do=" + std::to_string(m.do_bit);
}

Outcome Keep(Verdict v, const uint8_t* out, size_t out_len, const MissRequest& miss) {
  Outcome o{v, {}, {}};
  if (v == Verdict::kReply || v == Verdict::kReplyAndPrefetch) o.response.assign(out, out + out_len);
  if (v == Verdict::kMiss || v == Verdict::kReplyAndPrefetch) o.miss = Summary(miss);
  return o;
}

class HandlerBurstTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Published before this thread becomes an RCU reader (Publish waits for
    // a grace period).
    testing::PublishPartitions(&shared_,
                               "cdn.example weight=on ecs=on answer=single\n"
                               "ord.example weight=on answer=ordered level=city\n"
                               "sub.example ecs=on level=subnet\n",
                               testing::kTwoCities);
    shared_.clock = &clock_;
    shared_.cache = std::make_unique<partitions::Cache>(partitions::CacheOptions{}, clock_);
    rcu_ = std::make_unique<common::RcuThread>();

    const partitions::CityMap* map = shared_.citymap.Get();
    // Weighted answers per city (3:2:1 in alpha, 1:1 in beta), an ordered
    // one, a plain global one, a negative one.
    struct City {
      const char* source;
      std::vector<std::array<uint8_t, 4>> addrs;
      std::vector<uint8_t> weights;
    };
    for (const City& c : {City{"198.18.1.1", {{192, 0, 2, 1}, {192, 0, 2, 2}, {192, 0, 2, 3}}, {3, 2, 1}},
                          City{"198.19.1.1", {{192, 0, 2, 11}, {192, 0, 2, 12}}, {1, 1}}}) {
      const common::IpAddress who = Ip(c.source);
      for (const char* name : {"www.cdn.example", "www.ord.example"}) {
        const dns::NameKey q = Key(name);
        const partitions::Partition p =
            partitions::PartitionKey(partitions::CacheLevel::kCity, map->Lookup(who), who);
        partitions::CacheEntryBuilder b({p, q.span(), dns::type::kA, dns::klass::kIn});
        for (const auto& a : c.addrs) b.AddAddress(q.span(), a, 300);
        b.SetWeights(c.weights);
        auto e = b.Build(partitions::EntryKind::kPositive, clock_.NowSeconds());
        ASSERT_TRUE(e.ok()) << e.status();
        shared_.cache->Insert(*std::move(e));
      }
    }
    const dns::NameKey plain = Key("plain.example");
    partitions::CacheEntryBuilder b(
        {partitions::kCommonPartition, plain.span(), dns::type::kA, dns::klass::kIn});
    b.AddAddress(plain.span(), std::array<uint8_t, 4>{203, 0, 113, 7}, 300);
    auto e = b.Build(partitions::EntryKind::kPositive, clock_.NowSeconds());
    ASSERT_TRUE(e.ok()) << e.status();
    shared_.cache->Insert(*std::move(e));

    common::Cidr allow;
    ASSERT_TRUE(common::ParseCidr("198.18.0.0/15", &allow).ok());
    options_.allow = {allow};
  }

  void TearDown() override { rcu_.reset(); }

  std::vector<Packet> Mix(size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    const char* sources[] = {"198.18.1.1", "198.18.200.9", "198.19.1.1", "198.19.7.7", "203.0.113.9"};
    std::vector<Packet> out;
    for (size_t i = 0; i < n; ++i) {
      const uint16_t id = static_cast<uint16_t>(rng());
      const std::string src = sources[rng() % std::size(sources)];
      switch (rng() % 12) {
        case 0:
        case 1:
        case 2:
          out.push_back({Query(id, "www.cdn.example", dns::type::kA), src});
          break;
        case 3:
          out.push_back({Query(id, "www.ord.example", dns::type::kA), src});
          break;
        case 4:
          out.push_back({Query(id, "plain.example", dns::type::kA), src});
          break;
        case 5:
          out.push_back({Query(id, "miss" + std::to_string(rng() % 4) + ".sub.example", dns::type::kA), src});
          break;
        case 6:
          out.push_back({Query(id, "nothing.example", dns::type::kAaaa), src});
          break;
        case 7:
          out.push_back({Query(id, "www.cdn.example", dns::type::kA, 0, /*do_bit=*/true), src});
          break;
        case 8:
          out.push_back({Query(id, "www.cdn.example", dns::type::kA, 0x1000), src});  // opcode 2
          break;
        case 9: {
          const Bytes full = Query(id, "plain.example", dns::type::kA);
          out.push_back({Bytes(full.begin(), full.end() - 3), src});  // the question cut short: FORMERR
          break;
        }
        case 10:
          out.push_back({Bytes{1, 2, 3}, src});  // garbage
          break;
        default:
          out.push_back({Query(id, "www.cdn.example", dns::type::kA, 0x8000), src});  // a response: dropped
          break;
      }
    }
    return out;
  }

  common::FakeClock clock_{1000};
  SharedState shared_;
  HandlerOptions options_;
  std::unique_ptr<common::RcuThread> rcu_;
};

TEST_F(HandlerBurstTest, BurstGivesWhatHandleGivesEachPacket) {
  WorkerCounters one_ctr, burst_ctr;
  QueryHandler one(options_, &shared_, &one_ctr), burst(options_, &shared_, &burst_ctr);
  size_t replies = 0, misses = 0, drops = 0;
  for (size_t n : {1, 5, 32, 33, 70}) {
    const std::vector<Packet> packets = Mix(n, n);
    std::vector<Outcome> want;
    for (const Packet& p : packets) {
      uint8_t out[1500];
      size_t out_len = 0;
      MissRequest miss;
      const Verdict v = one.Handle(p.bytes.data(), p.bytes.size(), ClientInfo{Ip(p.source), false},
                                   clock_.NowSeconds(), out, sizeof(out), &out_len, &miss);
      want.push_back(Keep(v, out, out_len, miss));
    }
    std::vector<std::array<uint8_t, 1500>> outs(n);
    std::vector<MissRequest> miss(n);
    std::vector<QueryHandler::BurstPacket> burst_packets(n);
    for (size_t i = 0; i < n; ++i) {
      QueryHandler::BurstPacket& b = burst_packets[i];
      b.pkt = packets[i].bytes.data();
      b.len = packets[i].bytes.size();
      b.client = ClientInfo{Ip(packets[i].source), false};
      b.out = outs[i].data();
      b.out_cap = outs[i].size();
      b.miss = &miss[i];
    }
    burst.HandleBurst(burst_packets.data(), n, clock_.NowSeconds());
    for (size_t i = 0; i < n; ++i) {
      const Outcome got = Keep(burst_packets[i].verdict, outs[i].data(), burst_packets[i].out_len, miss[i]);
      EXPECT_EQ(got.verdict, want[i].verdict) << "burst of " << n << ", packet " << i;
      EXPECT_EQ(got.response, want[i].response) << "burst of " << n << ", packet " << i;
      EXPECT_EQ(got.miss, want[i].miss) << "burst of " << n << ", packet " << i;
      replies += want[i].verdict == Verdict::kReply;
      misses += want[i].verdict == Verdict::kMiss;
      drops += want[i].verdict == Verdict::kDrop;
    }
  }
  // Every kind of outcome was exercised.
  EXPECT_GT(replies, 40u);
  EXPECT_GT(misses, 10u);
  EXPECT_GT(drops, 5u);
  EXPECT_EQ(burst_ctr.queries_udp.Read(), one_ctr.queries_udp.Read());
  EXPECT_EQ(burst_ctr.hits.Read(), one_ctr.hits.Read());
  EXPECT_EQ(burst_ctr.misses.Read(), one_ctr.misses.Read());
  for (size_t r = 0; r < one_ctr.drops.size(); ++r)
    EXPECT_EQ(burst_ctr.drops[r].Read(), one_ctr.drops[r].Read());
  for (size_t r = 0; r < one_ctr.errors.size(); ++r)
    EXPECT_EQ(burst_ctr.errors[r].Read(), one_ctr.errors[r].Read());
  for (size_t t = 0; t < 2; ++t)
    for (size_t r = 0; r < one_ctr.responses[t].size(); ++r)
      EXPECT_EQ(burst_ctr.responses[t][r].Read(), one_ctr.responses[t][r].Read()) << r;
}

// HTTPDNS asks with ClientInfo::ordered: a weighted set tagged
// answer=single is answered with every address, the SWRR pick first, and
// the picks keep the weights (3:2:1) exactly; without it, one address.
TEST_F(HandlerBurstTest, OrderedClientsGetEveryAddressThePickFirst) {
  WorkerCounters ctr;
  QueryHandler h(options_, &shared_, &ctr);
  const Bytes q = Query(7, "www.cdn.example", dns::type::kA);
  const size_t first_addr = q.size() + 12;  // a compressed owner, type, class, TTL, RDLENGTH
  uint8_t out[1500];
  size_t out_len = 0;
  MissRequest miss;
  ClientInfo single{Ip("198.18.1.1"), true};
  ASSERT_EQ(h.Handle(q.data(), q.size(), single, clock_.NowSeconds(), out, sizeof(out), &out_len, &miss),
            Verdict::kReply);
  EXPECT_EQ(out[7], 1) << "answer=single: one address";
  ClientInfo ordered = single;
  ordered.ordered = true;
  std::map<uint8_t, int> firsts;
  for (int i = 0; i < 60; ++i) {
    AnswerInfo info;
    ASSERT_EQ(h.Handle(q.data(), q.size(), ordered, clock_.NowSeconds(), out, sizeof(out), &out_len, &miss,
                       HandleMode::kNormal, &info),
              Verdict::kReply);
    ASSERT_EQ(out[7], 3) << "ordered: every address";
    ++firsts[out[first_addr + 3]];
    EXPECT_TRUE(info.cached);
    EXPECT_FALSE(info.stale);
    EXPECT_EQ(info.origin_ttl, 300u);
  }
  // 61 picks in all (the single answer took one): 60 of them in windows of 6.
  EXPECT_NEAR(firsts[1], 30, 1);
  EXPECT_NEAR(firsts[2], 20, 1);
  EXPECT_NEAR(firsts[3], 10, 1);
}

// The optimistic cache: an expired entry inside the stale window is
// answered at once to a ClientInfo::optimistic client, at the stale TTL and
// marked stale, with a refresh asked for (kReplyAndPrefetch); other clients
// still wait for the upstream (kMiss); past the window it is a miss for all.
TEST_F(HandlerBurstTest, OptimisticClientsGetTheStaleAnswerAndARefresh) {
  options_.stale_answer_ttl = 30;
  WorkerCounters ctr;
  QueryHandler h(options_, &shared_, &ctr);
  const Bytes q = Query(9, "plain.example", dns::type::kA);
  uint8_t out[1500];
  size_t out_len = 0;
  MissRequest miss;
  ClientInfo plain{Ip("198.18.1.1"), true};
  ClientInfo optimistic = plain;
  optimistic.optimistic = true;
  clock_.Advance(310);  // 10 s past the TTL
  EXPECT_EQ(h.Handle(q.data(), q.size(), plain, clock_.NowSeconds(), out, sizeof(out), &out_len, &miss),
            Verdict::kMiss);
  AnswerInfo info;
  ASSERT_EQ(h.Handle(q.data(), q.size(), optimistic, clock_.NowSeconds(), out, sizeof(out), &out_len, &miss,
                     HandleMode::kNormal, &info),
            Verdict::kReplyAndPrefetch);
  EXPECT_TRUE(info.cached);
  EXPECT_TRUE(info.stale);
  EXPECT_EQ(info.origin_ttl, 300u);
  const size_t ttl_at = q.size() + 6;
  EXPECT_EQ((uint32_t{out[ttl_at]} << 24) | (uint32_t{out[ttl_at + 1]} << 16) |
                (uint32_t{out[ttl_at + 2]} << 8) | out[ttl_at + 3],
            30u);
  EXPECT_EQ(Summary(miss).substr(0, 17), "plain.example. 1 ");
  EXPECT_EQ(ctr.stale_served.Read(), 1u);
  clock_.Advance(partitions::CacheOptions{}.stale_window);
  EXPECT_EQ(h.Handle(q.data(), q.size(), optimistic, clock_.NowSeconds(), out, sizeof(out), &out_len, &miss,
                     HandleMode::kNormal, &info),
            Verdict::kMiss);
  EXPECT_FALSE(info.cached);
}

// SWRR through the burst path: 600 queries from one city in bursts of 32
// give exactly the weights (3:2:1) over every window of 6.
TEST_F(HandlerBurstTest, BurstsKeepExactWeightedShares) {
  WorkerCounters ctr;
  QueryHandler h(options_, &shared_, &ctr);
  std::vector<Packet> packets;
  for (int i = 0; i < 600; ++i)
    packets.push_back({Query(static_cast<uint16_t>(i), "www.cdn.example", 1), "198.18.3.4"});
  std::vector<std::array<uint8_t, 1500>> outs(packets.size());
  std::vector<MissRequest> miss(packets.size());
  std::vector<QueryHandler::BurstPacket> b(packets.size());
  for (size_t i = 0; i < packets.size(); ++i) {
    b[i].pkt = packets[i].bytes.data();
    b[i].len = packets[i].bytes.size();
    b[i].client = ClientInfo{Ip(packets[i].source), false};
    b[i].out = outs[i].data();
    b[i].out_cap = outs[i].size();
    b[i].miss = &miss[i];
  }
  for (size_t at = 0; at < b.size(); at += 32)
    h.HandleBurst(&b[at], std::min<size_t>(32, b.size() - at), 1000);
  std::vector<int> window(4, 0);
  for (size_t i = 0; i < b.size(); ++i) {
    ASSERT_EQ(b[i].verdict, Verdict::kReply) << i;
    dns::Message m;
    ASSERT_EQ(m.Parse({outs[i].data(), b[i].out_len}, dns::ParseOptions{}), dns::ParseError::kOk) << i;
    ASSERT_EQ(m.count(dns::Section::kAnswer), 1u) << i;
    const uint8_t last = outs[i][b[i].out_len - 1];  // the A record's last octet
    ASSERT_GE(last, 1);
    ASSERT_LE(last, 3);
    ++window[last];
    if (i % 6 == 5) {
      EXPECT_EQ(window[1], 3) << i;
      EXPECT_EQ(window[2], 2) << i;
      EXPECT_EQ(window[3], 1) << i;
      window.assign(4, 0);
    }
  }
}

// A query for a cached name with bytes after its question is not a hit: it
// is FORMERR (header only) and counted, in Handle and in HandleBurst.
TEST_F(HandlerBurstTest, TrailingBytesAreFormErrEvenForCachedNames) {
  WorkerCounters ctr;
  QueryHandler h(options_, &shared_, &ctr);
  Bytes good = Query(0x4242, "plain.example", dns::type::kA);
  Bytes bad = good;
  bad.push_back(0);
  for (const Bytes* q : {&good, &bad}) {
    uint8_t out[1500];
    size_t out_len = 0;
    MissRequest miss;
    const Verdict v = h.Handle(q->data(), q->size(), ClientInfo{Ip("198.18.1.1"), false}, clock_.NowSeconds(),
                               out, sizeof(out), &out_len, &miss);
    ASSERT_EQ(v, Verdict::kReply);
    ASSERT_GE(out_len, dns::kHeaderSize);
    EXPECT_EQ(dns::Load16(out), 0x4242);
    const uint16_t rcode = dns::Load16(out + 2) & 0xf;
    EXPECT_EQ(rcode, q == &good ? 0 : static_cast<uint16_t>(dns::Rcode::kFormErr));
    if (q == &bad) {
      EXPECT_EQ(dns::Load16(out + dns::kOffAncount), 0);
    }
  }
  EXPECT_EQ(ctr.hits.Read(), 1u);
  EXPECT_EQ(ctr.errors[static_cast<size_t>(ErrorReason::kFormErr)].Read(), 1u);
  EXPECT_EQ(ctr.responses[0][static_cast<size_t>(dns::Rcode::kFormErr)].Read(), 1u);
  EXPECT_EQ(ctr.responses[0][0].Read(), 1u);
  for (const OwnedCounter& d : ctr.drops) EXPECT_EQ(d.Read(), 0u);
}

}  // namespace
}  // namespace weir::fastpath
