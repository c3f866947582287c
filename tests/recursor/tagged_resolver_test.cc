// The tagged resolution and its last hop without sockets: zone cuts from a
// scripted resolver, authoritative servers behind a fake LastHopTransport,
// TTLs on a common::FakeClock and deadlines and server health on fake
// timers. Each test reads what the front would get (Replies) and what went
// to the servers (the queries the transport was given).
#include "weir/recursor/tagged_resolver.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "scripted_resolver.h"
#include "weir/dns/writer.h"

namespace weir::recursor {
namespace {

using namespace test_support;  // the scripted resolver and its record builders

constexpr uint16_t kWeightCode = dns::kDefaultWeightOptionCode;

std::string Text(std::span<const uint8_t> name) { return dns::NameKeyToText(name); }

using FakeTimers = net::ManualTimers;

// The authoritative side: every query the resolver sends is kept; a test
// answers it (Reply), lets it time out (TimeOut) or leaves it.
class FakeTransport : public LastHopTransport {
 public:
  struct Sent {
    uint64_t token = 0;
    common::SocketAddress server;
    std::vector<uint8_t> message;
    dns::Query query;  // its parse: RD, EDNS, ECS, the weight option
  };
  SendResult Send(uint64_t token, const LastHopQuery& q) override {
    Sent s;
    s.token = token;
    s.server = q.server;
    s.message.assign(q.message.begin(), q.message.end());
    dns::ParseOptions opts;
    opts.weight_option_code = kWeightCode;
    EXPECT_EQ(dns::ParseQuery(s.message, opts, &s.query), dns::ParseError::kOk);
    EXPECT_EQ(s.query.id, q.id);
    EXPECT_TRUE(s.query.qname == q.qname);
    sent.push_back(std::move(s));
    in_flight.insert(token);
    return SendResult::kSent;
  }
  void Cancel(uint64_t token) override { in_flight.erase(token); }

  struct Answer {
    uint16_t rcode = 0;
    bool aa = true;
    std::vector<Rr> answer{};
    std::vector<Rr> authority{};
    std::optional<std::vector<uint8_t>> weights{};  // the weight option, when sent
    std::optional<uint8_t> ecs_scope{};             // the ECS echo (of what was sent), when sent
  };
  // Answers the last query sent.
  void Reply(const Answer& a) { Reply(sent.back(), a); }
  void Reply(const Sent& s, const Answer& a) {
    ASSERT_TRUE(in_flight.count(s.token)) << "the query is not in flight";
    in_flight.erase(s.token);
    std::vector<uint8_t> buf(4096);
    dns::ResponseWriter w(buf.data(), buf.size());
    const uint16_t flags = static_cast<uint16_t>(dns::flag::kQr | (a.aa ? dns::flag::kAa : 0) | a.rcode);
    ASSERT_EQ(w.Begin(s.query.id, flags, s.query.qname.span(), s.query.qtype, dns::klass::kIn),
              dns::ParseError::kOk);
    test_support::WriteRecords(w, a.answer, a.authority);
    if (a.weights || a.ecs_scope) {
      w.BeginOpt(1232, false);
      if (a.ecs_scope) {
        dns::ClientSubnet echo = s.query.edns.ecs;
        echo.scope_prefix = *a.ecs_scope;
        w.AddEcs(echo);
      }
      if (a.weights) w.AddWeights(kWeightCode, *a.weights);
    }
    buf.resize(w.Finish(buf.size()));
    dns::Message m;
    dns::ParseOptions opts;
    opts.weight_option_code = kWeightCode;
    ASSERT_EQ(m.Parse(buf, opts), dns::ParseError::kOk);
    sink->OnReply(s.token, m);
  }
  void TimeOut() { TimeOut(sent.back()); }
  void TimeOut(const Sent& s) {
    ASSERT_TRUE(in_flight.count(s.token)) << "the query is not in flight";
    in_flight.erase(s.token);
    sink->OnFailure(s.token, Failure::kTimeout);
  }

  Sink* sink = nullptr;
  std::vector<Sent> sent;
  std::set<uint64_t> in_flight;
};

// What the front gets.
class FakeReplies : public Replies {
 public:
  struct Reply {
    bool error = false;
    dns::Rcode rcode = dns::Rcode::kNoError;
    recursor::Answer answer;
    uint16_t id = 0;  // of the front's query
  };
  void Answer(const Waiter& w, const recursor::Answer& a, uint32_t, int64_t) override {
    EXPECT_FALSE(w.packet().empty());
    got.push_back({false, dns::Rcode::kNoError, a, w.q.id});
  }
  void Error(const Waiter& w, dns::Rcode rcode) override { got.push_back({true, rcode, {}, w.q.id}); }
  std::vector<Reply> got;
};

// Records of an answer as "owner TYPE" strings, in order.
std::vector<std::string> Records(const Answer& a) {
  std::vector<std::string> out;
  for (const CachedRecord& r : a.answer) {
    out.push_back(Text(r.owner) + (r.type == dns::type::kCname ? " CNAME"
                                   : r.type == dns::type::kA   ? " A"
                                                               : " ?"));
  }
  return out;
}

class TaggedResolverTest : public ::testing::Test {
 protected:
  TaggedResolverTest() { transport_.sink = &tagged_; }

  static RecursorConfig Config() {
    RecursorConfig c;
    c.attempts = 4;
    c.max_cname_chain = 8;
    c.answer_deadline_ms = 3000;
    c.weight_option_code = kWeightCode;
    return c;
  }
  void Tags(const std::string& text) {
    auto t = partitions::TagTable::FromText(text);
    ASSERT_TRUE(t.ok()) << t.status();
    tags_ = *std::move(t);
  }
  // A front query for `name` A (with the front's ECS when `ecs` is given,
  // "198.51.100.0/24" say), handed to the resolver; delivers what the
  // zone-cut finder asks.
  void Query(const std::string& name, const std::string& ecs = "") {
    auto pkt = std::make_unique<std::vector<uint8_t>>(512);
    dns::ResponseWriter w(pkt->data(), pkt->size());
    const dns::NameKey q = Key(name);
    ASSERT_EQ(w.Begin(next_qid_++, dns::flag::kRd, q.span(), dns::type::kA, dns::klass::kIn),
              dns::ParseError::kOk);
    w.BeginOpt(1232, false);
    if (!ecs.empty()) {
      dns::ClientSubnet s;
      s.family = dns::kEcsFamilyIpv4;
      s.source_prefix = static_cast<uint8_t>(std::stoi(ecs.substr(ecs.find('/') + 1)));
      const std::vector<uint8_t> a = V4(ecs.substr(0, ecs.find('/')));
      std::copy(a.begin(), a.end(), s.address.begin());
      w.AddEcs(s);
    }
    w.AddWeights(kWeightCode, {});
    pkt->resize(w.Finish(pkt->size()));
    Waiter waiter;
    waiter.to.udp_fd = 3;
    waiter.to.peer = *common::SocketAddress::Parse("198.51.100.7:5353");
    waiter.received = *pkt;
    dns::ParseOptions opts;
    opts.weight_option_code = kWeightCode;
    ASSERT_EQ(dns::ParseQuery(*pkt, opts, &waiter.q), dns::ParseError::kOk);
    const partitions::Tag* tag = tags_->Lookup(waiter.q.qname.span());
    tagged_.Query(std::move(waiter), tag);
    packets_.push_back(std::move(pkt));  // the front's buffer, while the resolver may look at it
    resolver_.Deliver();
  }
  const FakeTransport::Sent& LastSent() const { return transport_.sent.back(); }
  std::string Asked(const FakeTransport::Sent& s) const {
    return Text(s.query.qname.span()) + " to " + s.server.ToString();
  }

  RecursorConfig cfg_ = Config();
  common::FakeClock clock_{1000};
  FakeTimers timers_;
  TaggedResolver::Tags tags_;
  ScriptedResolver resolver_;
  std::vector<std::string> log_;
  ZoneCutFinder cuts_{resolver_,
                      clock_,
                      {.do_ip6 = false, .max_ttl = 3600, .max_entries = 100},
                      [this](const std::string& line) { log_.push_back(line); }};
  FakeTransport transport_;
  FakeReplies replies_;
  InflightLimit inflight_{100};
  TaggedResolver tagged_{cfg_,      clock_,    timers_,
                         tags_,     cuts_,     transport_,
                         replies_,  inflight_, [this](const std::string& line) { log_.push_back(line); },
                         /*seed=*/7};
  uint16_t next_qid_ = 100;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> packets_;
};

TEST_F(TaggedResolverTest, WeightedAnswerThroughOneCut) {
  Tags("cdn.example weight=on\n");
  resolver_.Zone("cdn.example.", "192.0.2.53");
  Query("www.cdn.example");
  ASSERT_EQ(transport_.sent.size(), 1u);
  const FakeTransport::Sent& q = LastSent();
  EXPECT_EQ(Asked(q), "www.cdn.example. to 192.0.2.53:53");
  EXPECT_FALSE(q.query.rd());            // authoritative servers get RD clear
  EXPECT_TRUE(q.query.edns.has_weight);  // the empty weight option asks for weights
  EXPECT_EQ(q.query.edns.weight_len, 0u);
  EXPECT_FALSE(q.query.edns.has_ecs);  // no ecs tag: no subnet goes out
  transport_.Reply({.answer = {{"www.cdn.example.", dns::type::kA, 300, V4("203.0.113.1")},
                               {"www.cdn.example.", dns::type::kA, 300, V4("203.0.113.2")}},
                    .weights = std::vector<uint8_t>{10, 90}});

  ASSERT_EQ(replies_.got.size(), 1u);
  const Answer& a = replies_.got[0].answer;
  EXPECT_FALSE(replies_.got[0].error);
  EXPECT_EQ(Records(a), (std::vector<std::string>{"www.cdn.example. A", "www.cdn.example. A"}));
  EXPECT_TRUE(a.weighted);
  EXPECT_EQ(a.weights, (std::vector<uint8_t>{10, 90}));
  EXPECT_EQ(a.ttl, 300u);

  // The next query is a cache hit: nothing goes to the server.
  Query("www.cdn.example");
  EXPECT_EQ(transport_.sent.size(), 1u);
  ASSERT_EQ(replies_.got.size(), 2u);
  EXPECT_EQ(replies_.got[1].answer.weights, (std::vector<uint8_t>{10, 90}));
  EXPECT_EQ(tagged_.stats().wait.hits, 1u);
  EXPECT_EQ(tagged_.stats().wait.misses, 1u);
  EXPECT_EQ(tagged_.tagged_names(), 1u);
  EXPECT_EQ(tagged_.in_flight(), 0u);
  EXPECT_EQ(inflight_.count(), 0u);

  // Until the TTL has passed on the clock.
  clock_.Advance(300);
  Query("www.cdn.example");
  EXPECT_EQ(transport_.sent.size(), 2u);
}

TEST_F(TaggedResolverTest, CnameIntoAnotherZoneIsResolvedFromItsOwnCut) {
  Tags("shop.example weight=on\ncdn.example weight=on\n");
  resolver_.Zone("shop.example.", "192.0.2.1");
  resolver_.Zone("cdn.example.", "192.0.2.53");
  Query("www.shop.example");
  ASSERT_EQ(transport_.sent.size(), 1u);
  EXPECT_EQ(Asked(LastSent()), "www.shop.example. to 192.0.2.1:53");
  // The shop's server answers the CNAME only: its target is another zone's.
  transport_.Reply(
      {.answer = {{"www.shop.example.", dns::type::kCname, 600, NameRdata("edge.cdn.example.")}}});
  resolver_.Deliver();  // the cut of edge.cdn.example
  ASSERT_EQ(transport_.sent.size(), 2u);
  EXPECT_EQ(Asked(LastSent()), "edge.cdn.example. to 192.0.2.53:53");
  EXPECT_TRUE(replies_.got.empty());
  transport_.Reply({.answer = {{"edge.cdn.example.", dns::type::kA, 60, V4("203.0.113.7")}},
                    .weights = std::vector<uint8_t>{5}});

  ASSERT_EQ(replies_.got.size(), 1u);
  const Answer& a = replies_.got[0].answer;
  EXPECT_EQ(Records(a), (std::vector<std::string>{"www.shop.example. CNAME", "edge.cdn.example. A"}));
  EXPECT_EQ(a.weights, (std::vector<uint8_t>{5}));
  EXPECT_EQ(a.ttl, 60u);  // the shortest of the chain
  EXPECT_EQ(cuts_.size(), 2u);
  EXPECT_EQ(tagged_.stats().upstream_queries, 2u);
}

TEST_F(TaggedResolverTest, ReferralToAChildZoneFindsTheChildsCut) {
  Tags("shop.example weight=on\n");
  resolver_.Zone("shop.example.", "192.0.2.1");
  resolver_.Zone("cdn.shop.example.", "192.0.2.53");
  // The first walk finds shop.example (nothing is scripted for www's NS).
  Query("img.shop.example");
  transport_.Reply({.answer = {{"img.shop.example.", dns::type::kA, 60, V4("203.0.113.9")}}});
  ASSERT_EQ(replies_.got.size(), 1u);
  // A name of the child zone: the parent's cached cut is tried first and
  // refers to the child.
  Query("www.cdn.shop.example");
  ASSERT_EQ(transport_.sent.size(), 2u);
  EXPECT_EQ(Asked(LastSent()), "www.cdn.shop.example. to 192.0.2.1:53");
  transport_.Reply(
      {.aa = false,
       .authority = {{"cdn.shop.example.", dns::type::kNs, 3600, NameRdata("ns1.cdn.shop.example.")}}});
  resolver_.Deliver();
  ASSERT_EQ(transport_.sent.size(), 3u);
  EXPECT_EQ(Asked(LastSent()), "www.cdn.shop.example. to 192.0.2.53:53");
  transport_.Reply({.answer = {{"www.cdn.shop.example.", dns::type::kA, 60, V4("203.0.113.10")}}});
  ASSERT_EQ(replies_.got.size(), 2u);
  EXPECT_EQ(Records(replies_.got[1].answer), (std::vector<std::string>{"www.cdn.shop.example. A"}));
  EXPECT_EQ(tagged_.stats().referrals, 1u);
}

TEST_F(TaggedResolverTest, TimeoutMovesToTheNextServer) {
  Tags("fwd.example weight=on policy=forward:192.0.2.10@53,192.0.2.11@53\n");
  Query("a.fwd.example");
  ASSERT_EQ(transport_.sent.size(), 1u);  // forward: no zone cut lookup
  EXPECT_TRUE(resolver_.asked.empty());
  const std::string first = transport_.sent[0].server.ToString();
  transport_.TimeOut();
  ASSERT_EQ(transport_.sent.size(), 2u);
  const std::string second = transport_.sent[1].server.ToString();
  EXPECT_NE(first, second);
  EXPECT_EQ(Text(transport_.sent[1].query.qname.span()), "a.fwd.example.");
  EXPECT_NE(transport_.sent[1].query.id, transport_.sent[0].query.id);  // a new ID per query
  transport_.Reply({.answer = {{"a.fwd.example.", dns::type::kA, 60, V4("203.0.113.1")}}});
  ASSERT_EQ(replies_.got.size(), 1u);
  EXPECT_FALSE(replies_.got[0].error);
  EXPECT_EQ(tagged_.stats().upstream_timeouts, 1u);
  EXPECT_EQ(tagged_.stats().upstream_queries, 2u);
}

TEST_F(TaggedResolverTest, EveryAttemptTimingOutIsServfail) {
  Tags("fwd.example weight=on policy=forward:192.0.2.10@53,192.0.2.11@53\n");
  Query("a.fwd.example");
  for (int i = 0; i < cfg_.attempts; ++i) transport_.TimeOut();
  EXPECT_EQ(transport_.sent.size(), static_cast<size_t>(cfg_.attempts));
  ASSERT_EQ(replies_.got.size(), 1u);
  EXPECT_TRUE(replies_.got[0].error);
  EXPECT_EQ(replies_.got[0].rcode, dns::Rcode::kServFail);
  EXPECT_EQ(tagged_.in_flight(), 0u);
  EXPECT_TRUE(transport_.in_flight.empty());
}

TEST_F(TaggedResolverTest, ServerThatTimedOutGoesLastUntilItsBackoffEnds) {
  Tags("fwd.example weight=on policy=forward:192.0.2.10@53,192.0.2.11@53\n");
  // Time out on whichever server comes first; the other answers.
  Query("a.fwd.example");
  const common::SocketAddress down = transport_.sent[0].server;
  transport_.TimeOut();
  transport_.Reply({.answer = {{"a.fwd.example.", dns::type::kA, 60, V4("203.0.113.1")}}});
  // While its backoff (5 s after a first timeout) runs, every query tries
  // the other server first, whatever the shuffle says.
  auto firsts = [&](int n, const std::string& prefix) {
    std::set<std::string> seen;
    for (int i = 0; i < n; ++i) {
      const size_t before = transport_.sent.size();
      Query(prefix + std::to_string(i) + ".fwd.example");
      EXPECT_EQ(transport_.sent.size(), before + 1);
      seen.insert(transport_.sent[before].server.ToString());
      transport_.Reply(
          {.answer = {{prefix + std::to_string(i) + ".fwd.example.", dns::type::kA, 60, V4("203.0.113.1")}}});
    }
    return seen;
  };
  const std::set<std::string> during = firsts(12, "b");
  EXPECT_EQ(during.size(), 1u);
  EXPECT_FALSE(during.count(down.ToString()));
  // After the backoff it is one of the two again (shuffled).
  timers_.Advance(std::chrono::seconds(5));
  const std::set<std::string> after = firsts(12, "c");
  EXPECT_EQ(after.size(), 2u);
  EXPECT_TRUE(after.count(down.ToString()));
}

TEST_F(TaggedResolverTest, ASingleServerIsAskedAgainAfterATimeout) {
  Tags("fwd.example weight=on policy=forward:192.0.2.10@53\n");
  Query("a.fwd.example");
  transport_.TimeOut();  // the only server: tried again all the same
  ASSERT_EQ(transport_.sent.size(), 2u);
  EXPECT_EQ(transport_.sent[1].server.ToString(), "192.0.2.10:53");
  transport_.Reply({.answer = {{"a.fwd.example.", dns::type::kA, 60, V4("203.0.113.1")}}});
  ASSERT_EQ(replies_.got.size(), 1u);
  EXPECT_FALSE(replies_.got[0].error);
}

TEST_F(TaggedResolverTest, CnameLoopAcrossZonesIsServfail) {
  Tags("a.example weight=on\nb.example weight=on\n");
  resolver_.Zone("a.example.", "192.0.2.1");
  resolver_.Zone("b.example.", "192.0.2.2");
  Query("www.a.example");
  transport_.Reply({.answer = {{"www.a.example.", dns::type::kCname, 60, NameRdata("www.b.example.")}}});
  resolver_.Deliver();
  ASSERT_EQ(transport_.sent.size(), 2u);
  EXPECT_EQ(Asked(LastSent()), "www.b.example. to 192.0.2.2:53");
  // The other zone points back at the name the chain started from.
  transport_.Reply({.answer = {{"www.b.example.", dns::type::kCname, 60, NameRdata("www.a.example.")}}});
  ASSERT_EQ(replies_.got.size(), 1u);
  EXPECT_TRUE(replies_.got[0].error);
  EXPECT_EQ(replies_.got[0].rcode, dns::Rcode::kServFail);
  EXPECT_EQ(tagged_.stats().cname_loops, 1u);
  EXPECT_EQ(transport_.sent.size(), 2u);  // nothing more is asked
  ASSERT_FALSE(log_.empty());
  EXPECT_NE(log_.back().find("www.a.example.: CNAME chain loops"), std::string::npos) << log_.back();
  EXPECT_EQ(tagged_.tagged_names(), 0u);  // and nothing is cached
}

TEST_F(TaggedResolverTest, CnameLoopInOneReplyIsServfail) {
  Tags("loop.example weight=on\n");
  resolver_.Zone("loop.example.", "192.0.2.1");
  Query("a.loop.example");
  transport_.Reply({.answer = {{"a.loop.example.", dns::type::kCname, 60, NameRdata("b.loop.example.")},
                               {"b.loop.example.", dns::type::kCname, 60, NameRdata("a.loop.example.")}}});
  ASSERT_EQ(replies_.got.size(), 1u);
  EXPECT_EQ(replies_.got[0].rcode, dns::Rcode::kServFail);
  EXPECT_EQ(tagged_.stats().cname_loops, 1u);
}

TEST_F(TaggedResolverTest, EcsGoesOnlyToTheStepsAnEcsTagCovers) {
  Tags("shop.example weight=on ecs=on\ncdn.example weight=on\n");
  resolver_.Zone("shop.example.", "192.0.2.1");
  resolver_.Zone("cdn.example.", "192.0.2.53");
  Query("www.shop.example", "198.51.100.0/24");
  ASSERT_EQ(transport_.sent.size(), 1u);
  const dns::Query& first = transport_.sent[0].query;
  ASSERT_TRUE(first.edns.has_ecs);
  EXPECT_EQ(first.edns.ecs.source_prefix, 24);
  EXPECT_EQ(first.edns.ecs.address[0], 198);
  EXPECT_EQ(first.edns.ecs.address[2], 100);
  transport_.Reply({.answer = {{"www.shop.example.", dns::type::kCname, 600, NameRdata("edge.cdn.example.")}},
                    .ecs_scope = 24});
  resolver_.Deliver();
  ASSERT_EQ(transport_.sent.size(), 2u);
  EXPECT_EQ(Asked(LastSent()), "edge.cdn.example. to 192.0.2.53:53");
  EXPECT_FALSE(LastSent().query.edns.has_ecs);  // cdn.example has no ecs tag: the subnet stays home
  transport_.Reply({.answer = {{"edge.cdn.example.", dns::type::kA, 60, V4("203.0.113.7")}}});
  ASSERT_EQ(replies_.got.size(), 1u);
  EXPECT_EQ(replies_.got[0].answer.scope, 24);  // the longest scope along the chain
  EXPECT_EQ(tagged_.stats().ecs_sent, 1u);
  // The zone-cut lookups never carry a subnet: they are the resolver's, by name only.
  EXPECT_FALSE(resolver_.asked.empty());
}

TEST_F(TaggedResolverTest, DeadlineAnswersServfailWhileTheResolutionGoesOn) {
  Tags("fwd.example weight=on policy=forward:192.0.2.10@53\n");
  Query("a.fwd.example");
  timers_.Advance(std::chrono::milliseconds(cfg_.answer_deadline_ms - 1));
  EXPECT_TRUE(replies_.got.empty());
  timers_.Advance(std::chrono::milliseconds(1));
  ASSERT_EQ(replies_.got.size(), 1u);
  EXPECT_EQ(replies_.got[0].rcode, dns::Rcode::kServFail);
  EXPECT_EQ(tagged_.stats().wait.deadline_servfail, 1u);
  // The late answer is still cached for the next query.
  transport_.Reply({.answer = {{"a.fwd.example.", dns::type::kA, 60, V4("203.0.113.1")}}});
  EXPECT_EQ(replies_.got.size(), 1u);
  Query("a.fwd.example");
  ASSERT_EQ(replies_.got.size(), 2u);
  EXPECT_FALSE(replies_.got[1].error);
  EXPECT_EQ(transport_.sent.size(), 1u);
}

}  // namespace
}  // namespace weir::recursor
