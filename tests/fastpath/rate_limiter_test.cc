// RateLimiter: per-prefix token buckets in a fixed open-addressing table,
// on an injected clock (the `now` argument): buckets and refills, prefix
// keying, sources that collided in the old 65,536-bucket hash, a full
// window (who is forgotten, who keeps its state), and the byte budget.
#include "weir/fastpath/rate_limiter.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "partitions/test_util.h"
#include "weir/fastpath/upstream_ring.h"

namespace weir::fastpath {
namespace {

using common::IpAddress;
using partitions::testing::Ip;

RateLimitOptions Qps(uint32_t qps, uint32_t burst = 0) {
  RateLimitOptions o;
  o.qps = qps;
  o.burst = burst;
  o.seed = 12345;
  return o;
}

// Queries `src` may send at `now` until its bucket is empty (at most `cap`).
int Drain(RateLimiter& l, const IpAddress& src, uint32_t now, int cap = 1000000) {
  int n = 0;
  while (n < cap && l.TakeQuery(l.Track(src, now))) ++n;
  return n;
}

TEST(RateLimiterTest, OffTracksNothing) {
  RateLimiter l(RateLimitOptions{});
  EXPECT_FALSE(l.enabled());
  EXPECT_EQ(l.capacity(), 0u);
  EXPECT_EQ(l.Track(Ip("192.0.2.1"), 1), RateLimiter::kNoSlot);
}

TEST(RateLimiterTest, BucketRefillsWithTheClock) {
  RateLimiter l(Qps(10, 25));
  const IpAddress a = Ip("192.0.2.1");
  EXPECT_EQ(Drain(l, a, 100), 25);  // a new source starts with a full bucket
  EXPECT_EQ(Drain(l, a, 100), 0);   // same second: nothing more
  EXPECT_EQ(Drain(l, a, 101), 10);  // one second: qps tokens
  EXPECT_EQ(Drain(l, a, 103), 20);
  EXPECT_EQ(Drain(l, a, 1000), 25);  // a long pause refills to the burst, no more
  EXPECT_EQ(Drain(l, a, 999), 0);    // the clock stepping back adds nothing
}

TEST(RateLimiterTest, BurstDefaultsToQps) {
  RateLimiter l(Qps(7));
  EXPECT_EQ(Drain(l, Ip("192.0.2.1"), 5), 7);
}

TEST(RateLimiterTest, SourcesAreKeyedByPrefix) {
  RateLimitOptions o = Qps(5);
  o.ipv4_prefix = 24;
  o.ipv6_prefix = 56;
  RateLimiter l(o);
  // Same /24: one bucket.
  EXPECT_EQ(Drain(l, Ip("198.51.100.1"), 1), 5);
  EXPECT_EQ(Drain(l, Ip("198.51.100.200"), 1), 0);
  // The next /24: its own.
  EXPECT_EQ(Drain(l, Ip("198.51.101.1"), 1), 5);
  // Same /56 (the 8th byte differs): one bucket; another /56: its own.
  EXPECT_EQ(Drain(l, Ip("2001:db8:0:100::1"), 1), 5);
  EXPECT_EQ(Drain(l, Ip("2001:db8:0:1ff::99"), 1), 0);
  EXPECT_EQ(Drain(l, Ip("2001:db8:0:200::1"), 1), 5);
  // An IPv6 address whose first bytes are an IPv4 address's is not that source.
  EXPECT_EQ(Drain(l, Ip("c633:6400::"), 1), 5);
}

TEST(RateLimiterTest, DefaultPrefixesAreSlash32AndSlash56) {
  RateLimiter l(Qps(3));
  EXPECT_EQ(Drain(l, Ip("203.0.113.1"), 1), 3);
  EXPECT_EQ(Drain(l, Ip("203.0.113.2"), 1), 3);  // /32: each address its own
  EXPECT_EQ(Drain(l, Ip("2001:db8:1:2300::1"), 1), 3);
  EXPECT_EQ(Drain(l, Ip("2001:db8:1:23ff::2"), 1), 0);  // same /56
}

// The old limiter: 65,536 buckets indexed by StableHash(address) & 0xffff,
// no address check.
uint32_t OldBucket(const IpAddress& a) { return StableHash(a.bytes.data(), a.family == 4 ? 4 : 16) & 0xffff; }

TEST(RateLimiterTest, SourcesThatSharedAnOldBucketAreIndependent) {
  const IpAddress abuser = Ip("127.0.0.2");
  // Find an innocent address in 127.0.0.0/8 the old hash put in the abuser's bucket.
  IpAddress innocent;
  bool found = false;
  for (uint32_t i = 3; i < (1u << 24) && !found; ++i) {
    const IpAddress c = IpAddress::V4((127u << 24) | i);
    if (OldBucket(c) == OldBucket(abuser)) {
      innocent = c;
      found = true;
    }
  }
  ASSERT_TRUE(found);
  RateLimiter l(Qps(100));
  // The abuser sends 50 times its rate each second; the innocent half of it.
  int innocent_ok = 0, innocent_sent = 0, abuser_ok = 0;
  for (uint32_t now = 1; now <= 20; ++now) {
    for (int i = 0; i < 5000; ++i) {
      abuser_ok += l.TakeQuery(l.Track(abuser, now));
      if (i % 100 == 0) {
        ++innocent_sent;
        innocent_ok += l.TakeQuery(l.Track(innocent, now));
      }
    }
  }
  EXPECT_EQ(innocent_ok, innocent_sent);
  EXPECT_EQ(abuser_ok, 100 * 20);
}

TEST(RateLimiterTest, EveryTrackedSourceHasItsOwnBucket) {
  // A small table (16 slots, windows of 8): sources collide in their home
  // slots all the time, yet keys are compared in full.
  RateLimitOptions o = Qps(4);
  o.table_size = 16;
  RateLimiter l(o);
  ASSERT_EQ(l.capacity(), 16u);
  std::vector<IpAddress> srcs;
  for (int i = 0; i < 6; ++i) srcs.push_back(IpAddress::V4(0xc0000200u + i));
  for (const IpAddress& s : srcs) EXPECT_EQ(Drain(l, s, 1, 2), 2);
  // Each has 2 left, whatever its neighbours did (6 sources never fill a
  // window of 8: nobody was forgotten).
  for (const IpAddress& s : srcs) EXPECT_EQ(Drain(l, s, 1), 2) << common::IpToString(s);
  EXPECT_EQ(l.evicted_idle() + l.evicted_active(), 0u);
}

TEST(RateLimiterTest, FullWindowForgetsIdleSourcesFirst) {
  RateLimitOptions o = Qps(10);
  o.table_size = 16;
  RateLimiter l(o);
  // 64 sources at t=1 fill every window; each spends one token.
  for (uint32_t i = 0; i < 64; ++i) Drain(l, IpAddress::V4(0x0a000000u + i), 1, 1);
  const uint64_t active_before = l.evicted_active();
  const uint64_t idle_before = l.evicted_idle();
  EXPECT_GT(active_before, 0u);  // at t=1 nobody had refilled yet
  // At t=3 every one of them has refilled (10 qps): replacing them loses
  // nothing. Four new sources: every window of 8 still holds an idle one.
  for (uint32_t i = 0; i < 4; ++i) Drain(l, IpAddress::V4(0x0b000000u + i), 3, 1);
  EXPECT_EQ(l.evicted_active(), active_before);
  EXPECT_EQ(l.evicted_idle(), idle_before + 4);
}

TEST(RateLimiterTest, NewSourcesDoNotResetALimitedSource) {
  // An abuser empties its bucket; then a flood of new sources (spoofed
  // addresses) passes through a table far too small. The fuller entries go
  // first, so the abuser stays limited until its bucket refills.
  RateLimitOptions o = Qps(10);
  o.table_size = 16;
  RateLimiter l(o);
  const IpAddress abuser = Ip("203.0.113.66");
  EXPECT_EQ(Drain(l, abuser, 1), 10);
  for (uint32_t i = 0; i < 10000; ++i) Drain(l, IpAddress::V4(0x0a000000u + i), 1, 1);
  EXPECT_GT(l.evicted_active(), 0u);
  EXPECT_EQ(Drain(l, abuser, 1), 0) << "the flood reset the abuser's bucket";
  EXPECT_EQ(Drain(l, abuser, 2), 10);
}

TEST(RateLimiterTest, ByteBudget) {
  RateLimitOptions o;
  o.bytes_per_second = 3000;
  o.seed = 1;
  RateLimiter l(o);
  ASSERT_TRUE(l.enabled());
  ASSERT_TRUE(l.limits_bytes());
  const IpAddress a = Ip("192.0.2.9");
  uint32_t slot = l.Track(a, 1);
  const uint32_t gen = l.generation();
  EXPECT_TRUE(l.TakeQuery(slot));  // queries are not limited
  EXPECT_EQ(l.ByteAllowance(&slot, gen, a, 1), 3000u);
  l.TakeBytes(slot, 1232);
  l.TakeBytes(slot, 1232);
  EXPECT_EQ(l.ByteAllowance(&slot, gen, a, 1), 536u);
  l.TakeBytes(slot, 1232);  // never below 0
  EXPECT_EQ(l.ByteAllowance(&slot, gen, a, 1), 0u);
  EXPECT_EQ(l.ByteAllowance(&slot, gen, a, 2), 3000u);
  // Another source is not charged.
  const IpAddress b = Ip("192.0.2.10");
  uint32_t other = RateLimiter::kNoSlot;
  EXPECT_EQ(l.ByteAllowance(&other, 0, b, 2), 3000u);
  EXPECT_NE(other, slot);
}

TEST(RateLimiterTest, ByteAllowanceFindsItsSourceAgainWhenTheSlotWasTaken) {
  RateLimitOptions o;
  o.bytes_per_second = 2000;
  o.table_size = 16;
  o.seed = 7;
  RateLimiter l(o);
  const IpAddress a = Ip("192.0.2.1");
  uint32_t slot = l.Track(a, 1);
  const uint32_t gen = l.generation();
  l.TakeBytes(slot, 1500);
  // Many other sources in the same second: a's slot may go to another.
  for (uint32_t i = 0; i < 200; ++i) l.Track(IpAddress::V4(0x0a000000u + i), 1);
  const uint32_t left = l.ByteAllowance(&slot, gen, a, 1);
  // Either a kept its state (500 left) or was forgotten and starts full;
  // never someone else's budget.
  EXPECT_TRUE(left == 500 || left == 2000) << left;
  uint32_t again = RateLimiter::kNoSlot;
  EXPECT_EQ(l.ByteAllowance(&again, 0, a, 1), left);
  EXPECT_EQ(again, slot);
}

}  // namespace
}  // namespace weir::fastpath
