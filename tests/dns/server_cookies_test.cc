// DNS cookies, server side (RFC 7873 5.2 with RFC 9018's server cookie):
// the construction against RFC 9018's Appendix A, the time window, the
// secret rollover and the verdict on each shape of COOKIE option.
#include "weir/dns/server_cookies.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace weir::dns {
namespace {

using Verdict = ServerCookies::Verdict;

std::vector<uint8_t> Hex(const std::string& s) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < s.size(); i += 2)
    out.push_back(static_cast<uint8_t>(std::stoi(s.substr(i, 2), nullptr, 16)));
  return out;
}

ServerCookies::Secret SecretOf(const std::string& hex) {
  ServerCookies::Secret s{};
  const std::vector<uint8_t> b = Hex(hex);
  EXPECT_EQ(b.size(), s.size());
  std::copy(b.begin(), b.end(), s.begin());
  return s;
}

std::vector<uint8_t> Ip(const char* text) {
  uint8_t b[16];
  if (inet_pton(AF_INET, text, b) == 1) return {b, b + 4};
  EXPECT_EQ(inet_pton(AF_INET6, text, b), 1) << text;
  return {b, b + 16};
}

std::string ToHex(std::span<const uint8_t> b) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (uint8_t x : b) {
    s.push_back(kDigits[x >> 4]);
    s.push_back(kDigits[x & 0xf]);
  }
  return s;
}

// RFC 9018 Appendix A: the server cookies the examples hand out.
TEST(ServerCookiesTest, MakesTheCookiesOfRfc9018AppendixA) {
  struct Case {
    const char* name;
    const char* secret;
    const char* client;
    const char* ip;
    uint32_t at;
    const char* want;
  } cases[] = {
      {"A.1", "e5e973e5a6b2a43f48e7dc849e37bfcf", "2464c4abcf10c957", "198.51.100.100", 1559731985,
       "010000005cf79f111f8130c3eee29480"},
      {"A.2", "e5e973e5a6b2a43f48e7dc849e37bfcf", "2464c4abcf10c957", "198.51.100.100", 1559734385,
       "010000005cf7a871d4a564a1442aca77"},
      {"A.3", "e5e973e5a6b2a43f48e7dc849e37bfcf", "fc93fc62807ddb86", "203.0.113.203", 1559734700,
       "010000005cf7a9acf73a7810aca2381e"},
      {"A.4", "445536bcd2513298075a5d379663c962", "22681ab97d52c298", "2001:db8:220:1:59de:d0f4:8769:82b8",
       1559741961, "010000005cf7c609a6bb79d16625507a"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto got = ServerCookies::Make(SecretOf(c.secret), Hex(c.client), Ip(c.ip), c.at);
    EXPECT_EQ(ToHex(got), c.want);
  }
}

// The cookies the examples' clients send back, judged as the server does.
TEST(ServerCookiesTest, JudgesTheQueriesOfRfc9018AppendixA) {
  ServerCookies::OptionBytes reply{};
  // A.1: a client cookie alone gets the client cookie and a server cookie.
  ServerCookies a(SecretOf("e5e973e5a6b2a43f48e7dc849e37bfcf"));
  EXPECT_EQ(a.Judge(true, Hex("2464c4abcf10c957"), Ip("198.51.100.100"), 1559731985, &reply),
            Verdict::kClientOnly);
  EXPECT_EQ(ToHex(reply), "2464c4abcf10c957010000005cf79f111f8130c3eee29480");
  // A.2: that cookie 40 minutes later is valid, and renewed.
  EXPECT_EQ(a.Judge(true, Hex("2464c4abcf10c957010000005cf79f111f8130c3eee29480"), Ip("198.51.100.100"),
                    1559734385, &reply),
            Verdict::kValid);
  EXPECT_EQ(ToHex(reply), "2464c4abcf10c957010000005cf7a871d4a564a1442aca77");
  // A.3: reserved bytes set by the server that made it are hashed as sent.
  // The example's reply comes 1 h 52 min after the cookie's timestamp,
  // outside RFC 9018's hour: valid at its own time, invalid then.
  const std::vector<uint8_t> a3 = Hex("fc93fc62807ddb8601abcdef5cf78f71a314227b6679ebf5");
  EXPECT_EQ(a.Judge(true, a3, Ip("203.0.113.203"), 1559727985 + 60, &reply), Verdict::kValid);
  EXPECT_EQ(a.Judge(true, a3, Ip("203.0.113.203"), 1559734700, &reply), Verdict::kInvalid);
  EXPECT_EQ(ToHex(reply), "fc93fc62807ddb86010000005cf7a9acf73a7810aca2381e");
  // A.4: a cookie of the secret before the rollover, still accepted; the
  // reply is made with the new one.
  ServerCookies b(SecretOf("445536bcd2513298075a5d379663c962"));
  const std::vector<uint8_t> a4 = Hex("22681ab97d52c298010000005cf7c57926556bd0934c72f8");
  const std::vector<uint8_t> ip6 = Ip("2001:db8:220:1:59de:d0f4:8769:82b8");
  EXPECT_EQ(b.Judge(true, a4, ip6, 1559741961, &reply), Verdict::kInvalid);
  b.SetSecrets(SecretOf("445536bcd2513298075a5d379663c962"), SecretOf("dd3bdf9344b678b185a6f5cb60fca715"));
  EXPECT_EQ(b.Judge(true, a4, ip6, 1559741961, &reply), Verdict::kValid);
  EXPECT_EQ(ToHex(reply), "22681ab97d52c298010000005cf7c609a6bb79d16625507a");
}

class ServerCookiesWindowTest : public ::testing::Test {
 protected:
  static constexpr uint32_t kNow = 1700000000;
  ServerCookies cookies_{SecretOf("000102030405060708090a0b0c0d0e0f")};
  const std::vector<uint8_t> client_ = Hex("0123456789abcdef");
  const std::vector<uint8_t> ip_ = Ip("192.0.2.7");

  // The option a client sends back after a server cookie made at `made`.
  std::vector<uint8_t> Echo(uint32_t made, std::span<const uint8_t> ip) const {
    std::vector<uint8_t> opt = client_;
    const auto server = ServerCookies::Make(cookies_.current(), client_, ip, made);
    opt.insert(opt.end(), server.begin(), server.end());
    return opt;
  }
  Verdict Judge(std::span<const uint8_t> opt, uint32_t now, std::span<const uint8_t> ip) const {
    ServerCookies::OptionBytes reply{};
    return cookies_.Judge(true, opt, ip, now, &reply);
  }
};

// RFC 9018 4.3: an hour into the past, five minutes into the future.
TEST_F(ServerCookiesWindowTest, AcceptsAnHourBackAndFiveMinutesAhead) {
  EXPECT_EQ(Judge(Echo(kNow, ip_), kNow, ip_), Verdict::kValid);
  EXPECT_EQ(Judge(Echo(kNow - 3600, ip_), kNow, ip_), Verdict::kValid);
  EXPECT_EQ(Judge(Echo(kNow - 3601, ip_), kNow, ip_), Verdict::kInvalid);
  EXPECT_EQ(Judge(Echo(kNow + 300, ip_), kNow, ip_), Verdict::kValid);
  EXPECT_EQ(Judge(Echo(kNow + 301, ip_), kNow, ip_), Verdict::kInvalid);
  // Serial number arithmetic across the 32-bit wrap.
  EXPECT_TRUE(ServerCookies::Timely(0xffffff00u, 0x100));
  EXPECT_FALSE(ServerCookies::Timely(0x100, 0xffffff00u + 0));
}

TEST_F(ServerCookiesWindowTest, ACookieIsBoundToTheClientAddressCookieAndSecret) {
  const std::vector<uint8_t> other_ip = Ip("192.0.2.8");
  EXPECT_EQ(Judge(Echo(kNow, ip_), kNow, ip_), Verdict::kValid);
  EXPECT_EQ(Judge(Echo(kNow, ip_), kNow, other_ip), Verdict::kInvalid);
  EXPECT_EQ(Judge(Echo(kNow, ip_), kNow, Ip("::ffff:192.0.2.7")), Verdict::kInvalid);
  std::vector<uint8_t> other_client = Echo(kNow, ip_);
  other_client[0] ^= 1;
  EXPECT_EQ(Judge(other_client, kNow, ip_), Verdict::kInvalid);
  std::vector<uint8_t> forged = Echo(kNow, ip_);
  forged.back() ^= 0x80;
  EXPECT_EQ(Judge(forged, kNow, ip_), Verdict::kInvalid);
  // Another version, or another length of server cookie, is not ours.
  std::vector<uint8_t> v2 = Echo(kNow, ip_);
  v2[8] = 2;
  EXPECT_EQ(Judge(v2, kNow, ip_), Verdict::kInvalid);
  std::vector<uint8_t> longer = Echo(kNow, ip_);
  longer.push_back(0);
  EXPECT_EQ(Judge(longer, kNow, ip_), Verdict::kInvalid);
  // Another secret: invalid, until it is the one kept beside the current.
  ServerCookies rolled(SecretOf("ffeeddccbbaa99887766554433221100"));
  ServerCookies::OptionBytes reply{};
  EXPECT_EQ(rolled.Judge(true, Echo(kNow, ip_), ip_, kNow, &reply), Verdict::kInvalid);
  rolled.SetSecrets(rolled.current(), cookies_.current());
  EXPECT_EQ(rolled.Judge(true, Echo(kNow, ip_), ip_, kNow, &reply), Verdict::kValid);
  // The reply is made with the current secret, so it validates under it alone.
  ServerCookies current_only(rolled.current());
  EXPECT_EQ(current_only.Judge(true, reply, ip_, kNow, &reply), Verdict::kValid);
}

// RFC 7873 5.2.2: 8 bytes, or 16 to 40; anything else is malformed.
TEST_F(ServerCookiesWindowTest, LengthsOtherThan8Or16To40AreMalformed) {
  ServerCookies::OptionBytes reply{};
  reply.fill(0xaa);
  EXPECT_EQ(cookies_.Judge(false, {}, ip_, kNow, &reply), Verdict::kNone);
  for (size_t len : {0, 1, 7, 9, 15, 41, 60}) {
    SCOPED_TRACE(len);
    const std::vector<uint8_t> opt(len, 1);
    EXPECT_EQ(cookies_.Judge(true, opt, ip_, kNow, &reply), Verdict::kMalformed);
  }
  for (size_t len : {16, 24, 40}) {
    SCOPED_TRACE(len);
    const std::vector<uint8_t> opt(len, 1);
    EXPECT_EQ(cookies_.Judge(true, opt, ip_, kNow, &reply), Verdict::kInvalid);
  }
  const std::vector<uint8_t> client_only(8, 1);
  EXPECT_EQ(cookies_.Judge(true, client_only, ip_, kNow, &reply), Verdict::kClientOnly);
  // The reply: the client cookie, then a cookie valid for this client.
  EXPECT_EQ(std::vector<uint8_t>(reply.begin(), reply.begin() + 8), client_only);
  EXPECT_EQ(cookies_.Judge(true, reply, ip_, kNow + 10, &reply), Verdict::kValid);
}

}  // namespace
}  // namespace weir::dns
