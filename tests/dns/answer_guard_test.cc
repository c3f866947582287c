// The one answer guard, as a table: each row a reply (what it echoes, how
// it came) and the action and reason both tiers take on it.
#include "weir/dns/answer_guard.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dns/test_util.h"
#include "weir/dns/writer.h"

namespace weir::dns {
namespace {

using Bytes = std::vector<uint8_t>;

common::SocketAddress Server() {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(53);
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  return common::SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&a), sizeof(a));
}

constexpr uint16_t kId = 0x4242;
// The question as sent: 0x20 case.
const Bytes kSentName = testing::WireName("wWw.ExAmple.cOM");

enum class CookieReply { kNone, kEcho, kWrong, kMalformed };

struct Row {
  std::string what;
  // The reply.
  int id_delta = 0;
  bool qr = true;
  std::string qname = "wWw.ExAmple.cOM";
  uint16_t qtype = type::kA;
  bool tc = false;
  uint16_t rcode = 0;  // 12 bits (23: BADCOOKIE)
  CookieReply cookie = CookieReply::kEcho;
  bool cut = false;  // the last bytes cut off: does not parse
  bool short_header = false;
  // How it came and what the query had.
  bool over_tcp = false;
  bool case_randomized = true;
  bool cookie_sent = true;
  bool server_does_cookies = false;  // a good cookie was seen before
  bool badcookie_retried = false;
  // Expected.
  GuardAction action;
  GuardReason reason;
  bool case_not_preserved = false;
};

class AnswerGuardTable : public ::testing::TestWithParam<Row> {};

TEST_P(AnswerGuardTable, ActsAsTheRuleSays) {
  const Row& r = GetParam();
  const common::SocketAddress server = Server();
  CookieJar jar(std::array<uint8_t, 16>{1, 2, 3});
  const CookieJar::ClientCookieBytes client = jar.ClientCookie({}, server);
  const Bytes server_cookie = {9, 9, 9, 9, 9, 9, 9, 9};
  if (r.server_does_cookies) {
    Bytes data(client.begin(), client.end());
    data.insert(data.end(), server_cookie.begin(), server_cookie.end());
    jar.Learn(server, data);
  }
  Bytes out(2048);
  ResponseWriter w(out.data(), out.size());
  uint16_t flags = (r.qr ? flag::kQr : 0) | flag::kRd | (r.tc ? flag::kTc : 0) | (r.rcode & 0xF);
  w.Begin(static_cast<uint16_t>(kId + r.id_delta), flags, testing::WireName(r.qname), r.qtype, klass::kIn);
  const uint8_t a[4] = {192, 0, 2, 1};
  w.AppendRecord(Section::kAnswer, testing::WireName(r.qname), type::kA, klass::kIn, 60, a);
  w.BeginOpt(1232, false, static_cast<uint8_t>(r.rcode >> 4));
  if (r.cookie != CookieReply::kNone) {
    Bytes data(client.begin(), client.end());
    if (r.cookie == CookieReply::kWrong) data[0] ^= 0xFF;
    if (r.cookie != CookieReply::kMalformed)
      data.insert(data.end(), server_cookie.begin(), server_cookie.end());
    else
      data.push_back(1);  // 9 bytes: no server sends that
    w.AddOption(option::kCookie, data);
  }
  out.resize(w.Finish(out.size()));
  if (r.cut) out.resize(out.size() - 5);
  if (r.short_header) out.resize(6);

  SentQuery sent;
  const NameKey qname = testing::Key("www.example.com");
  sent.id = kId;
  sent.qname = &qname;
  sent.name = kSentName;
  sent.qtype = type::kA;
  sent.qclass = klass::kIn;
  sent.case_randomized = r.case_randomized;
  sent.cookie = r.cookie_sent ? &client : nullptr;
  sent.server = &server;
  Message m;
  const GuardOutcome o = CheckAnswer(sent, out, r.over_tcp, r.badcookie_retried, &jar, ParseOptions{}, &m);
  EXPECT_EQ(static_cast<int>(o.action), static_cast<int>(r.action)) << r.what;
  EXPECT_EQ(static_cast<int>(o.reason), static_cast<int>(r.reason))
      << r.what << ": " << GuardReasonName(o.reason) << " instead of " << GuardReasonName(r.reason);
  EXPECT_EQ(o.case_not_preserved, r.case_not_preserved) << r.what;
  if (o.action == GuardAction::kTake) {
    EXPECT_EQ(m.id(), kId);
  }
}

Row R(std::string what, GuardAction action, GuardReason reason) {
  Row r;
  r.what = std::move(what);
  r.action = action;
  r.reason = reason;
  return r;
}

std::vector<Row> Rows() {
  using A = GuardAction;
  using G = GuardReason;
  std::vector<Row> rows;
  rows.push_back(R("genuine answer over UDP", A::kTake, G::kAnswer));
  {
    Row r = R("wrong ID: a blind guess", A::kIgnore, G::kWrongId);
    r.id_delta = 1;
    rows.push_back(r);
  }
  {
    Row r = R("no whole header", A::kIgnore, G::kWrongId);
    r.short_header = true;
    rows.push_back(r);
  }
  {
    Row r = R("right ID, cut short", A::kFail, G::kMalformed);
    r.cut = true;
    rows.push_back(r);
  }
  {
    Row r = R("not a response", A::kIgnore, G::kQuestion);
    r.qr = false;
    rows.push_back(r);
  }
  {
    Row r = R("another name", A::kIgnore, G::kQuestion);
    r.qname = "evil.example.com";
    rows.push_back(r);
  }
  {
    Row r = R("another type", A::kIgnore, G::kQuestion);
    r.qtype = type::kAaaa;
    rows.push_back(r);
  }
  {
    Row r = R("other case over UDP", A::kToTcp, G::kCase);
    r.qname = "www.example.com";
    rows.push_back(r);
  }
  {
    Row r = R("other case, 0x20 not used", A::kTake, G::kAnswer);
    r.qname = "www.example.com";
    r.case_randomized = false;
    rows.push_back(r);
  }
  {
    Row r = R("other case over TCP: the server's own", A::kTake, G::kAnswer);
    r.qname = "www.example.com";
    r.over_tcp = true;
    r.case_not_preserved = true;
    rows.push_back(r);
  }
  {
    Row r = R("wrong client cookie over UDP", A::kToTcp, G::kCookie);
    r.cookie = CookieReply::kWrong;
    rows.push_back(r);
  }
  {
    Row r = R("malformed cookie over UDP", A::kToTcp, G::kCookie);
    r.cookie = CookieReply::kMalformed;
    rows.push_back(r);
  }
  {
    Row r = R("no cookie from a server that does them", A::kToTcp, G::kCookie);
    r.cookie = CookieReply::kNone;
    r.server_does_cookies = true;
    rows.push_back(r);
  }
  {
    Row r = R("no cookie from a server not known to do them", A::kTake, G::kAnswer);
    r.cookie = CookieReply::kNone;
    rows.push_back(r);
  }
  {
    Row r = R("no cookie sent: none checked", A::kTake, G::kAnswer);
    r.cookie = CookieReply::kWrong;
    r.cookie_sent = false;
    rows.push_back(r);
  }
  {
    Row r = R("wrong cookie over TCP", A::kFail, G::kCookie);
    r.cookie = CookieReply::kWrong;
    r.over_tcp = true;
    rows.push_back(r);
  }
  {
    Row r = R("BADCOOKIE first time: retry over UDP", A::kRetryUdp, G::kBadCookie);
    r.rcode = 23;
    rows.push_back(r);
  }
  {
    Row r = R("BADCOOKIE again: TCP", A::kToTcp, G::kBadCookie);
    r.rcode = 23;
    r.badcookie_retried = true;
    rows.push_back(r);
  }
  {
    Row r = R("TC over UDP after every check", A::kToTcp, G::kTruncated);
    r.tc = true;
    rows.push_back(r);
  }
  {
    Row r = R("TC for another question is ignored", A::kIgnore, G::kQuestion);
    r.tc = true;
    r.qname = "evil.example.com";
    rows.push_back(r);
  }
  {
    Row r = R("TC with a wrong cookie: the cookie first", A::kToTcp, G::kCookie);
    r.tc = true;
    r.cookie = CookieReply::kWrong;
    rows.push_back(r);
  }
  {
    Row r = R("TC over TCP is the answer", A::kTake, G::kAnswer);
    r.tc = true;
    r.over_tcp = true;
    rows.push_back(r);
  }
  {
    Row r = R("wrong ID over TCP fails the try", A::kFail, G::kWrongId);
    r.id_delta = 7;
    r.over_tcp = true;
    rows.push_back(r);
  }
  {
    Row r = R("another question over TCP fails the try", A::kFail, G::kQuestion);
    r.qname = "evil.example.com";
    r.over_tcp = true;
    rows.push_back(r);
  }
  {
    Row r = R("NXDOMAIN is an answer", A::kTake, G::kAnswer);
    r.rcode = 3;
    rows.push_back(r);
  }
  return rows;
}

INSTANTIATE_TEST_SUITE_P(Rule, AnswerGuardTable, ::testing::ValuesIn(Rows()),
                         [](const ::testing::TestParamInfo<Row>& i) {
                           return "row" + std::to_string(i.index);
                         });

TEST(AnswerGuard, UnwantedThreshold) {
  EXPECT_FALSE(UnwantedReachesThreshold(9, 10));
  EXPECT_TRUE(UnwantedReachesThreshold(10, 10));
  EXPECT_FALSE(UnwantedReachesThreshold(1000, 0));  // 0: off
}

}  // namespace
}  // namespace weir::dns
