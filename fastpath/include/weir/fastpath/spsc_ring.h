// Bounded single-producer single-consumer ring: how a worker hands misses to
// the upstream thread without a lock. Capacity is a power of two.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <utility>

namespace weir::fastpath {

template <typename T, size_t N>
class SpscRing {
  static_assert((N & (N - 1)) == 0, "capacity must be a power of two");

 public:
  // Producer only. False when full (the caller counts the drop).
  bool Push(T&& v) {
    const size_t head = head_.load(std::memory_order_relaxed);
    if (head - tail_cache_ == N) {
      tail_cache_ = tail_.load(std::memory_order_acquire);
      if (head - tail_cache_ == N) return false;
    }
    slots_[head & (N - 1)] = std::move(v);
    head_.store(head + 1, std::memory_order_release);
    return true;
  }
  // Consumer only.
  bool Pop(T* out) {
    const size_t tail = tail_.load(std::memory_order_relaxed);
    if (tail == head_.load(std::memory_order_acquire)) return false;
    *out = std::move(slots_[tail & (N - 1)]);
    tail_.store(tail + 1, std::memory_order_release);
    return true;
  }

 private:
  alignas(64) std::atomic<size_t> head_{0};
  size_t tail_cache_ = 0;  // producer's view of tail
  alignas(64) std::atomic<size_t> tail_{0};
  alignas(64) std::array<T, N> slots_;
};

}  // namespace weir::fastpath
