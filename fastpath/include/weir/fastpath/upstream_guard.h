// What makes a blind forger's answer fail on the forwarder's miss path,
// without sockets, so each piece is unit-tested on its own
// (docs/behaviour.md#the-front-cache):
//
//   * SecureRandom: IDs, ports, 0x20 bits and secrets from the kernel's
//     CSPRNG (getrandom), one syscall per 4 KiB of randomness;
//   * 0x20 (draft-vixie-dnsext-dns0x20): the query name's letters in random
//     case, the answer must echo them exactly;
//   * DNS cookies (RFC 7873, client side): an 8-byte client cookie per
//     upstream keyed by a secret, the server cookie remembered and echoed;
//   * TryTable: the UDP tries in flight keyed by (socket, upstream, ID), and
//     the tries that ended recently, so a late answer is told from a forged
//     one and an ID is never reused while its late answer may still come.
//
// Threading: every object belongs to the forwarder thread.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "weir/common/socket_address.h"
#include "weir/dns/message.h"

namespace weir::fastpath {

// Buffered getrandom(2). Not for the hit path (a syscall per refill).
class SecureRandom {
 public:
  uint64_t Next64();
  uint16_t Next16() { return static_cast<uint16_t>(Next64()); }
  // Uniform in [0, n), n > 0.
  uint32_t Below(uint32_t n);
  void Fill(uint8_t* out, size_t len);

 private:
  void Refill();
  std::array<uint8_t, 4096> buf_{};
  size_t pos_ = sizeof(buf_);
};

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
  uint16_t Draw(SecureRandom& rng) const;
  bool Reserved(uint16_t port) const;

 private:
  uint16_t low_ = 32768;
  uint16_t high_ = 60999;
  std::vector<std::pair<uint16_t, uint16_t>> reserved_;
};

// SipHash-2-4 (Aumasson and Bernstein) of `data` under `key`: the keyed PRF
// the client cookie is built with (RFC 7873 appendix A.2 suggests a keyed
// hash; RFC 9018 uses SipHash-2-4 for server cookies).
uint64_t SipHash24(const std::array<uint8_t, 16>& key, std::span<const uint8_t> data);

// Sets the case of every ASCII letter of the wire name `name` (labels with
// their length bytes, uncompressed) from random bits. Returns the number of
// letters, the bits of entropy added.
int RandomizeCase(uint8_t* name, size_t len, SecureRandom& rng);

// True when the answer's question name (at offset 12, never compressed) is
// byte for byte the one sent, case included. Both messages must hold at
// least 12 + qname_len bytes (the caller parsed them).
bool SameSpelling(std::span<const uint8_t> sent, std::span<const uint8_t> answer, size_t qname_len);

// An upstream's 0x20 state: on by default; off for a while after it sent
// answers whose question case differs from ours more often than it echoed
// it (a server or middlebox that rewrites names). Only answers that carried
// our socket, ID and source count, so a blind forger cannot turn it off.
class CaseRandomization {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kMismatchesToDisable = 3;
  static constexpr std::chrono::minutes kRetryAfter{10};

  bool Enabled(Clock::time_point now) {
    if (!enabled_ && now >= retry_at_) {
      enabled_ = true;
      echoed_ = mismatched_ = 0;
    }
    return enabled_;
  }
  void Echoed() { ++echoed_; }
  // Returns true when this mismatch turned 0x20 off for the upstream.
  bool Mismatched(Clock::time_point now) {
    ++mismatched_;
    if (!enabled_ || mismatched_ < kMismatchesToDisable || mismatched_ <= echoed_) return false;
    enabled_ = false;
    retry_at_ = now + kRetryAfter;
    return true;
  }

 private:
  bool enabled_ = true;
  uint32_t echoed_ = 0;
  uint32_t mismatched_ = 0;
  Clock::time_point retry_at_{};
};

// RFC 7873 client side, one per upstream.
class UpstreamCookie {
 public:
  static constexpr size_t kClientLen = 8;
  static constexpr size_t kMaxServerLen = 32;

  // The client cookie: SipHash-2-4 of the upstream's address and port under
  // `secret` (the same for every upstream, drawn at start), so each upstream
  // sees its own client cookie and none can learn another's.
  UpstreamCookie(const std::array<uint8_t, 16>& secret, const common::SocketAddress& upstream);

  // The COOKIE option data to send: client cookie, then the server cookie
  // last learned (if any).
  std::span<const uint8_t> OptionData() const { return {data_.data(), kClientLen + server_len_}; }
  // True once the upstream returned a valid cookie: from then on an answer
  // over UDP without one is refused (a forger cannot know the client cookie).
  bool server_supports() const { return server_supports_; }

  enum class Verdict : uint8_t {
    kAbsent,     // no COOKIE option in the answer
    kOk,         // our client cookie, the server cookie (if any) remembered
    kWrong,      // another client cookie: not an answer to us
    kMalformed,  // length not 8 or 16..40
  };
  // Checks the COOKIE option of an answer (RFC 7873 5.3) and learns the
  // server cookie of a good one.
  Verdict Check(const dns::Message& answer);
  // The upstream answered over TCP without a cookie: it stopped supporting
  // them (a downgrade by a forger is impossible over TCP).
  void Forget() {
    server_supports_ = false;
    server_len_ = 0;
  }

 private:
  std::array<uint8_t, kClientLen + kMaxServerLen> data_{};
  size_t server_len_ = 0;
  bool server_supports_ = false;
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
