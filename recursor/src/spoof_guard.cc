#include "weir/recursor/spoof_guard.h"

#include <sys/random.h>
#include <algorithm>

#include <cstring>

#include "weir/dns/wire.h"

namespace weir::recursor {

namespace {

std::string AddressAndPort(const common::SocketAddress& a) {
  return std::string(reinterpret_cast<const char*>(a.addr_bytes()), a.addr_len()) +
         static_cast<char>(a.port() >> 8) + static_cast<char>(a.port() & 0xff);
}

}  // namespace

SecureRandom::result_type SecureRandom::operator()() {
  if (left_ == 0) {
    size_t got = 0;
    auto* p = reinterpret_cast<uint8_t*>(buf_.data());
    while (got < sizeof(buf_)) {
      const ssize_t n = getrandom(p + got, sizeof(buf_) - got, 0);
      if (n > 0) got += static_cast<size_t>(n);
      // getrandom only fails when interrupted (EINTR) or before the kernel's
      // pool is seeded; both pass.
    }
    left_ = buf_.size();
  }
  return buf_[--left_];
}

bool SameSpelling(std::span<const uint8_t> reply, std::span<const uint8_t> sent) {
  return reply.size() >= dns::kHeaderSize + sent.size() &&
         std::memcmp(reply.data() + dns::kHeaderSize, sent.data(), sent.size()) == 0;
}

bool CaseMemory::Preserves(const common::SocketAddress& server, Time now) const {
  auto it = until_.find(AddressAndPort(server));
  return it == until_.end() || it->second <= now;
}

void CaseMemory::NotPreserved(const common::SocketAddress& server, Time now) {
  if (until_.size() >= kMaxServers) until_.clear();
  until_[AddressAndPort(server)] = now + kHold;
}

// ---------------------------------------------------------------- SipHash-2-4

namespace {

inline uint64_t Rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

inline uint64_t LoadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct SipState {
  uint64_t v0, v1, v2, v3;
  void Round() {
    v0 += v1;
    v1 = Rotl(v1, 13);
    v1 ^= v0;
    v0 = Rotl(v0, 32);
    v2 += v3;
    v3 = Rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = Rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = Rotl(v1, 17);
    v1 ^= v2;
    v2 = Rotl(v2, 32);
  }
  void Absorb(uint64_t m) {
    v3 ^= m;
    Round();
    Round();
    v0 ^= m;
  }
};

}  // namespace

uint64_t SipHash24(const std::array<uint8_t, 16>& key, std::span<const uint8_t> data) {
  const uint64_t k0 = LoadLe64(key.data()), k1 = LoadLe64(key.data() + 8);
  SipState s{k0 ^ 0x736f6d6570736575ULL, k1 ^ 0x646f72616e646f6dULL, k0 ^ 0x6c7967656e657261ULL,
             k1 ^ 0x7465646279746573ULL};
  const size_t whole = data.size() / 8 * 8;
  for (size_t i = 0; i < whole; i += 8) s.Absorb(LoadLe64(data.data() + i));
  uint64_t last = static_cast<uint64_t>(data.size() & 0xff) << 56;
  for (size_t i = whole; i < data.size(); ++i) last |= static_cast<uint64_t>(data[i]) << (8 * (i - whole));
  s.Absorb(last);
  s.v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) s.Round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

// ---------------------------------------------------------------- cookies

std::array<uint8_t, CookieJar::kClientCookie> CookieJar::ClientCookie(
    const common::SocketAddress& local, const common::SocketAddress& server) const {
  uint8_t in[2 + 16 + 16] = {};
  size_t n = 0;
  // The families go in so that an IPv4 pair and an IPv6 pair never hash alike.
  in[n++] = static_cast<uint8_t>(local.len == 0 ? 0 : local.addr_len());
  in[n++] = static_cast<uint8_t>(server.addr_len());
  if (local.len != 0) {
    std::memcpy(in + n, local.addr_bytes(), local.addr_len());
    n += local.addr_len();
  }
  std::memcpy(in + n, server.addr_bytes(), server.addr_len());
  n += server.addr_len();
  const uint64_t h = SipHash24(secret_, {in, n});
  std::array<uint8_t, kClientCookie> out{};
  for (size_t i = 0; i < kClientCookie; ++i) out[i] = static_cast<uint8_t>(h >> (8 * i));
  return out;
}

size_t CookieJar::OptionData(const std::array<uint8_t, kClientCookie>& client,
                             const common::SocketAddress& server, uint8_t out[kMaxOption]) const {
  std::memcpy(out, client.data(), kClientCookie);
  auto it = servers_.find(Key(server));
  if (it == servers_.end()) return kClientCookie;
  std::memcpy(out + kClientCookie, it->second.bytes.data(), it->second.len);
  return kClientCookie + it->second.len;
}

CookieJar::Verdict CookieJar::Check(const std::array<uint8_t, kClientCookie>& client, bool present,
                                    std::span<const uint8_t> data) {
  if (!present) return Verdict::kAbsent;
  // RFC 7873 5.3: a server cookie of 8 to 32 bytes follows the client's.
  if (data.size() < kClientCookie + 8 || data.size() > kMaxOption) return Verdict::kMalformed;
  if (std::memcmp(data.data(), client.data(), kClientCookie) != 0) return Verdict::kWrongClient;
  return Verdict::kGood;
}

void CookieJar::Learn(const common::SocketAddress& server, std::span<const uint8_t> data) {
  if (data.size() < kClientCookie + 8 || data.size() > kMaxOption) return;
  if (servers_.size() >= kMaxServers && !servers_.contains(Key(server))) servers_.clear();
  ServerCookie& c = servers_[Key(server)];
  c.len = static_cast<uint8_t>(data.size() - kClientCookie);
  std::memcpy(c.bytes.data(), data.data() + kClientCookie, c.len);
}

}  // namespace weir::recursor
