// A cache hit allocates nothing (CONVENTIONS.md, the hot path): the real
// front (a UDP socket on loopback and the event loop), the query router,
// the ordinary and the tagged resolver and the reply writer, with libunbound
// replaced by a scripted resolver and the authoritative servers by a fake
// last hop. After a warm-up, every heap allocation made while hits are
// received, answered and sent is counted by this binary's own operator new.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "front.h"
#include "ordinary_resolver.h"
#include "query_router.h"
#include "scripted_resolver.h"
#include "weir/dns/writer.h"
#include "weir/net/event_loop.h"
#include "weir/net/timers.h"
#include "weir/partitions/tagtable.h"
#include "weir/recursor/tagged_resolver.h"
#include "weir/recursor/zone_cuts.h"

namespace {

// Allocations counted while `g_counting` is set (the test's one thread
// turns the loop; nothing else runs meanwhile).
std::atomic<bool> g_counting{false};
std::atomic<uint64_t> g_allocations{0};

void* Allocate(size_t n, size_t align) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  void* p = nullptr;
  if (align <= alignof(std::max_align_t)) {
    p = std::malloc(n);
  } else if (posix_memalign(&p, align, n) != 0) {
    p = nullptr;
  }
  return p;
}

// Out of line: inlined into the operators, GCC would see free() paired
// with operator new and warn (-Wmismatched-new-delete).
[[gnu::noinline]] void Release(void* p) noexcept { std::free(p); }

}  // namespace

void* operator new(size_t n) {
  if (void* p = Allocate(n, 0)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) {
  if (void* p = Allocate(n, 0)) return p;
  throw std::bad_alloc();
}
void* operator new(size_t n, std::align_val_t a) {
  if (void* p = Allocate(n, static_cast<size_t>(a))) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n, std::align_val_t a) {
  if (void* p = Allocate(n, static_cast<size_t>(a))) return p;
  throw std::bad_alloc();
}
void* operator new(size_t n, const std::nothrow_t&) noexcept { return Allocate(n, 0); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return Allocate(n, 0); }
void operator delete(void* p) noexcept { Release(p); }
void operator delete[](void* p) noexcept { Release(p); }
void operator delete(void* p, size_t) noexcept { Release(p); }
void operator delete[](void* p, size_t) noexcept { Release(p); }
void operator delete(void* p, std::align_val_t) noexcept { Release(p); }
void operator delete[](void* p, std::align_val_t) noexcept { Release(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { Release(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { Release(p); }

namespace weir::recursor {
namespace {

using namespace test_support;  // the scripted resolver and its record builders

constexpr uint16_t kWeightCode = dns::kDefaultWeightOptionCode;

// The authoritative side: keeps the last query and answers it on demand.
class FakeTransport : public LastHopTransport {
 public:
  SendResult Send(uint64_t token, const LastHopQuery& q) override {
    last_token = token;
    last.assign(q.message.begin(), q.message.end());
    ++sent;
    return SendResult::kSent;
  }
  void Cancel(uint64_t) override {}

  // Answers the last query with `records` (A, TTL 300), the ECS echoed at
  // `scope` when the query sent one, and `weights` when given.
  void Reply(const std::vector<std::string>& addresses, uint8_t scope, const std::vector<uint8_t>* weights) {
    dns::ParseOptions opts;
    opts.weight_option_code = kWeightCode;
    dns::Query q;
    ASSERT_EQ(dns::ParseQuery(last, opts, &q), dns::ParseError::kOk);
    std::vector<uint8_t> buf(4096);
    dns::ResponseWriter w(buf.data(), buf.size());
    ASSERT_EQ(w.Begin(q.id, dns::flag::kQr | dns::flag::kAa, q.qname.span(), q.qtype, dns::klass::kIn),
              dns::ParseError::kOk);
    for (const std::string& a : addresses) {
      ASSERT_EQ(
          w.AppendRecord(dns::Section::kAnswer, q.qname.span(), dns::type::kA, dns::klass::kIn, 300, V4(a)),
          dns::ParseError::kOk);
    }
    w.BeginOpt(1232, false);
    if (q.edns.has_ecs) {
      dns::ClientSubnet echo = q.edns.ecs;
      echo.scope_prefix = scope;
      w.AddEcs(echo);
    }
    if (weights != nullptr) w.AddWeights(kWeightCode, *weights);
    buf.resize(w.Finish(buf.size()));
    dns::Message m;
    ASSERT_EQ(m.Parse(buf, opts), dns::ParseError::kOk);
    sink->OnReply(last_token, m);
  }

  Sink* sink = nullptr;
  uint64_t last_token = 0;
  std::vector<uint8_t> last;
  int sent = 0;
};

class HitPathAllocTest : public ::testing::Test {
 protected:
  static RecursorConfig Config() {
    RecursorConfig c;
    c.listen = {*common::SocketAddress::Parse("127.0.0.1:0")};
    c.tcp = false;
    c.allow = {*common::Cidr::Parse("127.0.0.0/8")};
    c.weight_option_code = kWeightCode;
    c.answer_deadline_ms = 3000;
    return c;
  }

  void SetUp() override {
    ASSERT_TRUE(loop_.Init().ok());
    auto t = partitions::TagTable::FromText("ecs.example ecs=on\nweighted.example weight=on\n");
    ASSERT_TRUE(t.ok()) << t.status();
    tags_ = *std::move(t);
    transport_.sink = &tagged_;
    front_.SetHandlers(&router_, [](const std::string&) { return std::string(); });
    ASSERT_TRUE(front_.Listen().ok());
    const std::string& line = front_.describe().at(0);  // "listening udp 127.0.0.1:PORT"
    auto addr = common::SocketAddress::Parse(line.substr(line.rfind(' ') + 1));
    ASSERT_TRUE(addr.ok()) << line;
    server_ = *addr;
    client_ = socket(AF_INET, SOCK_DGRAM, 0);
    ASSERT_GE(client_, 0);
    resolver_.Zone("ecs.example.", "192.0.2.53");
    resolver_.Zone("weighted.example.", "192.0.2.54");
    resolver_.Script("www.ordinary.example.", dns::type::kA,
                     {0, {{"www.ordinary.example.", dns::type::kA, 300, V4("203.0.113.7")}}, {}});
  }
  void TearDown() override {
    if (client_ >= 0) close(client_);
  }

  // An A query for `name` (EDNS, with the ECS `ecs_v4`/24 when given and
  // the empty weight option when `ask_weights`).
  static std::vector<uint8_t> MakeQuery(const std::string& name, const char* ecs_v4, bool ask_weights) {
    std::vector<uint8_t> pkt(512);
    dns::ResponseWriter w(pkt.data(), pkt.size());
    const dns::NameKey q = Key(name);
    EXPECT_EQ(w.Begin(0x4242, dns::flag::kRd, q.span(), dns::type::kA, dns::klass::kIn),
              dns::ParseError::kOk);
    w.BeginOpt(1232, false);
    if (ecs_v4 != nullptr) {
      dns::ClientSubnet s;
      s.family = dns::kEcsFamilyIpv4;
      s.source_prefix = 24;
      const std::vector<uint8_t> a = V4(ecs_v4);
      std::copy(a.begin(), a.end(), s.address.begin());
      w.AddEcs(s);
    }
    if (ask_weights) w.AddWeights(kWeightCode, {});
    pkt.resize(w.Finish(pkt.size()));
    return pkt;
  }

  // Sends `pkt` to the front and turns the loop until it is handled.
  // Allocates nothing itself: the loop's work is what is counted.
  void Deliver(const std::vector<uint8_t>& pkt) {
    sendto(client_, pkt.data(), pkt.size(), 0, server_.sa(), server_.len);
    loop_.RunOnce(std::chrono::milliseconds(1000));
  }
  // The response to the last query, 0 bytes when none came within a second.
  size_t Receive(uint8_t* out, size_t cap) {
    pollfd p{.fd = client_, .events = POLLIN, .revents = 0};
    if (poll(&p, 1, 1000) != 1) return 0;
    const ssize_t n = recv(client_, out, cap, 0);
    return n < 0 ? 0 : static_cast<size_t>(n);
  }

  // A first query (a miss, completed by `complete`), a warm-up hit, then
  // `hits` hits counted: the number of allocations they made. Each hit's
  // response must be the warm-up hit's, byte for byte.
  template <typename Complete>
  uint64_t CountHitAllocations(const std::vector<uint8_t>& query, Complete complete, int hits) {
    uint8_t first[2048], got[2048];
    Deliver(query);
    complete();
    const size_t miss_len = Receive(first, sizeof(first));
    EXPECT_GT(miss_len, dns::kHeaderSize) << "no answer to the miss";
    Deliver(query);
    const size_t len = Receive(first, sizeof(first));
    EXPECT_GT(len, dns::kHeaderSize) << "no answer to the warm-up hit";
    dns::Message m;
    dns::ParseOptions opts;
    opts.weight_option_code = kWeightCode;
    EXPECT_EQ(m.Parse({first, len}, opts), dns::ParseError::kOk);
    EXPECT_EQ(m.rcode(), 0);
    EXPECT_GT(m.count(dns::Section::kAnswer), 0);
    int same = 0;
    g_allocations = 0;
    g_counting = true;
    for (int i = 0; i < hits; ++i) {
      Deliver(query);
      const size_t n = Receive(got, sizeof(got));
      same += n == len && std::memcmp(got, first, n) == 0 ? 1 : 0;
    }
    g_counting = false;
    EXPECT_EQ(same, hits) << "every hit gets the same response";
    return g_allocations.load();
  }

  RecursorConfig cfg_ = Config();
  common::FakeClock clock_{1000};
  net::ManualTimers timers_;
  net::EventLoop loop_;
  TaggedResolver::Tags tags_;
  ScriptedResolver resolver_;
  ZoneCutFinder cuts_{
      resolver_, clock_, {.do_ip6 = false, .max_ttl = 3600, .max_entries = 100}, [](const std::string&) {}};
  FakeTransport transport_;
  InflightLimit inflight_{100};
  Front front_{cfg_, loop_};
  FrontReplies replies_{cfg_, front_};
  TaggedResolver tagged_{
      cfg_,      clock_, timers_, tags_, cuts_, transport_, replies_, inflight_, [](const std::string&) {},
      /*seed=*/7};
  OrdinaryResolver ordinary_{cfg_,     clock_,    timers_, tags_,     resolver_,
                             replies_, inflight_, tagged_, /*seed=*/9};
  QueryRouter router_{cfg_, tags_, replies_, ordinary_, tagged_};
  common::SocketAddress server_;
  int client_ = -1;
};

constexpr int kHits = 200;

TEST_F(HitPathAllocTest, OrdinaryNameHitAllocatesNothing) {
  const std::vector<uint8_t> q = MakeQuery("www.ordinary.example", nullptr, false);
  const uint64_t n = CountHitAllocations(
      q, [&] { resolver_.Deliver(); }, kHits);
  EXPECT_EQ(ordinary_.stats().wait.hits, uint64_t{kHits} + 1);
  EXPECT_EQ(n, 0u) << "heap allocations over " << kHits << " ordinary hits";
}

TEST_F(HitPathAllocTest, EcsScopedTaggedHitAllocatesNothing) {
  const std::vector<uint8_t> q = MakeQuery("www.ecs.example", "198.51.100.0", false);
  const uint64_t n = CountHitAllocations(
      q,
      [&] {
        resolver_.Deliver();  // the zone cut
        transport_.Reply({"203.0.113.1"}, 24, nullptr);
      },
      kHits);
  EXPECT_EQ(transport_.sent, 1);
  EXPECT_EQ(tagged_.stats().wait.hits, uint64_t{kHits} + 1);
  EXPECT_EQ(n, 0u) << "heap allocations over " << kHits << " ECS-scoped hits";
}

TEST_F(HitPathAllocTest, WeightedTaggedHitAllocatesNothing) {
  const std::vector<uint8_t> q = MakeQuery("www.weighted.example", nullptr, true);
  const std::vector<uint8_t> weights = {10, 90};
  const uint64_t n = CountHitAllocations(
      q,
      [&] {
        resolver_.Deliver();
        transport_.Reply({"203.0.113.1", "203.0.113.2"}, 0, &weights);
      },
      kHits);
  EXPECT_EQ(transport_.sent, 1);
  EXPECT_EQ(tagged_.stats().wait.hits, uint64_t{kHits} + 1);
  EXPECT_EQ(n, 0u) << "heap allocations over " << kHits << " weighted hits";
}

// Queries that arrive together are read and answered in bursts (more than
// one recvmmsg, more responses than one sendmmsg holds): each gets its own
// response, in order, and none allocates.
TEST_F(HitPathAllocTest, BurstOfHitsIsAnsweredInOrderWithoutAllocating) {
  constexpr int kQueries = 40;  // one burst of 32 and one of 8
  const std::vector<uint8_t> q = MakeQuery("www.ordinary.example", nullptr, false);
  uint8_t first[2048];
  Deliver(q);
  resolver_.Deliver();
  ASSERT_GT(Receive(first, sizeof(first)), dns::kHeaderSize);
  std::vector<std::vector<uint8_t>> queries;
  for (int i = 0; i < kQueries; ++i) {
    queries.push_back(q);
    queries.back()[0] = static_cast<uint8_t>(i);  // IDs 0x0042, 0x0142, ...
  }
  std::vector<std::vector<uint8_t>> got(kQueries, std::vector<uint8_t>(2048));
  std::vector<size_t> len(kQueries);
  g_allocations = 0;
  g_counting = true;
  for (const auto& x : queries) sendto(client_, x.data(), x.size(), 0, server_.sa(), server_.len);
  loop_.RunOnce(std::chrono::milliseconds(1000));
  for (int i = 0; i < kQueries; ++i) len[i] = Receive(got[i].data(), got[i].size());
  g_counting = false;
  EXPECT_EQ(g_allocations.load(), 0u);
  EXPECT_EQ(front_.stats().udp, uint64_t{kQueries} + 1);
  for (int i = 0; i < kQueries; ++i) {
    ASSERT_GT(len[i], dns::kHeaderSize) << "no response to query " << i;
    EXPECT_EQ(got[i][0], i) << "response " << i << " out of order";
    EXPECT_EQ(got[i][1], 0x42);
  }
}

// The counter itself counts: a test that cannot fail is a defect.
TEST_F(HitPathAllocTest, CounterSeesAnAllocation) {
  g_allocations = 0;
  g_counting = true;
  auto* p = new std::vector<int>(100);
  g_counting = false;
  delete p;
  EXPECT_GE(g_allocations.load(), 2u);
}

}  // namespace
}  // namespace weir::recursor
