// A backend's address data for the clients whose misses are upstream, named
// by the 64-bit token of a ClientRoute: slot index and a generation, so a
// token that was already taken (or never issued) finds nothing.
//
// Threading: one table per worker, used on the worker's thread only.
#pragma once

#include <cstdint>
#include <vector>

namespace weir::fastpath {

template <typename T>
class RouteTable {
 public:
  // Keeps `data` until Take; the token names it.
  uint64_t Put(const T& data) {
    uint32_t i;
    if (!free_.empty()) {
      i = free_.back();
      free_.pop_back();
    } else {
      i = static_cast<uint32_t>(slots_.size());
      slots_.emplace_back();
    }
    Slot& s = slots_[i];
    s.data = data;
    s.used = true;
    ++held_;
    return (uint64_t{s.generation} << 32) | i;
  }

  // Moves the data of `token` to *out and frees its slot; false when the
  // token names nothing held.
  bool Take(uint64_t token, T* out) {
    const auto i = static_cast<uint32_t>(token);
    if (i >= slots_.size()) return false;
    Slot& s = slots_[i];
    if (!s.used || s.generation != static_cast<uint32_t>(token >> 32)) return false;
    *out = s.data;
    s.used = false;
    ++s.generation;
    free_.push_back(i);
    --held_;
    return true;
  }

  size_t held() const { return held_; }

 private:
  struct Slot {
    T data{};
    uint32_t generation = 1;
    bool used = false;
  };
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
  size_t held_ = 0;
};

}  // namespace weir::fastpath
