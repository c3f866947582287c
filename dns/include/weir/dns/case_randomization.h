// 0x20 (draft-vixie-dnsext-dns0x20): the letters of an outgoing question
// name go out in random case, and a genuine answer echoes them byte for
// byte, so a blind forger must guess one more bit per letter. Used by the
// fastpath's forwarder and by the recursor's last hop.
//
// CaseMemory remembers the servers (address and port) found not to
// preserve the case, so they are asked without 0x20 for a while. Both
// callers teach it only from proof a blind forger cannot give: an answer
// over TCP (the same question asked again after a UDP answer in another
// case) whose question is in another case than sent.
//
// Pure logic with the time passed in. Threading: a CaseMemory belongs to
// one thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "weir/common/socket_address.h"

namespace weir::dns {

// Sets the case of each ASCII letter of the uncompressed wire name
// `name_wire` (labels with their length bytes) from one random bit each;
// length bytes and other bytes stay. `rng()` gives 64 random bits
// (common::SecureRandom in the daemons). Returns the number of letters,
// the bits of entropy added (0: the name carries none).
template <typename Rng>
int RandomizeCase(std::span<uint8_t> name_wire, Rng& rng) {
  int letters = 0;
  uint64_t bits = 0;
  int left = 0;
  size_t pos = 0;
  while (pos < name_wire.size() && name_wire[pos] != 0) {
    const size_t end = std::min(name_wire.size(), pos + 1 + name_wire[pos]);
    for (size_t i = pos + 1; i < end; ++i) {
      const uint8_t lower = name_wire[i] | 0x20;
      if (lower < 'a' || lower > 'z') continue;
      if (left == 0) {
        bits = static_cast<uint64_t>(rng());
        left = 64;
      }
      name_wire[i] = (bits & 1) ? static_cast<uint8_t>(lower & ~0x20) : lower;
      bits >>= 1;
      --left;
      ++letters;
    }
    pos = end;
  }
  return letters;
}

// True when `answer` (a whole message) carries `sent_name` (the
// uncompressed question name as sent) at offset 12, byte for byte: the
// same case. A message too short to hold it never matches.
bool SameSpelling(std::span<const uint8_t> answer, std::span<const uint8_t> sent_name);

// The servers that do not preserve the question's case: asked without
// 0x20 until `kHold` has passed since the last proof. Bounded: a full table
// forgets everything (each server then costs one more TCP query to learn
// again).
class CaseMemory {
 public:
  using Time = std::chrono::steady_clock::time_point;
  static constexpr std::chrono::seconds kHold{900};
  static constexpr size_t kMaxServers = 100000;

  bool Preserves(const common::SocketAddress& server, Time now) const;
  void NotPreserved(const common::SocketAddress& server, Time now);
  size_t size() const { return until_.size(); }

 private:
  absl::flat_hash_map<std::string, Time> until_;
};

// The key of a server in CaseMemory and CookieJar: its address bytes, then
// its port (servers on one address with different ports are different
// servers: the forwarder's upstreams often are).
std::string ServerKey(const common::SocketAddress& server);

}  // namespace weir::dns
