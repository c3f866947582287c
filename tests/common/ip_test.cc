#include "weir/common/ip.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace weir::common
