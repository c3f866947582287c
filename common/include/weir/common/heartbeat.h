// Signs of life for the systemd watchdog. Every long-running loop (a
// fastpath worker, its TCP thread and forwarder, the recursor's loops)
// beats its Heartbeat once per turn; each of those loops turns at least
// every 100 ms, busy or idle. The daemon's main thread pets the watchdog
// only while every heart has beaten within the stall limit, so a wedged
// worker gets the daemon restarted instead of a healthy-looking signal
// thread keeping it alive (docs/operator-guide.md#running-under-systemd).
//
// Threading: Beat() from the loop's own thread only (one writer);
// beats() from any thread. HeartbeatMonitor belongs to one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace weir::common {

class Heartbeat {
 public:
  void Beat() { beats_.store(beats_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  uint64_t beats() const { return beats_.load(std::memory_order_relaxed); }

 private:
  // A line of its own: the reader never bounces the writer's hot line.
  alignas(64) std::atomic<uint64_t> beats_{0};
};

// A heart and the name an operator reads in the stall message.
struct NamedHeart {
  std::string name;  // "worker 2", "forwarder"
  const Heartbeat* heart = nullptr;
};

class HeartbeatMonitor {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts watching; a heart counts as alive at `now`.
  void Watch(std::vector<NamedHeart> hearts, Clock::time_point now);
  // The hearts that have not beaten for `limit` or longer at `now`, each as
  // "NAME (no progress for N ms)"; empty when every heart is alive.
  std::vector<std::string> Stalled(Clock::time_point now, Clock::duration limit);
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    NamedHeart heart;
    uint64_t last = 0;
    Clock::time_point changed;
  };
  std::vector<Entry> entries_;
};

}  // namespace weir::common
