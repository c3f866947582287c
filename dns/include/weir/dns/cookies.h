// DNS cookies, client side (RFC 7873), for the fastpath's forwarder and the
// recursor's last hop. CookieJar makes the client cookie towards each
// server from a secret, remembers each server's cookie and which servers
// do cookies, and judges the COOKIE option of each answer:
//
//  * over UDP, an answer with another client cookie or a malformed option,
//    or without a cookie from a server known to make them, is refused (the
//    caller asks again over TCP, which a blind forger cannot answer); a
//    good one teaches the server cookie; BADCOOKIE (from a server that
//    made a good cookie, or one not known to make them) asks the caller to
//    send again with the cookie just learnt or over TCP (RFC 7873 5.3), and
//    is never passed on as an answer;
//  * over TCP, an answer without a cookie says the server stopped making
//    them (a forger cannot downgrade TCP); a wrong one is still refused.
//
// Pure logic. Threading: a CookieJar belongs to one thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "weir/common/socket_address.h"
#include "weir/dns/message.h"

namespace weir::dns {

class CookieJar {
 public:
  static constexpr size_t kClientCookie = 8;
  static constexpr size_t kMaxServerCookie = 32;  // RFC 7873 4: 8 to 32 bytes
  static constexpr size_t kMaxOption = kClientCookie + kMaxServerCookie;
  static constexpr size_t kMaxServers = 100000;
  static constexpr uint16_t kRcodeBadCookie = 23;  // RFC 7873 8
  using ClientCookieBytes = std::array<uint8_t, kClientCookie>;

  explicit CookieJar(const std::array<uint8_t, 16>& secret) : secret_(secret) {}

  // The client cookie towards `server` from `local`: SipHash-2-4 of the two
  // addresses under the secret (no ports: RFC 7873 4.1 ties it to the
  // client and server IP addresses, so it survives a change of source
  // port). `local` may be empty (len 0) where the source address is the
  // kernel's choice (a socket bound to the wildcard).
  ClientCookieBytes ClientCookie(const common::SocketAddress& local,
                                 const common::SocketAddress& server) const;

  // The COOKIE option data for a query: the client cookie, then the
  // server's cookie when one is known. Returns its length (8, or 16 to 40).
  size_t OptionData(const ClientCookieBytes& client, const common::SocketAddress& server,
                    uint8_t out[kMaxOption]) const;

  enum class Verdict : uint8_t {
    kGood,         // the client cookie sent, and a server cookie of 8 to 32 bytes
    kAbsent,       // no COOKIE option in the answer
    kWrongClient,  // not the client cookie sent: not an answer to this query (RFC 7873 5.3)
    kMalformed,    // a COOKIE option of a length no server sends (not 16 to 40)
  };
  // Judges the COOKIE option of an answer to a query that carried `client`.
  // `present`/`data`: the answer's option (data without its header).
  static Verdict Check(const ClientCookieBytes& client, bool present, std::span<const uint8_t> data);
  // The COOKIE option data of a parsed message (empty without one).
  static std::span<const uint8_t> OptionOf(const Message& answer);

  enum class Outcome : uint8_t {
    kAccept,     // take the answer (as far as cookies go)
    kRefuse,     // not the server's answer to this query
    kBadCookie,  // over UDP, BADCOOKIE (not refused): send again with the cookie just learnt, or over TCP
  };
  // The whole client-side rule for an answer from `server` to a query that
  // carried `client`: judges its option, learns or forgets the server's
  // cookie as said above, and says what to do. `verdict` (optional) gets
  // the option's verdict, for the caller's logs and counters.
  Outcome OnAnswer(const ClientCookieBytes& client, const common::SocketAddress& server,
                   const Message& answer, bool over_tcp, Verdict* verdict = nullptr);

  // The server cookie of a good answer (`data` as judged kGood): it goes
  // into the next queries to that server, which is from now on known to do
  // cookies. A malformed `data` teaches nothing.
  void Learn(const common::SocketAddress& server, std::span<const uint8_t> data);
  // The server stopped doing cookies: its answers over UDP are no longer
  // held to them.
  void Forget(const common::SocketAddress& server);
  bool DoesCookies(const common::SocketAddress& server) const;
  size_t servers() const { return servers_.size(); }

 private:
  struct ServerCookie {
    uint8_t len = 0;
    std::array<uint8_t, kMaxServerCookie> bytes{};
  };
  std::array<uint8_t, 16> secret_;
  absl::flat_hash_map<std::string, ServerCookie> servers_;
};

}  // namespace weir::dns
