// Time for the daemons' control logic: the steady clock and one-shot timers
// behind one interface, so the logic that waits (upstream tries, answer
// deadlines, server health) runs on the event loop in the daemons and on
// a hand-moved clock in unit tests - no sleep, no socket.
//
// Both tiers use it: weir-fastpath's forwarder and weir-recursor's
// resolvers.
//
// Threading: an object belongs to one thread (the loop's).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <utility>

#include "weir/net/event_loop.h"

namespace weir::net {

class Timers {
 public:
  using Clock = std::chrono::steady_clock;
  using TimerId = uint64_t;  // never 0, never reused
  virtual ~Timers() = default;
  virtual Clock::time_point Now() const = 0;
  // `fn` runs once, at or after `at`, unless cancelled first.
  virtual TimerId At(Clock::time_point at, std::function<void()> fn) = 0;
  // Unknown or already run ids are ignored.
  virtual void Cancel(TimerId id) = 0;
  TimerId After(std::chrono::milliseconds delay, std::function<void()> fn) {
    return At(Now() + delay, std::move(fn));
  }
};

// The daemons' timers: the event loop's, on the real steady clock.
class LoopTimers final : public Timers {
 public:
  explicit LoopTimers(EventLoop& loop) : loop_(loop) {}
  Clock::time_point Now() const override { return Clock::now(); }
  TimerId At(Clock::time_point at, std::function<void()> fn) override { return loop_.At(at, std::move(fn)); }
  void Cancel(TimerId id) override { loop_.Cancel(id); }

 private:
  EventLoop& loop_;
};

// Timers on a clock that moves only when told (unit tests): Advance runs
// what falls due, in time order (ties in the order they were set),
// including timers that those callbacks set within the step.
class ManualTimers final : public Timers {
 public:
  explicit ManualTimers(Clock::time_point start = Clock::time_point() + std::chrono::hours(1))
      : now_(start) {}
  Clock::time_point Now() const override { return now_; }
  TimerId At(Clock::time_point at, std::function<void()> fn) override {
    const TimerId id = next_++;
    due_.emplace(std::make_pair(at, id), std::move(fn));
    return id;
  }
  void Cancel(TimerId id) override {
    for (auto it = due_.begin(); it != due_.end(); ++it) {
      if (it->first.second == id) {
        due_.erase(it);
        return;
      }
    }
  }
  // Moves the clock by `d`, running every timer due by the new time.
  void Advance(Clock::duration d) {
    const Clock::time_point to = now_ + d;
    while (!due_.empty() && due_.begin()->first.first <= to) {
      auto it = due_.begin();
      now_ = std::max(now_, it->first.first);
      std::function<void()> fn = std::move(it->second);
      due_.erase(it);
      fn();
    }
    now_ = to;
  }
  size_t pending() const { return due_.size(); }

 private:
  Clock::time_point now_;
  TimerId next_ = 1;
  std::map<std::pair<Clock::time_point, TimerId>, std::function<void()>> due_;
};

}  // namespace weir::net
