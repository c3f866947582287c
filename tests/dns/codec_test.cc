// Unit tests of the wire codec: names, ECS, weights, the response writer and
// the record encoder, plus a seeded round-trip property test (everything
// written must parse back to the same fields).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "dns/test_util.h"
#include "weir/dns/error.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"
#include "weir/dns/writer.h"

namespace weir::dns {

// gtest prints errors by name instead of as raw bytes.
void PrintTo(ParseError e, std::ostream* os) { *os << ParseErrorName(e); }
void PrintTo(WeightVerdict v, std::ostream* os) { *os << WeightVerdictName(v); }

namespace {

using Bytes = std::vector<uint8_t>;

using testing::Key;
using testing::KeyBytes;
using testing::MakeQuery;
using testing::QuerySpec;
using testing::WireName;

std::string KeyText(std::span<const uint8_t> msg, size_t offset) {
  NameKey k;
  size_t end;
  const ParseError e = ReadName(msg, offset, &end, &k);
  if (e != ParseError::kOk) return std::string("error:") + std::string(ParseErrorName(e));
  return NameKeyToText(k.span());
}

// Records pre-encoded for a qname, with their TTL offsets.
struct Blob {
  Bytes bytes;
  std::vector<uint16_t> ttl_offsets;
  uint16_t count = 0;
};
Blob FourA(std::string_view qname, uint32_t ttl) {
  uint8_t buf[512];
  const NameKey q = Key(qname);
  RecordEncoder enc(buf, sizeof buf, q.span());
  Blob b;
  for (uint8_t i = 1; i <= 4; ++i) {
    uint16_t off;
    const uint8_t addr[4] = {192, 0, 2, i};
    EXPECT_EQ(enc.Append(q.span(), type::kA, klass::kIn, ttl, addr, &off), ParseError::kOk);
    b.ttl_offsets.push_back(off);
  }
  b.bytes.assign(enc.blob().begin(), enc.blob().end());
  b.count = 4;
  return b;
}

// ------------------------------------------------------------ ReadName

TEST(ReadName, UncompressedLowercasesKey) {
  Bytes msg(12, 0);
  const Bytes name = WireName("WwW.ExAmPlE.CoM");
  msg.insert(msg.end(), name.begin(), name.end());
  msg.insert(msg.end(), {0, 1, 0, 1});
  NameKey k;
  size_t end = 0;
  ASSERT_EQ(ReadName(msg, 12, &end, &k), ParseError::kOk);
  EXPECT_EQ(end, 12 + name.size());
  EXPECT_EQ(k, Key("www.example.com"));
  EXPECT_EQ(NameKeyToText(k.span()), "www.example.com.");
  // Without a key the end offset is still computed.
  end = 0;
  ASSERT_EQ(ReadName(msg, 12, &end, nullptr), ParseError::kOk);
  EXPECT_EQ(end, 12 + name.size());
}

TEST(ReadName, BackwardChainsResolve) {
  Bytes msg(12, 0);
  // 12: foo.EXAMPLE.com (17 octets; "\7EXAMPLE" at 16)
  const Bytes foo = WireName("foo.EXAMPLE.com");
  msg.insert(msg.end(), foo.begin(), foo.end());
  ASSERT_EQ(msg.size(), 29u);
  // 29: www -> 16 ("www.example.com")
  msg.insert(msg.end(), {3, 'w', 'w', 'w', 0xC0, 16});
  // 35: A -> 29 (two hops: 35 -> 29 -> 16)
  msg.insert(msg.end(), {1, 'A', 0xC0, 29});
  // 39: a bare pointer to 35 (three hops)
  msg.insert(msg.end(), {0xC0, 35});
  // 41: a pointer to the root byte at 28
  msg.insert(msg.end(), {0xC0, 28});

  struct Want {
    size_t offset;
    const char* text;
    size_t end;
  } const wants[] = {{12, "foo.example.com.", 29},   {16, "example.com.", 29},
                     {29, "www.example.com.", 35},   {35, "a.www.example.com.", 39},
                     {39, "a.www.example.com.", 41}, {41, ".", 43}};
  for (const Want& w : wants) {
    NameKey k;
    size_t end = 0;
    ASSERT_EQ(ReadName(msg, w.offset, &end, &k), ParseError::kOk) << w.offset;
    EXPECT_EQ(NameKeyToText(k.span()), w.text) << w.offset;
    EXPECT_EQ(end, w.end) << w.offset;
  }
}

TEST(ReadName, CaseFoldsAcrossPointers) {
  Bytes msg(12, 0);
  const Bytes q = WireName("ExAmPlE.COM");
  msg.insert(msg.end(), q.begin(), q.end());
  msg.insert(msg.end(), {3, 'W', 'w', 'W', 0xC0, 12});
  NameKey k;
  size_t end;
  ASSERT_EQ(ReadName(msg, 12 + q.size(), &end, &k), ParseError::kOk);
  EXPECT_EQ(k, Key("www.example.com"));
}

TEST(ReadName, LengthLimitCountsPointedLabels) {
  // Four 63-octet labels joined by pointers: 257 octets once expanded.
  Bytes msg(12, 0);
  size_t prev = msg.size();
  msg.push_back(63);
  msg.insert(msg.end(), 63, 'a');
  msg.push_back(0);
  for (char c : {'b', 'c', 'd'}) {
    const size_t here = msg.size();
    msg.push_back(63);
    msg.insert(msg.end(), 63, static_cast<uint8_t>(c));
    msg.insert(msg.end(), {static_cast<uint8_t>(0xC0 | (prev >> 8)), static_cast<uint8_t>(prev)});
    prev = here;
  }
  size_t end;
  NameKey k;
  EXPECT_EQ(ReadName(msg, prev, &end, &k), ParseError::kNameTooLong);
  // Three of them (193 octets) are fine.
  const size_t third = prev - 66;
  ASSERT_EQ(ReadName(msg, third, &end, &k), ParseError::kOk);
  EXPECT_EQ(k.len, 3 * 64 + 1);
}

TEST(ReadName, TruncatedPointer) {
  Bytes msg(12, 0);
  msg.push_back(0xC0);
  size_t end;
  EXPECT_EQ(ReadName(msg, 12, &end, nullptr), ParseError::kTruncatedName);
  EXPECT_EQ(ReadName(msg, 13, &end, nullptr), ParseError::kTruncatedName);
}

// Every octet value in every position of a label: the key folds exactly
// 'A'..'Z' (RFC 4343), whatever the label length and alignment.
TEST(ReadName, FoldsOnlyAsciiUpperCase) {
  std::mt19937 rng(4343);
  for (int iter = 0; iter < 2000; ++iter) {
    Bytes msg(12, 0);
    Bytes want;
    const int labels = 1 + static_cast<int>(rng() % 4);
    for (int l = 0; l < labels; ++l) {
      const uint8_t len = static_cast<uint8_t>(1 + rng() % 40);
      msg.push_back(len);
      want.push_back(len);
      for (int i = 0; i < len; ++i) {
        const uint8_t c = static_cast<uint8_t>(rng());
        msg.push_back(c);
        want.push_back(c >= 'A' && c <= 'Z' ? static_cast<uint8_t>(c + 32) : c);
      }
    }
    msg.push_back(0);
    want.push_back(0);
    msg.insert(msg.end(), {0, 1, 0, 1});
    NameKey k;
    size_t end;
    ASSERT_EQ(ReadName(msg, 12, &end, &k), ParseError::kOk);
    ASSERT_EQ(Bytes(k.bytes.begin(), k.bytes.begin() + k.len), want);
    // The query parser's fast path agrees.
    Store16(msg.data() + kOffQdcount, 1);
    Query q;
    ASSERT_EQ(ParseQuery(msg, ParseOptions{}, &q), ParseError::kOk);
    ASSERT_EQ(q.qname, k);
    // ... and records where each label starts, the root's included.
    Bytes starts;
    for (size_t pos = 0;; pos += 1 + k.bytes[pos]) {
      starts.push_back(static_cast<uint8_t>(pos));
      if (k.bytes[pos] == 0) break;
    }
    const auto got = q.qname_labels.span();
    ASSERT_EQ(Bytes(got.begin(), got.end()), starts);
  }
}

// ------------------------------------------------------------ NameKey text

TEST(NameKeyText, FromTextIsCanonical) {
  const Bytes want = {3, 'w', 'w', 'w', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 3, 'c', 'o', 'm', 0};
  EXPECT_EQ(KeyBytes("www.example.com"), want);
  EXPECT_EQ(KeyBytes("WWW.Example.COM."), want);
  EXPECT_EQ(Key("wWw.eXample.com"), Key("www.example.com."));
  EXPECT_EQ(KeyBytes("."), Bytes{0});
  EXPECT_EQ(KeyBytes(""), Bytes{0});
}

TEST(NameKeyText, RejectsInvalidNames) {
  NameKey k;
  EXPECT_FALSE(NameKeyFromText("a..b", &k));
  EXPECT_FALSE(NameKeyFromText(".a", &k));
  EXPECT_FALSE(NameKeyFromText("a..", &k));
  EXPECT_FALSE(NameKeyFromText(std::string(64, 'a') + ".com", &k));
  const std::string l63(63, 'x');
  // 3 * 64 + 63 + 1 = 256 octets.
  EXPECT_FALSE(NameKeyFromText(l63 + "." + l63 + "." + l63 + "." + std::string(62, 'y'), &k));
  // 3 * 64 + 62 + 1 = 255 octets: the limit.
  ASSERT_TRUE(NameKeyFromText(l63 + "." + l63 + "." + l63 + "." + std::string(61, 'y'), &k));
  EXPECT_EQ(k.len, 255);
}

TEST(NameKeyText, ToTextEscapesAndRoundTrips) {
  EXPECT_EQ(NameKeyToText(KeyBytes("Mail.Example.ORG")), "mail.example.org.");
  EXPECT_EQ(NameKeyToText(Bytes{0}), ".");
  EXPECT_EQ(NameKeyToText(Bytes{}), ".");
  const Bytes dotted = {3, 'a', '.', 'b', 3, 'c', 'o', 'm', 0};
  EXPECT_EQ(NameKeyToText(dotted), "a\\.b.com.");
  for (const char* name : {"a.b.c.d.e.f", "x", "xn--bcher-kva.example", "_dmarc.example.com"}) {
    EXPECT_EQ(NameKeyToText(KeyBytes(name)), std::string(name) + ".");
  }
}

// ------------------------------------------------------------ ECS

struct EcsCase {
  uint16_t family;
  uint8_t prefix;
};

TEST(Ecs, RoundTripsEveryPrefixWidth) {
  std::vector<EcsCase> cases;
  for (uint8_t p : {0, 1, 7, 8, 9, 24}) cases.push_back({kEcsFamilyIpv4, p});
  for (uint8_t p : {0, 1, 7, 8, 9, 24, 56, 128}) cases.push_back({kEcsFamilyIpv6, p});
  for (const EcsCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "family " << c.family << " /" << int{c.prefix});
    const Bytes all_ones(c.family == kEcsFamilyIpv4 ? 4 : 16, 0xFF);
    ClientSubnet s;
    ASSERT_TRUE(MakeClientSubnet(all_ones, c.prefix, &s));
    EXPECT_EQ(s.family, c.family);
    EXPECT_EQ(s.AddressBytes(), (c.prefix + 7u) / 8u);
    // Exactly `prefix` leading one bits survive the masking.
    int ones = 0;
    for (uint8_t b : s.address) ones += __builtin_popcount(b);
    EXPECT_EQ(ones, c.prefix);

    uint8_t buf[32];
    const size_t n = EncodeEcsOption(s, buf, sizeof buf);
    ASSERT_EQ(n, EcsOptionSize(s));
    EXPECT_EQ(Load16(buf), option::kEcs);
    EXPECT_EQ(size_t{Load16(buf + 2)}, n - 4);
    ClientSubnet back;
    ASSERT_EQ(DecodeEcs({buf + 4, n - 4}, /*in_query=*/true, &back), ParseError::kOk);
    EXPECT_EQ(back, s);

    // A response's scope survives too, and is refused in a query.
    s.scope_prefix = c.prefix;
    ASSERT_EQ(EncodeEcsOption(s, buf, sizeof buf), n);
    ASSERT_EQ(DecodeEcs({buf + 4, n - 4}, /*in_query=*/false, &back), ParseError::kOk);
    EXPECT_EQ(back, s);
    if (c.prefix != 0) {
      EXPECT_EQ(DecodeEcs({buf + 4, n - 4}, true, &back), ParseError::kEcsScopeInQuery);
    }
  }
}

TEST(Ecs, MakeClientSubnetMasks) {
  ClientSubnet s;
  ASSERT_TRUE(MakeClientSubnet(Bytes{192, 0, 2, 255}, 24, &s));
  EXPECT_EQ(Bytes(s.address.begin(), s.address.begin() + 4), (Bytes{192, 0, 2, 0}));
  ASSERT_TRUE(MakeClientSubnet(Bytes{192, 0, 3, 1}, 23, &s));
  EXPECT_EQ(Bytes(s.address.begin(), s.address.begin() + 4), (Bytes{192, 0, 2, 0}));
  const Bytes v6 = {0x20, 0x01, 0x0d, 0xb8, 0xab, 0xcd, 0x12, 0x34, 1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_TRUE(MakeClientSubnet(v6, 56, &s));
  EXPECT_EQ(Bytes(s.address.begin(), s.address.end()),
            (Bytes{0x20, 0x01, 0x0d, 0xb8, 0xab, 0xcd, 0x12, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  ASSERT_TRUE(MakeClientSubnet(v6, 0, &s));
  EXPECT_EQ(s.address, (std::array<uint8_t, 16>{}));

  EXPECT_FALSE(MakeClientSubnet(Bytes{192, 0, 2, 1}, 33, &s));
  EXPECT_FALSE(MakeClientSubnet(v6, 129, &s));
  EXPECT_FALSE(MakeClientSubnet(Bytes{192, 0, 2, 1, 0}, 24, &s));
  EXPECT_FALSE(MakeClientSubnet(Bytes{}, 0, &s));
}

TEST(Ecs, EncodeRefusesBadSubnetsAndSmallBuffers) {
  ClientSubnet s;
  ASSERT_TRUE(MakeClientSubnet(Bytes{198, 51, 100, 7}, 24, &s));
  uint8_t buf[32];
  EXPECT_EQ(EncodeEcsOption(s, buf, 10), 0u);  // needs 11
  EXPECT_EQ(EncodeEcsOption(s, buf, 11), 11u);
  ClientSubnet bad = s;
  bad.family = 3;
  EXPECT_EQ(EncodeEcsOption(bad, buf, sizeof buf), 0u);
  bad = s;
  bad.source_prefix = 33;
  EXPECT_EQ(EncodeEcsOption(bad, buf, sizeof buf), 0u);
  // Stray address bits beyond the prefix are masked on the way out.
  ClientSubnet dirty = s;
  dirty.source_prefix = 20;
  dirty.address = {198, 51, 0xFF, 0xFF};
  const size_t n = EncodeEcsOption(dirty, buf, sizeof buf);
  ASSERT_EQ(n, 11u);
  ClientSubnet back;
  ASSERT_EQ(DecodeEcs({buf + 4, n - 4}, true, &back), ParseError::kOk);
  EXPECT_EQ(Bytes(back.address.begin(), back.address.begin() + 4), (Bytes{198, 51, 0xF0, 0}));
}

// ------------------------------------------------------------ weights

struct WeightCase {
  const char* what;
  Bytes data;
  size_t addresses;
  WeightVerdict verdict;
  Bytes weights;  // expected weights[0..count)
};

TEST(DecodeWeights, Cases) {
  Bytes w64_data, w64, ones64(64, 1);
  for (int i = 0; i < 64; ++i) {
    w64_data.insert(w64_data.end(), {0, static_cast<uint8_t>(200 + i % 50)});
    w64.push_back(static_cast<uint8_t>(200 + i % 50));
  }
  Bytes w65_data = w64_data;
  w65_data.insert(w65_data.end(), {0, 1});
  const WeightCase cases[] = {
      {"valid", {0, 5, 0, 255}, 2, WeightVerdict::kValid, {5, 255}},
      {"valid single", {0, 1}, 1, WeightVerdict::kValid, {1}},
      {"valid 64", w64_data, 64, WeightVerdict::kValid, w64},
      {"empty", {}, 3, WeightVerdict::kEmpty, {1, 1, 1}},
      {"empty, no addresses", {}, 0, WeightVerdict::kEmpty, {}},
      {"odd length", {0, 5, 0}, 2, WeightVerdict::kOddLength, {1, 1}},
      {"too few", {0, 5, 0, 6}, 3, WeightVerdict::kCountMismatch, {1, 1, 1}},
      {"too many weights", {0, 5, 0, 6}, 1, WeightVerdict::kCountMismatch, {1}},
      {"weights, no addresses", {0, 5}, 0, WeightVerdict::kCountMismatch, {}},
      {"zero weight", {0, 5, 0, 0}, 2, WeightVerdict::kZeroWeight, {1, 1}},
      {"high byte", {0, 5, 1, 6}, 2, WeightVerdict::kHighByteSet, {1, 1}},
      {"high byte, low zero", {1, 0}, 1, WeightVerdict::kHighByteSet, {1}},
      {"65 addresses", w65_data, 65, WeightVerdict::kTooMany, ones64},
  };
  for (const WeightCase& c : cases) {
    SCOPED_TRACE(c.what);
    const WeightSet w = DecodeWeights(c.data, c.addresses);
    EXPECT_EQ(WeightVerdictName(w.verdict), WeightVerdictName(c.verdict));
    EXPECT_EQ(w.valid(), c.verdict == WeightVerdict::kValid);
    EXPECT_EQ(Bytes(w.weights.begin(), w.weights.begin() + w.count), c.weights);
  }
}

// ------------------------------------------------------------ ResponseWriter

TEST(ResponseWriter, HeaderFlagsAndQuestionCase) {
  QuerySpec spec;
  spec.qname = "WwW.ExAmPlE.CoM";
  spec.flags = flag::kRd | flag::kCd | flag::kAd | (2u << 11);  // opcode 2 (STATUS)
  const Bytes query = MakeQuery(spec);
  Query q;
  ASSERT_EQ(ParseQuery(query, ParseOptions{}, &q), ParseError::kOk);
  EXPECT_EQ(q.opcode(), 2);

  uint8_t buf[512];
  ResponseWriter w(buf, sizeof buf);
  ASSERT_EQ(w.BeginResponse(query, q, Rcode::kNxDomain), ParseError::kOk);
  const size_t len = w.Finish(q.udp_limit());
  ASSERT_EQ(len, q.question_end);
  EXPECT_EQ(Load16(buf), 0xBEEF);
  // QR, opcode, RD, CD and RA; AD is not copied; RCODE 3.
  EXPECT_EQ(Load16(buf + 2),
            static_cast<uint16_t>(flag::kQr | (2u << 11) | flag::kRd | flag::kCd | flag::kRa | 3u));
  EXPECT_EQ(Load16(buf + kOffQdcount), 1);
  EXPECT_EQ(Load16(buf + kOffAncount), 0);
  EXPECT_EQ(Load16(buf + kOffArcount), 0);
  // The question is the client's, byte for byte (0x20 case randomisation).
  EXPECT_EQ(Bytes(buf + 12, buf + len), Bytes(query.begin() + 12, query.begin() + q.question_end));

  ASSERT_EQ(w.BeginResponse(query, q, Rcode::kServFail, /*ra=*/false), ParseError::kOk);
  EXPECT_EQ(Load16(buf + 2) & (flag::kRa | flag::kRcodeMask), 2);
}

TEST(ResponseWriter, AdOnlyToClientsThatAsk) {
  for (const bool ad_bit : {false, true}) {
    for (const bool do_bit : {false, true}) {
      QuerySpec spec;
      spec.flags = static_cast<uint16_t>(flag::kRd | (ad_bit ? flag::kAd : 0));
      spec.do_bit = do_bit;
      const Bytes query = MakeQuery(spec);
      Query q;
      ASSERT_EQ(ParseQuery(query, ParseOptions{}, &q), ParseError::kOk);
      EXPECT_EQ(AdAllowed(q), ad_bit || do_bit) << ad_bit << do_bit;
      uint8_t buf[512];
      ResponseWriter w(buf, sizeof buf);
      ASSERT_EQ(w.BeginResponse(query, q, Rcode::kNoError), ParseError::kOk);
      w.AddFlags(flag::kAd);
      EXPECT_EQ(Load16(buf + kOffFlags), flag::kQr | flag::kRd | flag::kRa | flag::kAd);
    }
  }
}

TEST(WriteHeaderOnly, KeepsIdOpcodeAndRd) {
  // An unparsable query: ID, opcode 4 (NOTIFY), RD and AD, garbage after.
  const Bytes query = {0x12, 0x34, 0x21, 0x20, 0xff, 0xff, 0xff};
  uint8_t buf[kHeaderSize + 4];
  std::memset(buf, 0xaa, sizeof buf);
  ASSERT_EQ(WriteHeaderOnly(query, Rcode::kFormErr, /*ra=*/true, buf, sizeof buf), kHeaderSize);
  EXPECT_EQ(Load16(buf), 0x1234);
  EXPECT_EQ(Load16(buf + kOffFlags), flag::kQr | (4u << 11) | flag::kRd | flag::kRa | 1u);
  for (size_t i = 4; i < kHeaderSize; ++i) EXPECT_EQ(buf[i], 0) << i;
  EXPECT_EQ(buf[kHeaderSize], 0xaa) << "nothing written past the header";
  ASSERT_EQ(WriteHeaderOnly(query, Rcode::kServFail, /*ra=*/false, buf, sizeof buf), kHeaderSize);
  EXPECT_EQ(Load16(buf + kOffFlags), flag::kQr | (4u << 11) | flag::kRd | 2u);
  EXPECT_EQ(WriteHeaderOnly({query.data(), 3}, Rcode::kFormErr, true, buf, sizeof buf), 0u);
  EXPECT_EQ(WriteHeaderOnly(query, Rcode::kFormErr, true, buf, kHeaderSize - 1), 0u);
}

TEST(EncodeRecord, WritesOneUncompressedRecord) {
  const Bytes owner = WireName("a.example");
  const Bytes rdata = {192, 0, 2, 7};
  uint8_t buf[64];
  const size_t n = EncodeRecord(owner, type::kA, klass::kIn, 3600, rdata, buf, sizeof buf);
  ASSERT_EQ(n, owner.size() + 10 + 4);
  EXPECT_EQ(Bytes(buf, buf + owner.size()), owner);
  EXPECT_EQ(Load16(buf + owner.size()), type::kA);
  EXPECT_EQ(Load16(buf + owner.size() + 2), klass::kIn);
  EXPECT_EQ(Load32(buf + owner.size() + 4), 3600u);
  EXPECT_EQ(Load16(buf + owner.size() + 8), 4);
  EXPECT_EQ(Bytes(buf + owner.size() + 10, buf + n), rdata);
  EXPECT_EQ(EncodeRecord(owner, type::kA, klass::kIn, 1, rdata, buf, n - 1), 0u);
}

TEST(SetTrailingOption, WritesThenReplacesTheLastOption) {
  QuerySpec spec;
  spec.nsid = true;
  Bytes msg = MakeQuery(spec);
  Query q;
  ASSERT_EQ(ParseQuery(msg, ParseOptions{}, &q), ParseError::kOk);
  const size_t rdlen_at = q.edns.rdata_offset - 2u;
  const size_t before = msg.size();
  size_t at = 0;
  const Bytes first(8, 0x11), second(24, 0x22);
  SetTrailingOption(msg, rdlen_at, &at, option::kCookie, first);
  EXPECT_EQ(at, before);
  ASSERT_EQ(ParseQuery(msg, ParseOptions{}, &q), ParseError::kOk);
  EXPECT_TRUE(q.edns.has_cookie);
  EXPECT_EQ(msg.size(), before + 4 + 8);
  // A retry with a server cookie learnt: the option replaced, not added.
  SetTrailingOption(msg, rdlen_at, &at, option::kCookie, second);
  EXPECT_EQ(at, before);
  EXPECT_EQ(msg.size(), before + 4 + 24);
  ASSERT_EQ(ParseQuery(msg, ParseOptions{}, &q), ParseError::kOk);
  EXPECT_TRUE(q.edns.has_cookie);
  EXPECT_EQ(Bytes(msg.end() - 24, msg.end()), second);
  EXPECT_EQ(Load16(msg.data() + rdlen_at), 4 + 4 + 24) << "NSID (empty) + COOKIE";
}

TEST(SetQuestionSpelling, RewritesTheCaseOnly) {
  Bytes msg = MakeQuery({});
  const Bytes upper = WireName("WWW.EXAMPLE.COM");
  ASSERT_TRUE(SetQuestionSpelling(msg, upper));
  EXPECT_EQ(Bytes(msg.begin() + kHeaderSize, msg.begin() + kHeaderSize + upper.size()), upper);
  Bytes tiny(kHeaderSize + 3, 0);
  EXPECT_FALSE(SetQuestionSpelling(tiny, upper));
  EXPECT_EQ(tiny, Bytes(kHeaderSize + 3, 0));
}

TEST(ResponseWriter, AppendRecordsAgesTtls) {
  const Bytes query = MakeQuery({});
  Query q;
  ASSERT_EQ(ParseQuery(query, ParseOptions{}, &q), ParseError::kOk);
  const Blob blob = FourA("www.example.com", 300);
  for (uint32_t age : {0u, 1u, 299u, 300u, 301u, 100000u}) {
    uint8_t buf[512];
    ResponseWriter w(buf, sizeof buf);
    ASSERT_EQ(w.BeginResponse(query, q, Rcode::kNoError), ParseError::kOk);
    ASSERT_EQ(w.AppendRecords(Section::kAnswer, blob.bytes, blob.count, blob.ttl_offsets, age),
              ParseError::kOk);
    const size_t len = w.Finish(q.udp_limit());
    Message m;
    ASSERT_EQ(m.Parse({buf, len}, ParseOptions{}), ParseError::kOk);
    ASSERT_EQ(m.count(Section::kAnswer), 4);
    Message::Iterator it = m.Records(Section::kAnswer);
    RrView rr;
    int n = 0;
    while (it.Next(&rr)) {
      EXPECT_EQ(rr.ttl, age < 300 ? 300 - age : 0) << "age " << age;
      EXPECT_EQ(KeyText(m.bytes(), rr.name_offset), "www.example.com.");
      EXPECT_EQ(Bytes(buf + rr.rdata_offset, buf + rr.rdata_offset + rr.rdlength),
                (Bytes{192, 0, 2, static_cast<uint8_t>(++n)}));
    }
    EXPECT_EQ(n, 4);
  }
}

TEST(ResponseWriter, OptCarriesEcsEchoAndWeights) {
  QuerySpec spec;
  ASSERT_TRUE(MakeClientSubnet(Bytes{198, 51, 100, 77}, 24, &spec.subnet));
  spec.ecs = true;
  spec.weight = true;
  const Bytes query = MakeQuery(spec);
  Query q;
  ASSERT_EQ(ParseQuery(query, ParseOptions{}, &q), ParseError::kOk);
  ASSERT_TRUE(q.edns.has_ecs);
  ASSERT_TRUE(q.edns.has_weight);
  EXPECT_EQ(q.edns.ecs, spec.subnet);

  const Blob blob = FourA("www.example.com", 60);
  uint8_t buf[512];
  ResponseWriter w(buf, sizeof buf);
  ASSERT_EQ(w.BeginResponse(query, q, Rcode::kNoError), ParseError::kOk);
  ASSERT_EQ(w.AppendRecords(Section::kAnswer, blob.bytes, 4, blob.ttl_offsets, 0), ParseError::kOk);
  ASSERT_EQ(w.BeginOpt(1232, /*do_bit=*/true), ParseError::kOk);
  ClientSubnet echo = q.edns.ecs;
  echo.scope_prefix = 20;
  ASSERT_EQ(w.AddEcs(echo), ParseError::kOk);
  const uint8_t weights[] = {10, 20, 30, 255};
  ASSERT_EQ(w.AddWeights(kDefaultWeightOptionCode, weights), ParseError::kOk);
  const size_t len = w.Finish(q.udp_limit());

  Message m;
  ASSERT_EQ(m.Parse({buf, len}, ParseOptions{}), ParseError::kOk);
  EXPECT_EQ(m.count(Section::kAdditional), 1);
  const Edns& e = m.edns();
  ASSERT_TRUE(e.present);
  EXPECT_EQ(e.udp_size, 1232);
  EXPECT_TRUE(e.do_bit);
  EXPECT_EQ(e.option_count, 2);
  ASSERT_TRUE(e.has_ecs);
  EXPECT_EQ(e.ecs, echo);
  ASSERT_TRUE(e.has_weight);
  const WeightSet ws = DecodeWeights(m.bytes().subspan(e.weight_offset, e.weight_len), 4);
  ASSERT_TRUE(ws.valid());
  EXPECT_EQ(Bytes(ws.weights.begin(), ws.weights.begin() + 4), Bytes(std::begin(weights), std::end(weights)));
}

TEST(ResponseWriter, EmptyWeightOptionMeansNotWeighted) {
  uint8_t buf[128];
  ResponseWriter w(buf, sizeof buf);
  ASSERT_EQ(w.Begin(1, flag::kQr, KeyBytes("a.example"), type::kA, klass::kIn), ParseError::kOk);
  ASSERT_EQ(w.BeginOpt(1232, false), ParseError::kOk);
  ASSERT_EQ(w.AddWeights(kDefaultWeightOptionCode, {}), ParseError::kOk);
  Message m;
  ASSERT_EQ(m.Parse({buf, w.Finish(512)}, ParseOptions{}), ParseError::kOk);
  ASSERT_TRUE(m.edns().has_weight);
  EXPECT_EQ(m.edns().weight_len, 0);
  EXPECT_EQ(DecodeWeights({}, 0).verdict, WeightVerdict::kEmpty);
}

TEST(ResponseWriter, RefusesWhatDoesNotFit) {
  uint8_t buf[64];
  ResponseWriter tiny(buf, 20);
  EXPECT_EQ(tiny.Begin(1, 0, KeyBytes("www.example.com"), type::kA, klass::kIn), ParseError::kBufferTooSmall);

  ResponseWriter w(buf, sizeof buf);
  // Options before BeginOpt have no OPT RR to go into.
  ASSERT_EQ(w.Begin(1, 0, KeyBytes("www.example.com"), type::kA, klass::kIn), ParseError::kOk);
  EXPECT_EQ(w.AddOption(option::kNsid, {}), ParseError::kBufferTooSmall);
  EXPECT_EQ(w.AddWeights(kDefaultWeightOptionCode, {}), ParseError::kBufferTooSmall);
  ClientSubnet s;
  ASSERT_TRUE(MakeClientSubnet(Bytes{192, 0, 2, 1}, 24, &s));
  EXPECT_EQ(w.AddEcs(s), ParseError::kBufferTooSmall);

  const Blob blob = FourA("www.example.com", 60);  // 64 bytes
  const size_t before = w.size();
  EXPECT_EQ(w.AppendRecords(Section::kAnswer, blob.bytes, 4, blob.ttl_offsets, 0),
            ParseError::kBufferTooSmall);
  EXPECT_EQ(w.size(), before);
  EXPECT_EQ(Load16(buf + kOffAncount), 0);
  ASSERT_EQ(w.BeginOpt(1232, false), ParseError::kOk);
  EXPECT_EQ(w.AddEcs(s), ParseError::kOk);  // 11 bytes: 33 + 11 + 11 = 55
  EXPECT_EQ(w.AddEcs(s), ParseError::kBufferTooSmall);
  Message m;
  EXPECT_EQ(m.Parse({buf, w.Finish(512)}, ParseOptions{}), ParseError::kOk);
}

// Writes `addresses` A records for the query, with an OPT (ECS echo and
// weights) when the query had EDNS, and finishes at the query's limit.
Bytes Answer(const Bytes& query, int addresses) {
  Query q;
  EXPECT_EQ(ParseQuery(query, ParseOptions{}, &q), ParseError::kOk);
  static uint8_t buf[8192];
  ResponseWriter w(buf, sizeof buf);
  EXPECT_EQ(w.BeginResponse(query, q, Rcode::kNoError), ParseError::kOk);
  for (int i = 0; i < addresses; ++i) {
    const uint8_t addr[4] = {10, 0, static_cast<uint8_t>(i >> 8), static_cast<uint8_t>(i)};
    EXPECT_EQ(
        w.AppendRecord(Section::kAnswer, {query.data() + 12, q.qname.len}, type::kA, klass::kIn, 60, addr),
        ParseError::kOk);
  }
  if (q.edns.present) {
    EXPECT_EQ(w.BeginOpt(1232, false), ParseError::kOk);
    if (q.edns.has_ecs) {
      EXPECT_EQ(w.AddEcs(q.edns.ecs), ParseError::kOk);
    }
    if (q.edns.has_weight) {
      EXPECT_EQ(w.AddWeights(kDefaultWeightOptionCode, {}), ParseError::kOk);
    }
  }
  const size_t len = w.Finish(q.udp_limit());
  return Bytes(buf, buf + len);
}

// `response` parses into `m`, with TC set when `truncated` and `answers`
// records in the answer section: what a client first looks at.
::testing::AssertionResult Delivers(const Bytes& response, bool truncated, int answers, Message* m) {
  const ParseError e = m->Parse(response, ParseOptions{});
  if (e != ParseError::kOk) return ::testing::AssertionFailure() << "does not parse: " << ParseErrorName(e);
  if (((m->flags() & flag::kTc) != 0) != truncated) {
    return ::testing::AssertionFailure() << "TC is " << (truncated ? "clear" : "set");
  }
  if (m->count(Section::kAnswer) != answers) {
    return ::testing::AssertionFailure() << m->count(Section::kAnswer) << " answers, not " << answers;
  }
  return ::testing::AssertionSuccess();
}

TEST(ResponseWriterFinish, Truncates512WithoutEdns) {
  QuerySpec spec;
  spec.edns = false;
  const Bytes query = MakeQuery(spec);  // qname 17 octets: question ends at 33
  // 33 + 29 * 31 = 932 > 512; 33 + 15 * 31 = 498 fits.
  const Bytes fits = Answer(query, 15);
  EXPECT_EQ(fits.size(), 498u);
  Message m;
  EXPECT_TRUE(Delivers(fits, /*truncated=*/false, 15, &m));

  const Bytes cut = Answer(query, 29);
  EXPECT_EQ(cut.size(), 33u);
  ASSERT_TRUE(Delivers(cut, /*truncated=*/true, 0, &m));
  EXPECT_EQ(m.count(Section::kAdditional), 0);
  EXPECT_FALSE(m.edns().present);
  EXPECT_EQ(NameKeyToText(m.qname().span()), "www.example.com.");
}

TEST(ResponseWriterFinish, UsesTheClientsBufferWithEdns) {
  QuerySpec spec;
  spec.udp_size = 1232;
  const Bytes query = MakeQuery(spec);
  // 33 + 29 * 31 + 11 = 943: too big for 512, fine for 1232.
  const Bytes whole = Answer(query, 29);
  EXPECT_EQ(whole.size(), 943u);
  Message m;
  EXPECT_TRUE(Delivers(whole, /*truncated=*/false, 29, &m));

  // A client buffer below 512 still gets 512 (RFC 6891 6.2.5).
  spec.udp_size = 100;
  const Bytes small = Answer(MakeQuery(spec), 15);
  EXPECT_TRUE(Delivers(small, /*truncated=*/false, 15, &m));
}

TEST(ResponseWriterFinish, TruncationKeepsOpt) {
  QuerySpec spec;
  spec.udp_size = 1232;
  ASSERT_TRUE(MakeClientSubnet(Bytes{192, 0, 2, 1}, 24, &spec.subnet));
  spec.ecs = true;
  spec.weight = true;
  const Bytes cut = Answer(MakeQuery(spec), 60);  // 33 + 60 * 31 > 1232
  Message m;
  ASSERT_TRUE(Delivers(cut, /*truncated=*/true, 0, &m));
  EXPECT_EQ(m.count(Section::kAdditional), 1);
  ASSERT_TRUE(m.edns().present);
  EXPECT_EQ(m.edns().udp_size, 1232);
  EXPECT_TRUE(m.edns().has_ecs);
  EXPECT_EQ(m.edns().ecs, spec.subnet);
  EXPECT_TRUE(m.edns().has_weight);
  EXPECT_EQ(cut.size(), 33u + 11 + 11 + 4);
}

TEST(ResponseWriterFinish, TinyLimitKeepsBareOpt) {
  uint8_t buf[256];
  ResponseWriter w(buf, sizeof buf);
  ASSERT_EQ(w.Begin(7, flag::kQr, KeyBytes("www.example.com"), type::kA, klass::kIn), ParseError::kOk);
  ASSERT_EQ(w.AppendRecord(Section::kAnswer, KeyBytes("www.example.com"), type::kA, klass::kIn, 5,
                           Bytes{192, 0, 2, 1}),
            ParseError::kOk);
  ASSERT_EQ(w.BeginOpt(1232, false), ParseError::kOk);
  ASSERT_EQ(w.AddOption(option::kNsid, Bytes(40, 'n')), ParseError::kOk);
  const size_t len = w.Finish(60);  // 33 + 11 fits, the NSID does not
  EXPECT_EQ(len, 44u);
  Message m;
  ASSERT_EQ(m.Parse({buf, len}, ParseOptions{}), ParseError::kOk);
  EXPECT_NE(m.flags() & flag::kTc, 0);
  ASSERT_TRUE(m.edns().present);
  EXPECT_EQ(m.edns().rdata_len, 0);
  EXPECT_FALSE(m.edns().has_nsid);
}

// ------------------------------------------------------------ RecordEncoder

// Checks every answer of `msg` against `want` (owner text, type, TTL and
// decompressed RDATA), the way the cache reads an upstream response.
struct WantRr {
  std::string owner;
  uint16_t type;
  uint32_t ttl;
  Bytes rdata;  // uncompressed: names as canonical keys
};
void ExpectAnswers(std::span<const uint8_t> msg, const std::vector<WantRr>& want) {
  Message m;
  ASSERT_EQ(m.Parse(msg, ParseOptions{}), ParseError::kOk);
  ASSERT_EQ(size_t{m.count(Section::kAnswer)}, want.size());
  Message::Iterator it = m.Records(Section::kAnswer);
  RrView rr;
  size_t i = 0;
  while (it.Next(&rr)) {
    SCOPED_TRACE(::testing::Message() << "answer " << i);
    ASSERT_LT(i, want.size());
    EXPECT_EQ(KeyText(msg, rr.name_offset), want[i].owner);
    EXPECT_EQ(rr.type, want[i].type);
    EXPECT_EQ(rr.klass, klass::kIn);
    EXPECT_EQ(rr.ttl, want[i].ttl);
    uint8_t rdata[1024];
    size_t len = 0;
    ASSERT_EQ(CopyRdataUncompressed(msg, rr, rdata, sizeof rdata, &len), ParseError::kOk);
    EXPECT_EQ(Bytes(rdata, rdata + len), want[i].rdata);
    ++i;
  }
  EXPECT_EQ(i, want.size());
}

TEST(RecordEncoder, CnameChainPlusFourACompresses) {
  const NameKey q = Key("www.example.com");
  uint8_t blob[512];
  RecordEncoder enc(blob, sizeof blob, q.span());
  std::vector<uint16_t> ttls;
  uint16_t off;
  ASSERT_EQ(enc.Append(q.span(), type::kCname, klass::kIn, 300, KeyBytes("a.cdn.example.net"), &off),
            ParseError::kOk);
  ttls.push_back(off);
  ASSERT_EQ(enc.Append(KeyBytes("a.cdn.example.net"), type::kCname, klass::kIn, 120,
                       KeyBytes("b.cdn.example.net"), &off),
            ParseError::kOk);
  ttls.push_back(off);
  for (uint8_t i = 1; i <= 4; ++i) {
    ASSERT_EQ(
        enc.Append(KeyBytes("b.cdn.example.net"), type::kA, klass::kIn, 60, Bytes{198, 51, 100, i}, &off),
        ParseError::kOk);
    ttls.push_back(off);
  }
  // Uncompressed it would be (17 + 10 + 19) + (19 + 10 + 19) + 4 * (19 + 10 + 4) = 226 octets.
  // Compressed: www CNAME a.cdn.example.net (2+10+19), a.cdn CNAME b.cdn (2+10+4),
  // 4 * b.cdn A (2+10+4): 31 + 16 + 64 = 111.
  EXPECT_EQ(enc.size(), 111u);
  // The first owner is a pointer to the question's name.
  EXPECT_EQ(Load16(blob), 0xC000 | 12);

  // A client that spelled the name in mixed case gets its own spelling back.
  const Bytes query = MakeQuery({.qname = "WWW.example.COM"});
  Query pq;
  ASSERT_EQ(ParseQuery(query, ParseOptions{}, &pq), ParseError::kOk);
  uint8_t buf[512];
  ResponseWriter w(buf, sizeof buf);
  ASSERT_EQ(w.BeginResponse(query, pq, Rcode::kNoError), ParseError::kOk);
  ASSERT_EQ(w.AppendRecords(Section::kAnswer, enc.blob(), 6, ttls, 10), ParseError::kOk);
  const size_t len = w.Finish(512);
  EXPECT_EQ(len, AnswerOffset(q.len) + 111);

  ExpectAnswers({buf, len}, {{"www.example.com.", type::kCname, 290, KeyBytes("a.cdn.example.net")},
                             {"a.cdn.example.net.", type::kCname, 110, KeyBytes("b.cdn.example.net")},
                             {"b.cdn.example.net.", type::kA, 50, {198, 51, 100, 1}},
                             {"b.cdn.example.net.", type::kA, 50, {198, 51, 100, 2}},
                             {"b.cdn.example.net.", type::kA, 50, {198, 51, 100, 3}},
                             {"b.cdn.example.net.", type::kA, 50, {198, 51, 100, 4}}});
  EXPECT_EQ(Bytes(buf + 12, buf + 12 + q.len), Bytes(query.begin() + 12, query.begin() + 12 + q.len));
}

TEST(RecordEncoder, SharesSuffixesOfTheQname) {
  const NameKey q = Key("shop.example.com");
  uint8_t blob[256];
  RecordEncoder enc(blob, sizeof blob, q.span());
  ASSERT_EQ(enc.Append(q.span(), type::kNs, klass::kIn, 30, KeyBytes("ns1.example.com"), nullptr),
            ParseError::kOk);
  ASSERT_EQ(enc.Append(q.span(), type::kPtr, klass::kIn, 30, KeyBytes("example.com"), nullptr),
            ParseError::kOk);
  // ns1 + pointer to "example.com" inside the qname; the PTR target is a bare pointer.
  EXPECT_EQ(enc.size(), (2 + 10 + 4 + 2) + (2 + 10 + 2u));
  uint8_t buf[512];
  ResponseWriter w(buf, sizeof buf);
  ASSERT_EQ(w.Begin(1, flag::kQr, q.span(), type::kNs, klass::kIn), ParseError::kOk);
  ASSERT_EQ(w.AppendRecords(Section::kAnswer, enc.blob(), 2, {}, 0), ParseError::kOk);
  ExpectAnswers({buf, w.Finish(512)}, {{"shop.example.com.", type::kNs, 30, KeyBytes("ns1.example.com")},
                                       {"shop.example.com.", type::kPtr, 30, KeyBytes("example.com")}});
}

TEST(RecordEncoder, FailedAppendLeavesNoTrace) {
  const NameKey q = Key("www.example.com");
  uint8_t blob[80];
  RecordEncoder enc(blob, sizeof blob, q.span());
  ASSERT_EQ(enc.Append(q.span(), type::kA, klass::kIn, 60, Bytes{192, 0, 2, 1}, nullptr), ParseError::kOk);
  const size_t before = enc.size();
  // The owner fits, the 100-byte TXT does not: nothing of it may remain,
  // not even as a compression target for later names.
  EXPECT_EQ(enc.Append(KeyBytes("big.example.org"), type::kTxt, klass::kIn, 60, Bytes(100, 'x'), nullptr),
            ParseError::kBufferTooSmall);
  EXPECT_EQ(enc.size(), before);
  ASSERT_EQ(enc.Append(KeyBytes("x.example.org"), type::kA, klass::kIn, 60, Bytes{192, 0, 2, 2}, nullptr),
            ParseError::kOk);
  ASSERT_EQ(enc.Append(KeyBytes("y.example.org"), type::kA, klass::kIn, 60, Bytes{192, 0, 2, 3}, nullptr),
            ParseError::kOk);

  uint8_t buf[512];
  ResponseWriter w(buf, sizeof buf);
  ASSERT_EQ(w.Begin(1, flag::kQr, q.span(), type::kA, klass::kIn), ParseError::kOk);
  ASSERT_EQ(w.AppendRecords(Section::kAnswer, enc.blob(), 3, {}, 0), ParseError::kOk);
  ExpectAnswers({buf, w.Finish(512)}, {{"www.example.com.", type::kA, 60, {192, 0, 2, 1}},
                                       {"x.example.org.", type::kA, 60, {192, 0, 2, 2}},
                                       {"y.example.org.", type::kA, 60, {192, 0, 2, 3}}});
}

// ------------------------------------------------------------ TTL aging

TEST(TtlAging, CopyRecordsAgedFloorsAtZero) {
  const Blob blob = FourA("www.example.com", 300);
  Bytes src = blob.bytes;
  Store32(src.data() + blob.ttl_offsets[1], 10);
  Store32(src.data() + blob.ttl_offsets[2], 0xFFFFFFFF);
  Store32(src.data() + blob.ttl_offsets[3], 0);
  const Bytes original = src;
  Bytes dst(src.size());
  CopyRecordsAged(dst.data(), src.data(), src.size(), blob.ttl_offsets, 10);
  EXPECT_EQ(src, original);  // the cached blob is never modified
  EXPECT_EQ(Load32(dst.data() + blob.ttl_offsets[0]), 290u);
  EXPECT_EQ(Load32(dst.data() + blob.ttl_offsets[1]), 0u);
  EXPECT_EQ(Load32(dst.data() + blob.ttl_offsets[2]), 0xFFFFFFF5u);
  EXPECT_EQ(Load32(dst.data() + blob.ttl_offsets[3]), 0u);
  // Everything but the TTLs is copied verbatim.
  Bytes masked = dst;
  for (uint16_t off : blob.ttl_offsets) Store32(masked.data() + off, Load32(src.data() + off));
  EXPECT_EQ(masked, src);
}

TEST(TtlAging, AgeTtlsInPlaceFloorsAtZero) {
  const Blob blob = FourA("www.example.com", 300);
  Bytes b = blob.bytes;
  AgeTtlsInPlace(b.data(), blob.ttl_offsets, 0);
  EXPECT_EQ(b, blob.bytes);
  AgeTtlsInPlace(b.data(), blob.ttl_offsets, 200);
  for (uint16_t off : blob.ttl_offsets) EXPECT_EQ(Load32(b.data() + off), 100u);
  AgeTtlsInPlace(b.data(), blob.ttl_offsets, 100);
  for (uint16_t off : blob.ttl_offsets) EXPECT_EQ(Load32(b.data() + off), 0u);
  AgeTtlsInPlace(b.data(), blob.ttl_offsets, 5);
  for (uint16_t off : blob.ttl_offsets) EXPECT_EQ(Load32(b.data() + off), 0u);
}

// ------------------------------------------------------------ size limit

// Views keep 16-bit offsets, and no DNS message exceeds 65535 octets: bytes
// beyond are ignored, so a record cannot straddle the limit and wrap.
TEST(MessageSize, BytesPast65535AreIgnored) {
  QuerySpec spec;
  spec.edns = false;
  Bytes pkt = MakeQuery(spec);  // 33 octets, no records
  Store16(pkt.data() + kOffArcount, 2);
  // A TXT record with 65535 octets of RDATA ends at 33 + 11 + 65535 = 65579,
  // then an OPT RR with a cookie: 65602 octets in all.
  pkt.insert(pkt.end(), {0, 0, type::kTxt, 0, 1, 0, 0, 0, 0, 0xFF, 0xFF});
  pkt.resize(pkt.size() + 65535, 0);
  pkt.insert(pkt.end(),
             {0, 0, type::kOpt, 0x04, 0xD0, 0, 0, 0, 0, 0, 12, 0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8});
  ASSERT_EQ(pkt.size(), 65602u);
  Query q;
  EXPECT_EQ(ParseQuery(pkt, ParseOptions{}, &q), ParseError::kRdataOverrun);
  Message m;
  EXPECT_EQ(m.Parse(pkt, ParseOptions{}), ParseError::kRdataOverrun);

  // A valid message followed by junk up to 70000 octets: a query must end
  // with its last record (FORMERR), a response still parses.
  Bytes padded = MakeQuery({});
  const size_t real = padded.size();
  padded.resize(70000, 0xC0);
  EXPECT_EQ(ParseQuery(padded, ParseOptions{}, &q), ParseError::kTrailingBytes);
  ASSERT_EQ(m.Parse(padded, ParseOptions{}), ParseError::kOk);
  EXPECT_EQ(m.bytes().size(), 65535u);
  EXPECT_TRUE(m.edns().present);
  EXPECT_LE(size_t{m.edns().rdata_offset} + m.edns().rdata_len, real);
}

// ------------------------------------------------------------ round trip

class RandomDns {
 public:
  explicit RandomDns(uint32_t seed) : rng_(seed) {}
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  uint8_t Byte() { return static_cast<uint8_t>(Int(0, 255)); }
  Bytes RandomBytes(int n) {
    Bytes b(n);
    for (uint8_t& c : b) c = Byte();
    return b;
  }
  // A presentation name of 1..4 labels in mixed case, sometimes under a
  // shared suffix so the encoder finds something to compress.
  std::string Name(std::string_view suffix = "") {
    static constexpr std::string_view kChars =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_";
    std::string s;
    const int labels = Int(1, 4);
    for (int i = 0; i < labels; ++i) {
      if (i > 0) s.push_back('.');
      const int len = Int(1, 20);
      for (int j = 0; j < len; ++j) s.push_back(kChars[Int(0, kChars.size() - 1)]);
    }
    if (!suffix.empty()) s = s + "." + std::string(suffix);
    return s;
  }
  std::mt19937& rng() { return rng_; }

 private:
  std::mt19937 rng_;
};

TEST(RoundTrip, RandomQueriesAndAnswers) {
  RandomDns r(0x5eed);
  for (int iter = 0; iter < 500; ++iter) {
    SCOPED_TRACE(::testing::Message() << "iteration " << iter);
    // The query.
    QuerySpec spec;
    const std::string zone = r.Name();
    spec.qname = r.Name(zone);
    spec.qtype = r.Int(0, 1) ? type::kA : type::kAaaa;
    spec.flags = static_cast<uint16_t>(r.Int(0, 1) ? flag::kRd : 0) | (r.Int(0, 1) ? flag::kCd : 0);
    spec.edns = r.Int(0, 3) != 0;
    spec.udp_size = static_cast<uint16_t>(r.Int(512, 4096));
    spec.ecs = spec.edns && r.Int(0, 1);
    if (spec.ecs) {
      const bool v6 = r.Int(0, 1);
      ASSERT_TRUE(MakeClientSubnet(r.RandomBytes(v6 ? 16 : 4), static_cast<uint8_t>(r.Int(0, v6 ? 128 : 32)),
                                   &spec.subnet));
    }
    spec.weight = spec.edns && r.Int(0, 1);
    const Bytes query = MakeQuery(spec);
    Query q;
    ASSERT_EQ(ParseQuery(query, ParseOptions{}, &q), ParseError::kOk);
    EXPECT_EQ(q.id, 0xBEEF);
    EXPECT_EQ(q.flags, spec.flags);
    EXPECT_EQ(q.qname, Key(spec.qname));
    EXPECT_EQ(q.qtype, spec.qtype);
    EXPECT_EQ(q.edns.present, spec.edns);
    EXPECT_EQ(q.udp_limit(), spec.edns ? spec.udp_size : 512);
    EXPECT_EQ(q.edns.has_ecs, spec.ecs);
    if (spec.ecs) {
      EXPECT_EQ(q.edns.ecs, spec.subnet);
    }
    EXPECT_EQ(q.edns.has_weight, spec.weight);

    // The answer: a random mix of records owned by the qname, names in its
    // zone and unrelated names.
    const NameKey qkey = Key(spec.qname);
    uint8_t blob[8192];
    RecordEncoder enc(blob, sizeof blob, qkey.span());
    std::vector<WantRr> want;
    std::vector<uint16_t> ttls;
    std::vector<uint8_t> weights;
    const uint32_t age = static_cast<uint32_t>(r.Int(0, 100));
    const int n = r.Int(1, 12);
    for (int i = 0; i < n; ++i) {
      const int pick = r.Int(0, 2);
      const std::string owner = pick == 0 ? spec.qname : pick == 1 ? r.Name(zone) : r.Name();
      WantRr rr;
      rr.owner = NameKeyToText(Key(owner).span());
      rr.ttl = static_cast<uint32_t>(r.Int(0, 200));
      switch (r.Int(0, 6)) {
        case 0:
          rr.type = type::kA;
          rr.rdata = r.RandomBytes(4);
          break;
        case 1:
          rr.type = type::kAaaa;
          rr.rdata = r.RandomBytes(16);
          break;
        case 2:
          rr.type = type::kCname;
          rr.rdata = KeyBytes(r.Name(zone));
          break;
        case 3:
          rr.type = type::kNs;
          rr.rdata = KeyBytes(r.Name());
          break;
        case 4:
          rr.type = type::kPtr;
          rr.rdata = KeyBytes(r.Int(0, 1) ? zone : r.Name(zone));
          break;
        case 5: {
          rr.type = type::kMx;
          rr.rdata = r.RandomBytes(2);
          const Bytes exchange = KeyBytes(r.Name(zone));
          rr.rdata.insert(rr.rdata.end(), exchange.begin(), exchange.end());
          break;
        }
        default: {
          rr.type = type::kTxt;
          const int len = r.Int(0, 60);
          rr.rdata.push_back(static_cast<uint8_t>(len));
          const Bytes text = r.RandomBytes(len);
          rr.rdata.insert(rr.rdata.end(), text.begin(), text.end());
          break;
        }
      }
      uint16_t off;
      ASSERT_EQ(enc.Append(KeyBytes(owner), rr.type, klass::kIn, rr.ttl, rr.rdata, &off), ParseError::kOk);
      ttls.push_back(off);
      rr.ttl = rr.ttl > age ? rr.ttl - age : 0;
      if (rr.type == type::kA || rr.type == type::kAaaa)
        weights.push_back(static_cast<uint8_t>(r.Int(1, 255)));
      want.push_back(std::move(rr));
    }

    uint8_t buf[16384];
    ResponseWriter w(buf, sizeof buf);
    ASSERT_EQ(w.BeginResponse(query, q, Rcode::kNoError), ParseError::kOk);
    ASSERT_EQ(w.AppendRecords(Section::kAnswer, enc.blob(), static_cast<uint16_t>(n), ttls, age),
              ParseError::kOk);
    ClientSubnet echo = q.edns.ecs;
    if (q.edns.present) {
      ASSERT_EQ(w.BeginOpt(1232, false), ParseError::kOk);
      if (q.edns.has_ecs) {
        echo.scope_prefix = static_cast<uint8_t>(r.Int(0, echo.family == kEcsFamilyIpv4 ? 32 : 128));
        ASSERT_EQ(w.AddEcs(echo), ParseError::kOk);
      }
      if (q.edns.has_weight) {
        ASSERT_EQ(w.AddWeights(kDefaultWeightOptionCode, weights), ParseError::kOk);
      }
    }
    const size_t len = w.Finish(sizeof buf);
    ExpectAnswers({buf, len}, want);

    Message m;
    ASSERT_EQ(m.Parse({buf, len}, ParseOptions{}), ParseError::kOk);
    EXPECT_EQ(m.id(), q.id);
    EXPECT_EQ(m.qname(), qkey);
    EXPECT_EQ(m.qtype(), spec.qtype);
    EXPECT_EQ(m.edns().present, spec.edns);
    EXPECT_EQ(m.edns().has_ecs, spec.ecs);
    if (spec.ecs) {
      EXPECT_EQ(m.edns().ecs, echo);
    }
    EXPECT_EQ(m.edns().has_weight, spec.weight);
    if (spec.weight) {
      const WeightSet ws =
          DecodeWeights(m.bytes().subspan(m.edns().weight_offset, m.edns().weight_len), weights.size());
      EXPECT_EQ(ws.verdict, weights.empty() ? WeightVerdict::kEmpty : WeightVerdict::kValid);
      EXPECT_EQ(Bytes(ws.weights.begin(), ws.weights.begin() + ws.count), weights);
    }
  }
}

}  // namespace
}  // namespace weir::dns

namespace weir::dns {
namespace {

TEST(RcodeNameTest, MnemonicsAndUnassigned) {
  EXPECT_EQ(RcodeName(0), "NOERROR");
  EXPECT_EQ(RcodeName(3), "NXDOMAIN");
  EXPECT_EQ(RcodeName(16), "BADVERS");
  EXPECT_EQ(RcodeName(12), "RCODE12");
  EXPECT_EQ(RcodeName(4095), "RCODE4095");
}

}  // namespace
}  // namespace weir::dns
