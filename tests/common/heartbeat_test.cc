#include "weir/common/heartbeat.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace weir::common {
namespace {

using std::chrono::milliseconds;

TEST(HeartbeatMonitor, ReportsOnlyTheHeartsThatStopped) {
  Heartbeat a, b;
  HeartbeatMonitor m;
  const auto t0 = HeartbeatMonitor::Clock::time_point{} + std::chrono::hours(1);
  m.Watch({{"worker 0", &a}, {"forwarder", &b}, {"missing", nullptr}}, t0);
  EXPECT_EQ(m.size(), 2u);
  // Nobody beat yet, but the limit has not passed.
  EXPECT_TRUE(m.Stalled(t0 + milliseconds(999), milliseconds(1000)).empty());
  a.Beat();
  // b has not beaten for 1 s: only b.
  auto stuck = m.Stalled(t0 + milliseconds(1000), milliseconds(1000));
  ASSERT_EQ(stuck.size(), 1u);
  EXPECT_EQ(stuck[0], "forwarder (no progress for 1000 ms)");
  // a beat at 1000 ms: alive until 2000 ms, whatever b does.
  b.Beat();
  EXPECT_TRUE(m.Stalled(t0 + milliseconds(1500), milliseconds(1000)).empty());
  stuck = m.Stalled(t0 + milliseconds(2000), milliseconds(1000));
  ASSERT_EQ(stuck.size(), 1u);
  EXPECT_EQ(stuck[0], "worker 0 (no progress for 1000 ms)");
  a.Beat();
  b.Beat();
  EXPECT_TRUE(m.Stalled(t0 + milliseconds(2600), milliseconds(1000)).empty());
}

TEST(HeartbeatMonitor, BeatsFromAnotherThreadAreSeen) {
  Heartbeat h;
  std::atomic<bool> go{true};
  std::thread t([&] {
    while (go.load()) {
      h.Beat();
      std::this_thread::sleep_for(milliseconds(1));
    }
  });
  HeartbeatMonitor m;
  auto now = HeartbeatMonitor::Clock::now();
  m.Watch({{"loop", &h}}, now);
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(milliseconds(5));
    now += milliseconds(100);  // a limit of 50 ms, passed twice per check
    m.Stalled(now, milliseconds(50));
  }
  go = false;
  t.join();
  const uint64_t last = h.beats();
  EXPECT_GT(last, 0u);
  m.Stalled(now, milliseconds(50));  // takes the last count
  EXPECT_EQ(m.Stalled(now + milliseconds(50), milliseconds(50)).size(), 1u);
}

}  // namespace
}  // namespace weir::common
