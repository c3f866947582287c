// Consistent hashing of (partition, qname) onto upstream recursors with
// bounded load (Mirrokni et al., "Consistent Hashing with Bounded Loads"):
// each cache entry lives on one recursor (seed 002 7.1), a dead recursor's
// share moves to the next live one on the ring only, and no recursor takes
// more than `load_factor` times the mean in-flight load.
//
// Threading: owned by the miss thread; not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "weir/common/hash.h"

namespace weir::fastpath {

class UpstreamRing {
 public:
  // `count` upstreams, `vnodes` points each on the ring.
  UpstreamRing(int count, int vnodes = 128, double load_factor = 1.25);

  // The upstream for `hash`, skipping those marked down, those in `exclude`
  // (a bit mask of already-tried upstreams) and those over the load bound.
  // Returns -1 when every upstream is down or excluded.
  int Pick(uint64_t hash, uint64_t exclude = 0) const;

  void SetUp(int i, bool up) { up_[i] = up; }
  bool IsUp(int i) const { return up_[i]; }
  void AddLoad(int i, int delta) {
    load_[i] += delta;
    total_load_ += delta;
  }
  int load(int i) const { return load_[i]; }
  int size() const { return static_cast<int>(up_.size()); }

  // The share of the hash space each upstream owns (sums to 1 over the
  // live ones) when the upstreams with up[i] false are down: their arcs go
  // to the next live point, as Pick() sends them. Reads only the points,
  // fixed at construction, so any thread may call it.
  std::vector<double> Shares(const std::vector<bool>& up) const;

 private:
  struct Point {
    uint64_t hash;
    int upstream;
  };
  std::vector<Point> points_;  // sorted by hash
  std::vector<bool> up_;
  std::vector<int> load_;
  int total_load_ = 0;
  double load_factor_;
};

// The ring's hash of a key's bytes: common::HashBytes, the same in every
// process, node and release, so every front node maps a question to the same
// recursor, before and after an upgrade (tests/fastpath/upstream_ring_test.cc
// pins where keys land).
inline uint64_t StableHash(const uint8_t* data, size_t len, uint64_t seed = 0) {
  return common::HashBytes(data, len, seed);
}

}  // namespace weir::fastpath
