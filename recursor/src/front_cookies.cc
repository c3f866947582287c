#include "front_cookies.h"

#include <time.h>

#include <cstring>

#include "weir/common/config_file.h"
#include "weir/common/text.h"

namespace weir::recursor {

using common::Cat;

namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

dns::ServerCookies::Secret Drawn(common::SecureRandom& random) {
  dns::ServerCookies::Secret s{};
  random.Fill(s.data(), s.size());
  return s;
}

}  // namespace

absl::StatusOr<CookieSecrets> ParseCookieSecrets(std::string_view text, const std::string& path) {
  CookieSecrets out;
  int found = 0;
  int line = 1;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      ++i;
    } else if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
    } else if (c == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
    } else {
      size_t end = i;
      while (end < text.size() && text[end] != ' ' && text[end] != '\t' && text[end] != '\r' &&
             text[end] != '\n' && text[end] != '#')
        ++end;
      const std::string_view token = text.substr(i, end - i);
      dns::ServerCookies::Secret s{};
      bool ok = token.size() == 2 * s.size();
      for (size_t k = 0; ok && k < s.size(); ++k) {
        const int hi = HexDigit(token[2 * k]);
        const int lo = HexDigit(token[2 * k + 1]);
        ok = hi >= 0 && lo >= 0;
        s[k] = static_cast<uint8_t>(hi << 4 | lo);
      }
      if (!ok)
        return absl::InvalidArgumentError(
            Cat(path, ":", line, ": a cookie secret is 32 hex digits (16 bytes)"));
      if (found == 2) return absl::InvalidArgumentError(Cat(path, ":", line, ": at most two cookie secrets"));
      if (found == 0) {
        out.current = s;
      } else {
        out.accepted = s;
      }
      ++found;
      i = end;
    }
  }
  if (found == 0) return absl::InvalidArgumentError(Cat(path, ": no cookie secret (32 hex digits)"));
  return out;
}

absl::StatusOr<CookieSecrets> ReadCookieSecretFile(const std::string& path) {
  auto text = common::ReadConfigFile(path);
  if (!text.ok()) return text.status();
  return ParseCookieSecrets(*text, path);
}

uint32_t WallSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return static_cast<uint32_t>(ts.tv_sec);
}

FrontCookies::FrontCookies(const RecursorConfig& cfg)
    : enabled_(cfg.server_cookies),
      required_(cfg.server_cookies && cfg.require_cookies),
      secret_file_(cfg.cookie_secret_file),
      cookies_(Drawn(random_)) {}

absl::Status FrontCookies::Load() {
  if (secret_file_.empty()) return absl::OkStatus();
  auto s = ReadCookieSecretFile(secret_file_);
  if (!s.ok()) return s.status();
  cookies_.SetSecrets(s->current, s->accepted);
  previous_from_file_ = s->accepted.has_value();
  return absl::OkStatus();
}

absl::Status FrontCookies::Reload() {
  auto s = ReadForReload();
  if (!s.ok()) return s.status();
  if (*s) ApplyReload(**s);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<CookieSecrets>> FrontCookies::ReadForReload() const {
  if (secret_file_.empty()) return std::optional<CookieSecrets>();
  auto s = ReadCookieSecretFile(secret_file_);
  if (!s.ok()) return s.status();
  return std::optional<CookieSecrets>(*s);
}

void FrontCookies::ApplyReload(const CookieSecrets& s) {
  if (s.accepted) {
    cookies_.SetSecrets(s.current, s.accepted);
    previous_from_file_ = true;
  } else if (s.current != cookies_.current()) {
    // A new secret: the one it replaces still validates the cookies made
    // with it until they expire.
    cookies_.SetSecrets(s.current, cookies_.current());
    previous_from_file_ = false;
  } else if (previous_from_file_) {
    // The file names only the secret in use where it named another one to
    // accept before: a rollover's last step, that one is accepted no more.
    cookies_.SetSecrets(s.current, std::nullopt);
    previous_from_file_ = false;
  }
}

void FrontCookies::MaybeRotate(uint32_t now) {
  if (!secret_file_.empty()) return;
  const auto since = static_cast<int32_t>(now - rotated_at_);
  // The first query, or a wall clock stepped back: the period starts now.
  if (rotated_at_ == 0 || since < 0) {
    rotated_at_ = now;
    return;
  }
  if (since < static_cast<int32_t>(kRotation)) return;
  cookies_.SetSecrets(Drawn(random_), cookies_.current());
  rotated_at_ = now;
  ++rotations_;
}

FrontCookies::Verdict FrontCookies::Judge(const dns::Query& q, std::span<const uint8_t> pkt,
                                          const common::SocketAddress& peer, uint32_t now,
                                          dns::ServerCookies::OptionBytes* reply) {
  if (!q.edns.has_cookie) return Verdict::kNone;
  MaybeRotate(now);
  // RFC 9018 hashes the client's IP address: an IPv4 client on a
  // dual-stack socket is hashed as IPv4, as a server on an IPv4 socket sees it.
  std::span<const uint8_t> ip{peer.addr_bytes(), peer.addr_len()};
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (ip.size() == 16 && std::memcmp(ip.data(), kMapped, sizeof(kMapped)) == 0) ip = ip.subspan(12);
  return cookies_.Judge(true, pkt.subspan(q.edns.cookie_offset, q.edns.cookie_len), ip, now, reply);
}

}  // namespace weir::recursor
