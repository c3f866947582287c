// The malformed-packet corpus: one case per way a packet can be broken, each
// asserting the exact ParseError (or, for the weight option, the exact
// WeightVerdict, since a bad weight option is never an error).
//
// Every packet is also stored as tests/fuzz/corpus/query_fuzz/malformed_<case>.bin
// and indexed in tests/fuzz/corpus/MALFORMED.md, so the fuzzers start from it
// and integration tests can replay it (the fast path must answer FORMERR or
// drop each one). The CorpusFile and Index tests fail when the stored files
// drift from the builders below; regenerate them with
//   WEIR_UPDATE_CORPUS=1 ./build-d/tests/dns_malformed_test
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <ostream>
#include <sstream>
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

using testing::PacketBuilder;

using testing::Cat;
using testing::EcsOption;
using testing::Option;
const Bytes kCookie = testing::DigCookie();

constexpr uint16_t kQueryFlags = flag::kRd | flag::kAd;  // what dig sends
constexpr uint16_t kResponseFlags = flag::kQr | flag::kRd | flag::kRa;

// Header and question of a dig-style query for www.example.com A; the caller
// adds the records it announced.
PacketBuilder DigQuery(uint16_t an, uint16_t ns, uint16_t ar) {
  PacketBuilder b;
  b.Header(0x1234, kQueryFlags, 1, an, ns, ar).Question("www.example.com");
  return b;
}

// A dig-style query whose OPT carries `options`.
Bytes QueryWithOptions(const Bytes& options) { return DigQuery(0, 0, 1).Opt(1232, options).Build(); }

// A response for a4.example.com A with `addresses` A records and an OPT
// carrying `weight_data` as the weight option (code 65001).
Bytes ResponseWithWeights(int addresses, const Bytes& weight_data) {
  PacketBuilder b;
  b.Header(0x1234, kResponseFlags, 1, static_cast<uint16_t>(addresses), 0, 1).Question("a4.example.com");
  for (int i = 0; i < addresses; ++i) b.AToQname(static_cast<uint8_t>(i + 1));
  return b.Opt(1232, Option(kDefaultWeightOptionCode, weight_data)).Build();
}

// ------------------------------------------------------------ the cases

// --- Header and question (ParseQuery).

// 11 bytes: one short of a header.
Bytes TruncatedHeader() { return Bytes{0x12, 0x34, 0x01, 0x20, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00}; }

// QR is set: a response arriving on the query port.
Bytes NotAQuery() {
  return PacketBuilder()
      .Header(0x1234, flag::kQr | flag::kRd, 1, 0, 0, 0)
      .Question("www.example.com")
      .Build();
}

// QDCOUNT 0, though a question follows.
Bytes Qdcount0() {
  return PacketBuilder().Header(0x1234, kQueryFlags, 0, 0, 0, 0).Question("www.example.com").Build();
}

// QDCOUNT 2 with two questions: nobody answers those (RFC 9619).
Bytes Qdcount2() {
  return PacketBuilder()
      .Header(0x1234, kQueryFlags, 2, 0, 0, 0)
      .Question("www.example.com")
      .Question("mail.example.com")
      .Build();
}

// The qname ends in the middle of a label.
Bytes TruncatedName() {
  return PacketBuilder()
      .Header(0x1234, kQueryFlags, 1, 0, 0, 0)
      .Label("www")
      .U8(7)
      .Raw({'e', 'x', 'a'})
      .Build();
}

// A 64-octet label: the length byte 0x40 is the obsolete extended label type.
Bytes LabelTooLong() {
  return PacketBuilder()
      .Header(0x1234, kQueryFlags, 1, 0, 0, 0)
      .Question(std::string(64, 'a') + ".com")
      .Build();
}

// Label type 0x80 (reserved).
Bytes BadLabelType() {
  return PacketBuilder().Header(0x1234, kQueryFlags, 1, 0, 0, 0).U8(0x81).U8('a').U8(0).U16(1).U16(1).Build();
}

// Four 63-octet labels: 4 * 64 + 1 = 257 octets, over the 255 limit.
Bytes NameTooLong() {
  const std::string l(63, 'x');
  return PacketBuilder()
      .Header(0x1234, kQueryFlags, 1, 0, 0, 0)
      .Question(l + "." + l + "." + l + "." + l)
      .Build();
}

// "www" then a pointer back to its own start: www.www.www... for ever.
Bytes PointerLoop() {
  return PacketBuilder()
      .Header(0x1234, kQueryFlags, 1, 0, 0, 0)
      .Label("www")
      .Pointer(12)
      .U16(1)
      .U16(1)
      .Build();
}

// The qname is a pointer to itself.
Bytes PointerSelf() {
  return PacketBuilder().Header(0x1234, kQueryFlags, 1, 0, 0, 0).Pointer(12).U16(1).U16(1).Build();
}

// "www" then a pointer to offset 32, after the pointer itself (where a
// valid "example.com" sits, so only the direction is wrong).
Bytes ForwardPointer() {
  PacketBuilder b;
  b.Header(0x1234, kQueryFlags, 1, 0, 0, 0).Label("www").Pointer(32).U16(1).U16(1);
  while (b.size() < 32) b.U8(0);
  return b.Name("example.com").Build();
}

// A compressed qname: "www" then a pointer to offset 0, whose byte (the high
// byte of ID 0x0042) reads as the root. Valid compression, but a query's
// question must be uncompressed.
Bytes CompressedQname() {
  return PacketBuilder()
      .Header(0x0042, kQueryFlags, 1, 0, 0, 0)
      .Label("www")
      .Pointer(0)
      .U16(1)
      .U16(1)
      .Build();
}

// QTYPE present, QCLASS missing.
Bytes TruncatedQuestion() {
  return PacketBuilder().Header(0x1234, kQueryFlags, 1, 0, 0, 0).Name("www.example.com").U16(1).Build();
}

// --- Records after the question (ParseQuery).

// ARCOUNT 65535 but room for one record: rejected before walking any.
Bytes TooManyRecords() { return DigQuery(0, 0, 0xFFFF).Opt(1232, kCookie).Build(); }

// The OPT RR stops inside its fixed part (owner "com.", then 7 of 10 bytes).
Bytes TruncatedRr() { return DigQuery(0, 0, 1).Name("com").U16(type::kOpt).U16(1232).U16(0).U8(0).Build(); }

// OPT RDLENGTH 12 with only the 4 bytes of an empty NSID option present.
Bytes RdataOverrun() {
  return DigQuery(0, 0, 1)
      .U8(0)
      .U16(type::kOpt)
      .U16(1232)
      .U32(0)
      .U16(12)
      .Raw(Option(option::kNsid, {}))
      .Build();
}

// The cookie option claims 8 bytes but the OPT RDATA ends after 2.
Bytes TruncatedOption() { return QueryWithOptions({0x00, 0x0a, 0x00, 0x08, 0x2f, 0x9e}); }

// --- EDNS (ParseQuery).

// Two OPT RRs (RFC 6891 6.1.1: FORMERR).
Bytes TwoOpt() { return DigQuery(0, 0, 2).Opt(1232, kCookie).Opt(1232, {}).Build(); }

// The OPT RR in the answer section.
Bytes OptInAnswer() { return DigQuery(1, 0, 0).Opt(1232, kCookie).Build(); }

// The OPT RR in the authority section.
Bytes OptInAuthority() { return DigQuery(0, 1, 0).Opt(1232, kCookie).Build(); }

// OPT owned by "com." instead of the root.
Bytes OptOwnerNotRoot() { return DigQuery(0, 0, 1).Name("com").RrBody(type::kOpt, 1232, 0, kCookie).Build(); }

// EDNS version 1: answered with BADVERS, so the header, question and UDP
// size must still be readable (see the BadEdnsVersionKeepsQuestion test).
Bytes EdnsVersion1() { return DigQuery(0, 0, 1).Opt(1232, kCookie, /*version=*/1).Build(); }

// --- Bytes after the last counted record (ParseQuery: FORMERR, as unbound
// and Knot answer).

// Two zero bytes after the question of a query without EDNS.
Bytes TrailingAfterQuestion() { return DigQuery(0, 0, 0).U16(0).Build(); }

// One byte after the OPT RR (the fast path's single-OPT parse).
Bytes TrailingAfterOpt() { return DigQuery(0, 0, 1).Opt(1232, kCookie).U8(0xde).Build(); }

// An additional A record and the OPT, then junk (the general record walk).
Bytes TrailingAfterRecords() {
  return DigQuery(0, 0, 2)
      .Name("glue.example.com")
      .RrBody(type::kA, klass::kIn, 60, {192, 0, 2, 1})
      .Opt(1232, {})
      .U32(0xdeadbeef)
      .Build();
}

// --- ECS in a query (ParseQuery).

// 192.0.2.0/24 sent with all 4 address octets; /24 needs exactly 3.
Bytes EcsV4AddressLength() { return QueryWithOptions(EcsOption(1, 24, 0, {192, 0, 2, 0})); }

// 2001:db8::/48 sent with the full 16 octets.
Bytes EcsV6AddressLength() {
  return QueryWithOptions(EcsOption(2, 48, 0, {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
}

// 192.0.3.0/23: the last bit of the third octet lies beyond the prefix.
Bytes EcsV4TrailingBits() { return QueryWithOptions(EcsOption(1, 23, 0, {192, 0, 3})); }

// A /60 IPv6 prefix whose last octet has its low 4 bits set.
Bytes EcsV6TrailingBits() {
  return QueryWithOptions(EcsOption(2, 60, 0, {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0x0f}));
}

// IPv4 source prefix 33.
Bytes EcsV4SourceTooLong() { return QueryWithOptions(EcsOption(1, 33, 0, {192, 0, 2, 1, 0})); }

// IPv6 source prefix 129.
Bytes EcsV6SourceTooLong() { return QueryWithOptions(EcsOption(2, 129, 0, Bytes(17, 0))); }

// Family 3 (only 1 = IPv4 and 2 = IPv6 are defined for ECS).
Bytes EcsBadFamily() { return QueryWithOptions(EcsOption(3, 24, 0, {192, 0, 2})); }

// SCOPE PREFIX-LENGTH 24 in a query (RFC 7871 6: MUST be 0).
Bytes EcsScopeInQuery() { return QueryWithOptions(EcsOption(1, 24, 24, {192, 0, 2})); }

// IPv4 scope prefix 33 (too long whatever the direction).
Bytes EcsScopeTooLong() { return QueryWithOptions(EcsOption(1, 24, 33, {192, 0, 2})); }

// ECS option data of 3 bytes: not even family, source and scope.
Bytes EcsTruncated() { return QueryWithOptions(Option(option::kEcs, {0x00, 0x01, 24})); }

// Two ECS options in one OPT.
Bytes EcsDuplicate() {
  return QueryWithOptions(Cat({EcsOption(1, 24, 0, {192, 0, 2}), EcsOption(1, 24, 0, {198, 51, 100})}));
}

// --- Responses (Message::Parse).

// An answer owner "a" followed by a pointer back to its own first label.
Bytes ResponsePointerLoop() {
  PacketBuilder b;
  b.Header(0x1234, kResponseFlags, 1, 1, 0, 0).Question("a4.example.com");
  const uint16_t owner = static_cast<uint16_t>(b.size());
  return b.Label("a").Pointer(owner).RrBody(type::kA, klass::kIn, 300, {192, 0, 2, 1}).Build();
}

// An answer owner pointing at the next record.
Bytes ResponseForwardPointer() {
  PacketBuilder b;
  b.Header(0x1234, kResponseFlags, 1, 2, 0, 0).Question("a4.example.com");
  const uint16_t next = static_cast<uint16_t>(b.size() + 16);  // 2 + 10 + 4 bytes later
  return b.Pointer(next).RrBody(type::kA, klass::kIn, 300, {192, 0, 2, 1}).AToQname(2).Build();
}

// An A record whose RDLENGTH 4 runs 2 bytes past the end of the packet.
Bytes ResponseRdataOverrun() {
  return PacketBuilder()
      .Header(0x1234, kResponseFlags, 1, 1, 0, 0)
      .Question("a4.example.com")
      .Pointer(12)
      .U16(type::kA)
      .U16(klass::kIn)
      .U32(300)
      .U16(4)
      .Raw({192, 0})
      .Build();
}

// ANCOUNT 200 with one record present.
Bytes ResponseTooManyRecords() {
  return PacketBuilder()
      .Header(0x1234, kResponseFlags, 1, 200, 0, 0)
      .Question("a4.example.com")
      .AToQname(1)
      .Build();
}

// A response carrying its OPT in the answer section.
Bytes ResponseOptInAnswer() {
  return PacketBuilder()
      .Header(0x1234, kResponseFlags, 1, 2, 0, 0)
      .Question("a4.example.com")
      .AToQname(1)
      .Opt(1232, {})
      .Build();
}

// --- The weight option (Message::Parse succeeds; DecodeWeights neutralises).

// 2 addresses, option length 3.
Bytes WeightOddLength() { return ResponseWithWeights(2, {0, 10, 0}); }

// 2 addresses, second weight 0.
Bytes WeightZero() { return ResponseWithWeights(2, {0, 10, 0, 0}); }

// 2 addresses, second weight 0x0105 (high byte set).
Bytes WeightHighByte() { return ResponseWithWeights(2, {0, 10, 1, 5}); }

// 3 addresses, 2 weights.
Bytes WeightCountMismatch() { return ResponseWithWeights(3, {0, 10, 0, 20}); }

// 65 addresses with 65 valid weights: more than weir keeps weights for.
Bytes WeightTooMany() {
  Bytes w;
  for (int i = 0; i < 65; ++i) w.insert(w.end(), {0, 1});
  return ResponseWithWeights(65, w);
}

// ------------------------------------------------------------ the table

enum class Parser { kQuery, kResponse };

struct MalformedCase {
  const char* name;  // file malformed_<name>.bin
  Bytes (*build)();
  Parser parser;
  ParseError error;
  // Weight cases only: the packet parses and the option is neutralised.
  bool weights = false;
  WeightVerdict verdict = WeightVerdict::kValid;
};

MalformedCase QueryCase(const char* name, Bytes (*build)(), ParseError e) {
  return {name, build, Parser::kQuery, e};
}
MalformedCase ResponseCase(const char* name, Bytes (*build)(), ParseError e) {
  return {name, build, Parser::kResponse, e};
}
MalformedCase WeightCase(const char* name, Bytes (*build)(), WeightVerdict v) {
  return {name, build, Parser::kResponse, ParseError::kOk, true, v};
}

const MalformedCase kCases[] = {
    QueryCase("truncated_header", TruncatedHeader, ParseError::kTruncatedHeader),
    QueryCase("not_a_query", NotAQuery, ParseError::kNotAQuery),
    QueryCase("qdcount_0", Qdcount0, ParseError::kNoQuestion),
    QueryCase("qdcount_2", Qdcount2, ParseError::kMultipleQuestions),
    QueryCase("truncated_name", TruncatedName, ParseError::kTruncatedName),
    QueryCase("label_too_long", LabelTooLong, ParseError::kLabelTooLong),
    QueryCase("bad_label_type", BadLabelType, ParseError::kBadLabelType),
    QueryCase("name_too_long", NameTooLong, ParseError::kNameTooLong),
    QueryCase("pointer_loop", PointerLoop, ParseError::kPointerLoop),
    QueryCase("pointer_self", PointerSelf, ParseError::kPointerLoop),
    QueryCase("forward_pointer", ForwardPointer, ParseError::kForwardPointer),
    QueryCase("compressed_qname", CompressedQname, ParseError::kCompressedQuestion),
    QueryCase("truncated_question", TruncatedQuestion, ParseError::kTruncatedQuestion),
    QueryCase("too_many_records", TooManyRecords, ParseError::kTooManyRecords),
    QueryCase("truncated_rr", TruncatedRr, ParseError::kTruncatedRr),
    QueryCase("rdata_overrun", RdataOverrun, ParseError::kRdataOverrun),
    QueryCase("truncated_option", TruncatedOption, ParseError::kTruncatedOption),
    QueryCase("two_opt", TwoOpt, ParseError::kDuplicateOpt),
    QueryCase("opt_in_answer", OptInAnswer, ParseError::kOptNotInAdditional),
    QueryCase("opt_in_authority", OptInAuthority, ParseError::kOptNotInAdditional),
    QueryCase("opt_owner_not_root", OptOwnerNotRoot, ParseError::kOptOwnerNotRoot),
    QueryCase("edns_version_1", EdnsVersion1, ParseError::kBadEdnsVersion),
    QueryCase("trailing_after_question", TrailingAfterQuestion, ParseError::kTrailingBytes),
    QueryCase("trailing_after_opt", TrailingAfterOpt, ParseError::kTrailingBytes),
    QueryCase("trailing_after_records", TrailingAfterRecords, ParseError::kTrailingBytes),
    QueryCase("ecs_v4_address_length", EcsV4AddressLength, ParseError::kEcsAddressLength),
    QueryCase("ecs_v6_address_length", EcsV6AddressLength, ParseError::kEcsAddressLength),
    QueryCase("ecs_v4_trailing_bits", EcsV4TrailingBits, ParseError::kEcsTrailingBits),
    QueryCase("ecs_v6_trailing_bits", EcsV6TrailingBits, ParseError::kEcsTrailingBits),
    QueryCase("ecs_v4_source_too_long", EcsV4SourceTooLong, ParseError::kEcsSourceTooLong),
    QueryCase("ecs_v6_source_too_long", EcsV6SourceTooLong, ParseError::kEcsSourceTooLong),
    QueryCase("ecs_bad_family", EcsBadFamily, ParseError::kEcsBadFamily),
    QueryCase("ecs_scope_in_query", EcsScopeInQuery, ParseError::kEcsScopeInQuery),
    QueryCase("ecs_scope_too_long", EcsScopeTooLong, ParseError::kEcsScopeTooLong),
    QueryCase("ecs_truncated", EcsTruncated, ParseError::kEcsTruncated),
    QueryCase("ecs_duplicate", EcsDuplicate, ParseError::kDuplicateEcs),
    ResponseCase("response_pointer_loop", ResponsePointerLoop, ParseError::kPointerLoop),
    ResponseCase("response_forward_pointer", ResponseForwardPointer, ParseError::kForwardPointer),
    ResponseCase("response_rdata_overrun", ResponseRdataOverrun, ParseError::kRdataOverrun),
    ResponseCase("response_too_many_records", ResponseTooManyRecords, ParseError::kTooManyRecords),
    ResponseCase("response_opt_in_answer", ResponseOptInAnswer, ParseError::kOptNotInAdditional),
    WeightCase("weight_odd_length", WeightOddLength, WeightVerdict::kOddLength),
    WeightCase("weight_zero", WeightZero, WeightVerdict::kZeroWeight),
    WeightCase("weight_high_byte", WeightHighByte, WeightVerdict::kHighByteSet),
    WeightCase("weight_count_mismatch", WeightCountMismatch, WeightVerdict::kCountMismatch),
    WeightCase("weight_too_many", WeightTooMany, WeightVerdict::kTooMany),
};

// Parses `pkt` the way the case says and returns the error.
ParseError ParseAs(const MalformedCase& c, const Bytes& pkt) {
  if (c.parser == Parser::kQuery) {
    Query q;
    return ParseQuery(pkt, ParseOptions{}, &q);
  }
  Message m;
  return m.Parse(pkt, ParseOptions{});
}

// Number of A/AAAA records in the answer section.
size_t AddressRecords(const Message& m) {
  size_t n = 0;
  Message::Iterator it = m.Records(Section::kAnswer);
  RrView rr;
  while (it.Next(&rr)) n += rr.type == type::kA || rr.type == type::kAaaa;
  return n;
}

std::filesystem::path CorpusDir() { return std::filesystem::path(WEIR_TEST_DATA_DIR) / "fuzz" / "corpus"; }
std::string FileName(const MalformedCase& c) { return std::string("malformed_") + c.name + ".bin"; }
bool UpdateCorpus() { return std::getenv("WEIR_UPDATE_CORPUS") != nullptr; }

std::string Expected(const MalformedCase& c) {
  if (c.weights) return "WeightVerdict " + std::string(WeightVerdictName(c.verdict));
  return "ParseError " + std::string(ParseErrorName(c.error));
}

class Malformed : public ::testing::TestWithParam<MalformedCase> {};

TEST_P(Malformed, ExactError) {
  const MalformedCase& c = GetParam();
  const Bytes pkt = c.build();
  EXPECT_EQ(ParseErrorName(ParseAs(c, pkt)), ParseErrorName(c.error));
  if (c.parser == Parser::kResponse) {
    // As MALFORMED.md says: on the query path these are dropped as responses.
    Query q;
    EXPECT_EQ(ParseQuery(pkt, ParseOptions{}, &q), ParseError::kNotAQuery);
  }
  if (!c.weights) return;
  Message m;
  ASSERT_EQ(m.Parse(pkt, ParseOptions{}), ParseError::kOk);
  ASSERT_TRUE(m.edns().has_weight);
  const WeightSet w =
      DecodeWeights(m.bytes().subspan(m.edns().weight_offset, m.edns().weight_len), AddressRecords(m));
  EXPECT_EQ(WeightVerdictName(w.verdict), WeightVerdictName(c.verdict));
  // A neutralised option means every address weighs the same.
  EXPECT_FALSE(w.valid());
  for (size_t i = 0; i < w.count; ++i) EXPECT_EQ(w.weights[i], 1) << "address " << i;
}

// The stored corpus file holds exactly the bytes the builder makes.
TEST_P(Malformed, CorpusFile) {
  const MalformedCase& c = GetParam();
  const Bytes pkt = c.build();
  const std::filesystem::path path = CorpusDir() / "query_fuzz" / FileName(c);
  if (UpdateCorpus()) {
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(pkt.data()), pkt.size());
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << path << " is missing; run with WEIR_UPDATE_CORPUS=1";
  const Bytes stored((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(stored, pkt) << path << " is stale; run with WEIR_UPDATE_CORPUS=1";
}

INSTANTIATE_TEST_SUITE_P(Corpus, Malformed, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<MalformedCase>& info) {
                           return std::string(info.param.name);
                         });

// MALFORMED.md lists every file with its expected outcome.
TEST(MalformedIndex, ListsEveryCase) {
  std::ostringstream md;
  md << "# Malformed packets\n\n"
     << "Generated by `tests/dns/malformed_test.cc` (`WEIR_UPDATE_CORPUS=1 "
        "./build-d/tests/dns_malformed_test`),\n"
     << "which also checks that every file below still holds the bytes its builder makes.\n"
     << "All files live in `query_fuzz/`. `ParseQuery` cases must be answered FORMERR (BADVERS for\n"
     << "`bad_edns_version`) or dropped by the fast path; `Message::Parse` cases are broken upstream\n"
     << "responses; `DecodeWeights` cases parse, and their weight option (code 65001) is neutralised\n"
     << "to equal weights. Fed to `ParseQuery`, the `Message::Parse` and `DecodeWeights` files fail\n"
     << "with `not_a_query` (QR is set).\n\n"
     << "| file | parser | expected |\n|---|---|---|\n";
  for (const MalformedCase& c : kCases) {
    const char* parser = c.weights                    ? "Message::Parse + DecodeWeights"
                         : c.parser == Parser::kQuery ? "ParseQuery"
                                                      : "Message::Parse";
    md << "| `" << FileName(c) << "` | " << parser << " | " << Expected(c) << " |\n";
  }
  const std::filesystem::path path = CorpusDir() / "MALFORMED.md";
  if (UpdateCorpus()) std::ofstream(path) << md.str();
  std::ifstream in(path);
  ASSERT_TRUE(in) << path << " is missing; run with WEIR_UPDATE_CORPUS=1";
  const std::string stored((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(stored, md.str()) << path << " is stale; run with WEIR_UPDATE_CORPUS=1";
}

// ------------------------------------------------------------ controls

// The builders make valid packets when nothing is broken, so each case above
// fails for the one reason it names.
TEST(MalformedControl, ValidQueryParses) {
  const Bytes pkt = QueryWithOptions(
      Cat({EcsOption(1, 23, 0, {192, 0, 2}), kCookie, Option(kDefaultWeightOptionCode, {})}));
  Query q;
  ASSERT_EQ(ParseQuery(pkt, ParseOptions{}, &q), ParseError::kOk);
  EXPECT_EQ(NameKeyToText(q.qname.span()), "www.example.com.");
  EXPECT_TRUE(q.edns.has_ecs);
  EXPECT_EQ(q.edns.ecs.source_prefix, 23);
  EXPECT_TRUE(q.edns.has_cookie);
  EXPECT_TRUE(q.edns.has_weight);
  EXPECT_EQ(q.edns.weight_len, 0);
}

TEST(MalformedControl, LongestNameParses) {
  // 3 * 64 + 62 + 1 = 255 octets: exactly the limit.
  const std::string l(63, 'x');
  const Bytes pkt = PacketBuilder()
                        .Header(1, 0, 1, 0, 0, 0)
                        .Question(l + "." + l + "." + l + "." + std::string(61, 'y'))
                        .Build();
  Query q;
  ASSERT_EQ(ParseQuery(pkt, ParseOptions{}, &q), ParseError::kOk);
  EXPECT_EQ(q.qname.len, 255);
}

TEST(MalformedControl, ValidWeightsAreKept) {
  Message m;
  const Bytes pkt = ResponseWithWeights(2, {0, 10, 0, 255});
  ASSERT_EQ(m.Parse(pkt, ParseOptions{}), ParseError::kOk);
  const WeightSet w =
      DecodeWeights(m.bytes().subspan(m.edns().weight_offset, m.edns().weight_len), AddressRecords(m));
  EXPECT_EQ(w.verdict, WeightVerdict::kValid);
  EXPECT_EQ(w.weights[0], 10);
  EXPECT_EQ(w.weights[1], 255);
}

TEST(MalformedControl, SixtyFourWeightsAreKept) {
  Bytes w;
  for (int i = 0; i < 64; ++i) w.insert(w.end(), {0, static_cast<uint8_t>(i + 1)});
  const Bytes pkt = ResponseWithWeights(64, w);
  Message m;
  ASSERT_EQ(m.Parse(pkt, ParseOptions{}), ParseError::kOk);
  EXPECT_EQ(DecodeWeights(m.bytes().subspan(m.edns().weight_offset, m.edns().weight_len), AddressRecords(m))
                .verdict,
            WeightVerdict::kValid);
}

// ------------------------------------------------------------ BADVERS

// After kBadEdnsVersion the ID, question and UDP size are still there, so
// the fast path can answer BADVERS (RFC 6891 6.1.3).
TEST(MalformedBadVers, QuestionAndUdpSizeUsable) {
  const Bytes pkt = EdnsVersion1();
  Query q;
  ASSERT_EQ(ParseQuery(pkt, ParseOptions{}, &q), ParseError::kBadEdnsVersion);
  EXPECT_EQ(q.id, 0x1234);
  EXPECT_EQ(q.flags, kQueryFlags);
  EXPECT_EQ(NameKeyToText(q.qname.span()), "www.example.com.");
  EXPECT_EQ(q.qtype, type::kA);
  EXPECT_EQ(q.qclass, klass::kIn);
  EXPECT_EQ(q.question_end, 12 + 17 + 4);
  EXPECT_TRUE(q.edns.present);
  EXPECT_EQ(q.edns.version, 1);
  EXPECT_EQ(q.edns.udp_size, 1232);
  EXPECT_EQ(q.udp_limit(), 1232);

  // The BADVERS answer: RCODE 16 = low 4 bits 0 in the header, 1 in the OPT.
  uint8_t buf[512];
  ResponseWriter w(buf, sizeof buf);
  ASSERT_EQ(w.BeginResponse(pkt, q, Rcode::kNoError), ParseError::kOk);
  ASSERT_EQ(w.BeginOpt(1232, false, /*ext_rcode=*/1), ParseError::kOk);
  const size_t len = w.Finish(q.udp_limit());
  Message m;
  ASSERT_EQ(m.Parse({buf, len}, ParseOptions{}), ParseError::kOk);
  EXPECT_EQ(m.id(), 0x1234);
  EXPECT_EQ(m.rcode(), static_cast<uint16_t>(Rcode::kBadVers));
  EXPECT_EQ(NameKeyToText(m.qname().span()), "www.example.com.");
}

}  // namespace
}  // namespace weir::dns
