// Whether an upstream reply is the answer to the query a resolver sent, and
// what to do when it is not: one rule for both tiers (weir-fastpath's
// forwarder towards the recursors, weir-recursor's last hop towards the
// authoritative servers). docs/behaviour.md#accepting-an-upstream-answer
// says it for operators.
//
// The checks, in order, over UDP:
//   1. a header and the query's ID, else the reply is ignored (a blind
//      forger's guess, or a late answer): the try keeps waiting;
//   2. a message that parses, else the try fails (the server's answer that
//      cannot be read: next server);
//   3. QR set and the question asked (name, type, class), else ignored;
//   4. the question in the 0x20 case sent, else the UDP try ends and the
//      question goes to the same server over TCP;
//   5. the DNS cookie (RFC 7873, CookieJar): a wrong or missing one ends
//      the UDP try (TCP); BADCOOKIE is sent once more over UDP with the
//      server cookie just learnt, then over TCP (RFC 7873 5.3);
//   6. TC: the same question over TCP (RFC 7766);
//   7. the answer is taken.
// Ignored replies are counted per question; at the unwanted-reply
// threshold the UDP try ends and the question goes over TCP (unbound's
// unwanted-reply-threshold). Over TCP, where a blind forger cannot answer,
// any failed check fails the try, and an answer in another case than sent
// is the server's own: it does not preserve the case (taken, and the caller
// asks it without 0x20 for a while).
//
// Pure logic apart from the CookieJar it consults and teaches.
#pragma once

#include <cstdint>
#include <span>

#include "weir/common/socket_address.h"
#include "weir/dns/cookies.h"
#include "weir/dns/message.h"

namespace weir::dns {

// What the reply must echo: the query as it was sent.
struct SentQuery {
  uint16_t id = 0;
  const NameKey* qname = nullptr;  // the question name (canonical)
  // The question name as sent (uncompressed wire form, in its 0x20 case).
  std::span<const uint8_t> name;
  uint16_t qtype = 0;
  uint16_t qclass = 0;
  bool case_randomized = false;
  // The COOKIE option sent (null: none) and the server it went to.
  const CookieJar::ClientCookieBytes* cookie = nullptr;
  const common::SocketAddress* server = nullptr;
};

enum class GuardAction : uint8_t {
  kTake,      // the answer to the query
  kIgnore,    // not the answer: drop it, keep waiting (count it: UnwantedReachesThreshold)
  kRetryUdp,  // send the query again over UDP (a new ID) with the server cookie just learnt
  kToTcp,     // end the UDP try; ask the same server over TCP
  kFail,      // the try failed: the next server
};

enum class GuardReason : uint8_t {
  kAnswer,     // taken
  kWrongId,    // no header, or another ID
  kMalformed,  // does not parse
  kQuestion,   // not a response, or to another question
  kCase,       // the question in another case than sent
  kCookie,     // a wrong, malformed or missing cookie
  kBadCookie,  // BADCOOKIE (first time: retry; second: TCP)
  kTruncated,  // TC over UDP
  kCount,
};

struct GuardOutcome {
  GuardAction action = GuardAction::kIgnore;
  GuardReason reason = GuardReason::kWrongId;
  ParseError parse_error = ParseError::kOk;               // kMalformed: why
  CookieJar::Verdict cookie = CookieJar::Verdict::kGood;  // kCookie: the option's verdict
  // Over TCP, taken in another case than sent: the server does not
  // preserve the case.
  bool case_not_preserved = false;
};

// Judges `reply` to `sent`. `over_tcp`: it came on the query's TCP
// connection. `badcookie_retried`: this query was sent again after a
// BADCOOKIE already. `cookies` is consulted and taught when `sent.cookie`
// is set. `parsed` gets the parse of the reply (valid when it parsed).
GuardOutcome CheckAnswer(const SentQuery& sent, std::span<const uint8_t> reply, bool over_tcp,
                         bool badcookie_retried, CookieJar* cookies, const ParseOptions& options,
                         Message* parsed);

// After one more ignored reply carrying a question (`count` with it): true
// when the UDP try should end and the question go over TCP. 0: never.
inline bool UnwantedReachesThreshold(uint32_t count, uint32_t threshold) {
  return threshold != 0 && count >= threshold;
}

const char* GuardReasonName(GuardReason r);

}  // namespace weir::dns
