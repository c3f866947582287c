#include "weir/common/ip.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace weir::common {
namespace {

IpAddress Ip(std::string_view text) {
  IpAddress a;
  EXPECT_TRUE(ParseIp(text, &a)) << text;
  return a;
}

TEST(IpAddress, ParseAndPrint) {
  EXPECT_EQ(Ip("192.0.2.1").family, 4);
  EXPECT_EQ(Ip("192.0.2.1").v4(), 0xc0000201u);
  EXPECT_EQ(IpAddress::V4(0xc0000201u), Ip("192.0.2.1"));
  EXPECT_EQ(IpToString(Ip("192.0.2.1")), "192.0.2.1");
  EXPECT_EQ(IpToString(Ip("2001:db8::1")), "2001:db8::1");
  EXPECT_TRUE(Ip("::ffff:10.0.0.1").IsV4Mapped());
  EXPECT_FALSE(Ip("2001:db8::1").IsV4Mapped());
  EXPECT_EQ(IpToString(IpAddress{}), "-");
  IpAddress a;
  for (const char* bad : {"", "192.0.2", "192.0.2.256", "1::2::3", "host.example", "192.0.2.1 "}) {
    EXPECT_FALSE(ParseIp(bad, &a)) << bad;
  }
}

TEST(Cidr, Parse) {
  Cidr c;
  EXPECT_TRUE(ParseCidr("0.0.0.0/0", &c).ok());
  EXPECT_TRUE(ParseCidr("::/0", &c).ok());
  EXPECT_TRUE(ParseCidr("2001:db8::/32", &c).ok());
  EXPECT_EQ(c.prefix, 32);
  EXPECT_FALSE(ParseCidr("2001:db8::/129", &c).ok());
  EXPECT_FALSE(ParseCidr("10.0.0.0/-1", &c).ok());
  EXPECT_FALSE(ParseCidr("10.0.0.0/8x", &c).ok());
  EXPECT_FALSE(ParseCidr("10.0.0/8", &c).ok());
}

TEST(Cidr, ParseReturnsTheNetwork) {
  auto c = Cidr::Parse("192.0.2.0/24");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->address, Ip("192.0.2.0"));
  EXPECT_EQ(c->prefix, 24);
  EXPECT_EQ(Cidr::Parse("192.0.2.1/24").status().message(), "host bits set in '192.0.2.1/24'");
  EXPECT_EQ(Cidr::Parse("192.0.2.0").status().message(), "'192.0.2.0' is not a CIDR");
}

TEST(Cidr, Contains) {
  const Cidr v4 = *Cidr::Parse("10.128.0.0/9");
  EXPECT_TRUE(v4.Contains(Ip("10.128.0.1")));
  EXPECT_TRUE(v4.Contains(Ip("10.255.255.255")));
  EXPECT_FALSE(v4.Contains(Ip("10.127.255.255")));
  EXPECT_FALSE(v4.Contains(Ip("11.128.0.1")));
  EXPECT_FALSE(v4.Contains(Ip("::ffff:10.128.0.1"))) << "callers map IPv4-mapped clients first";
  EXPECT_TRUE(Cidr::Parse("0.0.0.0/0")->Contains(Ip("203.0.113.9")));
  EXPECT_FALSE(Cidr::Parse("0.0.0.0/0")->Contains(Ip("2001:db8::1")));
  EXPECT_TRUE(Cidr::Parse("192.0.2.7/32")->Contains(Ip("192.0.2.7")));
  EXPECT_FALSE(Cidr::Parse("192.0.2.7/32")->Contains(Ip("192.0.2.6")));
  const Cidr v6 = *Cidr::Parse("2001:db8:1234:5600::/56");
  EXPECT_TRUE(v6.Contains(Ip("2001:db8:1234:56ff::1")));
  EXPECT_FALSE(v6.Contains(Ip("2001:db8:1234:5700::1")));
  EXPECT_TRUE(Cidr::Parse("::/0")->Contains(Ip("2001:db8::1")));
  EXPECT_TRUE(Cidr::Parse("2001:db8::1/128")->Contains(Ip("2001:db8::1")));
}

TEST(CidrSet, MergesAndFinds) {
  const std::vector<Cidr> nets = {*Cidr::Parse("10.0.0.0/9"),    *Cidr::Parse("10.128.0.0/9"),
                                  *Cidr::Parse("10.1.0.0/16"),   *Cidr::Parse("192.0.2.7/32"),
                                  *Cidr::Parse("2001:db8::/33"), *Cidr::Parse("2001:db8:8000::/33")};
  const CidrSet set(nets);
  EXPECT_EQ(set.ranges(), 3u) << "10/9 + 10.128/9 (+ 10.1/16 inside) are 10/8; the two /33 one /32";
  EXPECT_TRUE(set.Contains(Ip("10.0.0.0")));
  EXPECT_TRUE(set.Contains(Ip("10.255.255.255")));
  EXPECT_FALSE(set.Contains(Ip("9.255.255.255")));
  EXPECT_FALSE(set.Contains(Ip("11.0.0.0")));
  EXPECT_TRUE(set.Contains(Ip("192.0.2.7")));
  EXPECT_FALSE(set.Contains(Ip("192.0.2.6")));
  EXPECT_FALSE(set.Contains(Ip("192.0.2.8")));
  EXPECT_TRUE(set.Contains(Ip("2001:db8:ffff:ffff::1")));
  EXPECT_FALSE(set.Contains(Ip("2001:db9::")));
  EXPECT_FALSE(set.Contains(Ip("::ffff:10.0.0.1"))) << "IPv4-mapped is IPv6, as for Cidr";
  EXPECT_FALSE(set.Contains(IpAddress{}));
  EXPECT_FALSE(CidrSet().Contains(Ip("10.0.0.1")));
  const std::vector<Cidr> all = {*Cidr::Parse("0.0.0.0/0"), *Cidr::Parse("::/0")};
  EXPECT_TRUE(CidrSet(all).Contains(Ip("255.255.255.255")));
  EXPECT_TRUE(CidrSet(all).Contains(Ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")));
  EXPECT_TRUE(CidrSet(all).Contains(Ip("::")));
}

// The same verdict as asking each network in turn, for a carrier-sized list
// of random prefixes and random addresses near their edges.
TEST(CidrSet, AgreesWithEachNetwork) {
  std::mt19937_64 rng(7);
  std::vector<Cidr> nets;
  for (int i = 0; i < 3000; ++i) {
    Cidr c;
    const bool v6 = i % 3 == 0;
    c.prefix = static_cast<uint8_t>(v6 ? 16 + rng() % 113 : 8 + rng() % 25);
    c.address.family = v6 ? 6 : 4;
    for (auto& b : c.address.bytes) b = static_cast<uint8_t>(rng());
    if (!v6) std::fill(c.address.bytes.begin() + 4, c.address.bytes.end(), 0);
    // Host bits cleared, as Cidr::Parse guarantees.
    const unsigned bits = c.prefix;
    for (unsigned bit = bits; bit < (v6 ? 128u : 32u); ++bit)
      c.address.bytes[bit / 8] &= ~(0x80u >> (bit % 8));
    if (v6) c.address.bytes[0] = 0x20;  // crowd them into 2000::/8 so they overlap
    if (!v6) c.address.bytes[0] = 10;   // and 10/8
    nets.push_back(c);
  }
  const CidrSet set(nets);
  int in = 0;
  for (int i = 0; i < 20000; ++i) {
    const Cidr& near = nets[rng() % nets.size()];
    IpAddress a = near.address;
    // The network's first address, one before it, or a random one inside or out.
    const int byte = static_cast<int>(rng() % (a.family == 4 ? 4 : 16));
    a.bytes[byte] = static_cast<uint8_t>(a.bytes[byte] + (rng() % 3) - 1);
    if (rng() % 2) a.bytes[a.family == 4 ? 3 : 15] ^= static_cast<uint8_t>(rng());
    bool expect = false;
    for (const Cidr& c : nets) expect = expect || c.Contains(a);
    ASSERT_EQ(set.Contains(a), expect) << IpToString(a);
    in += expect;
  }
  EXPECT_GT(in, 2000) << "both verdicts are tested";
  EXPECT_LT(in, 18000);
}

}  // namespace
}  // namespace weir::common
