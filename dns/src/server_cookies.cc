#include "weir/dns/server_cookies.h"

#include <cstring>

#include "weir/common/siphash.h"

namespace weir::dns {

namespace {

// Client Cookie | Version | Reserved | Timestamp | Client-IP, hashed; the
// Hash is SipHash-2-4's 64-bit result in little-endian byte order, as in
// RFC 9018's appendix.
uint64_t Hash(const ServerCookies::Secret& secret, std::span<const uint8_t> client,
              std::span<const uint8_t> header, std::span<const uint8_t> client_ip) {
  uint8_t in[ServerCookies::kClientCookie + 8 + 16];
  std::memcpy(in, client.data(), ServerCookies::kClientCookie);
  std::memcpy(in + ServerCookies::kClientCookie, header.data(), 8);
  std::memcpy(in + ServerCookies::kClientCookie + 8, client_ip.data(), client_ip.size());
  return common::SipHash24(secret, {in, ServerCookies::kClientCookie + 8 + client_ip.size()});
}

}  // namespace

std::array<uint8_t, ServerCookies::kServerCookie> ServerCookies::Make(const Secret& secret,
                                                                      std::span<const uint8_t> client,
                                                                      std::span<const uint8_t> client_ip,
                                                                      uint32_t timestamp) {
  std::array<uint8_t, kServerCookie> out{};
  out[0] = kVersion;
  for (int i = 0; i < 4; ++i) out[4 + i] = static_cast<uint8_t>(timestamp >> (24 - 8 * i));
  const uint64_t h = Hash(secret, client, {out.data(), 8}, client_ip);
  for (size_t i = 0; i < 8; ++i) out[8 + i] = static_cast<uint8_t>(h >> (8 * i));
  return out;
}

bool ServerCookies::HashMatches(const Secret& secret, std::span<const uint8_t> client,
                                std::span<const uint8_t> server, std::span<const uint8_t> client_ip) {
  if (server.size() != kServerCookie || server[0] != kVersion) return false;
  const uint64_t h = Hash(secret, client, server.first(8), client_ip);
  uint64_t sent = 0;
  for (size_t i = 0; i < 8; ++i) sent |= uint64_t{server[8 + i]} << (8 * i);
  return h == sent;
}

bool ServerCookies::Timely(uint32_t timestamp, uint32_t now) {
  // The difference as a signed 32-bit number: a timestamp from before the
  // 2106 wrap read after it is still an hour old, not 136 years ahead.
  const auto age = static_cast<int32_t>(now - timestamp);
  return age <= static_cast<int32_t>(kLifetime) && age >= -static_cast<int32_t>(kSkew);
}

ServerCookies::Verdict ServerCookies::Judge(bool present, std::span<const uint8_t> data,
                                            std::span<const uint8_t> client_ip, uint32_t now,
                                            OptionBytes* reply) const {
  if (!present) return Verdict::kNone;
  // RFC 7873 5.2.2: a client cookie alone, or with a server cookie of 8 to
  // 32 bytes; anything else is FORMERR.
  if (data.size() != kClientCookie && (data.size() < kClientCookie + 8 || data.size() > kClientCookie + 32)) {
    return Verdict::kMalformed;
  }
  const std::span<const uint8_t> client = data.first(kClientCookie);
  Verdict v = Verdict::kClientOnly;
  if (data.size() > kClientCookie) {
    const std::span<const uint8_t> server = data.subspan(kClientCookie);
    bool ok = server.size() == kServerCookie;
    if (ok) {
      const uint32_t ts = (uint32_t{server[4]} << 24) | (uint32_t{server[5]} << 16) |
                          (uint32_t{server[6]} << 8) | uint32_t{server[7]};
      ok = Timely(ts, now) && (HashMatches(current_, client, server, client_ip) ||
                               (previous_ && HashMatches(*previous_, client, server, client_ip)));
    }
    v = ok ? Verdict::kValid : Verdict::kInvalid;
  }
  // Always a fresh cookie (RFC 9018 4.3 allows one with every answer): the
  // client's stays valid for the whole hour from now.
  std::memcpy(reply->data(), client.data(), kClientCookie);
  const auto server = Make(current_, client, client_ip, now);
  std::memcpy(reply->data() + kClientCookie, server.data(), kServerCookie);
  return v;
}

}  // namespace weir::dns
