// The PROXY protocol v2 parser: headers as HAProxy and cloud load balancers
// send them (proxy-protocol.txt 2.2), split at every byte, and the ways a
// header can be wrong.
#include "weir/net/proxy_protocol.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace weir::net {
namespace {

using Bytes = std::vector<uint8_t>;

const Bytes kSignature = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};

// A header: the signature, version/command, family/protocol, the length of
// `rest`, then `rest`.
Bytes Header(uint8_t ver_cmd, uint8_t fam, const Bytes& rest) {
  Bytes h = kSignature;
  h.push_back(ver_cmd);
  h.push_back(fam);
  h.push_back(static_cast<uint8_t>(rest.size() >> 8));
  h.push_back(static_cast<uint8_t>(rest.size()));
  h.insert(h.end(), rest.begin(), rest.end());
  return h;
}

// 192.0.2.10:51000 -> 198.51.100.1:853
const Bytes kInetBlock = {192, 0, 2, 10, 198, 51, 100, 1, 0xC7, 0x38, 0x03, 0x55};
// [2001:db8::10]:51000 -> [2001:db8::1]:443
const Bytes kInet6Block = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,    0,    0x10, 0x20, 0x01,
                           0x0d, 0xb8, 0,    0,    0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xC7, 0x38, 0x01, 0xBB};

Bytes Plus(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

ProxyParse Parse(const Bytes& b, ProxyHeader* h) { return ParseProxyV2(b, h); }

TEST(ProxyProtocol, Ipv4) {
  const Bytes h = Header(0x21, 0x11, kInetBlock);
  ProxyHeader out;
  ASSERT_EQ(Parse(h, &out), ProxyParse::kDone);
  EXPECT_FALSE(out.local);
  EXPECT_EQ(out.length, 28u);
  EXPECT_EQ(out.source.family(), AF_INET);
  EXPECT_EQ(out.source.len, sizeof(sockaddr_in));
  EXPECT_EQ(out.source.ToString(), "192.0.2.10:51000");
  EXPECT_EQ(out.destination.ToString(), "198.51.100.1:853");
}

TEST(ProxyProtocol, Ipv6) {
  const Bytes h = Header(0x21, 0x21, kInet6Block);
  ProxyHeader out;
  ASSERT_EQ(Parse(h, &out), ProxyParse::kDone);
  EXPECT_FALSE(out.local);
  EXPECT_EQ(out.length, 52u);
  EXPECT_EQ(out.source.family(), AF_INET6);
  EXPECT_EQ(out.source.ToString(), "[2001:db8::10]:51000");
  EXPECT_EQ(out.destination.ToString(), "[2001:db8::1]:443");
}

TEST(ProxyProtocol, ClientBytesAfterTheHeaderAreNotRead) {
  const Bytes h = Header(0x21, 0x11, kInetBlock);
  const Bytes stream = Plus(h, {0x00, 0x1d, 0xAB, 0xCD});  // a DNS-over-TCP length and more
  ProxyHeader out;
  ASSERT_EQ(Parse(stream, &out), ProxyParse::kDone);
  EXPECT_EQ(out.length, h.size());
  // Even bytes that are no TLV: the length says where the header ends.
  ASSERT_EQ(Parse(Plus(h, {0xFF}), &out), ProxyParse::kDone);
  EXPECT_EQ(out.length, h.size());
}

TEST(ProxyProtocol, Local) {
  // LOCAL with UNSPEC and no addresses: HAProxy's health check.
  ProxyHeader out;
  out.source.len = 99;  // overwritten: no stale addresses survive
  ASSERT_EQ(Parse(Header(0x20, 0x00, {}), &out), ProxyParse::kDone);
  EXPECT_TRUE(out.local);
  EXPECT_EQ(out.length, 16u);
  EXPECT_EQ(out.source.len, 0u);
  // LOCAL with an address block, and junk in it: discarded unread.
  ASSERT_EQ(Parse(Header(0x20, 0x11, kInetBlock), &out), ProxyParse::kDone);
  EXPECT_TRUE(out.local);
  EXPECT_EQ(out.length, 28u);
  ASSERT_EQ(Parse(Header(0x20, 0x00, {1, 2, 3}), &out), ProxyParse::kDone);
  EXPECT_EQ(out.length, 19u);
}

TEST(ProxyProtocol, TlvsAreSkipped) {
  // ALPN "dot", AUTHORITY "dns.example", NOOP with nothing, CRC32C.
  const Bytes tlvs = {0x01, 0x00, 0x03, 'd', 'o', 't',  0x02, 0x00, 0x0B, 'd',  'n',  's', '.', 'e', 'x',
                      'a',  'm',  'p',  'l', 'e', 0x04, 0x00, 0x00, 0x03, 0x00, 0x04, 1,   2,   3,   4};
  ProxyHeader out;
  const Bytes v4 = Header(0x21, 0x11, Plus(kInetBlock, tlvs));
  ASSERT_EQ(Parse(v4, &out), ProxyParse::kDone);
  EXPECT_EQ(out.length, 16 + 12 + tlvs.size());
  EXPECT_EQ(out.source.ToString(), "192.0.2.10:51000");
  const Bytes v6 = Header(0x21, 0x21, Plus(kInet6Block, tlvs));
  ASSERT_EQ(Parse(v6, &out), ProxyParse::kDone);
  EXPECT_EQ(out.length, 16 + 36 + tlvs.size());
  EXPECT_EQ(out.destination.ToString(), "[2001:db8::1]:443");
}

TEST(ProxyProtocol, TlvsThatOverrunAreInvalid) {
  ProxyHeader out;
  // A TLV claiming 4 bytes with 3 there.
  EXPECT_EQ(Parse(Header(0x21, 0x11, Plus(kInetBlock, {0x01, 0x00, 0x04, 'd', 'o', 't'})), &out),
            ProxyParse::kInvalid);
  // One or two bytes left: no room for a TLV's type and length.
  EXPECT_EQ(Parse(Header(0x21, 0x11, Plus(kInetBlock, {0x04})), &out), ProxyParse::kInvalid);
  EXPECT_EQ(Parse(Header(0x21, 0x11, Plus(kInetBlock, {0x04, 0x00})), &out), ProxyParse::kInvalid);
  // A zero-length TLV that ends exactly at the header's end is fine.
  EXPECT_EQ(Parse(Header(0x21, 0x11, Plus(kInetBlock, {0x04, 0x00, 0x00})), &out), ProxyParse::kDone);
}

TEST(ProxyProtocol, EveryPrefixNeedsMore) {
  const Bytes tlvs = {0x01, 0x00, 0x02, 'h', '2'};
  for (const Bytes& h : {Header(0x21, 0x11, kInetBlock), Header(0x21, 0x21, Plus(kInet6Block, tlvs)),
                         Header(0x20, 0x00, {})}) {
    for (size_t n = 0; n < h.size(); ++n) {
      ProxyHeader out;
      out.length = 12345;
      EXPECT_EQ(ParseProxyV2(std::span<const uint8_t>(h.data(), n), &out), ProxyParse::kNeedMore)
          << n << " of " << h.size();
      EXPECT_EQ(out.length, 12345u) << "untouched until done";
    }
    ProxyHeader out;
    EXPECT_EQ(Parse(h, &out), ProxyParse::kDone);
    EXPECT_EQ(out.length, h.size());
  }
}

TEST(ProxyProtocol, BadSignatureIsInvalidAtOnce) {
  ProxyHeader out;
  for (size_t i = 0; i < kSignature.size(); ++i) {
    Bytes h = Header(0x21, 0x11, kInetBlock);
    h[i] ^= 0x40;
    EXPECT_EQ(Parse(h, &out), ProxyParse::kInvalid) << i;
    // Judged from the first wrong byte on, without waiting for the rest.
    EXPECT_EQ(ParseProxyV2(std::span<const uint8_t>(h.data(), i + 1), &out), ProxyParse::kInvalid) << i;
  }
  // A client that speaks DNS over TCP straight away.
  EXPECT_EQ(Parse({0x00, 0x1d, 0x12, 0x34}, &out), ProxyParse::kInvalid);
}

TEST(ProxyProtocol, Version1TextHeaderIsInvalid) {
  const std::string v1 = "PROXY TCP4 192.0.2.10 198.51.100.1 51000 853\r\n";
  ProxyHeader out;
  EXPECT_EQ(Parse(Bytes(v1.begin(), v1.end()), &out), ProxyParse::kInvalid);
  EXPECT_EQ(Parse(Bytes{'P'}, &out), ProxyParse::kInvalid);
}

TEST(ProxyProtocol, BadVersionOrCommandIsInvalid) {
  ProxyHeader out;
  for (const uint8_t ver_cmd : {0x11, 0x31, 0x01, 0xF1, 0x22, 0x2F}) {
    Bytes h = Header(ver_cmd, 0x11, kInetBlock);
    EXPECT_EQ(Parse(h, &out), ProxyParse::kInvalid) << int{ver_cmd};
    EXPECT_EQ(ParseProxyV2(std::span<const uint8_t>(h.data(), 13), &out), ProxyParse::kInvalid);
  }
}

TEST(ProxyProtocol, OnlyTcpOverIpv4OrIpv6IsProxied) {
  ProxyHeader out;
  EXPECT_EQ(Parse(Header(0x21, 0x12, kInetBlock), &out), ProxyParse::kInvalid);     // UDP over IPv4
  EXPECT_EQ(Parse(Header(0x21, 0x22, kInet6Block), &out), ProxyParse::kInvalid);    // UDP over IPv6
  EXPECT_EQ(Parse(Header(0x21, 0x10, kInetBlock), &out), ProxyParse::kInvalid);     // UNSPEC protocol
  EXPECT_EQ(Parse(Header(0x21, 0x00, {}), &out), ProxyParse::kInvalid);             // UNSPEC family
  EXPECT_EQ(Parse(Header(0x21, 0x31, Bytes(216, 0)), &out), ProxyParse::kInvalid);  // AF_UNIX
  EXPECT_EQ(Parse(Header(0x21, 0x41, kInet6Block), &out), ProxyParse::kInvalid);    // no such family
  // Refused on the family byte, before the addresses arrive.
  const Bytes udp = Header(0x21, 0x12, kInetBlock);
  EXPECT_EQ(ParseProxyV2(std::span<const uint8_t>(udp.data(), 14), &out), ProxyParse::kInvalid);
}

TEST(ProxyProtocol, LengthTooShortForTheAddressesIsInvalid) {
  ProxyHeader out;
  // The length says 11 bytes for a 12-byte IPv4 block, 35 for IPv6.
  EXPECT_EQ(Parse(Header(0x21, 0x11, Bytes(kInetBlock.begin(), kInetBlock.end() - 1)), &out),
            ProxyParse::kInvalid);
  EXPECT_EQ(Parse(Header(0x21, 0x21, Bytes(kInet6Block.begin(), kInet6Block.end() - 1)), &out),
            ProxyParse::kInvalid);
  // An IPv6 family with an IPv4-sized block.
  EXPECT_EQ(Parse(Header(0x21, 0x21, kInetBlock), &out), ProxyParse::kInvalid);
  // Judged on the length field alone.
  const Bytes h = Header(0x21, 0x11, Bytes(kInetBlock.begin(), kInetBlock.end() - 1));
  EXPECT_EQ(ParseProxyV2(std::span<const uint8_t>(h.data(), 16), &out), ProxyParse::kInvalid);
}

TEST(ProxyProtocol, TruncatedAddressBlockNeedsMore) {
  // The length is right but the bytes stop inside the addresses: more to come.
  const Bytes h = Header(0x21, 0x21, kInet6Block);
  ProxyHeader out;
  EXPECT_EQ(ParseProxyV2(std::span<const uint8_t>(h.data(), 16 + 20), &out), ProxyParse::kNeedMore);
}

TEST(ProxyProtocol, LongestAcceptedHeader) {
  ProxyHeader out;
  // One NOOP TLV filling the header to the cap.
  Bytes tlv = {0x04, 0x00, 0x00};
  const size_t fill = kProxyV2MaxRest - kInetBlock.size() - 3;
  tlv[1] = static_cast<uint8_t>(fill >> 8);
  tlv[2] = static_cast<uint8_t>(fill);
  tlv.resize(3 + fill, 0);
  const Bytes longest = Header(0x21, 0x11, Plus(kInetBlock, tlv));
  ASSERT_EQ(longest.size(), kProxyV2MaxHeader);
  ASSERT_EQ(Parse(longest, &out), ProxyParse::kDone);
  EXPECT_EQ(out.length, kProxyV2MaxHeader);
  // One byte more is refused on the length field, before it is read.
  tlv[2] = static_cast<uint8_t>(fill + 1);
  tlv.push_back(0);
  const Bytes too_long = Header(0x21, 0x11, Plus(kInetBlock, tlv));
  EXPECT_EQ(ParseProxyV2(std::span<const uint8_t>(too_long.data(), 16), &out), ProxyParse::kInvalid);
  EXPECT_EQ(Parse(Header(0x20, 0x00, Bytes(65535, 0)), &out), ProxyParse::kInvalid);
}

}  // namespace
}  // namespace weir::net
