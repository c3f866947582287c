// The forwarder's own defences against forged answers, without sockets: the
// table of tries and the port range. (The random source, 0x20 and cookies,
// shared with the recursor: tests/common/, tests/dns/.)
#include "weir/fastpath/upstream_guard.h"

#include <set>
#include <vector>

#include <gtest/gtest.h>

namespace weir::fastpath {
namespace {

using Clock = std::chrono::steady_clock;

TEST(TryTable, KeysInFlightAndLateAreNotReused) {
  int a = 1, b = 2;
  TryTable<int*> t(std::chrono::seconds(5), 100);
  const Clock::time_point t0 = Clock::now();
  const TryTable<int*>::Key k1{7, 0, 4711}, k2{7, 1, 4711}, k3{8, 0, 4711};
  EXPECT_TRUE(t.Free(k1, t0));
  t.Add(k1, &a);
  t.Add(k2, &b);
  EXPECT_FALSE(t.Free(k1, t0));
  EXPECT_TRUE(t.Free(k3, t0));  // another socket
  EXPECT_EQ(t.Find(k1), &a);
  EXPECT_EQ(t.Find(k2), &b);  // same socket and ID, another upstream
  EXPECT_EQ(t.Find(k3), nullptr);

  t.End(k1, /*expect_late=*/true, t0);
  EXPECT_EQ(t.Find(k1), nullptr);
  EXPECT_FALSE(t.Free(k1, t0 + std::chrono::seconds(4)));
  EXPECT_TRUE(t.TakeLate(k1, t0 + std::chrono::seconds(4)));
  EXPECT_FALSE(t.TakeLate(k1, t0 + std::chrono::seconds(4)));  // counted once

  t.End(k2, /*expect_late=*/false, t0);  // answered: nothing more to come
  EXPECT_FALSE(t.TakeLate(k2, t0));
  EXPECT_TRUE(t.Free(k2, t0));
}

TEST(TryTable, LateWindowAndCapacity) {
  TryTable<int*> t(std::chrono::seconds(5), 3);
  const Clock::time_point t0 = Clock::now();
  for (uint16_t id = 0; id < 4; ++id) t.End({1, 0, id}, true, t0);
  EXPECT_EQ(t.late(), 3u);  // the oldest went first
  EXPECT_TRUE(t.Free({1, 0, 0}, t0));
  EXPECT_FALSE(t.Free({1, 0, 3}, t0));
  EXPECT_FALSE(t.TakeLate({1, 0, 2}, t0 + std::chrono::seconds(5)));  // the window is over
  EXPECT_EQ(t.late(), 0u);
  EXPECT_TRUE(t.Free({1, 0, 3}, t0 + std::chrono::seconds(5)));
}

TEST(PortRange, EphemeralRangeLessReservedPorts) {
  common::SecureRandom rng;
  const PortRange r = PortRange::FromProc("32768\t32777\n", "32770,32772-32775\n");
  EXPECT_EQ(r.low(), 32768);
  EXPECT_EQ(r.high(), 32777);
  std::set<uint16_t> seen;
  for (int i = 0; i < 500; ++i) seen.insert(r.Draw(rng));
  EXPECT_EQ(seen, (std::set<uint16_t>{32768, 32769, 32771, 32776, 32777}));

  // Unreadable text: Linux's default range, nothing reserved.
  const PortRange d = PortRange::FromProc("", "garbage");
  EXPECT_EQ(d.low(), 32768);
  EXPECT_EQ(d.high(), 60999);
  EXPECT_FALSE(d.Reserved(40000));
  const PortRange low = PortRange::FromProc("80 90", "");  // below 1024: refused
  EXPECT_EQ(low.low(), 32768);

  const PortRange all = PortRange::FromProc("5000 5001", "5000-5001");
  EXPECT_EQ(all.Draw(rng), 0);
}

}  // namespace
}  // namespace weir::fastpath
