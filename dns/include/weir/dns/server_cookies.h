// DNS cookies, server side (RFC 7873 5.2), with the interoperable server
// cookie of RFC 9018: Version (1), Reserved (3 bytes), Timestamp (4 bytes,
// seconds since the epoch) and Hash (8 bytes), the Hash being SipHash-2-4
// under a 16-byte secret of
//
//   Client Cookie | Version | Reserved | Timestamp | Client-IP
//
// so that servers sharing a secret behind one address accept one another's
// cookies. A cookie is good from its timestamp for an hour, and from five
// minutes before it (clock skew between servers, RFC 9018 4.3).
//
// ServerCookies judges the COOKIE option of a query against the secret in
// use and the one before it (a rollover keeps the cookies already handed
// out valid), and writes the option of the response: the client cookie and
// a fresh server cookie. Pure logic: the owner picks the secrets and the
// time (wall-clock seconds, which every server behind one address shares).
//
// Threading: an object belongs to one thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace weir::dns {

class ServerCookies {
 public:
  using Secret = std::array<uint8_t, 16>;
  static constexpr size_t kClientCookie = 8;
  static constexpr size_t kServerCookie = 16;  // RFC 9018's layout
  static constexpr size_t kOption = kClientCookie + kServerCookie;
  static constexpr uint8_t kVersion = 1;
  static constexpr uint32_t kLifetime = 3600;  // RFC 9018 4.3: an hour in the past
  static constexpr uint32_t kSkew = 300;       // and five minutes in the future
  using OptionBytes = std::array<uint8_t, kOption>;

  enum class Verdict : uint8_t {
    kNone,        // no COOKIE option
    kClientOnly,  // a client cookie alone (first contact)
    kValid,       // a server cookie this server (or one sharing its secret) made, in its time window
    kInvalid,     // a server cookie that is not (another secret, address, client cookie, or too old)
    kMalformed,   // not 8 or 16 to 40 bytes (RFC 7873 5.2.2: FORMERR)
  };
  static constexpr size_t kVerdicts = 5;

  explicit ServerCookies(const Secret& secret) : current_(secret) {}

  // The secret cookies are made with from now on, and the other one still
  // accepted (none: only `current`).
  void SetSecrets(const Secret& current, const std::optional<Secret>& previous) {
    current_ = current;
    previous_ = previous;
  }
  const Secret& current() const { return current_; }
  const std::optional<Secret>& previous() const { return previous_; }

  // Judges a query's option (`present`, `data` without its header) from
  // `client_ip` (4 or 16 bytes) at `now`. Unless kNone or kMalformed,
  // `reply` gets the response's option: the client cookie and a server
  // cookie made now under the current secret.
  Verdict Judge(bool present, std::span<const uint8_t> data, std::span<const uint8_t> client_ip, uint32_t now,
                OptionBytes* reply) const;

  // RFC 9018's server cookie for `client` (8 bytes) from `client_ip` at
  // `timestamp` under `secret`: version 1, reserved 0.
  static std::array<uint8_t, kServerCookie> Make(const Secret& secret, std::span<const uint8_t> client,
                                                 std::span<const uint8_t> client_ip, uint32_t timestamp);
  // True when `server` (16 bytes, version 1: its reserved bytes are hashed
  // as sent) carries the hash of `client`, itself and `client_ip` under
  // `secret`. The time is not looked at.
  static bool HashMatches(const Secret& secret, std::span<const uint8_t> client,
                          std::span<const uint8_t> server, std::span<const uint8_t> client_ip);
  // RFC 9018 4.3: `timestamp` (serial number arithmetic, RFC 1982) is at
  // most kLifetime before `now` and at most kSkew after it.
  static bool Timely(uint32_t timestamp, uint32_t now);

 private:
  Secret current_;
  std::optional<Secret> previous_;
};

}  // namespace weir::dns
