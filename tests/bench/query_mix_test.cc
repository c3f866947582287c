#include "query_mix.h"

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "weir/dns/message.h"
#include "weir/dns/wire.h"

namespace weir::bench {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

// ---------------------------------------------------------------- types

TEST(TypeTextTest, KnownTypesInAnyCase) {
  EXPECT_EQ(TypeFromText("A"), 1);
  EXPECT_EQ(TypeFromText("a"), 1);
  EXPECT_EQ(TypeFromText("AAAA"), 28);
  EXPECT_EQ(TypeFromText("aaaa"), 28);
  EXPECT_EQ(TypeFromText("Https"), 65);
  EXPECT_EQ(TypeFromText("caa"), 257);
  EXPECT_EQ(TypeFromText("ANY"), 255);
}

TEST(TypeTextTest, GenericTypeNumbers) {
  EXPECT_EQ(TypeFromText("TYPE65"), 65);
  EXPECT_EQ(TypeFromText("type65"), 65);
  EXPECT_EQ(TypeFromText("TYPE1234"), 1234);
  EXPECT_EQ(TypeFromText("TYPE65535"), 65535);
  EXPECT_EQ(TypeFromText("TYPE65536"), 0);
  EXPECT_EQ(TypeFromText("TYPE99999999999"), 0);
  EXPECT_EQ(TypeFromText("TYPE"), 0);
  EXPECT_EQ(TypeFromText("TYPE1x"), 0);
  EXPECT_EQ(TypeFromText("TYPE-1"), 0);
  EXPECT_EQ(TypeFromText(""), 0);
  EXPECT_EQ(TypeFromText("BOGUS"), 0);
  EXPECT_EQ(TypeFromText("AA"), 0);
}

TEST(TypeTextTest, TypeToTextRoundTripsEveryType) {
  EXPECT_EQ(TypeToText(1), "A");
  EXPECT_EQ(TypeToText(28), "AAAA");
  EXPECT_EQ(TypeToText(65), "HTTPS");
  EXPECT_EQ(TypeToText(1234), "TYPE1234");
  for (uint32_t t = 1; t <= 65535; ++t) {
    ASSERT_EQ(TypeFromText(TypeToText(static_cast<uint16_t>(t))), t) << TypeToText(static_cast<uint16_t>(t));
  }
}

TEST(TypeTextTest, RcodeNames) {
  EXPECT_EQ(RcodeName(0), "NOERROR");
  EXPECT_EQ(RcodeName(1), "FORMERR");
  EXPECT_EQ(RcodeName(2), "SERVFAIL");
  EXPECT_EQ(RcodeName(3), "NXDOMAIN");
  EXPECT_EQ(RcodeName(4), "NOTIMP");
  EXPECT_EQ(RcodeName(5), "REFUSED");
  EXPECT_EQ(RcodeName(10), "NOTZONE");
  EXPECT_EQ(RcodeName(11), "DSOTYPENI");
  EXPECT_EQ(RcodeName(12), "RCODE12");
  EXPECT_EQ(RcodeName(16), "BADVERS");
  EXPECT_EQ(RcodeName(23), "BADCOOKIE");
  EXPECT_EQ(RcodeName(4095), "RCODE4095");
  // Every rcode has a distinct name.
  std::set<std::string> seen;
  for (uint16_t r = 0; r < 4096; ++r) EXPECT_TRUE(seen.insert(RcodeName(r)).second) << r;
}

// ---------------------------------------------------------------- query file

TEST(ParseQueryFileTest, NamesAndTypes) {
  auto qs =
      ParseQueryFile("www.Example.com A\nfoo.example. aaaa\nbar.example TYPE65\nbaz.example\n", "q.txt");
  ASSERT_TRUE(qs.ok()) << qs.status();
  ASSERT_EQ(qs->size(), 4u);
  EXPECT_EQ((*qs)[0].text, "www.example.com.");
  EXPECT_EQ((*qs)[0].qtype, 1);
  EXPECT_EQ((*qs)[1].text, "foo.example.");
  EXPECT_EQ((*qs)[1].qtype, 28);
  EXPECT_EQ((*qs)[2].text, "bar.example.");
  EXPECT_EQ((*qs)[2].qtype, 65);
  EXPECT_EQ((*qs)[3].text, "baz.example.");
  EXPECT_EQ((*qs)[3].qtype, 1);  // type defaults to A
  dns::NameKey k;
  ASSERT_TRUE(dns::NameKeyFromText("www.example.com", &k));
  EXPECT_EQ((*qs)[0].qname, k);
  for (const Question& q : *qs) EXPECT_FALSE(q.tagged);
}

TEST(ParseQueryFileTest, CommentsBlankLinesAndSpacesAreSkipped) {
  auto qs = ParseQueryFile(
      "# a dnsperf file\n"
      "\n"
      "   \t \n"
      "a.example\tMX   # trailing comment\n"
      "#b.example A\n"
      "  c.example    TXT  \n"
      "d.example#comment right after the name\n",
      "q.txt");
  ASSERT_TRUE(qs.ok()) << qs.status();
  ASSERT_EQ(qs->size(), 3u);
  EXPECT_EQ((*qs)[0].text, "a.example.");
  EXPECT_EQ((*qs)[0].qtype, 15);
  EXPECT_EQ((*qs)[1].text, "c.example.");
  EXPECT_EQ((*qs)[1].qtype, 16);
  EXPECT_EQ((*qs)[2].text, "d.example.");
}

TEST(ParseQueryFileTest, CrlfLineEndings) {
  auto qs = ParseQueryFile("a.example A\r\nb.example AAAA\r\nc.example\r\n\r\n", "q.txt");
  ASSERT_TRUE(qs.ok()) << qs.status();
  ASSERT_EQ(qs->size(), 3u);
  EXPECT_EQ((*qs)[0].qtype, 1);
  EXPECT_EQ((*qs)[1].qtype, 28);
  EXPECT_EQ((*qs)[2].text, "c.example.");
  EXPECT_EQ((*qs)[2].qtype, 1);
}

TEST(ParseQueryFileTest, NoTrailingNewline) {
  auto qs = ParseQueryFile("a.example A\nb.example NS", "q.txt");
  ASSERT_TRUE(qs.ok()) << qs.status();
  ASSERT_EQ(qs->size(), 2u);
  EXPECT_EQ((*qs)[1].qtype, 2);
}

TEST(ParseQueryFileTest, ErrorsNameTheFileAndLine) {
  {
    auto qs = ParseQueryFile("ok.example\n# comment\nx.example A extra\n", "q.txt");
    ASSERT_FALSE(qs.ok());
    EXPECT_EQ(qs.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Message(qs.status()), StartsWith("q.txt:3: "));
    EXPECT_THAT(Message(qs.status()), HasSubstr("3 fields"));
  }
  {
    auto qs = ParseQueryFile("ok.example\nx.example BOGUS\n", "q.txt");
    ASSERT_FALSE(qs.ok());
    EXPECT_THAT(Message(qs.status()), StartsWith("q.txt:2: "));
    EXPECT_THAT(Message(qs.status()), HasSubstr("unknown type 'BOGUS'"));
  }
  {
    auto qs = ParseQueryFile("a..example A\n", "q.txt");
    ASSERT_FALSE(qs.ok());
    EXPECT_THAT(Message(qs.status()), StartsWith("q.txt:1: "));
    EXPECT_THAT(Message(qs.status()), HasSubstr("invalid name 'a..example'"));
  }
  {
    const std::string long_label(64, 'x');
    auto qs = ParseQueryFile("\r\n\n" + long_label + ".example\n", "other.txt");
    ASSERT_FALSE(qs.ok());
    EXPECT_THAT(Message(qs.status()), StartsWith("other.txt:3: "));
  }
}

TEST(ParseQueryFileTest, EmptyFileIsAnError) {
  for (const char* text : {"", "\n\n", "# nothing but a comment\n   \n"}) {
    auto qs = ParseQueryFile(text, "q.txt");
    ASSERT_FALSE(qs.ok()) << text;
    EXPECT_EQ(qs.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Message(qs.status()), HasSubstr("q.txt"));
    EXPECT_THAT(Message(qs.status()), HasSubstr("no queries"));
  }
}

// ---------------------------------------------------------------- QueryMix::Build

TEST(QueryMixBuildTest, GeneratedNamesThenTaggedNames) {
  Options o;
  o.names = 5;
  o.zone = "Bench.Test";
  o.qtype = "aaaa";
  o.tagged_names = {"x.cdn.example.", "Y.cdn.example"};
  o.tagged_zone = "tz.example";
  o.tagged_count = 3;
  auto m = QueryMix::Build(o);
  ASSERT_TRUE(m.ok()) << m.status();
  const auto& qs = m->questions();
  ASSERT_EQ(qs.size(), 10u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(qs[i].text, "n" + std::to_string(i) + ".bench.test.");
    EXPECT_FALSE(qs[i].tagged) << i;
  }
  EXPECT_EQ(qs[5].text, "x.cdn.example.");
  EXPECT_EQ(qs[6].text, "y.cdn.example.");
  EXPECT_EQ(qs[7].text, "t0.tz.example.");
  EXPECT_EQ(qs[9].text, "t2.tz.example.");
  for (size_t i = 5; i < 10; ++i) EXPECT_TRUE(qs[i].tagged) << i;
  for (const Question& q : qs) EXPECT_EQ(q.qtype, 28);
  EXPECT_TRUE(m->has_tagged());
  EXPECT_EQ(dns::NameKeyToText(m->miss_zone().span()), "miss.bench.test.");
  EXPECT_EQ(m->miss_qtype(), 28);
}

TEST(QueryMixBuildTest, Errors) {
  {
    Options o;
    o.qtype = "BOGUS";
    auto m = QueryMix::Build(o);
    ASSERT_FALSE(m.ok());
    EXPECT_THAT(Message(m.status()), HasSubstr("--qtype"));
  }
  {
    Options o;
    o.names = 0;
    auto m = QueryMix::Build(o);
    ASSERT_FALSE(m.ok());
    EXPECT_THAT(Message(m.status()), HasSubstr("no names"));
  }
  {
    Options o;
    o.tagged_names = {"bad..name"};
    auto m = QueryMix::Build(o);
    ASSERT_FALSE(m.ok());
    EXPECT_THAT(Message(m.status()), HasSubstr("--tagged-name"));
  }
  {
    Options o;
    o.zone = "a..b";
    EXPECT_FALSE(QueryMix::Build(o).ok());
  }
  {
    Options o;
    o.queries_file = "/nonexistent/weir-bench-queries.txt";
    auto m = QueryMix::Build(o);
    ASSERT_FALSE(m.ok());
    EXPECT_THAT(Message(m.status()), HasSubstr("/nonexistent/weir-bench-queries.txt"));
  }
}

// The share of draws in [first, last) of the questions, or misses.
struct Tally {
  uint64_t n = 0, miss = 0, tagged = 0, tcp = 0, ecs = 0, weight = 0, edns = 0;
  std::vector<uint64_t> per_question;
};
Tally DrawMany(const QueryMix& m, uint64_t n, uint64_t seed) {
  Tally t;
  t.per_question.assign(m.questions().size(), 0);
  std::mt19937_64 rng(seed);
  uint64_t cursor = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const Draw d = m.Next(rng, &cursor);
    ++t.n;
    if (d.question == kMiss) {
      ++t.miss;
    } else {
      EXPECT_LT(d.question, m.questions().size());
      if (d.question >= m.questions().size()) continue;
      ++t.per_question[d.question];
      if (m.questions()[d.question].tagged) ++t.tagged;
    }
    t.tcp += d.tcp;
    t.ecs += d.ecs;
    t.weight += d.weight;
    t.edns += d.edns;
    // ECS and the weight option travel in an OPT record.
    if (d.ecs || d.weight) {
      EXPECT_TRUE(d.edns);
    }
  }
  return t;
}

// Expects count/n within 5 standard deviations of p.
void ExpectFraction(uint64_t count, uint64_t n, double p, const char* what) {
  const double sigma = std::sqrt(p * (1 - p) / static_cast<double>(n));
  EXPECT_NEAR(static_cast<double>(count) / static_cast<double>(n), p, 5 * sigma + 1e-12) << what;
}

// A query file's repeated lines are one question each, sent in the file's
// order; --queries-weighted makes them weighted names.
TEST(QueryMixBuildTest, QueryFileLinesRepeatQuestionsInOrder) {
  const fs::path dir = fs::temp_directory_path() / ("weir-bench-qm-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / "q.txt";
  std::ofstream(file) << "b.example A\na.example A\nB.Example. A\na.example AAAA\nb.example\n";
  for (bool weighted : {false, true}) {
    Options o;
    o.queries_file = file.string();
    o.queries_weighted = weighted;
    auto m = QueryMix::Build(o);
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_EQ(m->questions().size(), 3u);
    EXPECT_EQ(m->questions()[0].text, "b.example.");
    EXPECT_EQ(m->questions()[1].text, "a.example.");
    EXPECT_EQ(m->questions()[2].qtype, 28);
    for (const Question& q : m->questions()) EXPECT_EQ(q.tagged, weighted);
    EXPECT_EQ(m->has_tagged(), weighted);
    std::mt19937_64 rng(1);
    uint64_t cursor = 0;
    std::vector<uint32_t> order;
    for (int i = 0; i < 10; ++i) order.push_back(m->Next(rng, &cursor).question);
    EXPECT_EQ(order, (std::vector<uint32_t>{0, 1, 0, 2, 0, 0, 1, 0, 2, 0}));
  }
  fs::remove_all(dir);
}

TEST(QueryMixBuildTest, DefaultTaggedFractionIsATenthWithBothKinds) {
  Options o;
  o.names = 100;
  o.tagged_names = {"x.cdn.example."};
  auto m = QueryMix::Build(o);
  ASSERT_TRUE(m.ok()) << m.status();
  const Tally t = DrawMany(*m, 200000, 1);
  ExpectFraction(t.tagged, t.n, 0.1, "tagged");
  EXPECT_EQ(t.miss, 0u);
}

TEST(QueryMixBuildTest, DefaultTaggedFractionIsOneWithTaggedNamesOnly) {
  Options o;
  o.names = 0;
  o.tagged_zone = "tz.example";
  o.tagged_count = 4;
  auto m = QueryMix::Build(o);
  ASSERT_TRUE(m.ok()) << m.status();
  const Tally t = DrawMany(*m, 20000, 1);
  EXPECT_EQ(t.tagged, t.n);
  for (uint64_t c : t.per_question) ExpectFraction(c, t.n, 0.25, "each tagged name");
}

TEST(QueryMixBuildTest, TaggedOnlyLeavesRoomForMisses) {
  Options o;
  o.names = 0;
  o.tagged_names = {"x.cdn.example."};
  o.miss_fraction = 0.3;
  auto m = QueryMix::Build(o);
  ASSERT_TRUE(m.ok()) << m.status();
  const Tally t = DrawMany(*m, 100000, 2);
  EXPECT_EQ(t.tagged + t.miss, t.n);
  ExpectFraction(t.miss, t.n, 0.3, "miss");
}

TEST(QueryMixBuildTest, NoTaggedNamesNoTaggedDraws) {
  Options o;
  o.names = 10;
  auto m = QueryMix::Build(o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE(m->has_tagged());
  const Tally t = DrawMany(*m, 10000, 1);
  EXPECT_EQ(t.tagged, 0u);
}

TEST(QueryMixBuildTest, TaggedFractionWithoutTaggedNamesIsAnError) {
  Options o;
  o.names = 10;
  o.tagged_fraction = 0.2;
  auto m = QueryMix::Build(o);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(Message(m.status()), HasSubstr("--tagged-fraction"));
  // 0 is allowed: nothing is sent to them anyway.
  o.tagged_fraction = 0;
  EXPECT_TRUE(QueryMix::Build(o).ok());
}

TEST(QueryMixBuildTest, TaggedFractionBelowOneWithoutOrdinaryNamesIsAnError) {
  Options o;
  o.names = 0;
  o.tagged_names = {"x.cdn.example."};
  o.tagged_fraction = 0.5;
  EXPECT_FALSE(QueryMix::Build(o).ok());
  o.miss_fraction = 0.5;  // the rest are misses
  EXPECT_TRUE(QueryMix::Build(o).ok());
}

// ---------------------------------------------------------------- Next

TEST(QueryMixNextTest, FractionsOfEachChoice) {
  Options o;
  o.names = 50;
  o.tagged_names = {"x.cdn.example.", "y.cdn.example."};
  o.miss_fraction = 0.1;
  o.tagged_fraction = 0.2;
  o.tcp_fraction = 0.3;
  o.ecs_fraction = 0.05;
  o.weight_fraction = 0.02;
  o.edns_fraction = 0.4;
  auto m = QueryMix::Build(o);
  ASSERT_TRUE(m.ok()) << m.status();
  const Tally t = DrawMany(*m, 200000, 12345);
  ExpectFraction(t.miss, t.n, 0.1, "miss");
  ExpectFraction(t.tagged, t.n, 0.2, "tagged");
  ExpectFraction(t.tcp, t.n, 0.3, "tcp");
  ExpectFraction(t.ecs, t.n, 0.05, "ecs");
  ExpectFraction(t.weight, t.n, 0.02, "weight");
  // EDNS by itself, or because of ECS or the weight option.
  ExpectFraction(t.edns, t.n, 1 - (1 - 0.4) * (1 - 0.05) * (1 - 0.02), "edns");
  // Ordinary names get the rest, uniformly (Zipf 0).
  const uint64_t ordinary = t.n - t.miss - t.tagged;
  ExpectFraction(ordinary, t.n, 0.7, "ordinary");
  for (size_t i = 0; i < 50; ++i) ExpectFraction(t.per_question[i], t.n, 0.7 / 50, "ordinary name");
  ExpectFraction(t.per_question[50], t.n, 0.1, "tagged x");
  ExpectFraction(t.per_question[51], t.n, 0.1, "tagged y");
}

TEST(QueryMixNextTest, FractionsOfZeroAndOne) {
  Options o;
  o.names = 10;
  o.tcp_fraction = 1;
  o.weight_fraction = 1;
  auto m = QueryMix::Build(o);
  ASSERT_TRUE(m.ok());
  const Tally t = DrawMany(*m, 10000, 5);
  EXPECT_EQ(t.tcp, t.n);
  EXPECT_EQ(t.weight, t.n);
  EXPECT_EQ(t.edns, t.n);
  EXPECT_EQ(t.ecs, 0u);
  EXPECT_EQ(t.miss, 0u);
}

TEST(QueryMixNextTest, ZipfExponentOne) {
  Options o;
  o.names = 1000;
  o.zipf = 1;
  auto m = QueryMix::Build(o);
  ASSERT_TRUE(m.ok()) << m.status();
  const Tally t = DrawMany(*m, 200000, 99);
  double h = 0;
  for (int i = 1; i <= 1000; ++i) h += 1.0 / i;  // H(1000) = 7.485...
  const double p0 = static_cast<double>(t.per_question[0]) / static_cast<double>(t.n);
  const double p1 = static_cast<double>(t.per_question[1]) / static_cast<double>(t.n);
  EXPECT_NEAR(p0, 1 / h, 0.01);  // 13.4 %
  EXPECT_NEAR(p1, 0.5 / h, 0.01);
  EXPECT_NEAR(p0 / p1, 2.0, 0.15);
  // The tail: name 999 is drawn about 1/1000 as often as name 0.
  EXPECT_LT(t.per_question[999], t.per_question[0] / 100);
  ExpectFraction(t.per_question[9], t.n, 0.1 / h, "name 9");
}

TEST(QueryMixNextTest, ZipfExponentZeroIsUniform) {
  Options o;
  o.names = 1000;
  o.zipf = 0;
  auto m = QueryMix::Build(o);
  ASSERT_TRUE(m.ok()) << m.status();
  const Tally t = DrawMany(*m, 200000, 99);
  uint64_t lo = UINT64_MAX, hi = 0;
  for (uint64_t c : t.per_question) {
    lo = std::min(lo, c);
    hi = std::max(hi, c);
  }
  // 200 expected each; sigma about 14.
  EXPECT_GT(lo, 130u);
  EXPECT_LT(hi, 270u);
}

class QueryFileMixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "weir_query_mix_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    tmp_ = tmpl;
  }
  void TearDown() override { fs::remove_all(tmp_); }
  std::string Write(const std::string& name, const std::string& text) {
    const fs::path p = tmp_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  fs::path tmp_;
};

TEST_F(QueryFileMixTest, QueriesAreDrawnInOrderCyclically) {
  Options o;
  o.queries_file = Write("q.txt", "a.example A\nb.example AAAA\n# skip\nc.example MX\n");
  o.miss_fraction = 0.5;  // a query file is replayed as it is: no misses
  o.tcp_fraction = 0.5;
  auto m = QueryMix::Build(o);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->questions().size(), 3u);
  EXPECT_FALSE(m->has_tagged());
  EXPECT_EQ(m->questions()[1].qtype, 28);
  std::mt19937_64 rng(1);
  uint64_t cursor = 0;
  uint64_t tcp = 0;
  for (uint32_t i = 0; i < 3000; ++i) {
    const Draw d = m->Next(rng, &cursor);
    ASSERT_EQ(d.question, i % 3) << i;
    tcp += d.tcp;
  }
  EXPECT_EQ(cursor, 3000u);
  ExpectFraction(tcp, 3000, 0.5, "tcp");
  // Each thread has its own cursor.
  uint64_t other = 2;
  EXPECT_EQ(m->Next(rng, &other).question, 2u);
  EXPECT_EQ(m->Next(rng, &other).question, 0u);
}

TEST_F(QueryFileMixTest, BadQueryFileNamesTheFileAndLine) {
  Options o;
  o.queries_file = Write("bad.txt", "a.example A\nb.example NOPE\n");
  auto m = QueryMix::Build(o);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(Message(m.status()), HasSubstr("bad.txt:2: unknown type 'NOPE'"));
}

TEST(QueryMixNextTest, SameSeedSameSequence) {
  Options o;
  o.names = 100;
  o.zipf = 0.8;
  o.tagged_names = {"x.cdn.example."};
  o.miss_fraction = 0.1;
  o.tcp_fraction = 0.2;
  o.ecs_fraction = 0.3;
  o.weight_fraction = 0.1;
  o.edns_fraction = 0.5;
  auto m = QueryMix::Build(o);
  ASSERT_TRUE(m.ok());
  auto run = [&](uint64_t seed) {
    std::mt19937_64 rng(seed);
    uint64_t cursor = 0;
    std::vector<std::tuple<uint32_t, bool, bool, bool, bool>> out;
    for (int i = 0; i < 5000; ++i) {
      const Draw d = m->Next(rng, &cursor);
      out.emplace_back(d.question, d.tcp, d.edns, d.ecs, d.weight);
    }
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

// ---------------------------------------------------------------- WriteQuery

dns::NameKey Key(const char* text) {
  dns::NameKey k;
  EXPECT_TRUE(dns::NameKeyFromText(text, &k)) << text;
  return k;
}

TEST(WriteQueryTest, PlainQuery) {
  const dns::NameKey name = Key("www.example.com.");
  uint8_t buf[512];
  const size_t n = WriteQuery(0x1234, name.span(), 28, QueryOptions{}, buf, sizeof buf);
  ASSERT_GT(n, 0u);
  EXPECT_EQ(n, 12 + name.len + 4u);  // header, question, nothing else
  dns::Query q;
  ASSERT_EQ(dns::ParseQuery({buf, n}, dns::ParseOptions{}, &q), dns::ParseError::kOk);
  EXPECT_EQ(q.id, 0x1234);
  EXPECT_TRUE(q.rd());
  EXPECT_EQ(q.flags & dns::flag::kQr, 0);
  EXPECT_EQ(q.opcode(), 0);
  EXPECT_EQ(q.qtype, 28);
  EXPECT_EQ(q.qclass, 1);
  EXPECT_EQ(q.qname, name);
  EXPECT_FALSE(q.edns.present);
}

TEST(WriteQueryTest, EdnsSize) {
  const dns::NameKey name = Key("n1.bench.test.");
  QueryOptions qo;
  qo.edns = true;
  qo.edns_size = 4096;
  uint8_t buf[512];
  const size_t n = WriteQuery(7, name.span(), 1, qo, buf, sizeof buf);
  ASSERT_GT(n, 0u);
  dns::Query q;
  ASSERT_EQ(dns::ParseQuery({buf, n}, dns::ParseOptions{}, &q), dns::ParseError::kOk);
  EXPECT_TRUE(q.edns.present);
  EXPECT_EQ(q.edns.udp_size, 4096);
  EXPECT_EQ(q.edns.version, 0);
  EXPECT_FALSE(q.edns.do_bit);
  EXPECT_FALSE(q.edns.has_ecs);
  EXPECT_FALSE(q.edns.has_weight);
  EXPECT_EQ(q.udp_limit(), 4096);
}

TEST(WriteQueryTest, EcsAndEmptyWeightOption) {
  const dns::NameKey name = Key("x.cdn.example.");
  dns::ClientSubnet ecs;
  const uint8_t addr[4] = {192, 0, 2, 77};
  ASSERT_TRUE(dns::MakeClientSubnet(addr, 24, &ecs));
  QueryOptions qo;
  qo.edns = true;
  qo.edns_size = 1232;
  qo.ecs = &ecs;
  qo.weight = true;
  uint8_t buf[512];
  const size_t n = WriteQuery(9, name.span(), 1, qo, buf, sizeof buf);
  ASSERT_GT(n, 0u);
  dns::Query q;
  ASSERT_EQ(dns::ParseQuery({buf, n}, dns::ParseOptions{}, &q), dns::ParseError::kOk);
  EXPECT_TRUE(q.rd());
  EXPECT_EQ(q.flags & dns::flag::kQr, 0);
  EXPECT_EQ(q.edns.udp_size, 1232);
  ASSERT_TRUE(q.edns.has_ecs);
  EXPECT_EQ(q.edns.ecs, ecs);
  EXPECT_EQ(q.edns.ecs.source_prefix, 24);
  EXPECT_EQ(q.edns.ecs.scope_prefix, 0);
  ASSERT_TRUE(q.edns.has_weight);
  EXPECT_EQ(q.edns.weight_len, 0);
}

TEST(WriteQueryTest, IPv6EcsAndAnotherWeightOptionCode) {
  const dns::NameKey name = Key("x.cdn.example.");
  dns::ClientSubnet ecs;
  const uint8_t addr[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0xd, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 1};
  ASSERT_TRUE(dns::MakeClientSubnet(addr, 56, &ecs));
  QueryOptions qo;
  qo.edns = true;
  qo.ecs = &ecs;
  qo.weight = true;
  qo.weight_option_code = 65100;
  uint8_t buf[512];
  const size_t n = WriteQuery(9, name.span(), 28, qo, buf, sizeof buf);
  ASSERT_GT(n, 0u);
  dns::Query q;
  ASSERT_EQ(dns::ParseQuery({buf, n}, dns::ParseOptions{.weight_option_code = 65100}, &q),
            dns::ParseError::kOk);
  ASSERT_TRUE(q.edns.has_ecs);
  EXPECT_EQ(q.edns.ecs, ecs);
  EXPECT_TRUE(q.edns.has_weight);
  // Under the default code the option is an unknown one.
  ASSERT_EQ(dns::ParseQuery({buf, n}, dns::ParseOptions{}, &q), dns::ParseError::kOk);
  EXPECT_FALSE(q.edns.has_weight);
}

TEST(WriteQueryTest, OptionsAreIgnoredWithoutEdns) {
  const dns::NameKey name = Key("x.cdn.example.");
  dns::ClientSubnet ecs;
  const uint8_t addr[4] = {192, 0, 2, 77};
  ASSERT_TRUE(dns::MakeClientSubnet(addr, 24, &ecs));
  QueryOptions qo;
  qo.ecs = &ecs;
  qo.weight = true;
  uint8_t buf[512];
  const size_t n = WriteQuery(9, name.span(), 1, qo, buf, sizeof buf);
  ASSERT_GT(n, 0u);
  dns::Query q;
  ASSERT_EQ(dns::ParseQuery({buf, n}, dns::ParseOptions{}, &q), dns::ParseError::kOk);
  EXPECT_FALSE(q.edns.present);
}

TEST(WriteQueryTest, TooSmallBufferGivesZero) {
  const dns::NameKey name = Key("www.example.com.");
  QueryOptions qo;
  qo.edns = true;
  uint8_t buf[512];
  const size_t plain = 12 + name.len + 4u;
  EXPECT_EQ(WriteQuery(1, name.span(), 1, QueryOptions{}, buf, plain - 1), 0u);
  EXPECT_EQ(WriteQuery(1, name.span(), 1, QueryOptions{}, buf, plain), plain);
  EXPECT_EQ(WriteQuery(1, name.span(), 1, qo, buf, plain + 5), 0u);  // no room for the OPT RR
  EXPECT_EQ(WriteQuery(1, name.span(), 1, qo, buf, 11), 0u);
}

}  // namespace
}  // namespace weir::bench
