// Time for everything that ages: cache TTLs, serve-stale windows, ECS scope
// entries. Seconds resolution is enough for DNS TTLs.
//
// The fast path reads the clock once per burst and passes the value down, so
// the virtual call costs one indirect call per burst, never one per packet.
// Tests inject FakeClock and move time explicitly; nothing sleeps for a TTL.
#pragma once

#include <atomic>
#include <cstdint>

namespace weir::common {

// Threading: NowSeconds() may be called from any thread concurrently.
class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic seconds; never goes backwards, never 0.
  virtual uint32_t NowSeconds() const = 0;
};

// CLOCK_MONOTONIC_COARSE in seconds (+1 so the value is never 0). Not
// affected by wall-clock steps, so a settimeofday never ages the cache.
class SystemClock final : public Clock {
 public:
  uint32_t NowSeconds() const override;
  static const SystemClock& Instance();
};

// Settable clock for tests. Thread-safe: the test thread moves it while
// workers read it.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(uint32_t start = 1000) : now_(start) {}
  uint32_t NowSeconds() const override { return now_.load(std::memory_order_relaxed); }
  void Set(uint32_t now) { now_.store(now, std::memory_order_relaxed); }
  void Advance(uint32_t seconds) { now_.fetch_add(seconds, std::memory_order_relaxed); }

 private:
  std::atomic<uint32_t> now_;
};

}  // namespace weir::common
