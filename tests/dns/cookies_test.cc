// DNS cookies, client side (RFC 7873): the client cookie, the server
// cookies remembered, and the rule on each answer over UDP and TCP (used by
// the fastpath's forwarder and the recursor's last hop).
#include "weir/dns/cookies.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "weir/dns/writer.h"

namespace weir::dns {
namespace {

using common::SocketAddress;
using Outcome = CookieJar::Outcome;
using Verdict = CookieJar::Verdict;

SocketAddress Addr(const char* text) { return *SocketAddress::Parse(text, 53); }

std::array<uint8_t, 16> Secret(uint8_t b) {
  std::array<uint8_t, 16> s;
  s.fill(b);
  return s;
}

class CookieJarTest : public ::testing::Test {
 protected:
  // An answer to www.example.com, with a COOKIE option of `cookie` when
  // `with_cookie`, and the rcode `rcode` (BADCOOKIE's upper bits in the OPT's
  // extended rcode).
  Message Answer(std::span<const uint8_t> cookie, bool with_cookie, uint16_t rcode = 0) {
    NameKey k;
    EXPECT_TRUE(NameKeyFromText("www.example.com", &k));
    wire_.assign(512, 0);
    ResponseWriter w(wire_.data(), wire_.size());
    w.Begin(4711, static_cast<uint16_t>(flag::kQr | (rcode & 0xf)), {k.bytes.data(), k.len}, type::kA,
            klass::kIn);
    w.BeginOpt(1232, false, static_cast<uint8_t>(rcode >> 4));
    if (with_cookie) w.AddOption(option::kCookie, cookie);
    wire_.resize(w.Finish(wire_.size()));
    Message m;
    EXPECT_EQ(m.Parse(wire_, {}), ParseError::kOk);
    return m;
  }
  std::vector<uint8_t> Full(const CookieJar::ClientCookieBytes& c, uint8_t server_byte,
                            size_t server_len = 16) {
    std::vector<uint8_t> v(c.begin(), c.end());
    v.insert(v.end(), server_len, server_byte);
    return v;
  }

  CookieJar jar{Secret(1)};
  const SocketAddress local = Addr("127.0.0.1:40000");
  const SocketAddress server = Addr("192.0.2.53:53");
  std::vector<uint8_t> wire_;
};

TEST_F(CookieJarTest, ClientCookieIsPerAddressPairAndSecret) {
  const auto c = jar.ClientCookie(local, server);
  EXPECT_EQ(c, jar.ClientCookie(local, server));
  EXPECT_EQ(c, jar.ClientCookie(Addr("127.0.0.1:40001"), Addr("192.0.2.53:5300")))
      << "ports play no part (RFC 7873 4.1)";
  EXPECT_NE(c, jar.ClientCookie(local, Addr("192.0.2.54:53")));
  EXPECT_NE(c, jar.ClientCookie(Addr("127.0.0.2:40000"), server));
  EXPECT_NE(c, CookieJar(Secret(2)).ClientCookie(local, server)) << "another secret, another cookie";
  // A socket bound to the wildcard: the server's address alone.
  const auto w = jar.ClientCookie({}, server);
  EXPECT_EQ(w, jar.ClientCookie({}, server));
  EXPECT_NE(w, c);
  EXPECT_NE(w, jar.ClientCookie({}, Addr("192.0.2.54:53")));
  EXPECT_NE(w, jar.ClientCookie({}, Addr("[2001:db8::1]:53")));
}

TEST_F(CookieJarTest, OptionCarriesTheServerCookieOnceLearnt) {
  const auto c = jar.ClientCookie(local, server);
  uint8_t out[CookieJar::kMaxOption];
  ASSERT_EQ(jar.OptionData(c, server, out), 8u);
  EXPECT_TRUE(std::equal(c.begin(), c.end(), out));
  EXPECT_FALSE(jar.DoesCookies(server));

  std::vector<uint8_t> answer(c.begin(), c.end());
  for (uint8_t i = 0; i < 16; ++i) answer.push_back(0xa0 + i);
  ASSERT_EQ(CookieJar::Check(c, true, answer), Verdict::kGood);
  jar.Learn(server, answer);
  EXPECT_TRUE(jar.DoesCookies(server));
  ASSERT_EQ(jar.OptionData(c, server, out), 24u);
  EXPECT_TRUE(std::equal(answer.begin(), answer.end(), out));
  EXPECT_EQ(jar.servers(), 1u);

  // Another port on the same address is another server.
  EXPECT_FALSE(jar.DoesCookies(Addr("192.0.2.53:5353")));
  EXPECT_EQ(jar.OptionData(c, Addr("192.0.2.53:5353"), out), 8u);

  // A new server cookie (BADCOOKIE, or the server rotated its secret) replaces the old one.
  answer.resize(16);
  answer[15] = 0x42;
  jar.Learn(server, answer);
  ASSERT_EQ(jar.OptionData(c, server, out), 16u);
  EXPECT_EQ(out[15], 0x42);

  jar.Forget(server);
  EXPECT_FALSE(jar.DoesCookies(server));
  EXPECT_EQ(jar.OptionData(c, server, out), 8u);
}

TEST_F(CookieJarTest, ChecksTheAnswersOption) {
  const auto c = jar.ClientCookie(local, server);
  std::vector<uint8_t> good(c.begin(), c.end());
  good.insert(good.end(), 8, 0x11);
  EXPECT_EQ(CookieJar::Check(c, true, good), Verdict::kGood);
  EXPECT_EQ(CookieJar::Check(c, false, {}), Verdict::kAbsent);

  std::vector<uint8_t> wrong = good;
  wrong[0] ^= 1;  // a forger does not know the client cookie
  EXPECT_EQ(CookieJar::Check(c, true, wrong), Verdict::kWrongClient);

  // RFC 7873 5.3: a server cookie of 8 to 32 bytes, so 16 to 40 in all.
  std::vector<uint8_t> client_only(c.begin(), c.end());
  EXPECT_EQ(CookieJar::Check(c, true, client_only), Verdict::kMalformed);
  std::vector<uint8_t> short_server = good;
  short_server.resize(12);
  EXPECT_EQ(CookieJar::Check(c, true, short_server), Verdict::kMalformed);
  short_server.resize(15);
  EXPECT_EQ(CookieJar::Check(c, true, short_server), Verdict::kMalformed);
  std::vector<uint8_t> too_long = good;
  too_long.resize(41, 0);
  EXPECT_EQ(CookieJar::Check(c, true, too_long), Verdict::kMalformed);
  too_long.resize(40);
  EXPECT_EQ(CookieJar::Check(c, true, too_long), Verdict::kGood);
  EXPECT_EQ(CookieJar::Check(c, true, {}), Verdict::kMalformed);

  jar.Learn(server, client_only);  // never learns from a malformed option
  EXPECT_FALSE(jar.DoesCookies(server));
}

TEST_F(CookieJarTest, OverUdpLearnsTheServerCookieAndRefusesForgeries) {
  const auto c = jar.ClientCookie({}, server);
  Verdict v{};
  // A server without cookies: answers without the option are taken.
  EXPECT_EQ(jar.OnAnswer(c, server, Answer({}, false), false, &v), Outcome::kAccept);
  EXPECT_EQ(v, Verdict::kAbsent);
  EXPECT_FALSE(jar.DoesCookies(server));
  // Our client cookie alone is no answer a server sends (RFC 7873 5.3).
  EXPECT_EQ(jar.OnAnswer(c, server, Answer(c, true), false, &v), Outcome::kRefuse);
  EXPECT_EQ(v, Verdict::kMalformed);
  EXPECT_FALSE(jar.DoesCookies(server));

  const std::vector<uint8_t> full = Full(c, 0xa5);
  EXPECT_EQ(jar.OnAnswer(c, server, Answer(full, true), false, &v), Outcome::kAccept);
  EXPECT_EQ(v, Verdict::kGood);
  EXPECT_TRUE(jar.DoesCookies(server));
  uint8_t out[CookieJar::kMaxOption];
  ASSERT_EQ(jar.OptionData(c, server, out), full.size());
  EXPECT_TRUE(std::equal(full.begin(), full.end(), out)) << "the next query carries the server cookie";

  // From now on a forger's answer, with no cookie or another client cookie, is refused.
  EXPECT_EQ(jar.OnAnswer(c, server, Answer({}, false), false, &v), Outcome::kRefuse);
  EXPECT_EQ(v, Verdict::kAbsent);
  std::vector<uint8_t> wrong = Full(c, 0x77);
  wrong[0] ^= 1;
  EXPECT_EQ(jar.OnAnswer(c, server, Answer(wrong, true), false, &v), Outcome::kRefuse);
  EXPECT_EQ(v, Verdict::kWrongClient);
  EXPECT_TRUE(jar.DoesCookies(server));
  ASSERT_EQ(jar.OptionData(c, server, out), full.size());
  EXPECT_TRUE(std::equal(full.begin(), full.end(), out)) << "refused answers teach nothing";
  // A server on another port of that address is not held to its cookies.
  EXPECT_EQ(jar.OnAnswer(c, Addr("192.0.2.53:5353"), Answer({}, false), false), Outcome::kAccept);
}

TEST_F(CookieJarTest, BadCookieOverUdpAsksForAnotherTryWithTheNewCookie) {
  const auto c = jar.ClientCookie({}, server);
  const std::vector<uint8_t> fresh = Full(c, 0x3c, 24);
  EXPECT_EQ(jar.OnAnswer(c, server, Answer(fresh, true, CookieJar::kRcodeBadCookie), false),
            Outcome::kBadCookie);
  uint8_t out[CookieJar::kMaxOption];
  ASSERT_EQ(jar.OptionData(c, server, out), 32u);
  EXPECT_EQ(out[31], 0x3c);
  // BADCOOKIE with another client cookie is a forgery like any other.
  std::vector<uint8_t> wrong = fresh;
  wrong[3] ^= 0xff;
  EXPECT_EQ(jar.OnAnswer(c, server, Answer(wrong, true, CookieJar::kRcodeBadCookie), false),
            Outcome::kRefuse);
  // BADCOOKIE without a cookie from a server not known to make them: not
  // refused, never passed on either.
  EXPECT_EQ(jar.OnAnswer(c, Addr("192.0.2.99:53"), Answer({}, false, CookieJar::kRcodeBadCookie), false),
            Outcome::kBadCookie);
  // Over TCP BADCOOKIE needs no retry: the answer is taken as it is.
  EXPECT_EQ(jar.OnAnswer(c, server, Answer(fresh, true, CookieJar::kRcodeBadCookie), true), Outcome::kAccept);
}

TEST_F(CookieJarTest, OverTcpNoCookieMeansTheServerStoppedMakingThem) {
  const auto c = jar.ClientCookie({}, server);
  ASSERT_EQ(jar.OnAnswer(c, server, Answer(Full(c, 1), true), false), Outcome::kAccept);
  ASSERT_TRUE(jar.DoesCookies(server));
  std::vector<uint8_t> wrong = Full(c, 1);
  wrong[7] ^= 1;
  EXPECT_EQ(jar.OnAnswer(c, server, Answer(wrong, true), true), Outcome::kRefuse) << "still no answer to us";
  EXPECT_TRUE(jar.DoesCookies(server));
  EXPECT_EQ(jar.OnAnswer(c, server, Answer({}, false), true), Outcome::kAccept);
  EXPECT_FALSE(jar.DoesCookies(server));
  uint8_t out[CookieJar::kMaxOption];
  EXPECT_EQ(jar.OptionData(c, server, out), 8u);
  EXPECT_EQ(jar.OnAnswer(c, server, Answer({}, false), false), Outcome::kAccept)
      << "its UDP answers are no longer held to cookies";
}

}  // namespace
}  // namespace weir::dns
