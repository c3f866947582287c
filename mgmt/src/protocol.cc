#include "weir/mgmt/protocol.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <charconv>

#include "weir/common/text.h"

namespace weir::mgmt {

using common::Cat;

namespace {

void PutU32(std::string* out, uint32_t v) {
  const char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                     static_cast<char>(v)};
  out->append(b, 4);
}

uint32_t GetU32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) | (uint32_t{u[2]} << 8) | uint32_t{u[3]};
}

bool KnownType(uint8_t t) { return t >= 1 && t <= 10; }

}  // namespace

std::string Encode(const Message& m) {
  size_t body = 1;
  for (const std::string& f : m.fields) body += 4 + f.size();
  std::string out;
  out.reserve(4 + body);
  PutU32(&out, static_cast<uint32_t>(body));
  out.push_back(static_cast<char>(m.type));
  for (const std::string& f : m.fields) {
    PutU32(&out, static_cast<uint32_t>(f.size()));
    out += f;
  }
  return out;
}

absl::StatusOr<Message> DecodeBody(std::string_view body) {
  if (body.empty()) return absl::InvalidArgumentError("empty frame");
  const uint8_t type = static_cast<uint8_t>(body[0]);
  if (!KnownType(type)) return absl::InvalidArgumentError(Cat("unknown message type ", int{type}));
  Message m;
  m.type = static_cast<MsgType>(type);
  size_t pos = 1;
  while (pos < body.size()) {
    if (body.size() - pos < 4) return absl::InvalidArgumentError("truncated field length");
    const uint32_t len = GetU32(body.data() + pos);
    pos += 4;
    if (len > body.size() - pos) return absl::InvalidArgumentError("field longer than its frame");
    if (m.fields.size() == kMaxFields) return absl::InvalidArgumentError("too many fields");
    m.fields.emplace_back(body.substr(pos, len));
    pos += len;
  }
  return m;
}

absl::StatusOr<std::optional<Message>> FrameReader::Next() {
  if (buf_.size() - pos_ < 4) return std::optional<Message>();
  const uint32_t len = GetU32(buf_.data() + pos_);
  if (len == 0 || len > kMaxFrameBytes) return absl::InvalidArgumentError(Cat("bad frame length ", len));
  if (buf_.size() - pos_ - 4 < len) return std::optional<Message>();
  auto m = DecodeBody(std::string_view(buf_).substr(pos_ + 4, len));
  if (!m.ok()) return m.status();
  pos_ += 4 + len;
  if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  } else if (pos_ > (1u << 20) && pos_ > buf_.size() / 2) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  return std::optional<Message>(*std::move(m));
}

absl::StatusOr<uint64_t> ParseU64(std::string_view s) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) {
    return absl::InvalidArgumentError(Cat("not a number: '", s.substr(0, 32), "'"));
  }
  return v;
}

bool TokenEquals(std::string_view a, std::string_view b) {
  // Constant time in the token's length: no early exit on the first difference.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return diff == 0 && !b.empty();
}

void EnableKeepalive(int fd) {
  // An idle stream (a node in sync) must still notice a dead peer: a mgmt
  // host that rebooted, a firewall that dropped the flow. About 25 s.
  int on = 1, idle = 10, intvl = 5, cnt = 3;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

}  // namespace weir::mgmt
