// weir-recursor's server cookies: the secret file, its reload, the daily
// rotation of a generated secret with the one before still accepted, and
// the COOKIE option in the responses the front gets (BADCOOKIE's upper
// bits, truncated answers).
#include "front_cookies.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "dns/test_util.h"
#include "weir/dns/cookies.h"
#include "weir/recursor/answer.h"

namespace weir::recursor {
namespace {

using Verdict = FrontCookies::Verdict;
using dns::testing::MakeQuery;

constexpr uint32_t kNow = 1700000000;
const common::SocketAddress kPeer = *common::SocketAddress::Parse("192.0.2.7", 4000);

struct Parsed {
  std::vector<uint8_t> pkt;
  dns::Query q;
};

Parsed QueryWithCookie(std::vector<uint8_t> cookie) {
  Parsed p;
  p.pkt = MakeQuery({.cookie = std::move(cookie)});
  EXPECT_EQ(dns::ParseQuery(p.pkt, {}, &p.q), dns::ParseError::kOk);
  return p;
}

const std::vector<uint8_t> kClient = {1, 2, 3, 4, 5, 6, 7, 8};

// Asks with a client cookie alone and returns the option the response
// carries (client cookie and server cookie), which a client echoes.
std::vector<uint8_t> FirstContact(FrontCookies& c, uint32_t now, const common::SocketAddress& peer = kPeer) {
  Parsed p = QueryWithCookie(kClient);
  dns::ServerCookies::OptionBytes reply{};
  EXPECT_EQ(c.Judge(p.q, p.pkt, peer, now, &reply), Verdict::kClientOnly);
  return {reply.begin(), reply.end()};
}

Verdict Echo(FrontCookies& c, const std::vector<uint8_t>& option, uint32_t now,
             const common::SocketAddress& peer = kPeer) {
  Parsed p = QueryWithCookie(option);
  dns::ServerCookies::OptionBytes reply{};
  return c.Judge(p.q, p.pkt, peer, now, &reply);
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(FrontCookies, AGeneratedSecretRotatesDailyAndTheOneBeforeStaysValid) {
  RecursorConfig cfg;
  FrontCookies c(cfg);
  ASSERT_TRUE(c.Load().ok());
  const std::vector<uint8_t> before = FirstContact(c, kNow);
  EXPECT_EQ(Echo(c, before, kNow + 60), Verdict::kValid);
  // Another client address, or a query without any cookie.
  EXPECT_EQ(Echo(c, before, kNow + 60, *common::SocketAddress::Parse("192.0.2.8", 4000)), Verdict::kInvalid);
  Parsed none;
  none.pkt = MakeQuery({});
  ASSERT_EQ(dns::ParseQuery(none.pkt, {}, &none.q), dns::ParseError::kOk);
  dns::ServerCookies::OptionBytes reply{};
  EXPECT_EQ(c.Judge(none.q, none.pkt, kPeer, kNow, &reply), Verdict::kNone);

  // A day on, a cookie made a minute before the rotation is still valid
  // for its hour: the secret before is kept.
  const std::vector<uint8_t> last = FirstContact(c, kNow + FrontCookies::kRotation - 60);
  EXPECT_EQ(c.rotations(), 0u);
  const dns::ServerCookies::Secret old = c.cookies().current();
  EXPECT_EQ(Echo(c, last, kNow + FrontCookies::kRotation), Verdict::kValid);
  EXPECT_EQ(c.rotations(), 1u);
  EXPECT_NE(c.cookies().current(), old);
  ASSERT_TRUE(c.cookies().previous().has_value());
  EXPECT_EQ(*c.cookies().previous(), old);
  EXPECT_EQ(Echo(c, last, kNow + FrontCookies::kRotation + 3000), Verdict::kValid);
  // A cookie of the new secret is valid too; after a second rotation the
  // first secret is gone (its cookies were out of their hour anyway).
  const std::vector<uint8_t> fresh = FirstContact(c, kNow + FrontCookies::kRotation + 10);
  EXPECT_EQ(Echo(c, fresh, kNow + FrontCookies::kRotation + 20), Verdict::kValid);
  FirstContact(c, kNow + 2 * FrontCookies::kRotation);
  EXPECT_EQ(c.rotations(), 2u);
  EXPECT_NE(*c.cookies().previous(), old);
}

TEST(FrontCookies, TwoRecursorsWithOneSecretFileAcceptEachOthersCookies) {
  RecursorConfig cfg;
  cfg.cookie_secret_file = WriteFile("front_cookies_shared", "# shared\n000102030405060708090a0b0c0d0e0f\n");
  FrontCookies a(cfg), b(cfg);
  ASSERT_TRUE(a.Load().ok());
  ASSERT_TRUE(b.Load().ok());
  EXPECT_EQ(Echo(b, FirstContact(a, kNow), kNow + 5), Verdict::kValid);
  // A file's secret does not rotate.
  FirstContact(a, kNow + 3 * FrontCookies::kRotation);
  EXPECT_EQ(a.rotations(), 0u);
  std::remove(cfg.cookie_secret_file.c_str());
}

TEST(FrontCookies, ReloadUsesTheNewSecretAndStillAcceptsTheOneItReplaces) {
  RecursorConfig cfg;
  cfg.cookie_secret_file = WriteFile("front_cookies_reload", "000102030405060708090a0b0c0d0e0f\n");
  FrontCookies c(cfg);
  ASSERT_TRUE(c.Load().ok());
  const std::vector<uint8_t> old_cookie = FirstContact(c, kNow);
  WriteFile("front_cookies_reload", "ffeeddccbbaa99887766554433221100\n");
  ASSERT_TRUE(c.Reload().ok());
  EXPECT_EQ(Echo(c, old_cookie, kNow + 1), Verdict::kValid);
  RecursorConfig other_cfg = cfg;
  other_cfg.cookie_secret_file = WriteFile("front_cookies_new_only", "ffeeddccbbaa99887766554433221100\n");
  FrontCookies new_only(other_cfg);
  ASSERT_TRUE(new_only.Load().ok());
  EXPECT_EQ(Echo(new_only, old_cookie, kNow + 1), Verdict::kInvalid);
  EXPECT_EQ(Echo(new_only, FirstContact(c, kNow + 2), kNow + 3), Verdict::kValid);
  // A reload of the same secret keeps the one before; a bad file keeps both.
  ASSERT_TRUE(c.Reload().ok());
  EXPECT_EQ(Echo(c, old_cookie, kNow + 4), Verdict::kValid);
  WriteFile("front_cookies_reload", "not hex\n");
  EXPECT_FALSE(c.Reload().ok());
  EXPECT_EQ(Echo(c, old_cookie, kNow + 5), Verdict::kValid);
  // Two secrets: the first is used, the second accepted, nothing else.
  WriteFile("front_cookies_reload",
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\nffeeddccbbaa99887766554433221100  # the one before\n");
  ASSERT_TRUE(c.Reload().ok());
  EXPECT_EQ(Echo(c, old_cookie, kNow + 6), Verdict::kInvalid);
  const std::vector<uint8_t> b_cookie = FirstContact(new_only, kNow + 6);  // made with the second
  EXPECT_EQ(Echo(c, b_cookie, kNow + 7), Verdict::kValid);
  // The rollover's last step: the file names only the new secret; the one
  // it accepted besides is accepted no more.
  WriteFile("front_cookies_reload", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n");
  ASSERT_TRUE(c.Reload().ok());
  EXPECT_EQ(Echo(c, b_cookie, kNow + 8), Verdict::kInvalid);
  EXPECT_EQ(Echo(c, FirstContact(c, kNow + 8), kNow + 9), Verdict::kValid);
  std::remove(cfg.cookie_secret_file.c_str());
  std::remove(other_cfg.cookie_secret_file.c_str());
}

TEST(FrontCookies, SecretFileErrorsNameTheLine) {
  EXPECT_TRUE(ParseCookieSecrets("000102030405060708090a0b0c0d0e0f", "s").ok());
  auto bad = ParseCookieSecrets("# c\n0001020304050607", "s");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "s:2: a cookie secret is 32 hex digits (16 bytes)");
  EXPECT_FALSE(ParseCookieSecrets("# nothing\n", "s").ok());
  EXPECT_FALSE(ParseCookieSecrets("000102030405060708090a0b0c0d0e0g", "s").ok());
  EXPECT_FALSE(ParseCookieSecrets(std::string(3, ' ') + std::string(32, 'a') + " " + std::string(32, 'b') +
                                      " " + std::string(32, 'c'),
                                  "s")
                   .ok());
  EXPECT_FALSE(ReadCookieSecretFile(::testing::TempDir() + "/front_cookies_missing").ok());
}

// The option goes into every response to the query, errors and truncated
// answers included; BADCOOKIE's upper bits go into the OPT.
TEST(FrontCookies, ResponsesCarryTheCookieWhateverTheirRcode) {
  Parsed p = QueryWithCookie(kClient);
  const std::vector<uint8_t> cookie = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12,
                                       13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24};
  ReplyContext ctx{p.pkt, &p.q, false, dns::kDefaultWeightOptionCode, cookie};
  auto cookie_of = [](std::span<const uint8_t> wire, uint16_t* rcode, bool* tc) {
    dns::Message m;
    EXPECT_EQ(m.Parse(wire, {}), dns::ParseError::kOk);
    *rcode = m.rcode();
    *tc = (wire[2] & 0x02) != 0;
    const std::span<const uint8_t> opt = dns::CookieJar::OptionOf(m);
    return std::vector<uint8_t>(opt.begin(), opt.end());
  };
  uint8_t out[4096];
  uint16_t rcode = 0;
  bool tc = false;
  for (dns::Rcode r :
       {dns::Rcode::kBadCookie, dns::Rcode::kServFail, dns::Rcode::kFormErr, dns::Rcode::kRefused}) {
    const size_t n = WriteError(ctx, r, out, sizeof out);
    ASSERT_GT(n, 0u);
    EXPECT_EQ(cookie_of({out, n}, &rcode, &tc), cookie);
    EXPECT_EQ(rcode, static_cast<uint16_t>(r));
  }
  // An answer too big for 512 bytes (the query's EDNS size is 1232; ask
  // for less): TC, the cookie kept.
  p.pkt = MakeQuery({.udp_size = 512, .cookie = kClient});
  ASSERT_EQ(dns::ParseQuery(p.pkt, {}, &p.q), dns::ParseError::kOk);
  ctx.query_pkt = p.pkt;
  Answer a;
  for (int i = 0; i < 60; ++i) {
    CachedRecord r;
    r.owner = dns::testing::KeyBytes("www.example.com");
    r.type = dns::type::kA;
    r.klass = dns::klass::kIn;
    r.ttl = 300;
    r.rdata = {192, 0, 2, static_cast<uint8_t>(i)};
    a.answer.push_back(r);
  }
  const size_t n = WriteAnswer(ctx, a, 0, -1, out, sizeof out);
  ASSERT_GT(n, 0u);
  EXPECT_EQ(cookie_of({out, n}, &rcode, &tc), cookie);
  EXPECT_TRUE(tc);
  // Without a cookie in the context, none in the response.
  ctx.cookie = {};
  const size_t m = WriteError(ctx, dns::Rcode::kServFail, out, sizeof out);
  EXPECT_TRUE(cookie_of({out, m}, &rcode, &tc).empty());
}

}  // namespace
}  // namespace weir::recursor
