// Calls posted to an event loop from other threads: they run on the loop's
// thread, and a loop that does not take one in time leaves it unrun.
#include "weir/net/loop_mailbox.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace weir::net {
namespace {

using std::chrono::milliseconds;

class LoopThread {
 public:
  LoopThread() {
    EXPECT_TRUE(loop.Init().ok());
    loop.SetWakeHandler([this] { mailbox.RunPending(); });
    thread_ = std::thread([this] {
      loop_id = std::this_thread::get_id();
      started.store(true);
      while (running.load()) loop.RunOnce(milliseconds(100));
    });
    while (!started.load()) std::this_thread::yield();
  }
  ~LoopThread() {
    running.store(false);
    loop.Wake();
    thread_.join();
  }

  EventLoop loop;
  LoopMailbox mailbox{loop};
  std::atomic<bool> started{false}, running{true};
  std::thread::id loop_id;  // written before `started`

 private:
  std::thread thread_;
};

TEST(LoopMailbox, RunsTheCallOnTheLoopThread) {
  LoopThread t;
  std::thread::id ran_on;
  int state = 0;  // the loop thread's, read here only after Call returns
  ASSERT_TRUE(t.mailbox.Call(
      [&] {
        ran_on = std::this_thread::get_id();
        state = 42;
      },
      milliseconds(5000)));
  EXPECT_EQ(ran_on, t.loop_id);
  EXPECT_EQ(state, 42);
}

TEST(LoopMailbox, ManyThreadsAtOnce) {
  LoopThread t;
  uint64_t counter = 0;  // loop thread only
  std::vector<std::thread> callers;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    callers.emplace_back([&] {
      for (int j = 0; j < 100; ++j) ok += t.mailbox.Call([&] { ++counter; }, milliseconds(5000));
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(ok.load(), 800);
  uint64_t seen = 0;
  ASSERT_TRUE(t.mailbox.Call([&] { seen = counter; }, milliseconds(5000)));
  EXPECT_EQ(seen, 800u);
}

TEST(LoopMailbox, ACallTheLoopDoesNotTakeInTimeNeverRuns) {
  EventLoop loop;  // never run
  ASSERT_TRUE(loop.Init().ok());
  LoopMailbox mailbox(loop);
  bool ran = false;
  EXPECT_FALSE(mailbox.Call([&] { ran = true; }, milliseconds(20)));
  mailbox.RunPending();  // the loop comes back: the abandoned call is skipped
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace weir::net
