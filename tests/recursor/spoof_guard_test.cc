#include "weir/recursor/spoof_guard.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

#include "weir/dns/message.h"

namespace weir::recursor {
namespace {

using common::SocketAddress;

std::vector<uint8_t> Wire(const char* text) {
  dns::NameKey k;
  EXPECT_TRUE(dns::NameKeyFromText(text, &k));
  return {k.bytes.begin(), k.bytes.begin() + k.len};
}

SocketAddress Addr(const char* text) { return *SocketAddress::Parse(text); }

TEST(RandomizeCaseTest, FlipsLettersOnlyAndKeepsTheName) {
  std::mt19937_64 rng(7);
  const std::vector<uint8_t> plain = Wire("www-1.example.com");
  std::set<std::vector<uint8_t>> seen;
  for (int i = 0; i < 64; ++i) {
    std::vector<uint8_t> w = plain;
    EXPECT_EQ(RandomizeCase(w, rng), 13);  // wwwexamplecom
    ASSERT_EQ(w.size(), plain.size());
    for (size_t j = 0; j < w.size(); ++j) {
      const bool letter = (plain[j] >= 'a' && plain[j] <= 'z');
      if (letter) {
        EXPECT_EQ(w[j] | 0x20, plain[j]) << j;
      } else {
        EXPECT_EQ(w[j], plain[j]) << j;  // length bytes, '-', '1'
      }
    }
    dns::NameKey a, b;
    size_t end = 0;
    ASSERT_EQ(dns::ReadName(w, 0, &end, &a), dns::ParseError::kOk);
    ASSERT_EQ(dns::ReadName(plain, 0, &end, &b), dns::ParseError::kOk);
    EXPECT_EQ(a, b) << "the same name for everyone but a byte-for-byte check";
    seen.insert(w);
  }
  EXPECT_GT(seen.size(), 60u) << "13 random bits per query";
}

TEST(RandomizeCaseTest, NameWithoutLettersHasNoEntropy) {
  std::mt19937_64 rng(1);
  std::vector<uint8_t> w = Wire("1.2.3.4");
  const std::vector<uint8_t> before = w;
  EXPECT_EQ(RandomizeCase(w, rng), 0);
  EXPECT_EQ(w, before);
  std::vector<uint8_t> root = {0};
  EXPECT_EQ(RandomizeCase(root, rng), 0);
}

TEST(RandomizeCaseTest, SecureRandomGivesDifferentCases) {
  SecureRandom r;
  std::set<std::vector<uint8_t>> seen;
  for (int i = 0; i < 200; ++i) {  // crosses the 64-word buffer refill
    std::vector<uint8_t> w = Wire("abcdefghijklmnopqrstuvwxyz.example");
    RandomizeCase(w, r);
    seen.insert(w);
  }
  EXPECT_EQ(seen.size(), 200u);
}

TEST(SameSpellingTest, ByteForByteAtTheQuestion) {
  std::vector<uint8_t> sent = Wire("www.example.com");
  sent[1] = 'W';
  std::vector<uint8_t> reply(12, 0);
  reply.insert(reply.end(), sent.begin(), sent.end());
  reply.insert(reply.end(), {0, 1, 0, 1});
  EXPECT_TRUE(SameSpelling(reply, sent));
  reply[13] = 'w';  // the authority lower-cased it (or a forger guessed)
  EXPECT_FALSE(SameSpelling(reply, sent));
  reply.resize(14);
  EXPECT_FALSE(SameSpelling(reply, sent)) << "a short reply never matches";
}

TEST(CaseMemoryTest, RemembersPerServerForAWhile) {
  CaseMemory m;
  const auto t0 = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  const SocketAddress a = Addr("192.0.2.1:53"), b = Addr("192.0.2.2:53"),
                      a_other_port = Addr("192.0.2.1:5353");
  EXPECT_TRUE(m.Preserves(a, t0));
  m.NotPreserved(a, t0);
  EXPECT_FALSE(m.Preserves(a, t0 + std::chrono::seconds(1)));
  EXPECT_TRUE(m.Preserves(b, t0));
  EXPECT_TRUE(m.Preserves(a_other_port, t0));
  EXPECT_FALSE(m.Preserves(a, t0 + CaseMemory::kHold - std::chrono::seconds(1)));
  EXPECT_TRUE(m.Preserves(a, t0 + CaseMemory::kHold)) << "0x20 is tried again after the hold";
}

TEST(SipHashTest, ReferenceVectors) {
  // The SipHash paper, appendix A: key 00..0f, messages 00..(n-1).
  std::array<uint8_t, 16> key;
  for (int i = 0; i < 16; ++i) key[i] = static_cast<uint8_t>(i);
  std::vector<uint8_t> msg;
  EXPECT_EQ(SipHash24(key, msg), 0x726fdb47dd0e0e31ULL);
  for (int i = 0; i < 15; ++i) msg.push_back(static_cast<uint8_t>(i));
  EXPECT_EQ(SipHash24(key, msg), 0xa129ca6149be45e5ULL);
}

class CookieJarTest : public ::testing::Test {
 protected:
  static std::array<uint8_t, 16> Secret(uint8_t b) {
    std::array<uint8_t, 16> s;
    s.fill(b);
    return s;
  }
  CookieJar jar{Secret(1)};
  const SocketAddress local = Addr("127.0.0.1:40000");
  const SocketAddress server = Addr("192.0.2.53:53");
};

TEST_F(CookieJarTest, ClientCookieIsPerServerAndSecret) {
  const auto c = jar.ClientCookie(local, server);
  EXPECT_EQ(c, jar.ClientCookie(Addr("127.0.0.1:40001"), Addr("192.0.2.53:5300")))
      << "ports play no part (RFC 7873 4.1)";
  EXPECT_NE(c, jar.ClientCookie(local, Addr("192.0.2.54:53")));
  EXPECT_NE(c, jar.ClientCookie(Addr("127.0.0.2:40000"), server));
  EXPECT_NE(c, CookieJar(Secret(2)).ClientCookie(local, server)) << "another secret, another cookie";
}

TEST_F(CookieJarTest, OptionCarriesTheServerCookieOnceLearnt) {
  const auto c = jar.ClientCookie(local, server);
  uint8_t out[CookieJar::kMaxOption];
  ASSERT_EQ(jar.OptionData(c, server, out), 8u);
  EXPECT_TRUE(std::equal(c.begin(), c.end(), out));
  EXPECT_FALSE(jar.DoesCookies(server));

  std::vector<uint8_t> answer(c.begin(), c.end());
  for (uint8_t i = 0; i < 16; ++i) answer.push_back(0xa0 + i);
  ASSERT_EQ(CookieJar::Check(c, true, answer), CookieJar::Verdict::kGood);
  jar.Learn(server, answer);
  EXPECT_TRUE(jar.DoesCookies(server));
  ASSERT_EQ(jar.OptionData(c, server, out), 24u);
  EXPECT_TRUE(std::equal(answer.begin(), answer.end(), out));
  EXPECT_EQ(jar.servers(), 1u);

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
  EXPECT_EQ(CookieJar::Check(c, true, good), CookieJar::Verdict::kGood);
  EXPECT_EQ(CookieJar::Check(c, false, {}), CookieJar::Verdict::kAbsent);

  std::vector<uint8_t> wrong = good;
  wrong[0] ^= 1;  // a forger does not know the client cookie
  EXPECT_EQ(CookieJar::Check(c, true, wrong), CookieJar::Verdict::kWrongClient);

  std::vector<uint8_t> client_only(c.begin(), c.end());
  EXPECT_EQ(CookieJar::Check(c, true, client_only), CookieJar::Verdict::kMalformed);
  std::vector<uint8_t> short_server = good;
  short_server.resize(15);
  EXPECT_EQ(CookieJar::Check(c, true, short_server), CookieJar::Verdict::kMalformed);
  std::vector<uint8_t> too_long = good;
  too_long.resize(41, 0);
  EXPECT_EQ(CookieJar::Check(c, true, too_long), CookieJar::Verdict::kMalformed);
  too_long.resize(40);
  EXPECT_EQ(CookieJar::Check(c, true, too_long), CookieJar::Verdict::kGood);

  jar.Learn(server, client_only);  // never learns from a malformed option
  EXPECT_FALSE(jar.DoesCookies(server));
}

}  // namespace
}  // namespace weir::recursor
