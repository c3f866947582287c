// Calls from other threads run on an event loop's thread, the caller waiting
// a bounded time. A daemon whose state belongs to its loop thread (plain
// counters, caches) reads it this way from another thread, a metrics scrape
// say, without a lock or an atomic on the loop's side.
//
// Threading: Call() from any thread but the loop's; RunPending() on the
// loop's thread, from its wake handler (EventLoop::SetWakeHandler).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

#include "weir/net/event_loop.h"

namespace weir::net {

class LoopMailbox {
 public:
  explicit LoopMailbox(EventLoop& loop) : loop_(loop) {}
  LoopMailbox(const LoopMailbox&) = delete;
  LoopMailbox& operator=(const LoopMailbox&) = delete;

  // Runs `fn` on the loop thread and returns true once it has run. When
  // the loop has not started it within `timeout` (it is stuck, or not
  // running), returns false and `fn` never runs, so it may refer to the
  // caller's stack. Once started, `fn` is waited for to its end.
  bool Call(std::function<void()> fn, std::chrono::milliseconds timeout);

  // Runs the calls posted so far. Loop thread.
  void RunPending();

 private:
  struct Pending {
    std::function<void()> fn;
    enum class State { kQueued, kRunning, kDone, kAbandoned } state = State::kQueued;
  };

  EventLoop& loop_;
  std::mutex mu_;
  std::condition_variable done_;
  std::deque<std::shared_ptr<Pending>> queue_;
};

}  // namespace weir::net
