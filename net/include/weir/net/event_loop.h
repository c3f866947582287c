// One thread's event loop: file descriptors watched with epoll (level
// triggered), one callback each, and one-shot timers on the steady clock.
// Every daemon loop that is not a data-path worker runs on it.
//
// Threading: everything on the loop's thread except Wake(), which any
// thread may call (the wake handler then runs on the loop's thread).
// Callbacks may watch, unwatch and close descriptors and add or cancel
// timers, including their own: an event for a descriptor unwatched earlier
// in the same batch is never delivered, even if the number was reused.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <queue>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace weir::net {

class EventLoop {
 public:
  using Clock = std::chrono::steady_clock;
  using FdCallback = std::function<void(uint32_t events)>;
  using TimerId = uint64_t;

  EventLoop() = default;
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  absl::Status Init();

  // Starts watching `fd` for `events` (EPOLLIN, EPOLLOUT...), or replaces
  // the events and callback of a watched one.
  void Watch(int fd, uint32_t events, FdCallback cb);
  // Changes the events of a watched descriptor, keeping its callback.
  void Modify(int fd, uint32_t events);
  // Stops watching (before close(fd)); unknown descriptors are ignored.
  void Unwatch(int fd);
  bool Watching(int fd) const { return fds_.contains(fd); }
  uint32_t EventsOf(int fd) const;

  // `fn` runs once at or after `at`. Ids are never reused.
  TimerId At(Clock::time_point at, std::function<void()> fn);
  TimerId After(std::chrono::milliseconds delay, std::function<void()> fn) {
    return At(Clock::now() + delay, std::move(fn));
  }
  void Cancel(TimerId id) { timer_fns_.erase(id); }

  // Runs the handler on the loop thread after Wake() (eventfd).
  void SetWakeHandler(std::function<void()> fn) { on_wake_ = std::move(fn); }
  // Run just before and just after the loop blocks in epoll_wait (an RCU
  // reader goes offline for the wait, say).
  void SetWaitHooks(std::function<void()> before, std::function<void()> after) {
    before_wait_ = std::move(before);
    after_wait_ = std::move(after);
  }
  void Wake();

  // Waits up to `max_wait` (less when a timer is due), dispatches the ready
  // descriptors, then every due timer. Returns the number of callbacks run.
  int RunOnce(std::chrono::milliseconds max_wait);

 private:
  struct Watched {
    uint32_t events = 0;
    uint32_t generation = 0;
    FdCallback cb;
  };
  struct Due {
    Clock::time_point at;
    TimerId id;
    bool operator>(const Due& o) const { return at > o.at || (at == o.at && id > o.id); }
  };

  int epfd_ = -1;
  int wakefd_ = -1;
  uint32_t next_generation_ = 1;
  TimerId next_timer_ = 1;
  absl::flat_hash_map<int, Watched> fds_;
  absl::flat_hash_map<TimerId, std::function<void()>> timer_fns_;
  std::priority_queue<Due, std::vector<Due>, std::greater<Due>> timers_;
  std::function<void()> on_wake_;
  std::function<void()> before_wait_, after_wait_;
  // Callbacks unwatched or replaced during a dispatch are destroyed after it.
  std::vector<FdCallback> graveyard_;
};

// Stops a thread that turns `loop` while `running` is true: clears the
// flag, wakes the loop and joins the thread. False (nothing done) when it
// was not running.
bool StopLoopThread(std::atomic<bool>& running, EventLoop& loop, std::thread& thread);

}  // namespace weir::net
