// Valid seed packets for the fuzzers, written with the codec's own writer:
// tests/fuzz/corpus/{query_fuzz,response_fuzz,options_fuzz}/valid_*.bin.
// Each seed must parse; the stored files must match what is built here.
// Regenerate with WEIR_UPDATE_CORPUS=1 ./build-d/tests/dns_seed_corpus_test
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "dns/test_util.h"
#include "weir/dns/error.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"
#include "weir/dns/writer.h"

namespace weir::dns {
namespace {

using Bytes = std::vector<uint8_t>;

using testing::KeyBytes;
using testing::QuerySpec;
using testing::WireName;

ClientSubnet Subnet(const Bytes& addr, uint8_t prefix, uint8_t scope = 0) {
  ClientSubnet s;
  EXPECT_TRUE(MakeClientSubnet(addr, prefix, &s));
  s.scope_prefix = scope;
  return s;
}
const Bytes kCookie = {0x2f, 0x9e, 0xb6, 0x69, 0x89, 0xa6, 0xb2, 0x3c};
const Bytes kV6 = {0x20, 0x01, 0x0d, 0xb8, 0xab, 0xcd, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 1};

// What a query carries.
// The seeds' queries look like dig's: this ID, RD and AD set.
Bytes DigQuery(QuerySpec s) {
  s.id = 0x4d2e;
  s.flags = flag::kRd | flag::kAd;
  return testing::MakeQuery(s);
}

// A response to `query` with pre-encoded answers and an OPT echoing ECS and
// carrying weights, finished at `limit`.
struct Rr {
  std::string owner;
  uint16_t type;
  uint32_t ttl;
  Bytes rdata;
};
Bytes MakeResponse(const Bytes& query, const std::vector<Rr>& answers, const std::vector<Rr>& authority,
                   const Bytes& weights, Rcode rcode = Rcode::kNoError) {
  Query q;
  EXPECT_EQ(ParseQuery(query, ParseOptions{}, &q), ParseError::kOk);
  uint8_t blob[2048];
  RecordEncoder enc(blob, sizeof blob, q.qname.span());
  std::vector<uint16_t> ttls;
  for (const Rr& rr : answers) {
    uint16_t off;
    EXPECT_EQ(enc.Append(KeyBytes(rr.owner), rr.type, klass::kIn, rr.ttl, rr.rdata, &off), ParseError::kOk);
    ttls.push_back(off);
  }
  uint8_t buf[4096];
  ResponseWriter w(buf, sizeof buf);
  EXPECT_EQ(w.BeginResponse(query, q, rcode), ParseError::kOk);
  EXPECT_EQ(w.AppendRecords(Section::kAnswer, enc.blob(), static_cast<uint16_t>(answers.size()), ttls, 7),
            ParseError::kOk);
  for (const Rr& rr : authority) {
    EXPECT_EQ(w.AppendRecord(Section::kAuthority, KeyBytes(rr.owner), rr.type, klass::kIn, rr.ttl, rr.rdata),
              ParseError::kOk);
  }
  if (q.edns.present) {
    EXPECT_EQ(w.BeginOpt(1232, q.edns.do_bit), ParseError::kOk);
    if (q.edns.has_ecs) {
      ClientSubnet echo = q.edns.ecs;
      echo.scope_prefix = echo.source_prefix;
      EXPECT_EQ(w.AddEcs(echo), ParseError::kOk);
    }
    if (q.edns.has_weight) {
      EXPECT_EQ(w.AddWeights(kDefaultWeightOptionCode, weights), ParseError::kOk);
    }
  }
  const size_t len = w.Finish(q.udp_limit());
  return Bytes(buf, buf + len);
}

Bytes A(uint8_t last) { return {192, 0, 2, last}; }
Bytes Cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}
Bytes Option(uint16_t code, const Bytes& data) {
  return Cat({{static_cast<uint8_t>(code >> 8), static_cast<uint8_t>(code),
               static_cast<uint8_t>(data.size() >> 8), static_cast<uint8_t>(data.size())},
              data});
}
Bytes EcsOptionBytes(const ClientSubnet& s) {
  uint8_t buf[32];
  const size_t n = EncodeEcsOption(s, buf, sizeof buf);
  EXPECT_NE(n, 0u);
  return Bytes(buf, buf + n);
}

struct Seed {
  std::string corpus;  // query_fuzz, response_fuzz, options_fuzz
  std::string name;    // valid_<name>.bin
  Bytes bytes;
};

std::vector<Seed> Seeds() {
  const ClientSubnet v4 = Subnet({198, 51, 100, 77}, 24);
  const ClientSubnet v6 = Subnet(kV6, 56);
  std::vector<Seed> s;
  // Queries, as dig and kdig send them.
  s.push_back({"query_fuzz", "query_noedns", DigQuery({.edns = false})});
  s.push_back({"query_fuzz", "query_dig", DigQuery({.cookie = kCookie})});
  s.push_back({"query_fuzz", "query_mixedcase", DigQuery({.qname = "WwW.ExAmPlE.CoM", .cookie = kCookie})});
  s.push_back({"query_fuzz", "query_ecs_v4", DigQuery({.cookie = kCookie, .ecs = true, .subnet = v4})});
  s.push_back({"query_fuzz", "query_ecs_v6", DigQuery({.qtype = type::kAaaa, .ecs = true, .subnet = v6})});
  s.push_back({"query_fuzz", "query_weight", DigQuery({.cookie = kCookie, .weight = true})});
  s.push_back(
      {"query_fuzz", "query_all_options",
       DigQuery(
           {.do_bit = true, .cookie = kCookie, .nsid = true, .ecs = true, .subnet = v4, .weight = true})});

  // Responses.
  const Bytes q4 = DigQuery({.qname = "a4.example.com", .ecs = true, .subnet = v4, .weight = true});
  s.push_back({"response_fuzz", "response_4a_ecs_weights",
               MakeResponse(q4,
                            {{"a4.example.com", type::kA, 300, A(1)},
                             {"a4.example.com", type::kA, 300, A(2)},
                             {"a4.example.com", type::kA, 300, A(3)},
                             {"a4.example.com", type::kA, 300, A(4)}},
                            {}, {10, 20, 30, 40})});
  const Bytes qc = DigQuery({.cookie = kCookie, .weight = true});
  s.push_back({"response_fuzz", "response_cname_chain",
               MakeResponse(qc,
                            {{"www.example.com", type::kCname, 300, KeyBytes("a.cdn.example.net")},
                             {"a.cdn.example.net", type::kCname, 120, KeyBytes("b.cdn.example.net")},
                             {"b.cdn.example.net", type::kA, 60, {198, 51, 100, 7}},
                             {"b.cdn.example.net", type::kAaaa, 60, kV6}},
                            {}, {5, 250})});
  Bytes soa = Cat({KeyBytes("ns1.example.com"), KeyBytes("hostmaster.example.com")});
  for (int i = 0; i < 20; ++i) soa.push_back(static_cast<uint8_t>(i));
  s.push_back({"response_fuzz", "response_nxdomain_soa",
               MakeResponse(DigQuery({.qname = "nope.example.com"}), {},
                            {{"example.com", type::kSoa, 3600, soa}}, {}, Rcode::kNxDomain)});
  s.push_back({"response_fuzz", "response_ns_mx_ptr_txt",
               MakeResponse(DigQuery({.qname = "example.com", .qtype = type::kAny}),
                            {{"example.com", type::kNs, 86400, KeyBytes("ns1.example.com")},
                             {"example.com", type::kMx, 3600, Cat({{0, 10}, KeyBytes("mail.example.com")})},
                             {"example.com", type::kPtr, 60, KeyBytes("host.example.org")},
                             {"example.com", type::kTxt, 60, {5, 'h', 'e', 'l', 'l', 'o'}}},
                            {}, {})});
  std::vector<Rr> many;
  for (uint8_t i = 0; i < 40; ++i) many.push_back({"www.example.com", type::kA, 30, A(i)});
  s.push_back({"response_fuzz", "response_tc", MakeResponse(DigQuery({.edns = false}), many, {}, {})});

  // OPT RDATA and bare option data.
  s.push_back({"options_fuzz", "opt_dig_cookie", Option(option::kCookie, kCookie)});
  s.push_back(
      {"options_fuzz", "opt_ecs_v4_cookie_weight",
       Cat({EcsOptionBytes(v4), Option(option::kCookie, kCookie), Option(kDefaultWeightOptionCode, {})})});
  s.push_back(
      {"options_fuzz", "opt_ecs_v6_weights",
       Cat({EcsOptionBytes(Subnet(kV6, 56, 48)), Option(kDefaultWeightOptionCode, {0, 1, 0, 255, 0, 7})})});
  const Bytes ecs_v4 = EcsOptionBytes(Subnet({192, 0, 3, 9}, 23));
  s.push_back({"options_fuzz", "ecsdata_v4_23", Bytes(ecs_v4.begin() + 4, ecs_v4.end())});
  const Bytes ecs_v6 = EcsOptionBytes(Subnet(kV6, 128, 64));
  s.push_back({"options_fuzz", "ecsdata_v6_128", Bytes(ecs_v6.begin() + 4, ecs_v6.end())});
  s.push_back({"options_fuzz", "weights_count3", {3, 0, 10, 0, 20, 0, 30}});
  return s;
}

bool UpdateCorpus() { return std::getenv("WEIR_UPDATE_CORPUS") != nullptr; }

TEST(SeedCorpus, SeedsParseAndAreStored) {
  for (const Seed& seed : Seeds()) {
    SCOPED_TRACE(seed.name);
    if (seed.corpus == "query_fuzz") {
      Query q;
      EXPECT_EQ(ParseQuery(seed.bytes, ParseOptions{}, &q), ParseError::kOk);
    } else if (seed.corpus == "response_fuzz") {
      Message m;
      EXPECT_EQ(m.Parse(seed.bytes, ParseOptions{}), ParseError::kOk);
    }
    const std::filesystem::path path = std::filesystem::path(WEIR_TEST_DATA_DIR) / "fuzz" / "corpus" /
                                       seed.corpus / ("valid_" + seed.name + ".bin");
    if (UpdateCorpus()) {
      std::ofstream(path, std::ios::binary)
          .write(reinterpret_cast<const char*>(seed.bytes.data()),
                 static_cast<std::streamsize>(seed.bytes.size()));
    }
    std::ifstream in(path, std::ios::binary);
    ASSERT_TRUE(in) << path << " is missing; run with WEIR_UPDATE_CORPUS=1";
    const Bytes stored((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(stored, seed.bytes) << path << " is stale; run with WEIR_UPDATE_CORPUS=1";
  }
}

// The truncated seed really is truncated, and the ECS option seeds decode.
TEST(SeedCorpus, SeedsExerciseWhatTheirNamesSay) {
  for (const Seed& seed : Seeds()) {
    if (seed.name == "response_tc") {
      Message m;
      ASSERT_EQ(m.Parse(seed.bytes, ParseOptions{}), ParseError::kOk);
      EXPECT_NE(m.flags() & flag::kTc, 0);
    }
    if (seed.name == "ecsdata_v6_128") {
      ClientSubnet s;
      EXPECT_EQ(DecodeEcs(seed.bytes, false, &s), ParseError::kOk);
      EXPECT_EQ(s.source_prefix, 128);
    }
  }
}

}  // namespace
}  // namespace weir::dns
