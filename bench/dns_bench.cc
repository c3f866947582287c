// Micro-benchmarks of the wire codec on the cache-hit path: parse a query and
// compute its cache key, write a 4-address answer, parse an upstream answer.
// Figures and the exact commands are in bench/RESULTS.md ("## dns").
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "weir/dns/error.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"
#include "weir/dns/writer.h"

namespace weir::dns {
namespace {

// "dig www.example.com A" as BIND dig 9.18 sends it: RD and AD set, EDNS with
// a 1232-byte buffer and an 8-byte client cookie (56 octets; compare
// tests/dns/golden/q_dig_plain.bin).
const std::vector<uint8_t> kDigQuery = {
    0x7c, 0xa6, 0x01, 0x20, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,             // header
    0x03, 'w',  'w',  'w',  0x07, 'e',  'x',  'a',  'm',  'p',  'l',  'e',  0x03, 'c',  // qname
    'o',  'm',  0x00, 0x00, 0x01, 0x00, 0x01,                                           // ... A IN
    0x00, 0x00, 0x29, 0x04, 0xd0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0c,                   // OPT
    0x00, 0x0a, 0x00, 0x08, 0x2f, 0x9e, 0xb6, 0x69, 0x89, 0xa6, 0xb2, 0x3c};            // cookie

// The same question without EDNS, as kdig sends it by default (33 octets).
const std::vector<uint8_t> kPlainQuery = {0x7c, 0xa6, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,
                                          0x00, 0x03, 'w',  'w',  'w',  0x07, 'e',  'x',  'a',  'm',  'p',
                                          'l',  'e',  0x03, 'c',  'o',  'm',  0x00, 0x00, 0x01, 0x00, 0x01};

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "dns_bench setup failed: %s\n", what);
    std::abort();
  }
}

// Four A records for www.example.com as the cache stores them.
struct CachedAnswer {
  uint8_t blob[256];
  size_t len = 0;
  uint16_t ttl_offsets[4];
};
CachedAnswer MakeCachedAnswer(const NameKey& qname) {
  CachedAnswer c;
  RecordEncoder enc(c.blob, sizeof c.blob, qname.span());
  for (uint8_t i = 0; i < 4; ++i) {
    const uint8_t addr[4] = {192, 0, 2, static_cast<uint8_t>(i + 1)};
    Check(enc.Append(qname.span(), type::kA, klass::kIn, 300, addr, &c.ttl_offsets[i]) == ParseError::kOk,
          "encode");
  }
  c.len = enc.size();
  return c;
}

// ParseQuery of `packet` with its cache key, over and over; returns the
// parse of the last round for the caller to check.
Query ParseQueryLoop(benchmark::State& state, const std::vector<uint8_t>& packet, const char* what) {
  const ParseOptions opts;
  Query q;
  for (auto _ : state) {
    const ParseError e = ParseQuery(packet, opts, &q);
    benchmark::DoNotOptimize(e);
    benchmark::DoNotOptimize(q.qname);
  }
  Check(ParseQuery(packet, opts, &q) == ParseError::kOk, what);
  state.SetItemsProcessed(state.iterations());
  return q;
}

void BM_ParseQueryAndKey(benchmark::State& state) {
  Check(ParseQueryLoop(state, kDigQuery, "dig query").edns.has_cookie, "dig query cookie");
}
BENCHMARK(BM_ParseQueryAndKey);

void BM_ParseQueryNoEdns(benchmark::State& state) {
  Check(!ParseQueryLoop(state, kPlainQuery, "plain query").edns.present, "plain query without EDNS");
}
BENCHMARK(BM_ParseQueryNoEdns);

void BM_WriteResponse4A(benchmark::State& state) {
  Query q;
  Check(ParseQuery(kDigQuery, ParseOptions{}, &q) == ParseError::kOk, "dig query");
  const CachedAnswer cached = MakeCachedAnswer(q.qname);
  ClientSubnet ecs;
  const uint8_t client[4] = {198, 51, 100, 77};
  Check(MakeClientSubnet(client, 24, &ecs), "subnet");
  ecs.scope_prefix = 24;
  const uint8_t weights[4] = {10, 20, 30, 40};
  alignas(64) uint8_t buf[1500];
  uint32_t age = 0;
  size_t len = 0;
  for (auto _ : state) {
    ResponseWriter w(buf, sizeof buf);
    w.BeginResponse(kDigQuery, q, Rcode::kNoError);
    w.AppendRecords(Section::kAnswer, {cached.blob, cached.len}, 4, cached.ttl_offsets, age);
    w.BeginOpt(1232, false);
    w.AddEcs(ecs);
    w.AddWeights(kDefaultWeightOptionCode, weights);
    len = w.Finish(q.udp_limit());
    benchmark::DoNotOptimize(len);
    benchmark::ClobberMemory();
    age = (age + 1) & 127;
  }
  Message m;
  Check(m.Parse({buf, len}, ParseOptions{}) == ParseError::kOk && m.count(Section::kAnswer) == 4 &&
            m.edns().has_ecs && m.edns().has_weight,
        "written response");
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * len));
}
BENCHMARK(BM_WriteResponse4A);

void BM_ParseResponse(benchmark::State& state) {
  // An upstream answer: 4 A records, OPT with a 1232-byte buffer.
  Query q;
  Check(ParseQuery(kDigQuery, ParseOptions{}, &q) == ParseError::kOk, "dig query");
  const CachedAnswer cached = MakeCachedAnswer(q.qname);
  uint8_t buf[512];
  ResponseWriter w(buf, sizeof buf);
  Check(w.BeginResponse(kDigQuery, q, Rcode::kNoError) == ParseError::kOk, "begin");
  Check(w.AppendRecords(Section::kAnswer, {cached.blob, cached.len}, 4, cached.ttl_offsets, 0) ==
            ParseError::kOk,
        "append");
  Check(w.BeginOpt(1232, false) == ParseError::kOk, "opt");
  const size_t len = w.Finish(sizeof buf);
  const ParseOptions opts;
  Message m;
  for (auto _ : state) {
    const ParseError e = m.Parse({buf, len}, opts);
    benchmark::DoNotOptimize(e);
    benchmark::DoNotOptimize(m);
  }
  Check(m.Parse({buf, len}, opts) == ParseError::kOk && m.count(Section::kAnswer) == 4, "parse");
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ParseResponse);

}  // namespace
}  // namespace weir::dns

BENCHMARK_MAIN();
