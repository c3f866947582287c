// The server cookies of weir-recursor's front (RFC 7873, RFC 9018's
// interoperable cookie; docs/behaviour.md#server-cookies): where the secret
// comes from and when it changes, over dns::ServerCookies.
//
//  * [server] cookie_secret_file: a secret shared by every recursor behind
//    one address, re-read on reload; the secret it replaces is still
//    accepted, or the file names the one to accept beside it;
//  * otherwise a secret drawn from the kernel's CSPRNG at start, replaced
//    every kRotation seconds, the one before still accepted (a cookie lives
//    an hour, so none handed out is lost at a rotation).
//
// Threading: the recursor's loop thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "weir/common/secure_random.h"
#include "weir/common/socket_address.h"
#include "weir/dns/message.h"
#include "weir/dns/server_cookies.h"
#include "weir/recursor/config.h"

namespace weir::recursor {

// The secrets of a cookie_secret_file: the one cookies are made with, then
// optionally one more that is accepted (a rollover across several
// recursors, RFC 9018 5). Each is 32 hex digits; '#' starts a comment.
struct CookieSecrets {
  dns::ServerCookies::Secret current{};
  std::optional<dns::ServerCookies::Secret> accepted;
};
absl::StatusOr<CookieSecrets> ParseCookieSecrets(std::string_view text, const std::string& path);
absl::StatusOr<CookieSecrets> ReadCookieSecretFile(const std::string& path);

// Seconds since the epoch: the time in RFC 9018 cookies (servers sharing a
// secret share it). CLOCK_REALTIME_COARSE: no syscall.
uint32_t WallSeconds();

class FrontCookies {
 public:
  // A generated secret is replaced this often (and the one before dropped).
  static constexpr uint32_t kRotation = 86400;
  using Verdict = dns::ServerCookies::Verdict;

  explicit FrontCookies(const RecursorConfig& cfg);

  // Reads cookie_secret_file; without one, the generated secret stands.
  absl::Status Load();
  // Re-reads cookie_secret_file (nothing to do without one). A new secret
  // is used from now on and, unless the file names another, the one it
  // replaces is still accepted; a file that names only the secret in use
  // ends a rollover (the one accepted besides is dropped). On error the
  // secrets stay as they were.
  absl::Status Reload();
  // The same in two steps, for a reload that applies everything or nothing:
  // the file read (any thread; nullopt without a file), then applied (the
  // loop thread).
  absl::StatusOr<std::optional<CookieSecrets>> ReadForReload() const;
  void ApplyReload(const CookieSecrets& s);

  bool enabled() const { return enabled_; }
  bool required() const { return required_; }
  // Judges the query's COOKIE option from `peer` at `now` (WallSeconds());
  // `reply` as dns::ServerCookies::Judge. A generated secret due for
  // rotation is replaced first.
  Verdict Judge(const dns::Query& q, std::span<const uint8_t> pkt, const common::SocketAddress& peer,
                uint32_t now, dns::ServerCookies::OptionBytes* reply);
  const dns::ServerCookies& cookies() const { return cookies_; }
  uint64_t rotations() const { return rotations_; }

 private:
  // The secret accepted besides the current one was named by the file (a
  // rollover), not the one a new secret replaced.
  bool previous_from_file_ = false;
  void MaybeRotate(uint32_t now);

  const bool enabled_;
  const bool required_;
  const std::string secret_file_;
  common::SecureRandom random_;
  dns::ServerCookies cookies_;
  uint32_t rotated_at_ = 0;  // 0: not yet (set at the first query)
  uint64_t rotations_ = 0;
};

}  // namespace weir::recursor
