#include "weir/fastpath/upstream_ring.h"

#include <algorithm>
#include <cmath>

namespace weir::fastpath {

UpstreamRing::UpstreamRing(int count, int vnodes, double load_factor)
    : up_(count, true), load_(count, 0), load_factor_(load_factor) {
  for (int u = 0; u < count; ++u) {
    for (int v = 0; v < vnodes; ++v) {
      const uint64_t key = (uint64_t(u) << 32) | uint32_t(v);
      points_.push_back({StableHash(reinterpret_cast<const uint8_t*>(&key), sizeof(key), 0x77656972), u});
    }
  }
  std::sort(points_.begin(), points_.end(), [](const Point& a, const Point& b) { return a.hash < b.hash; });
}

int UpstreamRing::Pick(uint64_t hash, uint64_t exclude) const {
  if (points_.empty()) return -1;
  int live = 0;
  for (int i = 0; i < size(); ++i) live += (up_[i] && !(exclude >> i & 1)) ? 1 : 0;
  if (live == 0) return -1;
  // Bound: ceil(c * (total + 1) / live) in-flight queries per upstream.
  const int bound = static_cast<int>(std::ceil(load_factor_ * (total_load_ + 1) / live));
  auto it = std::lower_bound(points_.begin(), points_.end(), hash,
                             [](const Point& p, uint64_t h) { return p.hash < h; });
  int fallback = -1;
  for (size_t n = 0; n < points_.size(); ++n, ++it) {
    if (it == points_.end()) it = points_.begin();
    const int u = it->upstream;
    if (!up_[u] || (exclude >> u & 1)) continue;
    if (fallback < 0) fallback = u;
    if (load_[u] < bound) return u;
  }
  return fallback;
}

std::vector<double> UpstreamRing::Shares(const std::vector<bool>& up) const {
  std::vector<double> share(up_.size(), 0.0);
  const size_t n = points_.size();
  if (n == 0) return share;
  auto live = [&](int u) { return static_cast<size_t>(u) < up.size() && up[u]; };
  // The owner of each point's arc: the first live point at or after it.
  std::vector<int> owner(n, -1);
  int next = -1;
  for (size_t pass = 0; pass < 2; ++pass) {  // twice round, for the wrap
    for (size_t k = n; k-- > 0;) {
      if (live(points_[k].upstream)) next = points_[k].upstream;
      owner[k] = next;
    }
  }
  constexpr long double kSpace = 18446744073709551616.0L;  // 2^64
  for (size_t k = 0; k < n; ++k) {
    if (owner[k] < 0) continue;
    // The arc that ends at point k: the hashes after the previous point.
    const uint64_t arc =
        k == 0 ? points_[0].hash - points_[n - 1].hash : points_[k].hash - points_[k - 1].hash;
    share[owner[k]] += static_cast<double>((n == 1 ? kSpace : static_cast<long double>(arc)) / kSpace);
  }
  return share;
}

}  // namespace weir::fastpath
