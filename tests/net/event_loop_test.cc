// The event loop: descriptor callbacks, one-shot timers, cross-thread wake,
// and descriptors unwatched (and their numbers reused) inside one batch.
#include "weir/net/event_loop.h"

#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <thread>
#include <vector>

namespace weir::net {
namespace {

using std::chrono::milliseconds;

struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    r = fds[0];
    w = fds[1];
  }
  ~Pipe() {
    if (r >= 0) close(r);
    if (w >= 0) close(w);
  }
  void Poke() const { ASSERT_EQ(write(w, "x", 1), 1); }
};

TEST(EventLoop, CallsTheCallbackOfAReadyDescriptor) {
  EventLoop loop;
  ASSERT_TRUE(loop.Init().ok());
  Pipe p;
  int calls = 0;
  loop.Watch(p.r, EPOLLIN, [&](uint32_t ev) {
    EXPECT_TRUE(ev & EPOLLIN);
    char c;
    ASSERT_EQ(read(p.r, &c, 1), 1);
    ++calls;
  });
  EXPECT_EQ(loop.RunOnce(milliseconds(0)), 0);
  p.Poke();
  EXPECT_EQ(loop.RunOnce(milliseconds(1000)), 1);
  EXPECT_EQ(calls, 1);
  loop.Unwatch(p.r);
  p.Poke();
  EXPECT_EQ(loop.RunOnce(milliseconds(0)), 0);
  EXPECT_FALSE(loop.Watching(p.r));
}

TEST(EventLoop, ADescriptorUnwatchedInTheSameBatchIsNotCalledEvenIfItsNumberIsReused) {
  EventLoop loop;
  ASSERT_TRUE(loop.Init().ok());
  Pipe a, b;
  a.Poke();
  b.Poke();
  int a_calls = 0, b_calls = 0, reused_calls = 0;
  int reused = -1;
  // Whichever runs first closes the other and watches a new descriptor that
  // gets the freed number: the stale event must not reach the new callback.
  auto first = [&](Pipe& self, Pipe& other, int& calls) {
    return [&](uint32_t) {
      ++calls;
      if (reused >= 0) return;
      loop.Unwatch(other.r);
      close(other.r);
      const int old = other.r;
      other.r = -1;
      int fds[2];
      ASSERT_EQ(pipe(fds), 0);
      reused = fds[0];
      close(fds[1]);  // readable (EOF) at once
      if (reused == old) loop.Watch(reused, EPOLLIN, [&](uint32_t) { ++reused_calls; });
      char c;
      [[maybe_unused]] ssize_t n = read(self.r, &c, 1);
    };
  };
  loop.Watch(a.r, EPOLLIN, first(a, b, a_calls));
  loop.Watch(b.r, EPOLLIN, first(b, a, b_calls));
  loop.RunOnce(milliseconds(1000));
  EXPECT_EQ(a_calls + b_calls, 1);
  EXPECT_EQ(reused_calls, 0);
  if (reused >= 0) {
    loop.Unwatch(reused);
    close(reused);
  }
}

TEST(EventLoop, ACallbackMayReplaceOrRemoveItself) {
  EventLoop loop;
  ASSERT_TRUE(loop.Init().ok());
  Pipe p;
  p.Poke();
  int second = 0;
  loop.Watch(p.r, EPOLLIN, [&](uint32_t) {
    loop.Watch(p.r, EPOLLIN, [&](uint32_t) {
      ++second;
      loop.Unwatch(p.r);
    });
  });
  loop.RunOnce(milliseconds(1000));
  loop.RunOnce(milliseconds(1000));
  EXPECT_EQ(second, 1);
  EXPECT_FALSE(loop.Watching(p.r));
}

TEST(EventLoop, TimersRunInOrderOnceAndCanBeCancelled) {
  EventLoop loop;
  ASSERT_TRUE(loop.Init().ok());
  std::vector<int> order;
  const auto now = EventLoop::Clock::now();
  loop.At(now + milliseconds(30), [&] { order.push_back(3); });
  loop.At(now + milliseconds(10), [&] { order.push_back(1); });
  const auto cancelled = loop.At(now + milliseconds(20), [&] { order.push_back(2); });
  loop.At(now, [&] {
    order.push_back(0);
    loop.After(milliseconds(0), [&] { order.push_back(9); });  // added from a timer: runs later
  });
  loop.Cancel(cancelled);
  const auto deadline = now + milliseconds(2000);
  while (order.size() < 4 && EventLoop::Clock::now() < deadline) loop.RunOnce(milliseconds(100));
  EXPECT_EQ(order, (std::vector<int>{0, 9, 1, 3}));
  // The wait ends when the next timer is due, not at max_wait.
  const auto t0 = EventLoop::Clock::now();
  bool ran = false;
  loop.After(milliseconds(20), [&] { ran = true; });
  while (!ran) loop.RunOnce(milliseconds(5000));
  EXPECT_LT(EventLoop::Clock::now() - t0, milliseconds(1000));
}

TEST(EventLoop, WakeFromAnotherThreadRunsTheHandlerOnTheLoop) {
  EventLoop loop;
  ASSERT_TRUE(loop.Init().ok());
  const auto loop_thread = std::this_thread::get_id();
  bool woke = false;
  loop.SetWakeHandler([&] {
    EXPECT_EQ(std::this_thread::get_id(), loop_thread);
    woke = true;
  });
  std::thread t([&] { loop.Wake(); });
  t.join();
  const auto deadline = EventLoop::Clock::now() + milliseconds(2000);
  while (!woke && EventLoop::Clock::now() < deadline) loop.RunOnce(milliseconds(100));
  EXPECT_TRUE(woke);
}

}  // namespace
}  // namespace weir::net
