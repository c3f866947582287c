// A counter written by exactly one thread and read by any (the metrics
// scrape): the writer's increment is a relaxed load and store, no atomic
// read-modify-write, so it costs what a plain counter does on the data path.
#pragma once

#include <atomic>
#include <cstdint>

namespace weir::common {

class OwnedCounter {
 public:
  // Only the owning thread calls Add.
  void Add(uint64_t n = 1) { v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  uint64_t Read() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

}  // namespace weir::common
