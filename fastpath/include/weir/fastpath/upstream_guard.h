// The forwarder's own pieces of its defences against blind forgers, without
// sockets, so each is unit-tested on its own
// (docs/behaviour.md#the-front-cache):
//
//   * PortRange: the ports the pool's random-port sockets are drawn from;
//   * TryTable: the UDP tries in flight keyed by (socket, upstream, ID), and
//     the tries that ended recently, so a late answer is told from a forged
//     one and an ID is never reused while its late answer may still come.
//
// The mechanisms both tiers share live apart: the random source in
// weir/common/secure_random.h, 0x20 in weir/dns/case_randomization.h, DNS
// cookies in weir/dns/cookies.h.
//
// Threading: every object belongs to the forwarder thread.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "weir/common/secure_random.h"

namespace weir::fastpath {

// The ports the pool's sockets are drawn from: the kernel's ephemeral range
// (net.ipv4.ip_local_port_range) less net.ipv4.ip_local_reserved_ports, so
// no service that binds a fixed port outside that range (a recursor on the
// same host, say) can find it taken. Parsed from the two files' text; a
// text that does not parse gives Linux's default range, nothing reserved.
class PortRange {
 public:
  static PortRange FromProc(std::string_view range_text, std::string_view reserved_text);
  uint16_t low() const { return low_; }
  uint16_t high() const { return high_; }
  // A port of the range that is not reserved, drawn uniformly; 0 when every
  // port of the range is reserved.
  uint16_t Draw(common::SecureRandom& rng) const;
  bool Reserved(uint16_t port) const;

 private:
  uint16_t low_ = 32768;
  uint16_t high_ = 60999;
  std::vector<std::pair<uint16_t, uint16_t>> reserved_;
};

// The UDP tries in flight and those that ended recently. A key names one
// try: the socket it went out on, the upstream, the ID. `T` is what the
// forwarder keeps per try (a pointer to its question).
template <typename T>
class TryTable {
 public:
  using Clock = std::chrono::steady_clock;
  struct Key {
    int socket = -1;
    uint16_t upstream = 0;
    uint16_t id = 0;
    uint64_t packed() const {
      return (uint64_t{static_cast<uint32_t>(socket)} << 32) | (uint64_t{upstream} << 16) | id;
    }
  };

  // `late_window`: how long an ended try's answer is still expected (and
  // its key not reused); at most `late_capacity` ended tries are kept.
  TryTable(Clock::duration late_window, size_t late_capacity)
      : late_window_(late_window), late_capacity_(late_capacity) {}

  // False when the key is in flight or ended too recently: pick another.
  bool Free(Key k, Clock::time_point now) {
    Expire(now);
    const uint64_t p = k.packed();
    return !live_.contains(p) && !late_.contains(p);
  }
  void Add(Key k, T value) { live_[k.packed()] = value; }
  // The try in flight under `k`, or nullptr.
  T Find(Key k) const {
    auto it = live_.find(k.packed());
    return it == live_.end() ? T{} : it->second;
  }
  // Ends a try. `expect_late`: its answer may still come (it timed out, or
  // was abandoned), so the key is remembered for the late window.
  void End(Key k, bool expect_late, Clock::time_point now) {
    const uint64_t p = k.packed();
    live_.erase(p);
    if (!expect_late) return;
    Expire(now);
    if (late_order_.size() >= late_capacity_) {
      late_.erase(late_order_.front().first);
      late_order_.pop_front();
    }
    const Clock::time_point until = now + late_window_;
    late_[p] = until;
    late_order_.emplace_back(p, until);
  }
  // True (once) when `k` names a try that ended within the late window.
  bool TakeLate(Key k, Clock::time_point now) {
    Expire(now);
    return late_.erase(k.packed()) > 0;
  }
  size_t live() const { return live_.size(); }
  size_t late() const { return late_.size(); }

 private:
  void Expire(Clock::time_point now) {
    while (!late_order_.empty() && late_order_.front().second <= now) {
      auto it = late_.find(late_order_.front().first);
      // A key ended again later has a later deadline: keep that one.
      if (it != late_.end() && it->second <= now) late_.erase(it);
      late_order_.pop_front();
    }
  }

  Clock::duration late_window_;
  size_t late_capacity_;
  absl::flat_hash_map<uint64_t, T> live_;
  absl::flat_hash_map<uint64_t, Clock::time_point> late_;
  std::deque<std::pair<uint64_t, Clock::time_point>> late_order_;
};

}  // namespace weir::fastpath
