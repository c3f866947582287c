#include "weir/dns/answer_guard.h"

#include "weir/dns/case_randomization.h"
#include "weir/dns/wire.h"

namespace weir::dns {
namespace {

GuardOutcome Outcome(GuardAction a, GuardReason r) {
  GuardOutcome o;
  o.action = a;
  o.reason = r;
  return o;
}

}  // namespace

GuardOutcome CheckAnswer(const SentQuery& sent, std::span<const uint8_t> reply, bool over_tcp,
                         bool badcookie_retried, CookieJar* cookies, const ParseOptions& options,
                         Message* parsed) {
  // Over TCP nothing is ignored: the connection is the query's own, and a
  // reply that is not its answer ends it.
  const GuardAction not_ours = over_tcp ? GuardAction::kFail : GuardAction::kIgnore;
  if (reply.size() < kHeaderSize || Load16(reply.data()) != sent.id) {
    return Outcome(not_ours, GuardReason::kWrongId);
  }
  if (const ParseError e = parsed->Parse(reply, options); e != ParseError::kOk) {
    GuardOutcome o = Outcome(GuardAction::kFail, GuardReason::kMalformed);
    o.parse_error = e;
    return o;
  }
  if (!(parsed->flags() & flag::kQr) || parsed->qtype() != sent.qtype || parsed->qclass() != sent.qclass ||
      !(parsed->qname() == *sent.qname)) {
    return Outcome(not_ours, GuardReason::kQuestion);
  }
  bool case_differs = false;
  if (sent.case_randomized && !SameSpelling(reply, sent.name)) {
    if (!over_tcp) return Outcome(GuardAction::kToTcp, GuardReason::kCase);
    case_differs = true;
  }
  if (sent.cookie != nullptr && cookies != nullptr && sent.server != nullptr) {
    CookieJar::Verdict v = CookieJar::Verdict::kGood;
    switch (cookies->OnAnswer(*sent.cookie, *sent.server, *parsed, over_tcp, &v)) {
      case CookieJar::Outcome::kAccept:
        break;
      case CookieJar::Outcome::kRefuse: {
        GuardOutcome o = Outcome(over_tcp ? GuardAction::kFail : GuardAction::kToTcp, GuardReason::kCookie);
        o.cookie = v;
        return o;
      }
      case CookieJar::Outcome::kBadCookie:
        return Outcome(badcookie_retried ? GuardAction::kToTcp : GuardAction::kRetryUdp,
                       GuardReason::kBadCookie);
    }
  }
  if (!over_tcp && (parsed->flags() & flag::kTc))
    return Outcome(GuardAction::kToTcp, GuardReason::kTruncated);
  GuardOutcome o = Outcome(GuardAction::kTake, GuardReason::kAnswer);
  o.case_not_preserved = case_differs;
  return o;
}

const char* GuardReasonName(GuardReason r) {
  switch (r) {
    case GuardReason::kAnswer:
      return "answer";
    case GuardReason::kWrongId:
      return "wrong ID";
    case GuardReason::kMalformed:
      return "malformed";
    case GuardReason::kQuestion:
      return "does not match the query";
    case GuardReason::kCase:
      return "question case differs from the 0x20 query";
    case GuardReason::kCookie:
      return "wrong, malformed or missing cookie";
    case GuardReason::kBadCookie:
      return "BADCOOKIE";
    case GuardReason::kTruncated:
      return "truncated";
    case GuardReason::kCount:
      break;
  }
  return "?";
}

}  // namespace weir::dns
