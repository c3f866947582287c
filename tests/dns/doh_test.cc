// DNS over HTTPS as the resolver sees it: HTTP requests mapped to queries
// (RFC 8484's own examples, every error status, the JSON API's parameters),
// the Cache-Control max-age of answers, and the JSON form of answers.
#include "weir/dns/doh.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "dns/test_util.h"
#include "weir/dns/error.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"
#include "weir/dns/writer.h"

namespace weir::dns::doh {
namespace {

using Bytes = std::vector<uint8_t>;
using nlohmann::json;
using testing::WireName;

Bytes Hex(std::string_view hex) {
  Bytes out;
  int hi = -1;
  for (const char c : hex) {
    int v;
    if (c >= '0' && c <= '9') {
      v = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      v = c - 'a' + 10;
    } else {
      continue;  // spaces, as RFCs print their examples
    }
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(static_cast<uint8_t>(hi << 4 | v));
      hi = -1;
    }
  }
  return out;
}

// RFC 8484 4.1.1: the query for www.example.com IN A, ID 0, RD.
const Bytes kRfcQuery =
    Hex("00 00 01 00 00 01 00 00  00 00 00 00 03 77 77 77"
        "07 65 78 61 6d 70 6c 65  03 63 6f 6d 00 00 01 00"
        "01");
constexpr std::string_view kRfcGet = "/dns-query?dns=AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB";

// RFC 8484 4.2.2: the answer for www.example.com IN AAAA, the owner
// compressed, TTL 3709.
const Bytes kRfcAnswer =
    Hex("00 00 81 80 00 01 00 01  00 00 00 00 03 77 77 77"
        "07 65 78 61 6d 70 6c 65  03 63 6f 6d 00 00 1c 00"
        "01 c0 0c 00 1c 00 01 00  00 0e 7d 00 10 20 01 0d"
        "b8 ab cd 00 12 00 01 00  02 00 03 00 04");

const Paths kPaths;

Request Get(std::string_view target) { return FromHttp("GET", target, "", {}, kPaths); }
Request Post(std::span<const uint8_t> body, std::string_view content_type = kDnsMessageType) {
  return FromHttp("POST", "/dns-query", content_type, body, kPaths);
}

// What a user sees of an error: the status, and a one-line body.
void ExpectError(const Request& r, int status) {
  EXPECT_EQ(r.status, status) << r.error;
  EXPECT_FALSE(r.error.empty());
  EXPECT_EQ(r.error.find('\n'), std::string::npos);
  EXPECT_TRUE(r.query.empty());
}

// ---------------------------------------------------------------- RFC 8484

TEST(DohRequest, Rfc8484GetExample) {
  const Request r = Get(kRfcGet);
  ASSERT_EQ(r.status, 200) << r.error;
  EXPECT_TRUE(r.error.empty());
  EXPECT_FALSE(r.json);
  EXPECT_EQ(r.query, kRfcQuery);
  Query q;
  ASSERT_EQ(ParseQuery(r.query, ParseOptions{}, &q), ParseError::kOk);
  EXPECT_EQ(q.id, 0);  // ID 0 stays 0
  EXPECT_EQ(NameKeyToText(q.qname.span()), "www.example.com.");
  EXPECT_EQ(q.qtype, type::kA);
}

TEST(DohRequest, Rfc8484PostExample) {
  const Request r = Post(kRfcQuery);
  ASSERT_EQ(r.status, 200) << r.error;
  EXPECT_FALSE(r.json);
  EXPECT_EQ(r.query, kRfcQuery);
}

// The example RFC 8484 gives for the base64url alphabet: a 62-octet label
// encodes to '-' where standard base64 has '+'.
TEST(DohRequest, Rfc8484Base64urlExample) {
  const Request r =
      Get("/dns-query?dns=AAABAAABAAAAAAAAAWE-NjJjaGFyYWN0ZXJsYWJlbC1tYWtlcy1iYXNlNjR1"
          "cmwtZGlzdGluY3QtZnJvbS1zdGFuZGFyZC1iYXNlNjQHZXhhbXBsZQNjb20AAAEAAQ");
  ASSERT_EQ(r.status, 200) << r.error;
  Query q;
  ASSERT_EQ(ParseQuery(r.query, ParseOptions{}, &q), ParseError::kOk);
  EXPECT_EQ(NameKeyToText(q.qname.span()),
            "a.62characterlabel-makes-base64url-distinct-from-standard-base64.example.com.");
}

TEST(DohRequest, ToleratesPaddingAndTheStandardAlphabet) {
  const Request plain =
      Get("/dns-query?dns=AAABAAABAAAAAAAAAWE-NjJjaGFyYWN0ZXJsYWJlbC1tYWtlcy1iYXNlNjR1"
          "cmwtZGlzdGluY3QtZnJvbS1zdGFuZGFyZC1iYXNlNjQHZXhhbXBsZQNjb20AAAEAAQ");
  ASSERT_EQ(plain.status, 200) << plain.error;
  for (const std::string_view padded : {"==", "%3D%3D", "%3d%3d", "=", "==="}) {
    const std::string t = std::string(
                              "/dns-query?dns=AAABAAABAAAAAAAAAWE-NjJjaGFyYWN0ZXJsYWJlbC1tYWtlcy1iYXNlNjR1"
                              "cmwtZGlzdGluY3QtZnJvbS1zdGFuZGFyZC1iYXNlNjQHZXhhbXBsZQNjb20AAAEAAQ") +
                          std::string(padded);
    const Request r = Get(t);
    ASSERT_EQ(r.status, 200) << padded << ": " << r.error;
    EXPECT_EQ(r.query, plain.query) << padded;
  }
  // Standard base64 ('+', percent-encoded or not, and '/').
  for (const std::string_view plus : {"+", "%2B", "%2b"}) {
    const std::string t = std::string("/dns-query?dns=AAABAAABAAAAAAAAAWE") + std::string(plus) +
                          "NjJjaGFyYWN0ZXJsYWJlbC1tYWtlcy1iYXNlNjR1"
                          "cmwtZGlzdGluY3QtZnJvbS1zdGFuZGFyZC1iYXNlNjQHZXhhbXBsZQNjb20AAAEAAQ%3D%3D";
    const Request r = Get(t);
    ASSERT_EQ(r.status, 200) << plus << ": " << r.error;
    EXPECT_EQ(r.query, plain.query) << plus;
  }
  // A query whose encoding has '/' where base64url has '_': ID 0xFFFF.
  const Request underscore = Get("/dns-query?dns=__8BAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB");
  const Request slash = Get("/dns-query?dns=//8BAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB");
  ASSERT_EQ(underscore.status, 200) << underscore.error;
  ASSERT_EQ(slash.status, 200) << slash.error;
  EXPECT_EQ(underscore.query, slash.query);
  EXPECT_EQ(Load16(underscore.query.data()), 0xFFFF);  // the ID passes through as sent
}

TEST(DohRequest, HeadIsAnsweredLikeGet) {
  const Request r = FromHttp("HEAD", kRfcGet, "", {}, kPaths);
  ASSERT_EQ(r.status, 200) << r.error;
  EXPECT_EQ(r.query, kRfcQuery);
}

TEST(DohRequest, FindsDnsAmongOtherParameters) {
  const Request r =
      Get("/dns-query?ct=application/dns-message&%64ns=AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB"
          "&dns=AAAB&x");
  ASSERT_EQ(r.status, 200) << r.error;  // the first dns counts, its name percent-encoded
  EXPECT_EQ(r.query, kRfcQuery);
}

TEST(DohRequest, ContentTypeParametersAndCaseAreIgnored) {
  for (const std::string_view ct : {"application/dns-message; charset=utf-8", "Application/DNS-Message",
                                    " application/dns-message ", "application/dns-message;"}) {
    const Request r = Post(kRfcQuery, ct);
    EXPECT_EQ(r.status, 200) << "'" << ct << "': " << r.error;
  }
}

TEST(DohRequest, PassesEverythingPastTheHeaderChecksThrough) {
  // What the resolver judges itself: an opcode other than QUERY (NOTIMP), a
  // question cut short (FORMERR). The brief of this form that drops RFC
  // 8484's QCLASS is one.
  Bytes notify = kRfcQuery;
  notify[2] |= 0x20;  // opcode 4, NOTIFY
  notify[0] = 0x12;   // an ID other than 0 stays too
  Request r = Post(notify);
  ASSERT_EQ(r.status, 200) << r.error;
  EXPECT_EQ(r.query, notify);

  r = Get("/dns-query?dns=AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQ");
  ASSERT_EQ(r.status, 200) << r.error;
  EXPECT_EQ(r.query, Bytes(kRfcQuery.begin(), kRfcQuery.end() - 2));
  Query q;
  EXPECT_EQ(ParseQuery(r.query, ParseOptions{}, &q), ParseError::kTruncatedQuestion);
}

TEST(DohRequest, LargestMessageIsAccepted) {
  Bytes big(kMaxMessage, 0);
  std::copy(kRfcQuery.begin(), kRfcQuery.end(), big.begin());
  EXPECT_EQ(Post(big).status, 200);
}

// ---------------------------------------------------------------- errors

TEST(DohRequest, UnknownPathIs404) {
  for (const std::string_view t : {"/", "/dns", "/dns-query/", "/DNS-QUERY?dns=AAAB", "/dns-query2",
                                   "dns-query", "/resolve/x?name=a", "https://h/dns-query?dns=AAAB", ""}) {
    ExpectError(Get(t), 404);
  }
  ExpectError(FromHttp("POST", "/other", kDnsMessageType, kRfcQuery, kPaths), 404);
}

TEST(DohRequest, OtherMethodsAre405) {
  for (const std::string_view m : {"PUT", "DELETE", "OPTIONS", "PATCH", "get", "post", ""}) {
    ExpectError(FromHttp(m, kRfcGet, kDnsMessageType, kRfcQuery, kPaths), 405);
  }
  ExpectError(FromHttp("POST", "/resolve?name=example.com", kDnsMessageType, kRfcQuery, kPaths), 405);
  ExpectError(FromHttp("HEAD", "/resolve?name=example.com", "", {}, kPaths), 405);
}

TEST(DohRequest, PostWithoutTheDnsMessageTypeIs415) {
  for (const std::string_view ct : {"", "application/dns-json", "application/octet-stream",
                                    "application/dns-messages", "text/plain; application/dns-message"}) {
    ExpectError(Post(kRfcQuery, ct), 415);
  }
}

TEST(DohRequest, MissingOrBadDnsParameterIs400) {
  for (const std::string_view t : {"/dns-query", "/dns-query?", "/dns-query?dns",
                                   "/dns-query?dns=", "/dns-query?dns==", "/dns-query?name=example.com",
                                   "/dns-query?dns=%", "/dns-query?dns=AA%4", "/dns-query?dns=AA%G0AA",
                                   "/dns-query?dns=!!!!", "/dns-query?dns=A", "/dns-query?dns=AA=A"}) {
    ExpectError(Get(t), 400);
  }
}

TEST(DohRequest, MessageOver65535BytesIs413) {
  const Bytes big(kMaxMessage + 1, 0);
  ExpectError(Post(big), 413);
  // 65536 bytes of zeros in base64url: "AAAA" per 3 bytes, and one byte more.
  std::string t = "/dns-query?dns=" + std::string((kMaxMessage + 1) / 3 * 4, 'A') + "AA";
  ExpectError(Get(t), 413);
}

TEST(DohRequest, NotADnsQueryIs400) {
  ExpectError(Post(Bytes(kRfcQuery.begin(), kRfcQuery.begin() + 11)), 400);  // shorter than a header
  ExpectError(Post(Bytes{}), 400);
  Bytes response = kRfcQuery;
  response[2] |= 0x80;  // QR
  ExpectError(Post(response), 400);
  Bytes none = kRfcQuery;
  none[5] = 0;  // QDCOUNT 0
  ExpectError(Post(none), 400);
  Bytes two = kRfcQuery;
  two[5] = 2;  // QDCOUNT 2
  ExpectError(Post(two), 400);
  ExpectError(Get("/dns-query?dns=AACBAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB"), 400);  // QR in a GET
}

// ---------------------------------------------------------------- JSON requests

// The JSON request's query, parsed; fails the test unless it is a valid
// query with the JSON form's constants (ID 0, RD, IN, OPT of 1232).
Query JsonQuery(std::string_view target) {
  const Request r = Get(target);
  Query q;
  EXPECT_EQ(r.status, 200) << target << ": " << r.error;
  EXPECT_TRUE(r.json);
  EXPECT_EQ(ParseQuery(r.query, ParseOptions{}, &q), ParseError::kOk) << target;
  EXPECT_EQ(q.id, 0);
  EXPECT_TRUE(q.rd());
  EXPECT_EQ(q.qclass, klass::kIn);
  EXPECT_TRUE(q.edns.present);
  EXPECT_EQ(q.edns.udp_size, 1232);
  return q;
}

std::string QuestionName(std::string_view target) {
  const Request r = Get(target);
  if (r.status != 200) return "status " + std::to_string(r.status);
  std::string out;
  Message m;
  if (m.Parse(r.query, ParseOptions{}) != ParseError::kOk) return "unparseable";
  return NameKeyToText(m.qname().span());
}

TEST(DohJsonRequest, NameAndDefaults) {
  const Query q = JsonQuery("/resolve?name=example.com");
  EXPECT_EQ(NameKeyToText(q.qname.span()), "example.com.");
  EXPECT_EQ(q.qtype, type::kA);
  EXPECT_FALSE(q.edns.do_bit);
  EXPECT_FALSE(q.cd());
  EXPECT_FALSE(q.edns.has_ecs);
  EXPECT_EQ(q.opcode(), 0);
}

TEST(DohJsonRequest, KeepsTheNamesCase) {
  const Request r = Get("/resolve?name=WwW.Example.COM.");
  ASSERT_EQ(r.status, 200) << r.error;
  const Bytes wire = WireName("WwW.Example.COM");
  EXPECT_EQ(Bytes(r.query.begin() + kHeaderSize, r.query.begin() + kHeaderSize + wire.size()), wire);
}

TEST(DohJsonRequest, Names) {
  EXPECT_EQ(QuestionName("/resolve?name=example.com."), "example.com.");
  EXPECT_EQ(QuestionName("/resolve?name=."), ".");
  EXPECT_EQ(QuestionName("/resolve?name=%65xample%2Ecom"), "example.com.");
  EXPECT_EQ(QuestionName("/resolve?name=%5C065bc.example"), "abc.example.");  // \065 is 'A'
  // An escaped dot is part of its label: one label "a.b".
  const Query q = JsonQuery("/resolve?name=a%5C.b.example");
  EXPECT_EQ(q.qname.len, 1 + 3 + 1 + 7 + 1);
  EXPECT_EQ(NameKeyToText(q.qname.span()), "a\\.b.example.");

  // 253 octets without the trailing dot is the longest name.
  const std::string l63(63, 'a');
  const std::string longest = l63 + "." + l63 + "." + l63 + "." + std::string(61, 'b');
  ASSERT_EQ(longest.size(), 253u);
  EXPECT_EQ(Get("/resolve?name=" + longest).status, 200);
  EXPECT_EQ(Get("/resolve?name=" + longest + ".").status, 200);
  ExpectError(Get("/resolve?name=" + longest + "b"), 400);
  ExpectError(Get("/resolve?name=" + longest + ".b"), 400);
  EXPECT_EQ(Get("/resolve?name=" + l63 + ".com").status, 200);
  ExpectError(Get("/resolve?name=" + l63 + "a.com"), 400);  // a 64-octet label

  for (const std::string_view t :
       {"/resolve", "/resolve?type=A", "/resolve?name=", "/resolve?name", "/resolve?name=.example.com",
        "/resolve?name=example..com", "/resolve?name=example.com..", "/resolve?name=..",
        "/resolve?name=a%20b", "/resolve?name=a%00b", "/resolve?name=%C3%A9t%C3%A9", "/resolve?name=a%5C",
        "/resolve?name=a%5C25", "/resolve?name=a%5C256", "/resolve?name=a%5C2x5", "/resolve?name=%zz"}) {
    ExpectError(Get(t), 400);
  }
}

TEST(DohJsonRequest, Types) {
  EXPECT_EQ(JsonQuery("/resolve?name=example.com&type=AAAA").qtype, type::kAaaa);
  EXPECT_EQ(JsonQuery("/resolve?name=example.com&type=aaaa").qtype, type::kAaaa);
  EXPECT_EQ(JsonQuery("/resolve?name=example.com&type=28").qtype, type::kAaaa);
  EXPECT_EQ(JsonQuery("/resolve?name=example.com&type=MX").qtype, type::kMx);
  EXPECT_EQ(JsonQuery("/resolve?name=example.com&type=TYPE65").qtype, 65);
  EXPECT_EQ(JsonQuery("/resolve?name=example.com&type=65535").qtype, 65535);
  EXPECT_EQ(JsonQuery("/resolve?name=example.com&type=").qtype, type::kA);
  EXPECT_EQ(JsonQuery("/resolve?type=mx&name=example.com&type=A").qtype, type::kMx);  // the first counts
  for (const std::string_view t : {"bogus", "0", "65536", "-1", "+1", "1.0", "999999999999", "TYPE", "A%"}) {
    ExpectError(Get("/resolve?name=example.com&type=" + std::string(t)), 400);
  }
}

TEST(DohJsonRequest, DoAndCd) {
  EXPECT_TRUE(JsonQuery("/resolve?name=example.com&do=1").edns.do_bit);
  EXPECT_TRUE(JsonQuery("/resolve?name=example.com&do=true").edns.do_bit);
  EXPECT_TRUE(JsonQuery("/resolve?name=example.com&do=TRUE").edns.do_bit);
  EXPECT_FALSE(JsonQuery("/resolve?name=example.com&do=0").edns.do_bit);
  EXPECT_FALSE(JsonQuery("/resolve?name=example.com&do=false").edns.do_bit);
  EXPECT_TRUE(JsonQuery("/resolve?name=example.com&cd=1").cd());
  EXPECT_TRUE(JsonQuery("/resolve?name=example.com&cd=true").cd());
  EXPECT_FALSE(JsonQuery("/resolve?name=example.com&cd=0").cd());
  const Query both =
      JsonQuery("/resolve?name=example.com&cd=1&do=1&ct=application/dns-json&random_padding=xxxx");
  EXPECT_TRUE(both.cd());
  EXPECT_TRUE(both.edns.do_bit);
  ExpectError(Get("/resolve?name=example.com&do=yes"), 400);
  ExpectError(Get("/resolve?name=example.com&cd=2"), 400);
}

TEST(DohJsonRequest, ClientSubnet) {
  Query q = JsonQuery("/resolve?name=example.com&edns_client_subnet=192.0.2.77/24");
  ASSERT_TRUE(q.edns.has_ecs);
  EXPECT_EQ(q.edns.ecs.family, kEcsFamilyIpv4);
  EXPECT_EQ(q.edns.ecs.source_prefix, 24);
  EXPECT_EQ(q.edns.ecs.scope_prefix, 0);
  EXPECT_EQ(q.edns.ecs.address[0], 192);
  EXPECT_EQ(q.edns.ecs.address[2], 2);
  EXPECT_EQ(q.edns.ecs.address[3], 0);  // zeroed past the prefix

  q = JsonQuery("/resolve?name=example.com&edns_client_subnet=2001:db8:abcd:12ff::1%2F52");
  ASSERT_TRUE(q.edns.has_ecs);
  EXPECT_EQ(q.edns.ecs.family, kEcsFamilyIpv6);
  EXPECT_EQ(q.edns.ecs.source_prefix, 52);
  EXPECT_EQ(q.edns.ecs.AddressBytes(), 7u);
  EXPECT_EQ(q.edns.ecs.address[5], 0xcd);
  EXPECT_EQ(q.edns.ecs.address[6], 0x10);  // 0x12 cut to its top 4 bits

  q = JsonQuery("/resolve?name=example.com&edns_client_subnet=0.0.0.0/0");
  ASSERT_TRUE(q.edns.has_ecs);
  EXPECT_EQ(q.edns.ecs.source_prefix, 0);

  q = JsonQuery("/resolve?name=example.com&edns_client_subnet=198.51.100.7");
  ASSERT_TRUE(q.edns.has_ecs);
  EXPECT_EQ(q.edns.ecs.source_prefix, 32);

  EXPECT_FALSE(JsonQuery("/resolve?name=example.com&edns_client_subnet=").edns.has_ecs);

  for (const std::string_view s : {"1.2.3/24", "1.2.3.4/33", "2001:db8::/129", "x", "1.2.3.4/", "1.2.3.4/-1",
                                   "1.2.3.4/24/0", "/24", "1.2.3.4/+8", "1.2.3.4 /24"}) {
    ExpectError(Get("/resolve?name=example.com&edns_client_subnet=" + std::string(s)), 400);
  }
}

TEST(DohJsonRequest, OnePathForBothForms) {
  const Paths shared{"/q", "/q"};
  Request r = FromHttp("GET", "/q?dns=AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB", "", {}, shared);
  ASSERT_EQ(r.status, 200) << r.error;
  EXPECT_FALSE(r.json);
  r = FromHttp("GET", "/q?name=example.com", "", {}, shared);
  ASSERT_EQ(r.status, 200) << r.error;
  EXPECT_TRUE(r.json);
  r = FromHttp("POST", "/q", kDnsMessageType, kRfcQuery, shared);
  ASSERT_EQ(r.status, 200) << r.error;
  EXPECT_FALSE(r.json);
  ExpectError(FromHttp("GET", "/q", "", {}, shared), 400);
  ExpectError(FromHttp("GET", "/dns-query?dns=AAAB", "", {}, shared), 404);
}

// ---------------------------------------------------------------- answers

struct Rr {
  std::string owner;
  uint16_t type;
  uint32_t ttl;
  Bytes rdata;
};

struct AnswerSpec {
  std::string qname = "example.com";
  uint16_t qtype = type::kA;
  uint16_t flags = flag::kQr | flag::kRd | flag::kRa;
  Rcode rcode = Rcode::kNoError;
  std::vector<Rr> answer, authority, additional;
  bool edns = false;
  uint8_t ext_rcode = 0;
  bool ecs = false;
  ClientSubnet subnet;
};

Bytes MakeAnswer(const AnswerSpec& s) {
  Bytes buf(4096);
  ResponseWriter w(buf.data(), buf.size());
  const auto flags = static_cast<uint16_t>(s.flags | (static_cast<uint16_t>(s.rcode) & flag::kRcodeMask));
  EXPECT_EQ(w.Begin(0, flags, WireName(s.qname), s.qtype, klass::kIn), ParseError::kOk);
  for (const auto& [section, records] :
       {std::pair{Section::kAnswer, &s.answer}, std::pair{Section::kAuthority, &s.authority},
        std::pair{Section::kAdditional, &s.additional}}) {
    for (const Rr& rr : *records) {
      EXPECT_EQ(w.AppendRecord(section, WireName(rr.owner), rr.type, klass::kIn, rr.ttl, rr.rdata),
                ParseError::kOk);
    }
  }
  if (s.edns) {
    EXPECT_EQ(w.BeginOpt(1232, false, s.ext_rcode), ParseError::kOk);
    if (s.ecs) {
      EXPECT_EQ(w.AddEcs(s.subnet), ParseError::kOk);
    }
  }
  buf.resize(w.Finish(buf.size()));
  return buf;
}

Bytes Cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}
Bytes U16(uint16_t v) { return {static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v)}; }
Bytes U32(uint32_t v) { return Cat({U16(static_cast<uint16_t>(v >> 16)), U16(static_cast<uint16_t>(v))}); }
Bytes Str(std::string_view s) { return Bytes(s.begin(), s.end()); }
Bytes CharString(std::string_view s) { return Cat({{static_cast<uint8_t>(s.size())}, Str(s)}); }
Bytes Soa(uint32_t minimum) {
  return Cat({WireName("ns1.example.com"), WireName("hostmaster.example.com"), U32(2024010101), U32(7200),
              U32(3600), U32(1209600), U32(minimum)});
}

json Parsed(std::span<const uint8_t> answer) {
  const std::string text = ToJson(answer);
  EXPECT_TRUE(json::accept(text)) << text;
  return json::parse(text, nullptr, false);
}

TEST(DohJson, Rfc8484ResponseExample) {
  const std::string text = ToJson(kRfcAnswer);
  EXPECT_EQ(
      text,
      R"({"Status":0,"TC":false,"RD":true,"RA":true,"AD":false,"CD":false,)"
      R"("Question":[{"name":"www.example.com.","type":28}],)"
      R"("Answer":[{"name":"www.example.com.","type":28,"TTL":3709,"data":"2001:db8:abcd:12:1:2:3:4"}]})");
  EXPECT_EQ(MaxAge(kRfcAnswer), 3709u);  // RFC 8484 4.2.2's cache-control
}

TEST(DohJson, A) {
  AnswerSpec s;
  s.answer = {{"example.com", type::kA, 300, {192, 0, 2, 1}}, {"example.com", type::kA, 300, {192, 0, 2, 2}}};
  const json j = Parsed(MakeAnswer(s));
  EXPECT_EQ(j["Status"], 0);
  EXPECT_EQ(j["Question"], json::parse(R"([{"name":"example.com.","type":1}])"));
  ASSERT_EQ(j["Answer"].size(), 2u);
  EXPECT_EQ(j["Answer"][0], json::parse(R"({"name":"example.com.","type":1,"TTL":300,"data":"192.0.2.1"})"));
  EXPECT_EQ(j["Answer"][1]["data"], "192.0.2.2");
  EXPECT_FALSE(j.contains("Authority"));
  EXPECT_FALSE(j.contains("Additional"));
  EXPECT_FALSE(j.contains("edns_client_subnet"));
}

TEST(DohJson, Aaaa) {
  AnswerSpec s;
  s.qtype = type::kAaaa;
  s.answer = {{"example.com", type::kAaaa, 60, Hex("20010db8000000000000000000000001")}};
  const json j = Parsed(MakeAnswer(s));
  EXPECT_EQ(j["Question"][0]["type"], 28);
  EXPECT_EQ(j["Answer"][0]["data"], "2001:db8::1");
}

TEST(DohJson, CnameChain) {
  AnswerSpec s;
  s.qname = "www.example.com";
  s.answer = {{"www.example.com", type::kCname, 3600, WireName("cdn.example.net")},
              {"cdn.example.net", type::kCname, 120, WireName("edge.example.org")},
              {"edge.example.org", type::kA, 20, {203, 0, 113, 9}}};
  const Bytes a = MakeAnswer(s);
  const json j = Parsed(a);
  ASSERT_EQ(j["Answer"].size(), 3u);
  EXPECT_EQ(j["Answer"][0],
            json::parse(R"({"name":"www.example.com.","type":5,"TTL":3600,"data":"cdn.example.net."})"));
  EXPECT_EQ(j["Answer"][1]["name"], "cdn.example.net.");
  EXPECT_EQ(j["Answer"][1]["data"], "edge.example.org.");
  EXPECT_EQ(j["Answer"][2]["data"], "203.0.113.9");
  EXPECT_EQ(MaxAge(a), 20u);
}

TEST(DohJson, NxdomainWithSoa) {
  AnswerSpec s;
  s.qname = "nope.example.com";
  s.rcode = Rcode::kNxDomain;
  s.authority = {{"example.com", type::kSoa, 3600, Soa(300)}};
  const Bytes a = MakeAnswer(s);
  const json j = Parsed(a);
  EXPECT_EQ(j["Status"], 3);
  EXPECT_FALSE(j.contains("Answer"));
  ASSERT_EQ(j["Authority"].size(), 1u);
  EXPECT_EQ(j["Authority"][0], json::parse(R"({"name":"example.com.","type":6,"TTL":3600,)"
                                           R"("data":"ns1.example.com. hostmaster.example.com. )"
                                           R"(2024010101 7200 3600 1209600 300"})"));
  EXPECT_EQ(MaxAge(a), 300u);  // min(SOA TTL 3600, MINIMUM 300)
}

TEST(DohJson, Mx) {
  AnswerSpec s;
  s.qtype = type::kMx;
  s.answer = {{"example.com", type::kMx, 300, Cat({U16(10), WireName("mail.example.com")})}};
  EXPECT_EQ(Parsed(MakeAnswer(s))["Answer"][0]["data"], "10 mail.example.com.");
}

TEST(DohJson, TxtStringsQuotedAndEscaped) {
  AnswerSpec s;
  s.qtype = type::kTxt;
  s.answer = {{"example.com", type::kTxt, 300,
               Cat({CharString("v=spf1 -all"), CharString("say \"hi\" \\ o/"),
                    CharString(std::string("\x01\xff", 2)), CharString("")})}};
  EXPECT_EQ(Parsed(MakeAnswer(s))["Answer"][0]["data"], R"("v=spf1 -all" "say \"hi\" \\ o/" "\001\255" "")");
}

TEST(DohJson, SrvCaaHinfo) {
  AnswerSpec s;
  s.qtype = type::kAny;
  s.answer = {
      {"_sip._udp.example.com", 33, 60, Cat({U16(10), U16(60), U16(5060), WireName("sip.example.com")})},
      {"example.com", 257, 60, Cat({{0}, CharString("issue"), Str("letsencrypt.org")})},
      {"example.com", type::kHinfo, 60, Cat({CharString("RFC8482"), CharString("")})}};
  const json j = Parsed(MakeAnswer(s));
  EXPECT_EQ(j["Answer"][0]["data"], "10 60 5060 sip.example.com.");
  EXPECT_EQ(j["Answer"][0]["name"], "_sip._udp.example.com.");
  EXPECT_EQ(j["Answer"][1]["data"], R"(0 issue "letsencrypt.org")");
  EXPECT_EQ(j["Answer"][2]["data"], R"("RFC8482" "")");
}

TEST(DohJson, UnknownTypesAndMalformedRdataInRfc3597Form) {
  AnswerSpec s;
  s.qtype = 65280;
  s.answer = {{"example.com", 65280, 60, {0x0a, 0x0b, 0xfc}},
              {"example.com", 65280, 60, {}},
              {"example.com", type::kA, 60, {192, 0, 2}},                             // 3-byte A
              {"example.com", type::kMx, 60, {0, 10, 3, 'a', 'b'}},                   // name cut short
              {"example.com", type::kCname, 60, Cat({WireName("a.example"), {0}})},   // a byte after the name
              {"example.com", type::kTxt, 60, {}},                                    // no string
              {"example.com", type::kTxt, 60, {5, 'a'}},                              // string overruns
              {"example.com", 257, 60, Cat({{0}, CharString("is-sue"), Str("x")})}};  // tag not alphanumeric
  const json j = Parsed(MakeAnswer(s));
  ASSERT_EQ(j["Answer"].size(), 8u);
  EXPECT_EQ(j["Answer"][0]["data"], "\\# 3 0a0bfc");
  EXPECT_EQ(j["Answer"][0]["type"], 65280);
  EXPECT_EQ(j["Answer"][1]["data"], "\\# 0");
  EXPECT_EQ(j["Answer"][2]["data"], "\\# 3 c00002");
  EXPECT_EQ(j["Answer"][3]["data"], "\\# 5 000a036162");
  EXPECT_EQ(j["Answer"][4]["data"], "\\# 12 0161076578616d706c650000");
  EXPECT_EQ(j["Answer"][5]["data"], "\\# 0");
  EXPECT_EQ(j["Answer"][6]["data"], "\\# 2 0561");
  EXPECT_EQ(j["Answer"][7]["data"], "\\# 9 000669732d73756578");
}

TEST(DohJson, NamesEscaped) {
  AnswerSpec s;
  s.qname = "";  // the root
  s.qtype = type::kNs;
  const Bytes odd_owner =
      Cat({{3, 'a', '.', 'b'}, {4, 'x', ' ', 0x01, '"'}, {2, 0xc3, 0xa9}, WireName("example")});
  Bytes a = MakeAnswer(s);
  // One NS record, its owner written by hand: labels with a dot, a space, a
  // control byte, a quote, and UTF-8.
  const Bytes rr =
      Cat({odd_owner, U16(type::kNs), U16(klass::kIn), U32(60), U16(12), WireName("ns.example")});
  a.insert(a.end(), rr.begin(), rr.end());
  a[kOffAncount + 1] = 1;
  const json j = Parsed(a);
  EXPECT_EQ(j["Question"][0]["name"], ".");
  ASSERT_EQ(j["Answer"].size(), 1u);
  EXPECT_EQ(j["Answer"][0]["name"], "a\\.b.x\\032\\001\\\".\\195\\169.example.");
  EXPECT_EQ(j["Answer"][0]["data"], "ns.example.");
}

TEST(DohJson, Flags) {
  AnswerSpec s;
  s.flags = flag::kQr | flag::kTc | flag::kAd | flag::kCd;
  const json j = Parsed(MakeAnswer(s));
  EXPECT_EQ(j["TC"], true);
  EXPECT_EQ(j["RD"], false);
  EXPECT_EQ(j["RA"], false);
  EXPECT_EQ(j["AD"], true);
  EXPECT_EQ(j["CD"], true);
  // The members in the public APIs' order.
  EXPECT_EQ(
      ToJson(MakeAnswer(s)).rfind(R"({"Status":0,"TC":true,"RD":false,"RA":false,"AD":true,"CD":true,)", 0),
      0u);
}

TEST(DohJson, ClientSubnetEcho) {
  AnswerSpec s;
  s.edns = true;
  s.ecs = true;
  const uint8_t v4[4] = {192, 0, 2, 0};
  ASSERT_TRUE(MakeClientSubnet(v4, 24, &s.subnet));
  s.subnet.scope_prefix = 20;
  s.answer = {{"example.com", type::kA, 60, {192, 0, 2, 1}}};
  json j = Parsed(MakeAnswer(s));
  EXPECT_EQ(j["edns_client_subnet"], "192.0.2.0/20");  // Google's form: address / scope prefix
  EXPECT_FALSE(j.contains("Additional"));              // the OPT is not a record to show

  const uint8_t v6[16] = {0x20, 0x01, 0x0d, 0xb8, 0xab};
  ASSERT_TRUE(MakeClientSubnet(v6, 40, &s.subnet));
  s.subnet.scope_prefix = 48;
  j = Parsed(MakeAnswer(s));
  EXPECT_EQ(j["edns_client_subnet"], "2001:db8:ab00::/48");
}

TEST(DohJson, AdditionalRecordsWithoutTheOpt) {
  AnswerSpec s;
  s.qtype = type::kNs;
  s.edns = true;
  s.answer = {{"example.com", type::kNs, 3600, WireName("ns1.example.com")}};
  s.additional = {{"ns1.example.com", type::kA, 3600, {192, 0, 2, 53}}};
  const json j = Parsed(MakeAnswer(s));
  ASSERT_EQ(j["Additional"].size(), 1u);
  EXPECT_EQ(j["Additional"][0]["name"], "ns1.example.com.");
  EXPECT_EQ(j["Additional"][0]["data"], "192.0.2.53");
}

TEST(DohJson, ExtendedRcode) {
  AnswerSpec s;
  s.edns = true;
  s.ext_rcode = 1;  // 16, BADVERS
  EXPECT_EQ(Parsed(MakeAnswer(s))["Status"], 16);
}

TEST(DohJson, HeaderOnlyAnswer) {
  uint8_t out[kHeaderSize];
  ASSERT_EQ(WriteHeaderOnly(kRfcQuery, Rcode::kFormErr, true, out, sizeof out), kHeaderSize);
  const json j = Parsed(std::span<const uint8_t>(out, kHeaderSize));
  EXPECT_EQ(j["Status"], 1);
  EXPECT_EQ(j["RD"], true);
  EXPECT_EQ(j["RA"], true);
  EXPECT_EQ(j["Question"], json::array());
}

TEST(DohJson, UnparseableIsServfailWithAComment) {
  for (const Bytes& bad : {Bytes{}, Bytes{1, 2, 3}, Bytes(kRfcAnswer.begin(), kRfcAnswer.end() - 1),
                           Cat({Bytes(kRfcAnswer.begin(), kRfcAnswer.begin() + 4), {0, 2}, Bytes(6, 0)})}) {
    const json j = Parsed(bad);
    EXPECT_EQ(j["Status"], 2);
    ASSERT_TRUE(j.contains("Comment"));
    EXPECT_NE(j["Comment"].get<std::string>().find("not a valid DNS message"), std::string::npos);
  }
}

// ---------------------------------------------------------------- MaxAge

TEST(DohMaxAge, SmallestTtlOfAnswerAndAuthority) {
  AnswerSpec s;
  s.answer = {{"example.com", type::kA, 600, {192, 0, 2, 1}},
              {"example.com", type::kA, 30, {192, 0, 2, 2}},
              {"example.com", type::kA, 300, {192, 0, 2, 3}}};
  EXPECT_EQ(MaxAge(MakeAnswer(s)), 30u);  // RFC 8484 5.1's own example
  s.authority = {{"example.com", type::kNs, 10, WireName("ns.example.com")}};
  EXPECT_EQ(MaxAge(MakeAnswer(s)), 10u);
  s.authority.clear();
  s.additional = {{"ns.example.com", type::kA, 5, {192, 0, 2, 53}}};
  s.edns = true;
  EXPECT_EQ(MaxAge(MakeAnswer(s)), 30u);  // additional records and the OPT do not count
}

TEST(DohMaxAge, NegativeAnswersUseTheSoaMinimum) {
  AnswerSpec s;
  s.rcode = Rcode::kNxDomain;
  s.authority = {{"example.com", type::kSoa, 60, Soa(300)}};
  EXPECT_EQ(MaxAge(MakeAnswer(s)), 60u);  // min(TTL, MINIMUM)
  s.authority = {{"example.com", type::kSoa, 3600, Soa(300)}};
  EXPECT_EQ(MaxAge(MakeAnswer(s)), 300u);
  s.rcode = Rcode::kNoError;  // NODATA
  EXPECT_EQ(MaxAge(MakeAnswer(s)), 300u);
  // NXDOMAIN at the end of a CNAME: the CNAME's TTL is shorter still.
  s.rcode = Rcode::kNxDomain;
  s.answer = {{"example.com", type::kCname, 30, WireName("gone.example.net")}};
  EXPECT_EQ(MaxAge(MakeAnswer(s)), 30u);
  // NODATA at the end of a CNAME: no A record, so the SOA's MINIMUM counts.
  s.rcode = Rcode::kNoError;
  s.answer = {{"example.com", type::kCname, 900, WireName("gone.example.net")}};
  EXPECT_EQ(MaxAge(MakeAnswer(s)), 300u);
  // A positive answer: the SOA is an ordinary record.
  s.answer = {{"example.com", type::kA, 900, {192, 0, 2, 1}}};
  EXPECT_EQ(MaxAge(MakeAnswer(s)), 900u);
}

TEST(DohMaxAge, NothingToCacheIsZero) {
  AnswerSpec s;
  EXPECT_EQ(MaxAge(MakeAnswer(s)), 0u);  // NODATA without SOA
  s.rcode = Rcode::kNxDomain;
  EXPECT_EQ(MaxAge(MakeAnswer(s)), 0u);
  s.rcode = Rcode::kServFail;
  s.answer = {{"example.com", type::kA, 600, {192, 0, 2, 1}}};
  EXPECT_EQ(MaxAge(MakeAnswer(s)), 0u);  // SERVFAIL, REFUSED: nothing that lasts
  s.rcode = Rcode::kNoError;
  s.answer = {{"example.com", type::kA, 0x80000000u, {192, 0, 2, 1}}};
  EXPECT_EQ(MaxAge(MakeAnswer(s)), 0u);  // RFC 2181 8
  EXPECT_EQ(MaxAge(Bytes{}), 0u);
  EXPECT_EQ(MaxAge(Bytes(kRfcAnswer.begin(), kRfcAnswer.end() - 1)), 0u);
}

}  // namespace
}  // namespace weir::dns::doh
