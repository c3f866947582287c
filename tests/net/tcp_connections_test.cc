#include "weir/net/tcp_connections.h"

#include <gtest/gtest.h>

#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace weir::net {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = TcpConnectionTable::Clock;

common::SocketAddress Addr(const std::string& text) { return *common::SocketAddress::Parse(text); }

uint64_t Closed(const TcpConnectionTable& t, TcpCloseReason r) {
  return t.stats().closed[static_cast<size_t>(r)].load();
}

class TcpConnectionTableTest : public ::testing::Test {
 protected:
  // Admits and adds a connection from `peer`, closing what the table evicts.
  // The handle, or nothing when refused.
  std::optional<TcpConnectionTable::Handle> Connect(TcpConnectionTable& t, const std::string& peer) {
    const auto a = t.Admit(Addr(peer), now_);
    if (!a.admitted) return std::nullopt;
    if (a.evict) {
      evicted_.push_back(*a.evict);
      t.Remove(handles_.at(*a.evict), TcpCloseReason::kPressure);
    }
    const uint64_t id = next_id_++;
    const auto h = t.Add(id, Addr(peer), now_);
    handles_[id] = h;
    return h;
  }
  std::vector<TcpConnectionTable::Expiry> Expired(TcpConnectionTable& t) {
    std::vector<TcpConnectionTable::Expiry> out;
    t.Expired(now_, &out);
    return out;
  }

  Clock::time_point now_ = Clock::time_point{} + seconds(1000);
  uint64_t next_id_ = 1;
  std::map<uint64_t, TcpConnectionTable::Handle> handles_;
  std::vector<uint64_t> evicted_;
};

TEST_F(TcpConnectionTableTest, OneSourcePastItsLimitIsRefusedAndOthersStillGetIn) {
  TcpConnectionLimits l;
  l.max_connections = 100;
  l.max_per_source = 4;
  TcpConnectionTable t(l);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Connect(t, "192.0.2.1:" + std::to_string(1000 + i)));
  for (int i = 0; i < 2000; ++i) EXPECT_FALSE(Connect(t, "192.0.2.1:5000"));
  EXPECT_EQ(Closed(t, TcpCloseReason::kPerSourceLimit), 2000u);
  EXPECT_EQ(t.SourceConnections(Addr("192.0.2.1:1")), 4);
  EXPECT_TRUE(Connect(t, "192.0.2.2:1000"));
  EXPECT_EQ(t.size(), 5u);
  EXPECT_EQ(t.stats().accepted.load(), 2005u);
  EXPECT_EQ(t.stats().open.load(), 5u);
  // One closes: its source may connect again.
  t.Remove(handles_.at(1), TcpCloseReason::kClient);
  EXPECT_TRUE(Connect(t, "192.0.2.1:6000"));
  EXPECT_EQ(Closed(t, TcpCloseReason::kClient), 1u);
}

TEST_F(TcpConnectionTableTest, SourcesAreAddressesCutToTheirPrefix) {
  TcpConnectionLimits l;
  l.max_per_source = 2;
  TcpConnectionTable t(l);
  // IPv6: one /56 is one subscriber.
  ASSERT_TRUE(Connect(t, "[2001:db8:0:100::1]:1"));
  ASSERT_TRUE(Connect(t, "[2001:db8:0:1ff::2]:1"));
  EXPECT_FALSE(Connect(t, "[2001:db8:0:180::3]:1"));
  EXPECT_TRUE(Connect(t, "[2001:db8:0:200::1]:1"));  // the next /56
  // IPv4: /32 each; an IPv4-mapped IPv6 peer is its IPv4 address.
  ASSERT_TRUE(Connect(t, "198.51.100.7:1"));
  ASSERT_TRUE(Connect(t, "[::ffff:198.51.100.7]:2"));
  EXPECT_FALSE(Connect(t, "198.51.100.7:3"));
  EXPECT_TRUE(Connect(t, "198.51.100.8:1"));

  TcpConnectionLimits wide;
  wide.max_per_source = 1;
  wide.source_prefix_v4 = 24;
  wide.source_prefix_v6 = 64;
  TcpConnectionTable t2(wide);
  ASSERT_TRUE(Connect(t2, "198.51.100.7:1"));
  EXPECT_FALSE(Connect(t2, "198.51.100.200:1"));
  EXPECT_TRUE(Connect(t2, "198.51.101.7:1"));
  ASSERT_TRUE(Connect(t2, "[2001:db8::1]:1"));
  EXPECT_FALSE(Connect(t2, "[2001:db8::ffff:1]:1"));
  EXPECT_TRUE(Connect(t2, "[2001:db8:0:1::1]:1"));
}

TEST_F(TcpConnectionTableTest, NoPerSourceLimitWhenZero) {
  TcpConnectionLimits l;
  l.max_per_source = 0;
  l.max_connections = 10;
  TcpConnectionTable t(l);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(Connect(t, "192.0.2.1:1"));
}

TEST_F(TcpConnectionTableTest, IdleCountsOnlyWholeMessagesAndAnswers) {
  TcpConnectionLimits l;
  l.idle_timeout = seconds(10);
  l.lifetime = seconds(1000);
  TcpConnectionTable t(l);
  const auto quiet = *Connect(t, "192.0.2.1:1");   // id 1: connects, never sends a whole query
  const auto active = *Connect(t, "192.0.2.2:1");  // id 2: a query every 5 s
  const auto slow = *Connect(t, "192.0.2.3:1");    // id 3: its one answer takes 30 s
  (void)quiet;
  t.QueryRead(slow, now_);
  for (int i = 0; i < 6; ++i) {
    now_ += seconds(5);
    t.QueryRead(active, now_);
    now_ += milliseconds(1);
    t.QueryDone(active, now_);
    std::vector<uint64_t> ids;
    for (const auto& e : Expired(t)) {
      EXPECT_EQ(e.reason, TcpCloseReason::kIdle);
      ids.push_back(e.id);
    }
    // Only the quiet one, once 10 s passed; never the one that owes an answer.
    EXPECT_EQ(ids, (now_ - (Clock::time_point{} + seconds(1000)) >= seconds(10) ? std::vector<uint64_t>{1}
                                                                                : std::vector<uint64_t>{}));
  }
  // Answered at last: idle from now on, not from when it asked.
  t.QueryDone(slow, now_);
  now_ += seconds(9);
  for (const auto& e : Expired(t)) EXPECT_NE(e.id, 3u);
  now_ += seconds(1);
  bool listed = false;
  for (const auto& e : Expired(t)) listed = listed || e.id == 3u;
  EXPECT_TRUE(listed);
}

TEST_F(TcpConnectionTableTest, PipelinedQueriesKeepItBusyUntilTheLastAnswer) {
  TcpConnectionLimits l;
  l.idle_timeout = seconds(1);
  TcpConnectionTable t(l);
  const auto h = *Connect(t, "192.0.2.1:1");
  t.QueryRead(h, now_);
  t.QueryRead(h, now_);
  t.QueryDone(h, now_);
  now_ += seconds(5);
  EXPECT_TRUE(Expired(t).empty());  // one answer still owed
  t.QueryDone(h, now_);
  t.QueryDone(h, now_);  // one too many: ignored
  now_ += seconds(1);
  ASSERT_EQ(Expired(t).size(), 1u);
}

TEST_F(TcpConnectionTableTest, LifetimeClosesBusyAndActiveConnections) {
  TcpConnectionLimits l;
  l.idle_timeout = seconds(10);
  l.lifetime = seconds(120);
  TcpConnectionTable t(l);
  const auto h1 = *Connect(t, "192.0.2.1:1");
  now_ += seconds(30);
  const auto h2 = *Connect(t, "192.0.2.1:2");
  // Both complete a query every 5 s, forever; the first also owes one.
  t.QueryRead(h1, now_);
  for (int s = 0; s < 85; s += 5) {
    now_ += seconds(5);
    t.QueryRead(h2, now_);
    t.QueryDone(h2, now_);
  }
  EXPECT_TRUE(Expired(t).empty());  // 115 s: not yet for either
  now_ += seconds(5);
  auto e = Expired(t);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].id, 1u);
  EXPECT_EQ(e[0].reason, TcpCloseReason::kLifetime);
  EXPECT_TRUE(e[0].drain);  // its answer still goes out
  t.QueryRead(h2, now_);    // busy from here on: never idle
  // Drained: listed again only when still open idle_timeout later.
  now_ += seconds(9);
  EXPECT_TRUE(Expired(t).empty());
  now_ += seconds(1);
  e = Expired(t);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].id, 1u);
  EXPECT_FALSE(e[0].drain);               // close it now
  t.Remove(h1, TcpCloseReason::kClient);  // however it closed: counted as its lifetime
  EXPECT_EQ(Closed(t, TcpCloseReason::kLifetime), 1u);
  EXPECT_EQ(Closed(t, TcpCloseReason::kClient), 0u);
  now_ += seconds(20);
  e = Expired(t);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].id, 2u);
  EXPECT_EQ(e[0].reason, TcpCloseReason::kLifetime);
  EXPECT_TRUE(e[0].drain);
  t.QueryDone(h2, now_);  // its last answer sent: the owner closes it
  t.Remove(h2, TcpCloseReason::kClient);
  EXPECT_EQ(Closed(t, TcpCloseReason::kLifetime), 2u);
  EXPECT_EQ(t.size(), 0u);
}

TEST_F(TcpConnectionTableTest, IdleAndPastLifetimeIsListedOnceAsLifetime) {
  TcpConnectionLimits l;
  l.idle_timeout = seconds(10);
  l.lifetime = seconds(20);
  TcpConnectionTable t(l);
  Connect(t, "192.0.2.1:1");
  now_ += seconds(25);
  const auto e = Expired(t);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].reason, TcpCloseReason::kLifetime);
  EXPECT_TRUE(e[0].drain);
}

TEST_F(TcpConnectionTableTest, UnderPressureTheLongestIdleMakesRoom) {
  TcpConnectionLimits l;
  l.max_connections = 10;
  l.max_per_source = 0;
  l.pressure_percent = 90;
  TcpConnectionTable t(l);
  std::vector<TcpConnectionTable::Handle> h;
  for (int i = 0; i < 9; ++i) {
    h.push_back(*Connect(t, "192.0.2.1:1"));  // ids 1..9
    now_ += seconds(1);
  }
  EXPECT_TRUE(evicted_.empty());  // below 90%
  // ids 1 and 2 are busy; id 4 went idle again before id 3.
  t.QueryRead(h[0], now_);
  t.QueryRead(h[1], now_);
  t.QueryRead(h[3], now_);
  t.QueryRead(h[2], now_);
  t.QueryDone(h[3], now_);
  now_ += seconds(1);
  t.QueryDone(h[2], now_);
  // 9 of 10: the next connection closes the one idle the longest: id 5
  // (idle since its accept), then 6, 7, 8, 9, then 4, then 3.
  const std::vector<uint64_t> order = {5, 6, 7, 8, 9, 4, 3};
  for (size_t i = 0; i < order.size(); ++i) {
    ASSERT_TRUE(Connect(t, "198.51.100.1:1"));
    ASSERT_EQ(evicted_.size(), i + 1);
    EXPECT_EQ(evicted_.back(), order[i]);
    t.QueryRead(handles_.at(next_id_ - 1), now_);  // the new one is busy at once
  }
  EXPECT_EQ(Closed(t, TcpCloseReason::kPressure), order.size());
  // Only busy connections left: the 10th gets in, the 11th is refused.
  ASSERT_TRUE(Connect(t, "198.51.100.1:1"));
  t.QueryRead(handles_.at(next_id_ - 1), now_);
  EXPECT_EQ(t.size(), 10u);
  EXPECT_FALSE(Connect(t, "203.0.113.1:1"));
  EXPECT_EQ(Closed(t, TcpCloseReason::kMaxConnections), 1u);
  // One goes idle: it makes room for the next.
  t.QueryDone(h[0], now_);
  ASSERT_TRUE(Connect(t, "203.0.113.1:1"));
  EXPECT_EQ(evicted_.back(), 1u);
}

TEST_F(TcpConnectionTableTest, ASourceAtItsLimitCannotEvictOthers) {
  TcpConnectionLimits l;
  l.max_connections = 4;
  l.max_per_source = 2;
  l.pressure_percent = 100;  // full: every connection idle
  TcpConnectionTable t(l);
  ASSERT_TRUE(Connect(t, "192.0.2.1:1"));
  ASSERT_TRUE(Connect(t, "192.0.2.2:1"));
  ASSERT_TRUE(Connect(t, "192.0.2.3:1"));
  ASSERT_TRUE(Connect(t, "192.0.2.3:2"));
  EXPECT_FALSE(Connect(t, "192.0.2.3:3"));
  EXPECT_TRUE(evicted_.empty());
  EXPECT_EQ(Closed(t, TcpCloseReason::kPerSourceLimit), 1u);
  // Another source does make room.
  EXPECT_TRUE(Connect(t, "192.0.2.4:1"));
  EXPECT_EQ(evicted_, std::vector<uint64_t>{1});
}

TEST_F(TcpConnectionTableTest, HandlesAreReusedAndListsStayConsistent) {
  // Many connections coming and going in every state: the table's counts
  // and lists match a plain model of them.
  TcpConnectionLimits l;
  l.max_connections = 64;
  l.max_per_source = 0;
  l.idle_timeout = seconds(3);
  l.lifetime = seconds(50);
  TcpConnectionTable t(l);
  std::map<uint64_t, int> pending;  // the model: open ids, answers owed
  uint32_t rnd = 12345;
  auto next = [&rnd] { return rnd = rnd * 1103515245u + 12345u, (rnd >> 16) & 0x7fff; };
  for (int step = 0; step < 20000; ++step) {
    now_ += milliseconds(next() % 50);
    const uint32_t op = next() % 4;
    if (op == 0) {
      if (Connect(t, "192.0.2.1:1")) pending[next_id_ - 1] = 0;
      for (uint64_t e : evicted_) {
        EXPECT_EQ(pending.at(e), 0) << "evicted a busy connection";
        pending.erase(e);
      }
      evicted_.clear();
    } else if (!pending.empty()) {
      auto it = pending.begin();
      std::advance(it, next() % pending.size());
      const auto h = handles_.at(it->first);
      if (op == 1) {
        t.QueryRead(h, now_);
        ++it->second;
      } else if (op == 2 && it->second > 0) {
        t.QueryDone(h, now_);
        --it->second;
      } else if (op == 3) {
        std::vector<TcpConnectionTable::Expiry> e;
        t.Expired(now_, &e);
        for (const auto& x : e) {
          if (x.reason == TcpCloseReason::kIdle) {
            EXPECT_EQ(pending.at(x.id), 0);
          }
          t.Remove(handles_.at(x.id), x.reason);
          pending.erase(x.id);
        }
      }
    }
    ASSERT_EQ(t.size(), pending.size());
    ASSERT_LE(t.size(), 64u);
  }
  uint64_t closed = 0;
  for (const auto& c : t.stats().closed) closed += c.load();
  EXPECT_EQ(t.stats().accepted.load(), closed + t.stats().open.load());
}

TEST(TcpCloseReason, EveryReasonHasAName) {
  for (size_t r = 0; r < static_cast<size_t>(TcpCloseReason::kCount); ++r) {
    EXPECT_NE(TcpCloseReasonName(static_cast<TcpCloseReason>(r)), "unknown");
  }
}

}  // namespace
}  // namespace weir::net
