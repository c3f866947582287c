// The query parser's fast path against the reference: dns::ParseQuery (the
// fast path for the common query, ParseQueryFull behind it) must give the
// same verdict and the same Query as dns::ParseQueryFull on every seed
// corpus file, on systematic cases (names of every length and case, every
// OPT shape, every header count) and on 200,000 seeded random mutations of
// valid queries; and the fast path must take the queries clients send.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dns/query_agreement.h"
#include "dns/test_util.h"
#include "weir/dns/error.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"

namespace weir::dns {

// gtest prints errors by name instead of as raw bytes.
void PrintTo(ParseError e, std::ostream* os) { *os << ParseErrorName(e); }

namespace {

using Bytes = std::vector<uint8_t>;

using testing::MakeQuery;
using testing::QueryDifference;
using testing::QuerySpec;
using testing::QuestionParsed;
using testing::Scribble;
using testing::WireName;

// The weight option's default code, and codes an operator could configure
// that collide with options the fast path also reads (or declines).
const std::vector<ParseOptions> kOptionSets = {ParseOptions{}, ParseOptions{option::kCookie},
                                               ParseOptions{option::kEcs}, ParseOptions{option::kNsid},
                                               ParseOptions{option::kPadding}};

std::string Hex(std::span<const uint8_t> b) {
  std::string s;
  char buf[4];
  for (size_t i = 0; i < b.size() && i < 300; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", b[i]);
    s += buf;
  }
  if (b.size() > 300) s += "...";
  return s;
}

// Parses `pkt` with ParseQueryFull, ParseQuery and ParseQueryFast (each
// into a scribbled Query) and describes the first disagreement; empty when
// they agree. *verdict and *fast say what happened.
std::string Disagreement(std::span<const uint8_t> pkt, const ParseOptions& opts,
                         ParseError* verdict = nullptr, bool* fast = nullptr) {
  Query ref, got, quick;
  Scribble(&ref);
  Scribble(&got);
  Scribble(&quick);
  const ParseError e = ParseQueryFull(pkt, opts, &ref);
  const ParseError g = ParseQuery(pkt, opts, &got);
  const bool taken = ParseQueryFast(pkt, opts, &quick);
  if (verdict != nullptr) *verdict = e;
  if (fast != nullptr) *fast = taken;
  const std::string where =
      " (weight code " + std::to_string(opts.weight_option_code) + ", packet " + Hex(pkt) + ")";
  if (g != e) {
    return "ParseQuery says " + std::string(ParseErrorName(g)) + ", ParseQueryFull " +
           std::string(ParseErrorName(e)) + where;
  }
  if ((e == ParseError::kOk || e == ParseError::kBadEdnsVersion) && !QuestionParsed(ref)) {
    return "ParseQueryFull left the question undefined for " + std::string(ParseErrorName(e)) + where;
  }
  std::string d = QueryDifference(e, ref, got);
  if (!d.empty()) return "ParseQuery differs in " + d + " for " + std::string(ParseErrorName(e)) + where;
  if (taken) {
    if (e != ParseError::kOk)
      return "the fast path took a query the reference answers " + std::string(ParseErrorName(e)) + where;
    d = QueryDifference(e, ref, quick);
    if (!d.empty()) return "ParseQueryFast differs in " + d + where;
  }
  return "";
}

// Checks `pkt` with every option set.
void ExpectAgreement(std::span<const uint8_t> pkt, std::string_view what) {
  for (const ParseOptions& opts : kOptionSets) {
    const std::string d = Disagreement(pkt, opts);
    ASSERT_EQ(d, "") << what;
  }
}

using Packet = testing::PacketBuilder;

using testing::Cat;
using testing::EcsOption;
using testing::Option;
const Bytes kCookie = testing::DigCookie();
const Bytes kEcsV4 = EcsOption(kEcsFamilyIpv4, 24, 0, {198, 51, 100});
const Bytes kEcsV6 = EcsOption(kEcsFamilyIpv6, 56, 0, {0x20, 0x01, 0x0d, 0xb8, 0x12, 0x34, 0x56});
const Bytes kWeight = Option(kDefaultWeightOptionCode, {});

// A query for `name` (wire form, any octets) with an OPT holding `options`,
// or none.
Bytes QueryFor(const Bytes& name, bool edns = true, const Bytes& options = {}) {
  Packet p;
  p.Header(0x1234, flag::kRd, 1, 0, 0, edns ? 1 : 0).Raw(name).U16(type::kA).U16(klass::kIn);
  if (edns) p.Opt(1232, options);
  return p.Build();
}

// A name of exactly `wire_len` octets (root included) whose labels are at
// most `max_label` long, filled with letters of both cases and digits.
Bytes NameOfLength(size_t wire_len, size_t max_label) {
  Bytes n;
  size_t left = wire_len - 1;  // octets before the root
  char c = 'A';
  while (left > 0) {
    size_t label = std::min(max_label, left - 1);
    if (left - (label + 1) == 1) --label;  // a 1-octet remainder cannot be a label
    n.push_back(static_cast<uint8_t>(label));
    for (size_t i = 0; i < label; ++i) {
      n.push_back(static_cast<uint8_t>(c));
      c = c == 'Z' ? 'a' : c == 'z' ? '0' : c == '9' ? 'A' : static_cast<char>(c + 1);
    }
    left -= label + 1;
  }
  n.push_back(0);
  return n;
}

Bytes ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// ---------------------------------------------------------------- the fast path is taken

// What clients send: each of these must be parsed by the fast path alone.
TEST(QueryFastPath, TakesTheQueriesClientsSend) {
  std::vector<std::pair<std::string, Bytes>> common = {
      {"stub query, EDNS 1232, RD", QueryFor(WireName("h123.plain.example"))},
      {"weighted name", QueryFor(WireName("w45.cdn.example"))},
      {"dig: cookie", QueryFor(WireName("www.example.com"), true, kCookie)},
      {"kdig: no EDNS", QueryFor(WireName("www.example.com"), false)},
      {"ECS v4 and cookie", QueryFor(WireName("www.example.com"), true, Cat({kEcsV4, kCookie}))},
      {"ECS v6", QueryFor(WireName("www.example.com"), true, kEcsV6)},
      {"ECS /0", QueryFor(WireName("www.example.com"), true, EcsOption(kEcsFamilyIpv4, 0, 0, {}))},
      {"weight option", QueryFor(WireName("a4.example.com"), true, kWeight)},
      {"weight, ECS, cookie", QueryFor(WireName("a4.example.com"), true, Cat({kWeight, kEcsV4, kCookie}))},
      {"0x20 case", QueryFor(WireName("WwW.ExAmPlE.CoM"))},
      {"upper case", QueryFor(WireName("WWW.EXAMPLE.COM"), false)},
      {"root", QueryFor(WireName(""))},
      {"root, no EDNS", QueryFor(WireName(""), false)},
      {"one letter, no EDNS", QueryFor(WireName("a"), false)},
      {"255-octet name", QueryFor(NameOfLength(255, 63))},
      {"255-octet name, no EDNS", QueryFor(NameOfLength(255, 63), false)},
      {"server cookie", QueryFor(WireName("www.example.com"), true, Option(option::kCookie, Bytes(24, 7)))},
  };
  {
    Packet p;
    p.Header(1, flag::kRd | flag::kCd, 1, 0, 0, 1).Question("www.example.com", type::kAny);
    common.push_back({"ANY, CD, DO", p.Opt(4096, {}, 0, 0, true).Build()});
  }
  for (size_t len : {3, 15, 16, 17, 31, 32, 33, 48, 64, 100, 254}) {
    common.push_back({"name of " + std::to_string(len), QueryFor(NameOfLength(len, 63))});
    common.push_back({"name of " + std::to_string(len) + ", no EDNS", QueryFor(NameOfLength(len, 7), false)});
  }
  for (const auto& [what, pkt] : common) {
    Query q;
    EXPECT_TRUE(ParseQueryFast(pkt, ParseOptions{}, &q)) << what;
    ParseError e;
    bool fast = false;
    EXPECT_EQ(Disagreement(pkt, ParseOptions{}, &e, &fast), "") << what;
    EXPECT_EQ(e, ParseError::kOk) << what;
  }
}

// What the fast path leaves to the reference: valid or not, ParseQuery
// still answers as it does.
TEST(QueryFastPath, LeavesTheRestToTheReference) {
  const Bytes name = WireName("www.example.com");
  std::vector<std::pair<std::string, Bytes>> rare = {
      {"NSID", QueryFor(name, true, Option(option::kNsid, {}))},
      {"padding", QueryFor(name, true, Option(option::kPadding, Bytes(20, 0)))},
      {"unknown option", QueryFor(name, true, Option(65000, {1, 2}))},
      {"two cookies", QueryFor(name, true, Cat({kCookie, kCookie}))},
      {"two weight options", QueryFor(name, true, Cat({kWeight, kWeight}))},
      {"two ECS", QueryFor(name, true, Cat({kEcsV4, kEcsV4}))},
      {"bad ECS", QueryFor(name, true, EcsOption(kEcsFamilyIpv4, 24, 0, {1, 2}))},
      {"truncated option", QueryFor(name, true, {0, 10, 0, 8, 1, 2})},
      {"option header cut", QueryFor(name, true, {0, 10, 0})},
      {"trailing byte", Cat({QueryFor(name), {0}})},
      {"trailing byte, no EDNS", Cat({QueryFor(name, false), {0}})},
  };
  {
    Packet p;
    p.Header(1, 0, 1, 0, 0, 1).Question("www.example.com");
    rare.push_back({"EDNS version 1", p.Opt(1232, {}, 1).Build()});
  }
  {
    Packet p;
    p.Header(1, 0, 1, 0, 0, 2).Question("www.example.com").Opt(1232, {});
    rare.push_back({"two OPTs", p.Opt(1232, {}).Build()});
  }
  {
    Packet p;
    p.Header(1, 0, 1, 0, 0, 1).Question("www.example.com").Name("a").U16(type::kOpt).U16(1232).U32(0).U16(0);
    rare.push_back({"OPT owned by a.", p.Build()});
  }
  {
    Packet p;
    p.Header(1, 0, 1, 0, 0, 1).Question("www.example.com").Name("").U16(type::kA).U16(1).U32(0).U16(4).U32(7);
    rare.push_back({"an A record as additional", p.Build()});
  }
  {
    Packet p;
    p.Header(1, 0, 1, 1, 0, 0)
        .Question("www.example.com")
        .U16(0xC00C)
        .U16(type::kA)
        .U16(1)
        .U32(9)
        .U16(4)
        .U32(1);
    rare.push_back({"an answer record", p.Build()});
  }
  {
    Packet p;
    p.Header(1, 0, 1, 0, 0, 0).U16(0xC004).U16(type::kA).U16(klass::kIn);
    rare.push_back({"compressed question", p.Build()});
  }
  for (const auto& [what, pkt] : rare) {
    Query q;
    EXPECT_FALSE(ParseQueryFast(pkt, ParseOptions{}, &q)) << what;
    ExpectAgreement(pkt, what);
  }
}

// ---------------------------------------------------------------- (a) seed corpora

// Every seed of every fuzz target and every golden message, read as a
// packet, and with two octets cut off the front (a DNS-over-TCP message).
TEST(QueryFastPath, AgreesOnEverySeedFile) {
  const std::filesystem::path root(WEIR_TEST_DATA_DIR);
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root / "fuzz" / "corpus")) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  size_t query_seeds = 0;
  for (const auto& e : std::filesystem::directory_iterator(root / "dns" / "golden")) {
    if (e.path().extension() == ".bin") files.push_back(e.path());
  }
  for (const auto& e : std::filesystem::directory_iterator(root / "fuzz" / "corpus" / "query_fuzz")) {
    query_seeds += e.is_regular_file();
  }
  ASSERT_GT(query_seeds, 50u) << "the query_fuzz corpus is missing";
  size_t fast = 0;
  for (const auto& path : files) {
    const Bytes pkt = ReadFile(path);
    ExpectAgreement(pkt, path.string());
    if (pkt.size() > 2)
      ExpectAgreement(std::span(pkt).subspan(2), path.string() + " less its first 2 octets");
    Query q;
    fast += ParseQueryFast(pkt, ParseOptions{}, &q);
  }
  // The dig and kdig queries and the pcap seeds are common queries.
  EXPECT_GT(fast, 30u);
}

// ---------------------------------------------------------------- (b) systematic cases

TEST(QueryFastPath, AgreesOnEveryNameLength) {
  for (size_t max_label : {1, 2, 3, 7, 15, 16, 31, 32, 62, 63}) {
    for (size_t len = 1; len <= 270; ++len) {
      if (len == 2 || (max_label == 1 && len % 2 == 0)) continue;  // no such name
      const Bytes name = NameOfLength(len, max_label);
      const std::string what =
          "name of " + std::to_string(len) + " octets, labels up to " + std::to_string(max_label);
      for (const Bytes& pkt : {QueryFor(name), QueryFor(name, false), QueryFor(name, true, kCookie),
                               QueryFor(name, true, Cat({kEcsV6, kWeight}))}) {
        ExpectAgreement(pkt, what);
        ParseError e;
        bool fast = false;
        ASSERT_EQ(Disagreement(pkt, ParseOptions{}, &e, &fast), "") << what;
        // Up to 255 octets a name is fine and the fast path's; past that
        // the reference names the error.
        EXPECT_EQ(fast, len <= kMaxNameWire) << what;
        EXPECT_EQ(e, len <= kMaxNameWire ? ParseError::kOk : ParseError::kNameTooLong) << what;
      }
    }
  }
}

TEST(QueryFastPath, AgreesOnEveryOctetInALabel) {
  // Every octet value in every position of a 40-octet label (the key is
  // lower-cased 16 octets at a time: each lane, each block).
  for (int v = 0; v < 256; ++v) {
    for (size_t at : {0, 1, 7, 8, 15, 16, 17, 31, 32, 39}) {
      Bytes name = {40};
      for (int i = 0; i < 40; ++i) name.push_back(static_cast<uint8_t>('a' + i % 26));
      name[1 + at] = static_cast<uint8_t>(v);
      name.insert(name.end(), {3, 'C', 'o', 'M', 0});
      ExpectAgreement(QueryFor(name), "octet " + std::to_string(v) + " at " + std::to_string(at));
      ExpectAgreement(QueryFor(name, false), "octet " + std::to_string(v) + " at " + std::to_string(at));
    }
  }
  // Case: the key is the name in lower case, whatever the spelling.
  for (std::string_view spelling :
       {"www.example.com", "WWW.EXAMPLE.COM", "wWw.eXaMpLe.CoM", "@[`{.AZaz.09-_"}) {
    const Bytes pkt = QueryFor(WireName(spelling));
    ExpectAgreement(pkt, spelling);
    Query q;
    ASSERT_TRUE(ParseQueryFast(pkt, ParseOptions{}, &q)) << spelling;
    EXPECT_EQ(NameKeyToText(q.qname.span()), NameKeyToText(testing::KeyBytes(spelling))) << spelling;
  }
}

TEST(QueryFastPath, AgreesOnBadLabels) {
  for (int len : {63, 64, 65, 127, 128, 0x80, 0xBF, 0xC0, 0xFF}) {
    Bytes name = {3, 'w', 'w', 'w', static_cast<uint8_t>(len)};
    for (int i = 0; i < std::min(len, 63); ++i) name.push_back('x');
    name.push_back(0);
    ExpectAgreement(QueryFor(name), "label length " + std::to_string(len));
    ExpectAgreement(QueryFor(name, false), "label length " + std::to_string(len));
  }
  // The root octet of a valid query replaced by a label type or a length
  // that cannot end a name.
  for (int root : {0x01, 0x3F, 0x40, 0x7F, 0x80, 0xBF, 0xC0, 0xFF}) {
    for (bool edns : {false, true}) {
      Bytes pkt = QueryFor(WireName("www.example.com"), edns);
      pkt[kHeaderSize + 16] = static_cast<uint8_t>(root);
      ExpectAgreement(pkt, "root octet " + std::to_string(root));
    }
  }
  // Compressed questions: a pointer first, after a label, into the header.
  for (uint16_t target : {0, 2, 4, 5, 10, 11, 12, 13, 16, 0x3FFF}) {
    for (bool after_label : {false, true}) {
      Packet p;
      p.Header(0x0400, 0, 1, 0, 0, 1);
      if (after_label) p.Raw(Bytes{1, 'a'});
      p.U16(static_cast<uint16_t>(0xC000 | target)).U16(type::kA).U16(klass::kIn).Opt(1232, {});
      ExpectAgreement(p.Build(), "pointer to " + std::to_string(target));
    }
  }
}

// Every query cut short at every length: the name, the question or the OPT
// running past the end of the packet.
TEST(QueryFastPath, AgreesOnEveryTruncation) {
  for (const Bytes& full : {QueryFor(NameOfLength(40, 20), true, Cat({kEcsV4, kCookie, kWeight})),
                            QueryFor(NameOfLength(255, 63), false), QueryFor(WireName("a.b"), true)}) {
    for (size_t n = 0; n <= full.size(); ++n) {
      ExpectAgreement(std::span(full).first(n), "cut at " + std::to_string(n));
    }
  }
}

TEST(QueryFastPath, AgreesOnEveryOptShape) {
  const Bytes name = WireName("www.example.com");
  std::vector<std::pair<std::string, Bytes>> options = {
      {"none", {}},
      {"cookie", kCookie},
      {"ECS v4", kEcsV4},
      {"ECS v6", kEcsV6},
      {"weight", kWeight},
      {"weight with data", Option(kDefaultWeightOptionCode, {0, 1, 0, 2})},
      {"NSID", Option(option::kNsid, {})},
      {"padding", Option(option::kPadding, Bytes(11, 0))},
      {"unknown", Option(4242, {9})},
      {"empty cookie", Option(option::kCookie, {})},
      {"cookie, ECS, weight", Cat({kCookie, kEcsV4, kWeight})},
      {"weight, weight", Cat({kWeight, Option(kDefaultWeightOptionCode, {0, 3})})},
      {"cookie, cookie", Cat({kCookie, Option(option::kCookie, Bytes(16, 1))})},
      {"ECS, ECS", Cat({kEcsV4, kEcsV6})},
      {"ECS bad family", EcsOption(3, 8, 0, {1})},
      {"ECS v4 /33", EcsOption(kEcsFamilyIpv4, 33, 0, {1, 2, 3, 4, 5})},
      {"ECS v6 /129", EcsOption(kEcsFamilyIpv6, 129, 0, Bytes(17, 1))},
      {"ECS scope in query", EcsOption(kEcsFamilyIpv4, 24, 24, {1, 2, 3})},
      {"ECS scope too long", EcsOption(kEcsFamilyIpv4, 24, 40, {1, 2, 3})},
      {"ECS address too long", EcsOption(kEcsFamilyIpv4, 8, 0, {1, 2})},
      {"ECS trailing bits", EcsOption(kEcsFamilyIpv4, 9, 0, {1, 0xFF})},
      {"ECS truncated", Option(option::kEcs, {0, 1, 24})},
      {"option longer than the OPT", {0, 10, 0, 9, 1, 2, 3, 4, 5, 6, 7, 8}},
      {"option header cut", {0, 10, 0}},
      {"one stray octet", {0}},
      {"cookie then stray octets", Cat({kCookie, {0, 8}})},
  };
  for (const auto& [what, opts] : options) {
    ExpectAgreement(QueryFor(name, true, opts), what);
    // The OPT's RDLENGTH one short or one long of its options.
    Bytes pkt = QueryFor(name, true, opts);
    const size_t rdlen_at = pkt.size() - opts.size() - 2;
    for (int delta : {-1, 1, 0x100}) {
      Bytes bad = pkt;
      Store16(bad.data() + rdlen_at, static_cast<uint16_t>(opts.size() + delta));
      ExpectAgreement(bad, what + ", RDLENGTH off by " + std::to_string(delta));
    }
  }
  // The OPT's fixed fields.
  for (uint16_t udp : {0, 1, 511, 512, 1232, 4096, 65535}) {
    for (uint8_t version : {0, 1, 255}) {
      for (uint8_t ext : {0, 1, 0xFF}) {
        for (bool do_bit : {false, true}) {
          Packet p;
          p.Header(7, flag::kRd, 1, 0, 0, 1).Raw(name).U16(type::kAaaa).U16(klass::kIn);
          ExpectAgreement(p.Opt(udp, kCookie, version, ext, do_bit).Build(), "OPT fields");
        }
      }
    }
  }
  // Not an OPT, or an OPT where none belongs.
  for (uint16_t rrtype : {type::kA, type::kOpt, uint16_t{0x2900}, uint16_t{0x0129}}) {
    for (uint8_t owner : {0, 1}) {
      Packet p;
      p.Header(7, 0, 1, 0, 0, 1).Raw(name).U16(type::kA).U16(klass::kIn).U8(owner);
      if (owner != 0) p.U8('a').U8(0);
      ExpectAgreement(p.U16(rrtype).U16(1232).U32(0).U16(0).Build(), "additional record");
    }
  }
}

TEST(QueryFastPath, AgreesOnEveryHeader) {
  const Bytes name = WireName("www.example.com");
  for (uint16_t qd : {0, 1, 2, 0xFFFF}) {
    for (uint16_t an : {0, 1}) {
      for (uint16_t ns : {0, 1}) {
        for (uint16_t ar : {0, 1, 2, 0x101}) {
          for (int flags : {0x0000, 0x0100, 0x8000, 0x7FFF, 0xFFFF, 0x2800}) {
            for (bool edns : {false, true}) {
              Packet p;
              p.Header(0xABCD, static_cast<uint16_t>(flags), qd, an, ns, ar)
                  .Raw(name)
                  .U16(type::kAny)
                  .U16(klass::kIn);
              if (edns) p.Opt(1232, kCookie);
              ExpectAgreement(p.Build(), "header " + std::to_string(qd) + "/" + std::to_string(an) + "/" +
                                             std::to_string(ns) + "/" + std::to_string(ar));
            }
          }
        }
      }
    }
  }
  for (size_t n = 0; n <= 17; ++n) {
    const Bytes zeros(n, 0);
    ExpectAgreement(zeros, std::to_string(n) + " zero octets");
  }
}

// Past 65535 octets a packet is cut to 65535 by the reference: the fast
// path must not take what the cut would refuse, nor refuse what it takes.
TEST(QueryFastPath, AgreesPastTheLargestMessage) {
  const Bytes q = QueryFor(WireName("www.example.com"));  // OPT last, RDLENGTH 0
  for (size_t total : {65535, 65536, 65537, 70000}) {
    for (size_t rdlen : {65535 - q.size(), total - q.size(), size_t{60000}}) {
      if (rdlen > 0xFFFF) continue;
      Bytes pkt = q;
      Store16(pkt.data() + pkt.size() - 2, static_cast<uint16_t>(rdlen));
      // One cookie fills the OPT: an option the fast path takes at any length.
      const Bytes cookie = Option(option::kCookie, Bytes(rdlen - 4, 0x5A));
      pkt.insert(pkt.end(), cookie.begin(), cookie.end());
      pkt.resize(total, 0);
      const std::string what = "packet of " + std::to_string(total) + ", RDLENGTH " + std::to_string(rdlen);
      ExpectAgreement(pkt, what);
      Query parsed;
      EXPECT_EQ(ParseQueryFast(pkt, ParseOptions{}, &parsed), total == 65535 && q.size() + rdlen == total)
          << what;
    }
  }
}

// ---------------------------------------------------------------- (c) random mutations

// 200,000 mutations of valid queries (fixed seed): bit flips, octets set to
// values that matter to the wire format, truncations, insertions, deletions.
TEST(QueryFastPath, AgreesOnRandomMutations) {
  const std::vector<Bytes> seeds = {
      QueryFor(WireName("h123.plain.example")),
      QueryFor(WireName("www.example.com"), true, kCookie),
      QueryFor(WireName("WwW.ExAmPlE.CoM"), false),
      QueryFor(WireName("a4.example.com"), true, Cat({kEcsV4, kCookie, kWeight})),
      QueryFor(WireName("v6.example.net"), true, Cat({kWeight, kEcsV6})),
      QueryFor(NameOfLength(200, 63), true, kCookie),
      MakeQuery(QuerySpec{.qname = "x.y", .do_bit = true, .nsid = true}),
  };
  const uint8_t kInteresting[] = {0,   1,   0x29, 0x3F, 0x40, 0x80, 0xC0, 0xFF,
                                  'A', 'Z', '@',  '[',  'a',  'z',  8,    10};
  std::mt19937 rng(20240611);
  std::map<ParseError, size_t> verdicts;
  size_t fast = 0;
  constexpr size_t kRuns = 200000;
  for (size_t run = 0; run < kRuns; ++run) {
    Bytes pkt = seeds[rng() % seeds.size()];
    const int mutations = 1 + static_cast<int>(rng() % 3);
    for (int m = 0; m < mutations; ++m) {
      const size_t at = pkt.empty() ? 0 : rng() % pkt.size();
      switch (rng() % 6) {
        case 0:
          if (!pkt.empty()) pkt[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
          break;
        case 1:
          if (!pkt.empty()) pkt[at] = kInteresting[rng() % sizeof kInteresting];
          break;
        case 2:
          pkt.resize(rng() % (pkt.size() + 1));
          break;
        case 3:
          pkt.insert(pkt.begin() + static_cast<std::ptrdiff_t>(at), static_cast<uint8_t>(rng()));
          break;
        case 4:
          if (!pkt.empty()) pkt.erase(pkt.begin() + static_cast<std::ptrdiff_t>(at));
          break;
        default:
          // A header count or the ARCOUNT octet the fast path reads.
          if (pkt.size() >= kHeaderSize) pkt[4 + rng() % 8] = static_cast<uint8_t>(rng() % 3);
          break;
      }
    }
    ParseError e;
    bool taken = false;
    const std::string d = Disagreement(pkt, kOptionSets[run % kOptionSets.size()], &e, &taken);
    ASSERT_EQ(d, "") << "run " << run;
    ++verdicts[e];
    fast += taken;
  }
  // The mutations reach well into the reference's errors, and many
  // mutated queries are still common ones the fast path takes.
  EXPECT_GE(verdicts.size(), 15u);
  EXPECT_GT(fast, kRuns / 20);
  EXPECT_GT(verdicts[ParseError::kOk], fast);  // and valid ones it leaves to the reference
}

}  // namespace
}  // namespace weir::dns
