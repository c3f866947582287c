#include "weir/dns/cookies.h"

#include <cstring>

#include "weir/common/siphash.h"
#include "weir/dns/case_randomization.h"

namespace weir::dns {

namespace {

bool WellFormed(std::span<const uint8_t> data) {
  // RFC 7873 5.3: a server cookie of 8 to 32 bytes follows the client's.
  return data.size() >= CookieJar::kClientCookie + 8 && data.size() <= CookieJar::kMaxOption;
}

}  // namespace

CookieJar::ClientCookieBytes CookieJar::ClientCookie(const common::SocketAddress& local,
                                                     const common::SocketAddress& server) const {
  uint8_t in[2 + 16 + 16] = {};
  size_t n = 0;
  // The address lengths go in so that an IPv4 pair and an IPv6 pair never
  // hash alike.
  in[n++] = static_cast<uint8_t>(local.len == 0 ? 0 : local.addr_len());
  in[n++] = static_cast<uint8_t>(server.addr_len());
  if (local.len != 0) {
    std::memcpy(in + n, local.addr_bytes(), local.addr_len());
    n += local.addr_len();
  }
  std::memcpy(in + n, server.addr_bytes(), server.addr_len());
  n += server.addr_len();
  const uint64_t h = common::SipHash24(secret_, {in, n});
  ClientCookieBytes out{};
  for (size_t i = 0; i < kClientCookie; ++i) out[i] = static_cast<uint8_t>(h >> (8 * i));
  return out;
}

size_t CookieJar::OptionData(const ClientCookieBytes& client, const common::SocketAddress& server,
                             uint8_t out[kMaxOption]) const {
  std::memcpy(out, client.data(), kClientCookie);
  auto it = servers_.find(ServerKey(server));
  if (it == servers_.end()) return kClientCookie;
  std::memcpy(out + kClientCookie, it->second.bytes.data(), it->second.len);
  return kClientCookie + it->second.len;
}

CookieJar::Verdict CookieJar::Check(const ClientCookieBytes& client, bool present,
                                    std::span<const uint8_t> data) {
  if (!present) return Verdict::kAbsent;
  if (!WellFormed(data)) return Verdict::kMalformed;
  if (std::memcmp(data.data(), client.data(), kClientCookie) != 0) return Verdict::kWrongClient;
  return Verdict::kGood;
}

std::span<const uint8_t> CookieJar::OptionOf(const Message& answer) {
  const Edns& e = answer.edns();
  if (!e.has_cookie) return {};
  return answer.bytes().subspan(e.cookie_offset, e.cookie_len);
}

CookieJar::Outcome CookieJar::OnAnswer(const ClientCookieBytes& client, const common::SocketAddress& server,
                                       const Message& answer, bool over_tcp, Verdict* verdict) {
  const std::span<const uint8_t> data = OptionOf(answer);
  const Verdict v = Check(client, answer.edns().has_cookie, data);
  if (verdict != nullptr) *verdict = v;
  switch (v) {
    case Verdict::kWrongClient:
    case Verdict::kMalformed:
      return Outcome::kRefuse;
    case Verdict::kAbsent:
      if (over_tcp) {
        Forget(server);  // no forger on TCP: the server stopped making them
        return Outcome::kAccept;
      }
      // A forger cannot know the client cookie, so it leaves it out.
      if (DoesCookies(server)) return Outcome::kRefuse;
      break;
    case Verdict::kGood:
      Learn(server, data);
      break;
  }
  // BADCOOKIE over UDP is never an answer to pass on: the caller sends
  // again (with the cookie just learnt, if any) or goes to TCP.
  return !over_tcp && answer.rcode() == kRcodeBadCookie ? Outcome::kBadCookie : Outcome::kAccept;
}

void CookieJar::Learn(const common::SocketAddress& server, std::span<const uint8_t> data) {
  if (!WellFormed(data)) return;
  std::string key = ServerKey(server);
  if (servers_.size() >= kMaxServers && !servers_.contains(key)) servers_.clear();
  ServerCookie& c = servers_[std::move(key)];
  c.len = static_cast<uint8_t>(data.size() - kClientCookie);
  std::memcpy(c.bytes.data(), data.data() + kClientCookie, c.len);
}

void CookieJar::Forget(const common::SocketAddress& server) { servers_.erase(ServerKey(server)); }

bool CookieJar::DoesCookies(const common::SocketAddress& server) const {
  return servers_.contains(ServerKey(server));
}

}  // namespace weir::dns
