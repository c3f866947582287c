// The poll-mode backend's framing: which frames are queries, which go to the
// kernel, which are dropped, and the reply headers (checksums against a
// reference computation written here independently of frame.cc).
#include "weir/fastpath/frame.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "frame_util.h"

namespace weir::fastpath::frame {
namespace {

using namespace testing;

Parsed Classify(const std::vector<uint8_t>& f) { return frame::Classify(f.data(), f.size(), Port()); }

TEST(FrameTest, Ipv4QueryToAnOwnedAddress) {
  const auto f = Build({});
  const Parsed p = Classify(f);
  ASSERT_EQ(p.cls, FrameClass::kQuery);
  EXPECT_FALSE(p.ipv6);
  EXPECT_FALSE(p.vlan);
  EXPECT_EQ(p.dns_offset(), 14 + 20 + 8);
  EXPECT_EQ(p.dns_len, 29);
  const common::IpAddress c = ClientOf(f.data(), p);
  EXPECT_EQ(c.family, 4);
  EXPECT_EQ(std::memcmp(c.bytes.data(), kClient4.data(), 4), 0);
}

TEST(FrameTest, Ipv6AndVlanQueries) {
  FrameSpec s;
  s.v6 = true;
  Parsed p = Classify(Build(s));
  ASSERT_EQ(p.cls, FrameClass::kQuery);
  EXPECT_TRUE(p.ipv6);
  EXPECT_EQ(p.dns_offset(), 14 + 40 + 8);
  s.vlan = 0x0064;
  const auto f = Build(s);
  p = Classify(f);
  ASSERT_EQ(p.cls, FrameClass::kQuery);
  EXPECT_TRUE(p.vlan);
  EXPECT_EQ(p.dns_offset(), 18 + 40 + 8);
  const common::IpAddress c = ClientOf(f.data(), p);
  EXPECT_EQ(c.family, 6);
  EXPECT_EQ(std::memcmp(c.bytes.data(), kClient6.data(), 16), 0);
  FrameSpec v4;
  v4.vlan = 7;
  EXPECT_EQ(Classify(Build(v4)).cls, FrameClass::kQuery);
}

TEST(FrameTest, EthernetPaddingIsNotPartOfTheQuery) {
  FrameSpec s;
  s.payload.assign(4, 1);
  s.pad = 14;  // a 60-byte minimum frame
  const Parsed p = Classify(Build(s));
  ASSERT_EQ(p.cls, FrameClass::kQuery);
  EXPECT_EQ(p.dns_len, 4);
}

TEST(FrameTest, TheKernelGetsEverythingElseForUs) {
  std::vector<uint8_t> arp = Build({});
  arp[12] = 0x08;
  arp[13] = 0x06;
  EXPECT_EQ(Classify(arp).cls, FrameClass::kException) << "ARP";
  FrameSpec bcast;
  bcast.dst = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  EXPECT_EQ(Classify(Build(bcast)).cls, FrameClass::kException) << "broadcast";
  FrameSpec nd;
  nd.v6 = true;
  nd.dst = {0x33, 0x33, 0xff, 0, 0, 1};
  nd.proto = 58;
  EXPECT_EQ(Classify(Build(nd)).cls, FrameClass::kException) << "ND to a multicast MAC";
  FrameSpec icmp6;
  icmp6.v6 = true;
  icmp6.proto = 58;
  EXPECT_EQ(Classify(Build(icmp6)).cls, FrameClass::kException) << "ICMPv6 echo";
  FrameSpec tcp;
  tcp.proto = 6;
  EXPECT_EQ(Classify(Build(tcp)).cls, FrameClass::kException) << "TCP";
  FrameSpec other_port;
  other_port.dport = 123;
  EXPECT_EQ(Classify(Build(other_port)).cls, FrameClass::kException) << "NTP";
  FrameSpec other_addr;
  other_addr.dst4 = {198, 18, 0, 9};
  EXPECT_EQ(Classify(Build(other_addr)).cls, FrameClass::kException) << "a kernel address";
  FrameSpec frag;
  frag.frag = 0x2000;  // more fragments
  EXPECT_EQ(Classify(Build(frag)).cls, FrameClass::kException) << "first fragment";
  frag.frag = 0x0010;  // offset 128
  EXPECT_EQ(Classify(Build(frag)).cls, FrameClass::kException) << "later fragment";
  FrameSpec df;
  df.frag = 0x4000;  // don't fragment is fine
  EXPECT_EQ(Classify(Build(df)).cls, FrameClass::kQuery);
  FrameSpec options;
  options.ihl = 6;
  EXPECT_EQ(Classify(Build(options)).cls, FrameClass::kException) << "IPv4 options";
  FrameSpec ext;
  ext.v6 = true;
  ext.proto = 44;  // fragment header
  EXPECT_EQ(Classify(Build(ext)).cls, FrameClass::kException) << "IPv6 extension header";
  FrameSpec qinq;
  qinq.vlan = 5;
  auto q = Build(qinq);
  q[16] = 0x81;
  q[17] = 0x00;  // a second tag
  EXPECT_EQ(Classify(q).cls, FrameClass::kException) << "QinQ";
}

TEST(FrameTest, OthersFramesAndBadSourcesAreDropped) {
  FrameSpec other_mac;
  other_mac.dst = {0x02, 0, 0, 0, 0, 0x77};
  EXPECT_EQ(Classify(Build(other_mac)).cls, FrameClass::kNotOurs);
  for (const auto& src : {std::array<uint8_t, 4>{224, 0, 0, 1}, std::array<uint8_t, 4>{255, 255, 255, 255},
                          std::array<uint8_t, 4>{0, 0, 0, 0}}) {
    FrameSpec s;
    s.src4 = src;
    EXPECT_EQ(Classify(Build(s)).cls, FrameClass::kNotOurs) << int{src[0]};
  }
  std::vector<uint8_t> group_source = Build({});
  group_source[6] |= 1;
  EXPECT_EQ(Classify(group_source).cls, FrameClass::kNotOurs) << "a group source MAC";
  FrameSpec zero_port;
  zero_port.sport = 0;
  EXPECT_EQ(Classify(Build(zero_port)).cls, FrameClass::kMalformed);
}

TEST(FrameTest, BadLengthsAreMalformed) {
  const auto good = Build({});
  for (size_t cut : {0, 5, 13, 20, 33, 41}) {
    std::vector<uint8_t> f(good.begin(), good.begin() + cut);
    EXPECT_EQ(Classify(f).cls, FrameClass::kMalformed) << cut;
  }
  FrameSpec long_ip;
  long_ip.ip_len_delta = 1;  // claims a byte the frame does not have
  EXPECT_EQ(Classify(Build(long_ip)).cls, FrameClass::kMalformed);
  FrameSpec short_ip;
  short_ip.ip_len_delta = -30;  // shorter than its own UDP header
  EXPECT_EQ(Classify(Build(short_ip)).cls, FrameClass::kMalformed);
  FrameSpec long_udp;
  long_udp.udp_len_delta = 1;
  EXPECT_EQ(Classify(Build(long_udp)).cls, FrameClass::kMalformed);
  FrameSpec tiny_udp;
  tiny_udp.udp_len_delta = -30;  // below 8
  EXPECT_EQ(Classify(Build(tiny_udp)).cls, FrameClass::kMalformed);
  FrameSpec long6;
  long6.v6 = true;
  long6.ip_len_delta = 3;
  EXPECT_EQ(Classify(Build(long6)).cls, FrameClass::kMalformed);
  auto bad_version = Build({});
  bad_version[14] = 0x65;
  EXPECT_EQ(Classify(bad_version).cls, FrameClass::kMalformed);
  auto bad_ihl = Build({});
  bad_ihl[14] = 0x44;
  EXPECT_EQ(Classify(bad_ihl).cls, FrameClass::kMalformed);
  FrameSpec vlan;
  vlan.vlan = 1;
  auto cut_tag = Build(vlan);
  cut_tag.resize(16);
  EXPECT_EQ(Classify(cut_tag).cls, FrameClass::kMalformed);
}

// The reply to `query` with `answer` as its DNS message, built in place.
std::vector<uint8_t> Reply(const std::vector<uint8_t>& query, const std::vector<uint8_t>& answer,
                           const ReplyOptions& o = {}) {
  const Parsed p = Classify(query);
  EXPECT_EQ(p.cls, FrameClass::kQuery);
  std::vector<uint8_t> r(query.begin(), query.begin() + p.dns_offset());
  r.insert(r.end(), answer.begin(), answer.end());
  const size_t n = WriteReply(r.data(), p, kPortMac, r.data(), answer.size(), o);
  EXPECT_EQ(n, r.size());
  return r;
}

TEST(FrameTest, Ipv4ReplySwapsAndChecksums) {
  FrameSpec s;
  s.sport = 51234;
  const auto q = Build(s);
  const std::vector<uint8_t> answer(77, 0x5a);  // odd length: the padding byte matters
  const auto r = Reply(q, answer);
  ASSERT_EQ(r.size(), 14 + 20 + 8 + 77u);
  EXPECT_EQ(Slice(r, 0, 6), Slice(q, 6, 6)) << "to the client's MAC";
  EXPECT_EQ(Slice(r, 6, 6), std::vector<uint8_t>(kPortMac.begin(), kPortMac.end()));
  EXPECT_EQ(Slice(r, 26, 4), std::vector<uint8_t>(kOwned4.begin(), kOwned4.end()));
  EXPECT_EQ(Slice(r, 30, 4), std::vector<uint8_t>(kClient4.begin(), kClient4.end()));
  EXPECT_EQ((r[16] << 8) | r[17], 20 + 8 + 77);
  EXPECT_EQ((r[34] << 8) | r[35], 53);
  EXPECT_EQ((r[36] << 8) | r[37], 51234);
  EXPECT_EQ((r[38] << 8) | r[39], 8 + 77);
  EXPECT_EQ(ReferenceChecksum(Slice(r, 14, 20)), 0) << "IPv4 header checksum verifies";
  EXPECT_EQ((r[40] << 8) | r[41], ReferenceUdpChecksum(r, 14, false));
  EXPECT_EQ(Slice(r, 42, 77), answer);

  const auto no_udp_sum = Reply(q, answer, {.udp_checksum_v4 = false});
  EXPECT_EQ((no_udp_sum[40] << 8) | no_udp_sum[41], 0);
  EXPECT_EQ(ReferenceChecksum(Slice(no_udp_sum, 14, 20)), 0);
}

TEST(FrameTest, Ipv6VlanReplyKeepsTheTag) {
  FrameSpec s;
  s.v6 = true;
  s.vlan = 0x2064;  // priority 1, VLAN 100
  const auto q = Build(s);
  const std::vector<uint8_t> answer(120, 0x33);
  const auto r = Reply(q, answer);
  ASSERT_EQ(r.size(), 18 + 40 + 8 + 120u);
  EXPECT_EQ((r[12] << 8) | r[13], kEtherVlan);
  EXPECT_EQ((r[14] << 8) | r[15], 0x2064);
  EXPECT_EQ((r[16] << 8) | r[17], kEtherIpv6);
  EXPECT_EQ((r[22] << 8) | r[23], 8 + 120) << "payload length";
  EXPECT_EQ(Slice(r, 26, 16), std::vector<uint8_t>(kOwned6.begin(), kOwned6.end()));
  EXPECT_EQ(Slice(r, 42, 16), std::vector<uint8_t>(kClient6.begin(), kClient6.end()));
  const size_t udp = 18 + 40;
  EXPECT_EQ((r[udp + 6] << 8) | r[udp + 7], ReferenceUdpChecksum(r, 18, true));
  // IPv6 always carries a UDP checksum.
  const auto r2 = Reply(q, answer, {.udp_checksum_v4 = false});
  EXPECT_EQ((r2[udp + 6] << 8) | r2[udp + 7], ReferenceUdpChecksum(r2, 18, true));
}

TEST(FrameTest, OffloadLeavesThePseudoHeaderSum) {
  const auto q = Build({});
  const std::vector<uint8_t> answer(40, 1);
  const auto r = Reply(q, answer, {.offload_ip_checksum = true, .offload_udp_checksum = true});
  EXPECT_EQ((r[24] << 8) | r[25], 0) << "IPv4 checksum left to the NIC";
  // What the NIC expects in the UDP field: the folded, uninverted pseudo-header sum.
  std::vector<uint8_t> pseudo = Slice(r, 26, 8);
  pseudo.push_back(0);
  pseudo.push_back(17);
  Put16(pseudo, 8 + 40);
  EXPECT_EQ((r[40] << 8) | r[41], static_cast<uint16_t>(~ReferenceChecksum(pseudo) & 0xffff));
}

TEST(FrameTest, ReplyIntoASeparateBuffer) {
  FrameSpec s;
  s.vlan = 3;
  const auto q = Build(s);
  const Parsed p = Classify(q);
  std::vector<uint8_t> out(p.dns_offset() + 10, 0xee);
  const size_t n = WriteReply(q.data(), p, kPortMac, out.data(), 10, {});
  EXPECT_EQ(n, out.size());
  std::vector<uint8_t> in_place = Reply(q, std::vector<uint8_t>(10, 0xee));
  EXPECT_EQ(out, in_place);
}

TEST(FrameTest, TheShortestQueryHasAnEmptyMessage) {
  FrameSpec s;
  s.payload.clear();
  auto f = Build(s);
  ASSERT_EQ(f.size(), 14 + 20 + 8u);
  const Parsed p = Classify(f);
  ASSERT_EQ(p.cls, FrameClass::kQuery);
  EXPECT_EQ(p.dns_len, 0);
  f.pop_back();
  EXPECT_EQ(Classify(f).cls, FrameClass::kMalformed) << "the IP length claims a byte the frame lacks";
}

// An IPv4 payload too short for a UDP header is malformed only once the
// datagram is known to be ours; before that it is the kernel's or dropped.
TEST(FrameTest, ShortIpv4PayloadsAreJudgedAfterTheAddresses) {
  for (int delta = -37; delta <= -30; ++delta) {  // IP lengths 20..27
    FrameSpec ours;
    ours.ip_len_delta = delta;
    EXPECT_EQ(Classify(Build(ours)).cls, FrameClass::kMalformed) << delta;
    FrameSpec other = ours;
    other.dst4 = {198, 18, 0, 9};
    EXPECT_EQ(Classify(Build(other)).cls, FrameClass::kException) << delta;
    FrameSpec bad_source = ours;
    bad_source.src4 = {0, 1, 2, 3};
    EXPECT_EQ(Classify(Build(bad_source)).cls, FrameClass::kNotOurs) << delta;
  }
  FrameSpec too_short;
  too_short.ip_len_delta = -38;  // 19: shorter than its own header
  EXPECT_EQ(Classify(Build(too_short)).cls, FrameClass::kMalformed);
}

TEST(FrameTest, OnlyFragmentBitsMakeAFragment) {
  FrameSpec reserved;
  reserved.frag = 0x8000;  // the reserved flag: not a fragment
  EXPECT_EQ(Classify(Build(reserved)).cls, FrameClass::kQuery);
  FrameSpec last;
  last.frag = 0x0001;  // the last fragment of a datagram, offset 8
  EXPECT_EQ(Classify(Build(last)).cls, FrameClass::kException);
}

// A port configured with a group MAC: frames to it are group frames, the
// kernel's.
TEST(FrameTest, AGroupPortMacTakesNoQueries) {
  PortAddresses port = Port();
  port.mac[0] |= 1;
  FrameSpec s;
  s.dst = port.mac;
  const auto f = Build(s);
  EXPECT_EQ(frame::Classify(f.data(), f.size(), port).cls, FrameClass::kException);
}

// RFC 1071 the slow way, continuing `start`: 16-bit big-endian words (an odd
// last byte padded with zero), every carry added back, folded.
uint32_t ReferenceSum(const uint8_t* d, size_t n, uint32_t start) {
  uint64_t sum = start;
  for (size_t i = 0; i < n; i += 2) sum += (uint32_t{d[i]} << 8) | (i + 1 < n ? d[i + 1] : 0);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint32_t>(sum);
}

TEST(FrameTest, ChecksumAddMatchesRfc1071AtEveryLengthAndAlignment) {
  std::mt19937 rng(1071);
  std::vector<uint8_t> buf(2000 + 8);
  for (size_t len = 0; len <= 2000; ++len) {
    for (auto& b : buf) b = static_cast<uint8_t>(rng());
    for (size_t align = 0; align < 8; ++align) {
      const uint32_t start = rng();
      const std::span<const uint8_t> data(buf.data() + align, len);
      ASSERT_EQ(ChecksumAdd(data, start), ReferenceSum(data.data(), len, start))
          << "length " << len << ", alignment " << align << ", start " << start;
    }
  }
  // Every carry, and the two zeros: all-zero data sums to 0, anything else
  // to a value in [1, 0xffff].
  for (const uint8_t fill : {uint8_t{0}, uint8_t{0xff}}) {
    const std::vector<uint8_t> same(2000, fill);
    for (const uint32_t start : {0u, 1u, 0xfffeu, 0xffffu, 0x10000u, 0xffffffffu}) {
      for (size_t len : {0, 1, 2, 7, 8, 9, 31, 32, 33, 1999, 2000})
        EXPECT_EQ(ChecksumAdd({same.data(), len}, start), ReferenceSum(same.data(), len, start))
            << int{fill} << " " << start << " " << len;
    }
  }
  for (int i = 0; i < 100000; ++i) {
    const uint32_t x = i < 4 ? std::array<uint32_t, 4>{0, 0xffff, 0x10000, 0xffffffff}[i] : rng();
    ASSERT_EQ(ChecksumFold(x), ReferenceSum(nullptr, 0, x)) << x;
  }
}

// The reply's headers field by field, and its checksums by the reference.
void CheckReply(const std::vector<uint8_t>& q, const Parsed& p, const std::vector<uint8_t>& r, size_t dns_len,
                const ReplyOptions& o) {
  const size_t l2 = p.l2_len, ip = l2, udp = l2 + p.l3_len;
  ASSERT_EQ(r.size(), udp + 8 + dns_len);
  EXPECT_EQ(Slice(r, 0, 6), Slice(q, 6, 6)) << "to the client's MAC";
  EXPECT_EQ(Slice(r, 6, 6), std::vector<uint8_t>(kPortMac.begin(), kPortMac.end()));
  EXPECT_EQ(Slice(r, 12, l2 - 12), Slice(q, 12, l2 - 12)) << "the tag and the type";
  const auto field = [&](size_t at) { return (r[at] << 8) | r[at + 1]; };
  if (p.ipv6) {
    EXPECT_EQ(Slice(r, ip, 4), (std::vector<uint8_t>{0x60, 0, 0, 0}));
    EXPECT_EQ(field(ip + 4), 8 + dns_len);
    EXPECT_EQ(r[ip + 6], 17);
    EXPECT_EQ(r[ip + 7], 64);
    EXPECT_EQ(Slice(r, ip + 8, 16), Slice(q, ip + 24, 16));
    EXPECT_EQ(Slice(r, ip + 24, 16), Slice(q, ip + 8, 16));
  } else {
    EXPECT_EQ(Slice(r, ip, 2), (std::vector<uint8_t>{0x45, 0}));
    EXPECT_EQ(field(ip + 2), 20 + 8 + dns_len);
    EXPECT_EQ(field(ip + 4), 0) << "identification";
    EXPECT_EQ(field(ip + 6), 0x4000) << "DF";
    EXPECT_EQ(r[ip + 8], 64);
    EXPECT_EQ(r[ip + 9], 17);
    EXPECT_EQ(Slice(r, ip + 12, 4), Slice(q, ip + 16, 4));
    EXPECT_EQ(Slice(r, ip + 16, 4), Slice(q, ip + 12, 4));
    if (o.offload_ip_checksum) {
      EXPECT_EQ(field(ip + 10), 0);
    } else {
      EXPECT_EQ(ReferenceChecksum(Slice(r, ip, 20)), 0) << "the IPv4 header checksum verifies";
    }
  }
  EXPECT_EQ(Slice(r, udp, 2), Slice(q, udp + 2, 2)) << "from our port";
  EXPECT_EQ(Slice(r, udp + 2, 2), Slice(q, udp, 2)) << "to the client's";
  EXPECT_EQ(field(udp + 4), 8 + dns_len);
  if (!p.ipv6 && !o.udp_checksum_v4) {
    EXPECT_EQ(field(udp + 6), 0) << "no UDP checksum";
  } else if (o.offload_udp_checksum) {
    // The folded, uninverted pseudo-header sum, for the NIC.
    std::vector<uint8_t> pseudo = p.ipv6 ? Slice(r, ip + 8, 32) : Slice(r, ip + 12, 8);
    Put16(pseudo, 0);
    Put16(pseudo, 17);
    Put16(pseudo, static_cast<uint16_t>(8 + dns_len));
    EXPECT_EQ(field(udp + 6), static_cast<uint16_t>(~ReferenceChecksum(pseudo) & 0xffff));
  } else {
    EXPECT_EQ(field(udp + 6), ReferenceUdpChecksum(r, l2, p.ipv6));
  }
}

TEST(FrameTest, RepliesInEveryShapeCarryVerifiableChecksums) {
  std::mt19937 rng(768);
  int zero_sums = 0;
  for (const bool v6 : {false, true}) {
    for (const int vlan : {-1, 0x2064}) {
      for (int bits = 0; bits < 8; ++bits) {
        const ReplyOptions o{.udp_checksum_v4 = (bits & 1) != 0,
                             .offload_ip_checksum = (bits & 2) != 0,
                             .offload_udp_checksum = (bits & 4) != 0};
        for (const size_t dns_len : {0, 1, 2, 7, 8, 13, 31, 32, 33, 62, 63, 64, 100, 511, 1400}) {
          for (int round = 0; round < 3; ++round) {
            FrameSpec s;
            s.v6 = v6;
            s.vlan = vlan;
            s.src4 = {static_cast<uint8_t>(1 + rng() % 223), static_cast<uint8_t>(rng()),
                      static_cast<uint8_t>(rng()), static_cast<uint8_t>(rng())};
            s.sport = static_cast<uint16_t>(1 + rng() % 65535);
            const auto q = Build(s);
            const Parsed p = Classify(q);
            ASSERT_EQ(p.cls, FrameClass::kQuery);
            std::vector<uint8_t> answer(dns_len);
            for (auto& b : answer) b = static_cast<uint8_t>(rng());
            // Round 2 of an even length: the last word makes the UDP sum
            // come out as zero, which goes on the wire as 0xffff.
            const bool zero_sum = round == 2 && dns_len >= 2 && dns_len % 2 == 0 &&
                                  (v6 || o.udp_checksum_v4) && !o.offload_udp_checksum;
            if (zero_sum) {
              answer[dns_len - 2] = answer[dns_len - 1] = 0;
              const auto first = Reply(q, answer, o);
              const size_t udp = p.l2_len + p.l3_len;
              answer[dns_len - 2] = first[udp + 6];
              answer[dns_len - 1] = first[udp + 7];
            }
            const auto in_place = Reply(q, answer, o);
            std::vector<uint8_t> copy(p.dns_offset() + dns_len, 0xee);
            std::copy(answer.begin(), answer.end(), copy.begin() + p.dns_offset());
            EXPECT_EQ(WriteReply(q.data(), p, kPortMac, copy.data(), dns_len, o), copy.size());
            EXPECT_EQ(copy, in_place) << "into another buffer as in place";
            CheckReply(q, p, in_place, dns_len, o);
            if (zero_sum) {
              const size_t udp = p.l2_len + p.l3_len;
              EXPECT_EQ((in_place[udp + 6] << 8) | in_place[udp + 7], 0xffff);
              ++zero_sums;
            }
            ASSERT_FALSE(HasFailure()) << "v6 " << v6 << ", vlan " << vlan << ", options " << bits
                                       << ", length " << dns_len << ", round " << round;
          }
        }
      }
    }
  }
  EXPECT_GT(zero_sums, 0);
}

TEST(FrameTest, ChecksumMatchesTheReference) {
  std::vector<uint8_t> data;
  for (int n = 0; n < 300; ++n) {
    EXPECT_EQ(static_cast<uint16_t>(~ChecksumFold(ChecksumAdd(data)) & 0xffff), ReferenceChecksum(data)) << n;
    data.push_back(static_cast<uint8_t>(n * 37 + 11));
  }
  std::vector<uint8_t> ones(4000, 0xff);  // every carry path
  EXPECT_EQ(static_cast<uint16_t>(~ChecksumFold(ChecksumAdd(ones)) & 0xffff), ReferenceChecksum(ones));
}

}  // namespace
}  // namespace weir::fastpath::frame
