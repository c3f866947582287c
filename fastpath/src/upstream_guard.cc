#include "weir/fastpath/upstream_guard.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "weir/dns/wire.h"

namespace weir::fastpath {

void SecureRandom::Refill() {
  size_t got = 0;
  while (got < buf_.size()) {
    const ssize_t n = getrandom(buf_.data() + got, buf_.size() - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (errno != EINTR) {
      // getrandom only fails before the kernel's pool is initialised (with
      // GRND_NONBLOCK, not used) or on a bad buffer: never here.
      std::abort();
    }
  }
  pos_ = 0;
}

void SecureRandom::Fill(uint8_t* out, size_t len) {
  while (len > 0) {
    if (pos_ == buf_.size()) Refill();
    const size_t n = std::min(len, buf_.size() - pos_);
    std::memcpy(out, buf_.data() + pos_, n);
    pos_ += n;
    out += n;
    len -= n;
  }
}

uint64_t SecureRandom::Next64() {
  uint64_t v = 0;
  Fill(reinterpret_cast<uint8_t*>(&v), sizeof(v));
  return v;
}

uint32_t SecureRandom::Below(uint32_t n) {
  // Rejection sampling: no modulo bias.
  const uint32_t limit = UINT32_MAX - UINT32_MAX % n;
  for (;;) {
    const auto v = static_cast<uint32_t>(Next64());
    if (v < limit) return v % n;
  }
}

namespace {

// "a b" or "a-b" or "a": the numbers of `text` at `*pos`; false at the end.
bool NextNumber(std::string_view text, size_t* pos, uint32_t* out) {
  while (*pos < text.size() && (text[*pos] < '0' || text[*pos] > '9')) ++*pos;
  if (*pos == text.size()) return false;
  uint32_t v = 0;
  while (*pos < text.size() && text[*pos] >= '0' && text[*pos] <= '9' && v <= 65535)
    v = v * 10 + static_cast<uint32_t>(text[(*pos)++] - '0');
  *out = v;
  return true;
}

}  // namespace

PortRange PortRange::FromProc(std::string_view range_text, std::string_view reserved_text) {
  PortRange r;
  size_t pos = 0;
  uint32_t lo = 0, hi = 0;
  if (NextNumber(range_text, &pos, &lo) && NextNumber(range_text, &pos, &hi) && lo >= 1024 && lo <= hi &&
      hi <= 65535) {
    r.low_ = static_cast<uint16_t>(lo);
    r.high_ = static_cast<uint16_t>(hi);
  }
  // "8080,9000-9100": ranges separated by commas.
  size_t i = 0;
  while (i < reserved_text.size()) {
    size_t end = reserved_text.find(',', i);
    if (end == std::string_view::npos) end = reserved_text.size();
    const std::string_view item = reserved_text.substr(i, end - i);
    size_t p = 0;
    uint32_t a = 0, b = 0;
    if (NextNumber(item, &p, &a) && a <= 65535) {
      if (!NextNumber(item, &p, &b) || b < a || b > 65535) b = a;
      r.reserved_.emplace_back(static_cast<uint16_t>(a), static_cast<uint16_t>(b));
    }
    i = end + 1;
  }
  return r;
}

bool PortRange::Reserved(uint16_t port) const {
  for (const auto& [a, b] : reserved_) {
    if (port >= a && port <= b) return true;
  }
  return false;
}

uint16_t PortRange::Draw(SecureRandom& rng) const {
  const uint32_t n = uint32_t{high_} - low_ + 1;
  // Rejection: a reserved draw is drawn again (bounded; a range that is
  // mostly reserved falls back to a walk from the last draw).
  uint16_t port = 0;
  for (int i = 0; i < 64; ++i) {
    port = static_cast<uint16_t>(low_ + rng.Below(n));
    if (!Reserved(port)) return port;
  }
  for (uint32_t i = 0; i < n; ++i) {
    const auto p = static_cast<uint16_t>(low_ + (port - low_ + i) % n);
    if (!Reserved(p)) return p;
  }
  return 0;
}

namespace {

uint64_t Rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

uint64_t Le64(const uint8_t* p) {
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
  void Compress(uint64_t m) {
    v3 ^= m;
    Round();
    Round();
    v0 ^= m;
  }
};

}  // namespace

uint64_t SipHash24(const std::array<uint8_t, 16>& key, std::span<const uint8_t> data) {
  const uint64_t k0 = Le64(key.data());
  const uint64_t k1 = Le64(key.data() + 8);
  SipState s{k0 ^ 0x736f6d6570736575ull, k1 ^ 0x646f72616e646f6dull, k0 ^ 0x6c7967656e657261ull,
             k1 ^ 0x7465646279746573ull};
  const size_t full = data.size() / 8 * 8;
  for (size_t i = 0; i < full; i += 8) s.Compress(Le64(data.data() + i));
  uint64_t last = uint64_t{data.size() & 0xff} << 56;
  for (size_t i = full; i < data.size(); ++i) last |= uint64_t{data[i]} << (8 * (i - full));
  s.Compress(last);
  s.v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) s.Round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

int RandomizeCase(uint8_t* name, size_t len, SecureRandom& rng) {
  int letters = 0;
  uint64_t bits = 0;
  int left = 0;
  size_t i = 0;
  while (i < len && name[i] != 0) {
    const size_t label = name[i];
    const size_t end = std::min(len, i + 1 + label);
    for (size_t j = i + 1; j < end; ++j) {
      const uint8_t lower = name[j] | 0x20;
      if (lower < 'a' || lower > 'z') continue;
      if (left == 0) {
        bits = rng.Next64();
        left = 64;
      }
      name[j] = (bits & 1) ? static_cast<uint8_t>(lower & ~0x20) : lower;
      bits >>= 1;
      --left;
      ++letters;
    }
    i = end;
  }
  return letters;
}

bool SameSpelling(std::span<const uint8_t> sent, std::span<const uint8_t> answer, size_t qname_len) {
  if (sent.size() < dns::kHeaderSize + qname_len || answer.size() < dns::kHeaderSize + qname_len)
    return false;
  return std::memcmp(sent.data() + dns::kHeaderSize, answer.data() + dns::kHeaderSize, qname_len) == 0;
}

UpstreamCookie::UpstreamCookie(const std::array<uint8_t, 16>& secret, const common::SocketAddress& upstream) {
  uint8_t in[18];
  const size_t alen = upstream.addr_len();
  std::memcpy(in, upstream.addr_bytes(), alen);
  dns::Store16(in + alen, upstream.port());
  const uint64_t h = SipHash24(secret, {in, alen + 2});
  for (size_t i = 0; i < kClientLen; ++i) data_[i] = static_cast<uint8_t>(h >> (8 * i));
}

UpstreamCookie::Verdict UpstreamCookie::Check(const dns::Message& answer) {
  const dns::Edns& e = answer.edns();
  if (!e.has_cookie) return Verdict::kAbsent;
  const size_t len = e.cookie_len;
  // 8: our client cookie echoed without a server cookie (a server that
  // does not make them, or a reflector); 16..40: with one (RFC 7873 4).
  if (len != kClientLen && (len < 16 || len > kClientLen + kMaxServerLen)) return Verdict::kMalformed;
  const uint8_t* c = answer.bytes().data() + e.cookie_offset;
  if (std::memcmp(c, data_.data(), kClientLen) != 0) return Verdict::kWrong;
  if (len > kClientLen) {
    server_len_ = len - kClientLen;
    std::memcpy(data_.data() + kClientLen, c + kClientLen, server_len_);
    server_supports_ = true;
  }
  return Verdict::kOk;
}

}  // namespace weir::fastpath
