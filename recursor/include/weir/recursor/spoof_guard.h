// The last hop's defences against blind spoofing, beside the random ID and
// the random source port of each query (docs/behaviour.md#the-recursive-tier):
//
//  * 0x20 (draft-vixie-dnsext-dns0x20): the letters of the question name go
//    out in random case and a genuine answer echoes them byte for byte.
//    CaseMemory remembers the authoritative addresses that do not preserve
//    the case, so they are asked without 0x20 for a while.
//  * DNS cookies (RFC 7873, client side): CookieJar makes the client cookie
//    of each (local address, server address) from a secret, remembers the
//    server cookies and which servers do cookies, and judges the COOKIE
//    option of an answer.
//
// Pure logic with the time passed in, so it is unit-tested without sockets.
// Threading: a CaseMemory or CookieJar is owned by one thread (the loop's).
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "weir/common/socket_address.h"

namespace weir::recursor {

// ---------------------------------------------------------------- 0x20

// Random bits the way unbound takes them from arc4random: from the kernel
// (getrandom), a buffer at a time, so that what an authoritative sees of
// the IDs and the case of its own queries tells nothing about the next
// query to another server (a Mersenne Twister's outputs would).
class SecureRandom {
 public:
  using result_type = uint64_t;
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return ~result_type{0}; }
  result_type operator()();

 private:
  std::array<uint64_t, 64> buf_{};
  size_t left_ = 0;
};

// Flips the case of each letter of an uncompressed wire name at random
// (one random bit per letter); length bytes and other bytes stay. Returns
// the number of letters (0: the name carries no 0x20 entropy).
template <typename Rng>
int RandomizeCase(std::span<uint8_t> name_wire, Rng& rng) {
  int letters = 0;
  uint64_t bits = 0;
  int left = 0;
  size_t pos = 0;
  while (pos < name_wire.size() && name_wire[pos] != 0) {
    const size_t end = std::min(name_wire.size(), pos + 1 + name_wire[pos]);
    for (size_t i = pos + 1; i < end; ++i) {
      const uint8_t c = name_wire[i];
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) continue;
      if (left == 0) {
        bits = static_cast<uint64_t>(rng());
        left = 64;
      }
      name_wire[i] = (bits & 1) ? static_cast<uint8_t>(c | 0x20) : static_cast<uint8_t>(c & ~0x20);
      bits >>= 1;
      --left;
      ++letters;
    }
    pos = end;
  }
  return letters;
}

// True when `reply` (a whole message) carries `sent` (the uncompressed
// question name as sent) at offset 12, byte for byte: same case.
bool SameSpelling(std::span<const uint8_t> reply, std::span<const uint8_t> sent);

// Authoritative addresses that answered with the question name in another
// case than asked (over TCP, where that cannot be a blind spoof): they are
// asked without 0x20 until `hold` has passed. Bounded: a full table forgets
// everything (each server then costs one more TCP query to learn again).
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

// ---------------------------------------------------------------- cookies

// SipHash-2-4 (Aumasson and Bernstein) of `data` under a 16-byte key: the
// keyed pseudo-random function behind the client cookies (RFC 7873 4.1;
// RFC 9018 uses the same function for server cookies).
uint64_t SipHash24(const std::array<uint8_t, 16>& key, std::span<const uint8_t> data);

class CookieJar {
 public:
  static constexpr size_t kClientCookie = 8;
  static constexpr size_t kMaxServerCookie = 32;  // RFC 7873 4: 8 to 32 bytes
  static constexpr size_t kMaxOption = kClientCookie + kMaxServerCookie;
  static constexpr size_t kMaxServers = 100000;

  explicit CookieJar(const std::array<uint8_t, 16>& secret) : secret_(secret) {}

  // The client cookie towards `server` from `local` (addresses only, no
  // ports: RFC 7873 4.1 ties it to the client and server IP addresses).
  std::array<uint8_t, kClientCookie> ClientCookie(const common::SocketAddress& local,
                                                  const common::SocketAddress& server) const;

  // The COOKIE option data for a query: the client cookie, then the
  // server's cookie when one is known. Returns its length (8, or 16 to 40).
  size_t OptionData(const std::array<uint8_t, kClientCookie>& client, const common::SocketAddress& server,
                    uint8_t out[kMaxOption]) const;

  enum class Verdict : uint8_t {
    kGood,         // the client cookie sent, and a server cookie of 8 to 32 bytes
    kAbsent,       // no COOKIE option in the answer
    kWrongClient,  // not the client cookie sent: not an answer to this query (RFC 7873 5.3)
    kMalformed,    // a COOKIE option of a length no server sends
  };
  // Judges the COOKIE option of an answer to a query that carried
  // `client`. `present`/`data`: the answer's option (data without header).
  static Verdict Check(const std::array<uint8_t, kClientCookie>& client, bool present,
                       std::span<const uint8_t> data);

  // The server cookie of a good answer (`data` as judged kGood): it goes
  // into the next queries to that server, which is from now on known to do
  // cookies.
  void Learn(const common::SocketAddress& server, std::span<const uint8_t> data);
  // A server known to do cookies answered over TCP without one: it stopped
  // doing them (software changed); its answers over UDP are no longer held
  // to it.
  void Forget(const common::SocketAddress& server) { servers_.erase(Key(server)); }
  bool DoesCookies(const common::SocketAddress& server) const { return servers_.contains(Key(server)); }
  size_t servers() const { return servers_.size(); }

 private:
  struct ServerCookie {
    uint8_t len = 0;
    std::array<uint8_t, kMaxServerCookie> bytes{};
  };
  static std::string Key(const common::SocketAddress& a) {
    return std::string(reinterpret_cast<const char*>(a.addr_bytes()), a.addr_len());
  }
  std::array<uint8_t, 16> secret_;
  absl::flat_hash_map<std::string, ServerCookie> servers_;
};

}  // namespace weir::recursor
