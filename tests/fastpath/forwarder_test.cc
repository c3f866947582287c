// ForwarderCore on a fake transport and a hand-moved clock: no socket, no
// thread, no sleep. The test plays the workers (pushes misses into a
// MissChannel, reads what comes back) and the recursors (answers, or not,
// each query the transport was asked to send).
#include "weir/fastpath/forwarder_core.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "dns/test_util.h"
#include "test_util.h"
#include "weir/common/rcu.h"
#include "weir/dns/cookies.h"
#include "weir/dns/writer.h"
#include "weir/net/timers.h"

namespace weir::fastpath {
namespace {

using Bytes = std::vector<uint8_t>;
using common::SocketAddress;
using dns::testing::Key;
using Handle = UpstreamTransport::Handle;

SocketAddress Addr(const char* ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, ip, &a.sin_addr);
  return SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&a), sizeof(a));
}

// The recursors' side: every datagram, TCP try and probe the forwarder
// asked for, kept for the test to answer.
class FakeTransport : public UpstreamTransport {
 public:
  struct Sent {
    Handle handle;
    SocketAddress to;
    Bytes message;
    bool tcp = false;
  };
  void SetSink(Sink* sink) override { sink_ = sink; }
  absl::Status Open(bool ipv4, bool) override {
    if (ipv4) pool_ = {10, 11, 12, 13};
    return absl::OkStatus();
  }
  std::span<const Handle> Pool(int family) const override {
    return family == AF_INET ? std::span<const Handle>(pool_) : std::span<const Handle>();
  }
  int SendUdp(Handle socket, const SocketAddress& to, std::span<const uint8_t> m) override {
    if (send_errno != 0) return send_errno;
    sent.push_back({socket, to, Bytes(m.begin(), m.end()), false});
    return 0;
  }
  void TryStarted(Handle socket) override { ++tries[socket]; }
  void TryEnded(Handle socket) override { --tries[socket]; }
  Handle OpenTcp(const SocketAddress& to, std::span<const uint8_t> m) override {
    const Handle h = next_++;
    sent.push_back({h, to, Bytes(m.begin(), m.end()), true});
    open_tcp.insert(h);
    return h;
  }
  void CloseTcp(Handle h) override { open_tcp.erase(h); }
  bool TcpQueued(Handle h) const override { return queued_tcp.contains(h); }
  TcpPoolStats tcp_pool() const override { return {}; }
  Handle SendProbe(const SocketAddress& to, std::span<const uint8_t> m) override {
    const Handle h = next_++;
    probes.push_back({h, to, Bytes(m.begin(), m.end()), false});
    return h;
  }
  void CloseProbe(Handle) override {}
  void Housekeep(Clock::time_point) override {}
  SocketAddress LocalAddress(Handle) const override { return {}; }
  size_t udp_sockets() const override { return pool_.size(); }
  void CloseAll() override {}

  Sink* sink_ = nullptr;
  std::vector<Handle> pool_;
  std::vector<Sent> sent;
  std::vector<Sent> probes;
  std::map<Handle, int> tries;
  std::set<Handle> open_tcp;
  std::set<Handle> queued_tcp;  // TCP tries the pool has not sent yet
  int send_errno = 0;

 private:
  Handle next_ = 1000;
};

// A reply to `query` (as sent: its ID, its question in its case, its
// cookie echoed with a server cookie) with A records.
struct ReplySpec {
  std::vector<std::array<uint8_t, 4>> addrs;
  uint16_t extra_flags = 0;  // TC, ...
  uint8_t rcode = 0;         // low 4 bits
  uint8_t ext_rcode = 0;     // OPT's upper 8 bits (BADCOOKIE: 1 with rcode 7)
  bool echo_cookie = true;
  bool lower_case = false;  // the question in lower case (a server that does not keep it)
  uint32_t ttl = 300;
  int id_delta = 0;        // a wrong ID
  std::string other_name;  // another question
};

ReplySpec With(std::vector<std::array<uint8_t, 4>> addrs) {
  ReplySpec s;
  s.addrs = std::move(addrs);
  return s;
}

Bytes Reply(const Bytes& query, const ReplySpec& s = ReplySpec()) {
  dns::Message q;
  EXPECT_EQ(q.Parse(query, dns::ParseOptions{}), dns::ParseError::kOk);
  Bytes name(query.begin() + dns::kHeaderSize, query.begin() + dns::kHeaderSize + q.qname().len);
  if (s.lower_case)
    for (uint8_t& b : name) b = static_cast<uint8_t>(std::tolower(b));
  if (!s.other_name.empty()) name = dns::testing::KeyBytes(s.other_name);
  Bytes out(4096);
  dns::ResponseWriter w(out.data(), out.size());
  w.Begin(static_cast<uint16_t>(q.id() + s.id_delta),
          static_cast<uint16_t>(dns::flag::kQr | dns::flag::kRd | dns::flag::kRa | s.extra_flags | s.rcode),
          name, q.qtype(), q.qclass());
  for (const auto& a : s.addrs)
    w.AppendRecord(dns::Section::kAnswer, name, dns::type::kA, dns::klass::kIn, s.ttl, a);
  w.BeginOpt(1232, false, s.ext_rcode);
  const std::span<const uint8_t> cookie = dns::CookieJar::OptionOf(q);
  if (s.echo_cookie && cookie.size() >= 8) {
    Bytes c(cookie.begin(), cookie.begin() + 8);
    for (int i = 0; i < 8; ++i) c.push_back(static_cast<uint8_t>(0xA0 + i));  // the server cookie
    w.AddOption(dns::option::kCookie, c);
  }
  out.resize(w.Finish(out.size()));
  return out;
}

class ForwarderCoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::PublishPartitions(&shared_, "cdn.example weight=on ecs=on level=city\n", testing::kTwoCities);
    shared_.clock = &clock_;
    partitions::CacheOptions co;
    co.stale_window = 3600;
    shared_.cache = std::make_unique<partitions::Cache>(co, clock_);
    rcu_ = std::make_unique<common::RcuThread>();
    config_.ordinary = {
        {Addr("127.0.0.1", 5301), "r1"}, {Addr("127.0.0.2", 5302), "r2"}, {Addr("127.0.0.3", 5303), "r3"}};
    config_.weighted = config_.ordinary;
    config_.upstream_timeout_ms = 500;
    config_.upstream_attempts = 3;
    config_.answer_deadline_ms = 3000;
    config_.case_randomization = false;
    config_.upstream_cookies = false;
    config_.stale_answer_after_ms = 0;
  }
  void TearDown() override {
    core_.reset();
    rcu_.reset();
  }
  void Start() {
    core_ = std::make_unique<ForwarderCore>(config_, std::vector<MissChannel*>{&channel_}, &shared_, timers_,
                                            transport_, stats_);
    ASSERT_TRUE(core_->Open().ok());
  }

  // A worker's miss for `name` A (one client, route token `token`).
  void Miss(std::string_view name, uint64_t token = 1) {
    PendingClient c;
    c.miss.qname = Key(name);
    c.miss.qtype = dns::type::kA;
    c.miss.qclass = dns::klass::kIn;
    c.route = {0, Transport::kUdp, token};
    ASSERT_TRUE(channel_.misses.Push(std::move(c)));
    core_->Drain();
  }
  std::vector<ReturnedQuery> Returns() {
    core_->FlushReturns();
    std::vector<ReturnedQuery> v;
    ReturnedQuery r;
    while (channel_.returns.Pop(&r)) v.push_back(std::move(r));
    return v;
  }
  // The recursor answers the `i`th query sent.
  void Answer(size_t i, const ReplySpec& s = With({{192, 0, 2, 1}})) {
    ASSERT_LT(i, transport_.sent.size());
    const FakeTransport::Sent& q = transport_.sent[i];
    const Bytes r = Reply(q.message, s);
    if (q.tcp) {
      core_->OnTcpMessage(q.handle, r);
    } else {
      core_->OnDatagram(q.handle, q.to, r);
    }
  }
  void Forge(size_t i, const ReplySpec& s, const SocketAddress* from = nullptr) {
    const FakeTransport::Sent& q = transport_.sent[i];
    core_->OnDatagram(q.handle, from != nullptr ? *from : q.to, Reply(q.message, s));
  }
  bool Cached(std::string_view name, partitions::Freshness* f = nullptr) {
    const dns::NameKey k = Key(name);
    partitions::Freshness fr;
    const bool hit =
        shared_.cache->Find({partitions::kCommonPartition, k.span(), dns::type::kA, dns::klass::kIn},
                            clock_.NowSeconds(), &fr) != nullptr;
    if (f != nullptr) *f = fr;
    return hit;
  }
  void Advance(int ms) { timers_.Advance(std::chrono::milliseconds(ms)); }
  int UpstreamIndex(const SocketAddress& a) {
    for (size_t i = 0; i < config_.ordinary.size(); ++i) {
      if (config_.ordinary[i].address.port() == a.port()) return static_cast<int>(i);
    }
    return -1;
  }

  common::FakeClock clock_{1000};
  SharedState shared_;
  MissChannel channel_;
  FastpathConfig config_;
  net::ManualTimers timers_;
  FakeTransport transport_;
  ForwarderStats stats_;
  std::unique_ptr<common::RcuThread> rcu_;
  std::unique_ptr<ForwarderCore> core_;
};

TEST_F(ForwarderCoreTest, MissIsAskedOnceAndItsAnswerFillsTheCache) {
  Start();
  Miss("www.example");
  ASSERT_EQ(transport_.sent.size(), 1u);
  EXPECT_FALSE(transport_.sent[0].tcp);
  EXPECT_EQ(stats_.in_flight.load(), 1u);
  Answer(0);
  const auto r = Returns();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].mode, HandleMode::kAfterFill);
  EXPECT_EQ(r[0].client.route.token, 1u);
  EXPECT_TRUE(Cached("www.example"));
  EXPECT_EQ(stats_.in_flight.load(), 0u);
  EXPECT_EQ(stats_.waiting.load(), 0u);
  EXPECT_EQ(stats_.upstream_queries.Read(), 1u);
}

TEST_F(ForwarderCoreTest, IdenticalMissesAreCoalescedIntoOneQuery) {
  Start();
  for (uint64_t t = 1; t <= 5; ++t) Miss("www.example", t);
  EXPECT_EQ(transport_.sent.size(), 1u);
  EXPECT_EQ(stats_.coalesced.Read(), 4u);
  EXPECT_EQ(stats_.waiting.load(), 5u);
  Miss("other.example", 9);
  EXPECT_EQ(transport_.sent.size(), 2u);
  Answer(0);
  auto r = Returns();
  ASSERT_EQ(r.size(), 5u);
  for (const auto& q : r) EXPECT_EQ(q.mode, HandleMode::kAfterFill);
  EXPECT_EQ(stats_.waiting.load(), 1u);
}

TEST_F(ForwarderCoreTest, TimeoutRetriesOnTheNextRecursorInRingOrder) {
  Start();
  Miss("www.example");
  ASSERT_EQ(transport_.sent.size(), 1u);
  Advance(config_.upstream_timeout_ms - 1);
  EXPECT_EQ(transport_.sent.size(), 1u);  // not before the timeout
  Advance(1);
  ASSERT_EQ(transport_.sent.size(), 2u);
  Advance(config_.upstream_timeout_ms);
  ASSERT_EQ(transport_.sent.size(), 3u);
  // Three distinct recursors, each once.
  std::set<int> asked;
  for (const auto& s : transport_.sent) asked.insert(UpstreamIndex(s.to));
  EXPECT_EQ(asked.size(), 3u);
  // The same question gets the same order again (consistent hashing).
  std::vector<int> order;
  for (const auto& s : transport_.sent) order.push_back(UpstreamIndex(s.to));
  Answer(2);
  ASSERT_EQ(Returns().size(), 1u);
  const size_t before = transport_.sent.size();
  clock_.Advance(400);  // the entry expires
  Miss("www.example");
  ASSERT_EQ(transport_.sent.size(), before + 1);
  // The last one answered last time; the first choice is still the ring's.
  EXPECT_EQ(UpstreamIndex(transport_.sent.back().to), order[0]);
  size_t timeouts = 0;
  for (const auto& u : stats_.ordinary) timeouts += u->timeouts.Read();
  EXPECT_EQ(timeouts, 2u);
}

TEST_F(ForwarderCoreTest, EveryAttemptFailingAnswersStaleOrServfail) {
  Start();
  Miss("www.example");
  Advance(config_.upstream_timeout_ms * config_.upstream_attempts);
  const auto r = Returns();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].mode, HandleMode::kStaleOk);  // the worker serves stale if it has it, else SERVFAIL
  EXPECT_EQ(r[0].relay, nullptr);
  EXPECT_EQ(stats_.in_flight.load(), 0u);
}

TEST_F(ForwarderCoreTest, AnswerDeadlineAnswersTheWaitersWhileTheQueryGoesOn) {
  config_.upstream_timeout_ms = 2000;
  config_.answer_deadline_ms = 1000;
  Start();
  Miss("www.example", 1);
  Advance(400);
  Miss("www.example", 2);  // joins later: its own deadline
  Advance(600);
  auto r = Returns();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].client.route.token, 1u);
  EXPECT_EQ(r[0].mode, HandleMode::kStaleOk);
  EXPECT_EQ(stats_.waiting.load(), 1u);
  Advance(400);
  r = Returns();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].client.route.token, 2u);
  // The query is still in flight and fills the cache for the next clients.
  EXPECT_EQ(stats_.in_flight.load(), 1u);
  Answer(0);
  EXPECT_TRUE(Cached("www.example"));
  EXPECT_TRUE(Returns().empty());
}

TEST_F(ForwarderCoreTest, ServfailFromUpstreamKeepsTheStaleEntry) {
  Start();
  Miss("www.example");
  Answer(0);
  Returns();
  clock_.Advance(301);  // stale now
  partitions::Freshness f;
  ASSERT_TRUE(Cached("www.example", &f));
  ASSERT_EQ(f, partitions::Freshness::kStale);
  Miss("www.example");
  ReplySpec servfail;
  servfail.rcode = 2;
  Answer(transport_.sent.size() - 1, servfail);
  const auto r = Returns();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].mode, HandleMode::kStaleOk);
  ASSERT_TRUE(Cached("www.example", &f));
  EXPECT_EQ(f, partitions::Freshness::kStale);  // not overwritten by the SERVFAIL
}

TEST_F(ForwarderCoreTest, TruncatedAnswerAsksTheSameRecursorOverTcp) {
  Start();
  Miss("big.example");
  ReplySpec tc;
  tc.extra_flags = dns::flag::kTc;
  Answer(0, tc);
  ASSERT_EQ(transport_.sent.size(), 2u);
  EXPECT_TRUE(transport_.sent[1].tcp);
  EXPECT_EQ(transport_.sent[1].to.port(), transport_.sent[0].to.port());
  EXPECT_EQ(transport_.sent[1].message, transport_.sent[0].message);
  EXPECT_EQ(stats_.truncated.Read(), 1u);
  EXPECT_FALSE(Cached("big.example"));
  Answer(1, With({{192, 0, 2, 1}, {192, 0, 2, 2}}));
  ASSERT_EQ(Returns().size(), 1u);
  EXPECT_TRUE(Cached("big.example"));
  EXPECT_TRUE(transport_.open_tcp.empty());
}

TEST_F(ForwarderCoreTest, TcpFailureMovesOnToTheNextRecursorOverUdp) {
  Start();
  Miss("big.example");
  ReplySpec tc;
  tc.extra_flags = dns::flag::kTc;
  Answer(0, tc);
  ASSERT_TRUE(transport_.sent[1].tcp);
  core_->OnTcpFailed(transport_.sent[1].handle);
  ASSERT_EQ(transport_.sent.size(), 3u);
  EXPECT_FALSE(transport_.sent[2].tcp);
  EXPECT_NE(transport_.sent[2].to.port(), transport_.sent[0].to.port());
  EXPECT_TRUE(transport_.open_tcp.empty());
}

TEST_F(ForwarderCoreTest, RecursorMarkedDownAfterFailuresAndUpAfterItsProbeIsAnswered) {
  config_.health_failures = 2;
  config_.health_interval_ms = 1000;
  config_.upstream_attempts = 1;
  Start();
  // The same question, twice, times out at its first recursor.
  Miss("a.example");
  const int first = UpstreamIndex(transport_.sent[0].to);
  Advance(config_.upstream_timeout_ms);
  EXPECT_TRUE(stats_.ordinary[first]->up.load());  // one failure is not enough
  Miss("a.example");
  ASSERT_EQ(transport_.sent.size(), 2u);
  ASSERT_EQ(UpstreamIndex(transport_.sent[1].to), first);
  Advance(config_.upstream_timeout_ms);
  EXPECT_EQ(stats_.ordinary[first]->timeouts.Read(), 2u);
  EXPECT_FALSE(stats_.ordinary[first]->up.load());
  EXPECT_EQ(Returns().size(), 2u);
  // Its share moved away: nothing is sent to it any more.
  const size_t n = transport_.sent.size();
  for (int i = 0; i < 30; ++i) Miss("m" + std::to_string(i) + ".example");
  for (size_t i = n; i < transport_.sent.size(); ++i) EXPECT_NE(UpstreamIndex(transport_.sent[i].to), first);
  // A probe an interval after it went down; its answer brings it back.
  core_->Tick();
  EXPECT_TRUE(transport_.probes.empty());
  Advance(config_.health_interval_ms);
  core_->Tick();
  ASSERT_EQ(transport_.probes.size(), 1u);
  EXPECT_EQ(UpstreamIndex(transport_.probes[0].to), first);
  const Bytes probe_reply = Reply(transport_.probes[0].message);
  const SocketAddress wrong = Addr("127.0.0.9", transport_.probes[0].to.port());
  core_->OnProbeReply(transport_.probes[0].handle, wrong, probe_reply);
  EXPECT_FALSE(stats_.ordinary[first]->up.load());  // not from the recursor
  core_->OnProbeReply(transport_.probes[0].handle, transport_.probes[0].to, probe_reply);
  EXPECT_TRUE(stats_.ordinary[first]->up.load());
}

TEST_F(ForwarderCoreTest, InflightCapAnswersAtOnce) {
  config_.max_inflight = 2;
  Start();
  Miss("a.example", 1);
  Miss("b.example", 2);
  Miss("c.example", 3);
  EXPECT_EQ(transport_.sent.size(), 2u);
  auto r = Returns();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].client.route.token, 3u);
  EXPECT_EQ(r[0].mode, HandleMode::kStaleOk);
  EXPECT_EQ(stats_.inflight_limited.Read(), 1u);
  Miss("a.example", 4);  // joins one in flight: not limited
  EXPECT_TRUE(Returns().empty());
}

TEST_F(ForwarderCoreTest, WaitingCapAnswersAtOnce) {
  config_.max_waiting_clients = 3;
  Start();
  for (uint64_t t = 1; t <= 4; ++t) Miss("a.example", t);
  auto r = Returns();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].client.route.token, 4u);
  EXPECT_EQ(stats_.waiting_limited.Read(), 1u);
  EXPECT_EQ(stats_.waiting.load(), 3u);
}

TEST_F(ForwarderCoreTest, LateAnswerAfterATimeoutIsCountedLateAndNotTaken) {
  Start();
  Miss("www.example");
  Advance(config_.upstream_timeout_ms);
  ASSERT_EQ(transport_.sent.size(), 2u);
  Answer(0, With({{198, 51, 100, 66}}));  // the first recursor, too late
  EXPECT_EQ(stats_.late.Read(), 1u);
  EXPECT_EQ(stats_.spoofed.Read(), 0u);
  EXPECT_TRUE(Returns().empty());
  Answer(1);
  ASSERT_EQ(Returns().size(), 1u);
}

TEST_F(ForwarderCoreTest, ForgedAnswersAreRefusedAndTheThresholdMovesTheQuestionToTcp) {
  config_.unwanted_reply_threshold = 3;
  Start();
  Miss("www.example");
  // From an address that is no recursor: refused.
  const SocketAddress stranger = Addr("127.0.0.77", 53);
  Forge(0, With({{198, 51, 100, 66}}), &stranger);
  EXPECT_EQ(stats_.spoofed.Read(), 1u);
  // Wrong IDs for the question: unwanted; the third moves it to TCP.
  for (int i = 1; i <= 3; ++i) {
    ReplySpec s = With({{198, 51, 100, 66}});
    s.id_delta = i;
    Forge(0, s);
  }
  EXPECT_EQ(stats_.spoof_reactions.Read(), 1u);
  ASSERT_EQ(transport_.sent.size(), 2u);
  EXPECT_TRUE(transport_.sent[1].tcp);
  // The right ID but another question: not taken either.
  EXPECT_TRUE(Returns().empty());
  Answer(1);
  ASSERT_EQ(Returns().size(), 1u);
  EXPECT_TRUE(Cached("www.example"));
}

TEST_F(ForwarderCoreTest, AnswerToAnotherQuestionIsIgnoredAndTheGenuineOneTaken) {
  Start();
  Miss("www.example");
  ReplySpec other = With({{198, 51, 100, 66}});
  other.other_name = "evil.example";
  Forge(0, other);
  EXPECT_EQ(stats_.spoofed.Read(), 1u);
  EXPECT_TRUE(Returns().empty());
  Answer(0);
  ASSERT_EQ(Returns().size(), 1u);
}

TEST_F(ForwarderCoreTest, CaseMismatchGoesToTcpAndATcpAnswerInAnotherCaseTurns0x20Off) {
  config_.case_randomization = true;
  Start();
  Miss("abcdefghijklmnop.example");
  ReplySpec lower = With({{192, 0, 2, 1}});
  lower.lower_case = true;
  Answer(0, lower);
  EXPECT_EQ(stats_.case_mismatches.Read(), 1u);
  ASSERT_EQ(transport_.sent.size(), 2u);
  ASSERT_TRUE(transport_.sent[1].tcp);
  Answer(1, lower);  // over TCP, still lower case: the server's own way
  EXPECT_EQ(stats_.case_fallbacks.Read(), 1u);
  ASSERT_EQ(Returns().size(), 1u);
  // The next question to that recursor goes without 0x20.
  clock_.Advance(400);
  Miss("abcdefghijklmnop.example");
  const Bytes& q = transport_.sent.back().message;
  const Bytes name(q.begin() + dns::kHeaderSize, q.begin() + dns::kHeaderSize + 26);
  EXPECT_EQ(name, dns::testing::KeyBytes("abcdefghijklmnop.example"));
}

TEST_F(ForwarderCoreTest, MalformedAnswerFailsOverToTheNextRecursor) {
  Start();
  Miss("www.example");
  Bytes garbage = Reply(transport_.sent[0].message, With({{192, 0, 2, 1}}));
  garbage.resize(garbage.size() - 7);  // cut inside the records
  core_->OnDatagram(transport_.sent[0].handle, transport_.sent[0].to, garbage);
  ASSERT_EQ(transport_.sent.size(), 2u);
  EXPECT_NE(transport_.sent[1].to.port(), transport_.sent[0].to.port());
  Answer(1);
  ASSERT_EQ(Returns().size(), 1u);
}

TEST_F(ForwarderCoreTest, BadCookieIsRetriedOnceOverUdpThenOverTcp) {
  config_.upstream_cookies = true;
  Start();
  Miss("www.example");
  ASSERT_EQ(transport_.sent.size(), 1u);
  ReplySpec bad;
  bad.rcode = 7;  // BADCOOKIE = 23: 1 << 4 | 7
  bad.ext_rcode = 1;
  Answer(0, bad);
  ASSERT_EQ(transport_.sent.size(), 2u);
  EXPECT_FALSE(transport_.sent[1].tcp);
  EXPECT_EQ(transport_.sent[1].to.port(), transport_.sent[0].to.port());
  EXPECT_EQ(stats_.cookie_retries.Read(), 1u);
  // The retry carries the server cookie just learnt (8 + 8 bytes).
  dns::Message m;
  ASSERT_EQ(m.Parse(transport_.sent[1].message, dns::ParseOptions{}), dns::ParseError::kOk);
  EXPECT_EQ(dns::CookieJar::OptionOf(m).size(), 16u);
  Answer(1, bad);
  ASSERT_EQ(transport_.sent.size(), 3u);
  EXPECT_TRUE(transport_.sent[2].tcp);
  Answer(2);
  ASSERT_EQ(Returns().size(), 1u);
  EXPECT_TRUE(Cached("www.example"));
}

TEST_F(ForwarderCoreTest, WrongCookieEndsTheUdpTryAndGoesToTcp) {
  config_.upstream_cookies = true;
  Start();
  Miss("www.example");
  Answer(0);  // a good cookie: the server is known to do cookies
  Returns();
  clock_.Advance(400);
  Miss("www.example");
  ReplySpec none = With({{198, 51, 100, 66}});
  none.echo_cookie = false;
  Answer(transport_.sent.size() - 1, none);
  EXPECT_EQ(stats_.cookie_mismatches.Read(), 1u);
  EXPECT_TRUE(transport_.sent.back().tcp);
  EXPECT_TRUE(Returns().empty());
}

TEST_F(ForwarderCoreTest, ASocketErrorIsTheRecursorsFaultButAFullBufferIsOurs) {
  Start();
  transport_.send_errno = ENOBUFS;
  Miss("www.example");
  auto r = Returns();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].mode, HandleMode::kStaleOk);
  for (const auto& u : stats_.ordinary) EXPECT_TRUE(u->up.load());
}

TEST_F(ForwarderCoreTest, PrefetchIsAskedButNobodyIsAnswered) {
  config_.upstream_timeout_ms = 10000;
  Start();
  PendingClient c;
  c.miss.qname = Key("www.example");
  c.miss.qtype = dns::type::kA;
  c.miss.qclass = dns::klass::kIn;
  c.route = {};  // nobody waits
  ASSERT_TRUE(channel_.misses.Push(std::move(c)));
  core_->Drain();
  ASSERT_EQ(transport_.sent.size(), 1u);
  Advance(config_.answer_deadline_ms);  // no deadline for a prefetch
  Answer(transport_.sent.size() - 1);
  EXPECT_TRUE(Returns().empty());
  EXPECT_TRUE(Cached("www.example"));
}

// refresh=active (the white-list): the forwarder asks again before expiry,
// with nobody waiting, as long as clients read the answer; an answer nobody
// read since it was cached is left to its clients; names without the
// option never are.
TEST_F(ForwarderCoreTest, ActiveRefreshBeforeExpiryWhileTheAnswerIsRead) {
  testing::PublishPartitions(&shared_, "cdn.example refresh=active\n", testing::kTwoCities);
  config_.prefetch_percent = 10;
  Start();
  // Both clocks move together, as in the daemon, whose loop ticks the
  // forwarder at least every 50 ms.
  auto advance_s = [&](int s) {
    clock_.Advance(s);
    Advance(s * 1000);
    core_->Tick();
  };
  Miss("www.cdn.example");
  Miss("www.plain.example", 2);
  ASSERT_EQ(transport_.sent.size(), 2u);
  Answer(0);  // TTL 300
  Answer(1);
  EXPECT_EQ(Returns().size(), 2u);
  EXPECT_EQ(stats_.active_refresh_scheduled.load(), 1u) << "only the refresh=active name";
  ASSERT_TRUE(Cached("www.cdn.example"));  // a client reads it

  // Due when 10 % of the TTL is left: at 270 s, not before.
  advance_s(269);
  EXPECT_EQ(transport_.sent.size(), 2u);
  advance_s(1);
  ASSERT_EQ(transport_.sent.size(), 3u) << "the refresh, before expiry";
  EXPECT_EQ(stats_.active_refresh_sent.Read(), 1u);
  EXPECT_EQ(stats_.waiting.load(), 1u) << "the refresh itself: no client";
  Answer(2, With({{192, 0, 2, 7}}));
  EXPECT_TRUE(Returns().empty()) << "nobody waits for a refresh";
  partitions::Freshness f;
  ASSERT_TRUE(Cached("www.cdn.example", &f));
  EXPECT_EQ(f, partitions::Freshness::kFresh);
  EXPECT_EQ(stats_.active_refresh_scheduled.load(), 1u) << "the refreshed answer is scheduled again";

  // Read again (the Cached() above): refreshed again at 270 s of the new
  // TTL. This time a recursor answers from its own copy, 6 s left: asked
  // again at 5 s, a second before that runs out.
  advance_s(270);
  ASSERT_EQ(transport_.sent.size(), 4u);
  ReplySpec aged = With({{192, 0, 2, 7}});
  aged.ttl = 6;
  Answer(3, aged);
  EXPECT_EQ(stats_.active_refresh_sent.Read(), 2u);
  ASSERT_TRUE(Cached("www.cdn.example"));
  advance_s(4);
  EXPECT_EQ(transport_.sent.size(), 4u);
  advance_s(1);
  ASSERT_EQ(transport_.sent.size(), 5u);
  Answer(4);
  EXPECT_EQ(stats_.active_refresh_sent.Read(), 3u);

  // Nobody reads this one: at its turn it is not refreshed, and expires.
  advance_s(270);
  EXPECT_EQ(transport_.sent.size(), 5u);
  EXPECT_EQ(stats_.active_refresh_idle.Read(), 1u);
  EXPECT_EQ(stats_.active_refresh_scheduled.load(), 0u);
  advance_s(600);
  EXPECT_EQ(transport_.sent.size(), 5u) << "the plain name was never refreshed";
  ASSERT_TRUE(Cached("www.plain.example", &f));
  EXPECT_EQ(f, partitions::Freshness::kStale) << "expired, never refreshed";
}

// A refresh whose answer left the cache, or whose tag lost refresh=active,
// is not sent; the schedule is bounded by cache.active_refresh_max.
TEST_F(ForwarderCoreTest, ActiveRefreshSkipsGoneAndUntaggedAndIsBounded) {
  testing::PublishPartitions(&shared_, "cdn.example refresh=active\n", testing::kTwoCities);
  config_.active_refresh_max = 2;
  Start();
  Miss("a.cdn.example", 1);
  Miss("b.cdn.example", 2);
  Miss("c.cdn.example", 3);
  for (size_t i = 0; i < 3; ++i) Answer(i);
  Returns();
  EXPECT_EQ(stats_.active_refresh_scheduled.load(), 2u);
  EXPECT_EQ(stats_.active_refresh_overflow.Read(), 1u);
  ASSERT_TRUE(Cached("a.cdn.example"));
  ASSERT_TRUE(Cached("b.cdn.example"));
  const dns::NameKey a = Key("a.cdn.example");
  ASSERT_TRUE(shared_.cache->Erase({partitions::kCommonPartition, a.span(), dns::type::kA, dns::klass::kIn}));
  clock_.Advance(270);
  core_->Tick();
  ASSERT_EQ(transport_.sent.size(), 4u) << "b's refresh only";
  EXPECT_EQ(stats_.active_refresh_gone.Read(), 1u);
  EXPECT_EQ(stats_.active_refresh_sent.Read(), 1u);
  Answer(3);
  ASSERT_TRUE(Cached("b.cdn.example"));
  // The operator takes the option away: the scheduled refresh is dropped.
  testing::PublishPartitions(&shared_, "other.example refresh=active\n", testing::kTwoCities);
  clock_.Advance(270);
  core_->Tick();
  EXPECT_EQ(transport_.sent.size(), 4u);
  EXPECT_EQ(stats_.active_refresh_untagged.Read(), 1u);
  EXPECT_EQ(stats_.active_refresh_scheduled.load(), 0u);
}

// cache.sibling_prefetch: after a subnet-level miss is filled, the same
// question goes out for the city's other recently active subnets (each with
// its own /24 as ECS) that do not have it, at most N, once per (city, name)
// and TTL; other cities' subnets never.
TEST_F(ForwarderCoreTest, SiblingPrefetchFetchesTheCitysRecentSubnetsOnce) {
  testing::PublishPartitions(&shared_, "cdn.example ecs=on level=subnet\n", testing::kTwoCities);
  config_.sibling_prefetch = 2;
  Start();
  uint64_t token = 1;
  auto miss = [&](std::string_view name, const char* addr, partitions::PartitionId city) {
    common::IpAddress who;
    ASSERT_TRUE(common::ParseIp(addr, &who));
    PendingClient c;
    c.miss.qname = Key(name);
    c.miss.qtype = dns::type::kA;
    c.miss.qclass = dns::klass::kIn;
    c.miss.tagged = true;
    c.miss.partition = partitions::PartitionKey(partitions::CacheLevel::kSubnet, city, who);
    c.miss.ecs = partitions::SubnetEcs(who);
    c.miss.send_ecs = true;
    c.miss.city = city;
    c.route = {0, Transport::kUdp, token++};
    ASSERT_TRUE(channel_.misses.Push(std::move(c)));
    core_->Drain();
  };
  auto ecs_of = [&](size_t i) {
    dns::Query q;
    EXPECT_EQ(dns::ParseQuery(transport_.sent[i].message, {}, &q), dns::ParseError::kOk);
    EXPECT_TRUE(q.edns.has_ecs);
    const auto& a = q.edns.ecs.address;
    return common::IpToString(common::IpAddress::V4(uint32_t{a[0]} << 24 | uint32_t{a[1]} << 16 |
                                                    uint32_t{a[2]} << 8 | a[3])) +
           "/" + std::to_string(q.edns.ecs.source_prefix);
  };
  auto cached_in = [&](std::string_view name, const char* addr) {
    common::IpAddress who;
    EXPECT_TRUE(common::ParseIp(addr, &who));
    const dns::NameKey k = Key(name);
    partitions::Freshness f;
    return shared_.cache->Find({partitions::PartitionKey(partitions::CacheLevel::kSubnet, 0, who), k.span(),
                                dns::type::kA, dns::klass::kIn},
                               clock_.NowSeconds(), &f) != nullptr;
  };
  // Subscribers of three subnets of city 0 miss x: they become its recent
  // subnets. x's later fills find their siblings cached, or done.
  miss("x.cdn.example", "198.18.1.1", 0);
  Answer(0);
  miss("x.cdn.example", "198.18.2.1", 0);
  Answer(1);
  EXPECT_EQ(stats_.sibling_prefetches.Read(), 0u) << "198.18.1.0/24 has x already";
  miss("x.cdn.example", "198.18.3.1", 0);
  Answer(2);
  EXPECT_EQ(stats_.sibling_repeats.Read(), 1u) << "x's siblings were fetched within its TTL";
  ASSERT_EQ(transport_.sent.size(), 3u);
  Returns();

  // A miss of y in a fourth subnet: y is fetched for the two most recent
  // other subnets of the city, each with its own ECS.
  miss("y.cdn.example", "198.18.4.1", 0);
  EXPECT_EQ(ecs_of(3), "198.18.4.0/24") << "the miss itself";
  Answer(3);
  ASSERT_EQ(transport_.sent.size(), 6u);
  EXPECT_EQ(stats_.sibling_prefetches.Read(), 2u);
  EXPECT_EQ(ecs_of(4), "198.18.3.0/24");
  EXPECT_EQ(ecs_of(5), "198.18.2.0/24");
  Answer(4);
  Answer(5);
  EXPECT_TRUE(cached_in("y.cdn.example", "198.18.2.77"));
  EXPECT_TRUE(cached_in("y.cdn.example", "198.18.3.77")) << "a sibling, before any of its clients asked";
  EXPECT_FALSE(cached_in("y.cdn.example", "198.18.1.77")) << "beyond cache.sibling_prefetch";
  const std::vector<ReturnedQuery> r = Returns();
  EXPECT_EQ(r.size(), 1u) << "only the client of the miss is answered";

  // Another city's subnets are not siblings.
  miss("z.cdn.example", "198.19.0.1", 1);
  Answer(transport_.sent.size() - 1);
  EXPECT_EQ(transport_.sent.size(), 7u);
  EXPECT_EQ(stats_.sibling_prefetches.Read(), 2u);
}

// A refresh asks the question as the tag says when it is sent (weights
// turned on since the fill), and refreshes come due together are paced:
// prefetches take at most half of upstream.max_inflight.
TEST_F(ForwarderCoreTest, ActiveRefreshFollowsTheTagAndIsPaced) {
  testing::PublishPartitions(&shared_, "cdn.example refresh=active\n", testing::kTwoCities);
  config_.max_inflight = 4;
  Start();
  for (uint64_t i = 0; i < 3; ++i) Miss(std::string(1, static_cast<char>('a' + i)) + ".cdn.example", i + 1);
  for (size_t i = 0; i < 3; ++i) Answer(i);
  Returns();
  for (const char* n : {"a.cdn.example", "b.cdn.example", "c.cdn.example"}) ASSERT_TRUE(Cached(n));
  testing::PublishPartitions(&shared_, "cdn.example refresh=active weight=on\n", testing::kTwoCities);
  clock_.Advance(270);
  core_->Tick();
  ASSERT_EQ(transport_.sent.size(), 5u) << "two refreshes: half of max_inflight";
  dns::Query q;
  ASSERT_EQ(dns::ParseQuery(transport_.sent[3].message, {}, &q), dns::ParseError::kOk);
  EXPECT_TRUE(q.edns.has_weight) << "asked as the tag says now";
  core_->Tick();
  EXPECT_EQ(transport_.sent.size(), 5u) << "no room yet: the third stays due";
  Answer(3);
  core_->Tick();
  EXPECT_EQ(transport_.sent.size(), 6u);
  EXPECT_EQ(stats_.active_refresh_sent.Read(), 3u);
  EXPECT_EQ(stats_.inflight_limited.Read(), 0u);
}

}  // namespace
}  // namespace weir::fastpath
