// Fuzzes the query parser's fast path against the reference: on every input
// dns::ParseQuery (the fast path, ParseQueryFull behind it) and
// dns::ParseQueryFull give the same verdict and the same Query fields, the
// fast path alone takes only what the reference accepts and fills it the
// same, and the answers written from the two parses are the same bytes.
// Each input is parsed with the default weight option code and with the
// cookie's code (10) as the weight option, which the full parser's order
// of checks makes a weight option.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>

#include "../dns/query_agreement.h"
#include "fuzz_check.h"
#include "weir/dns/error.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"
#include "weir/dns/writer.h"

namespace {

using namespace weir::dns;

// The largest response: a TCP message.
uint8_t g_reference_answer[65535];
uint8_t g_answer[65535];

void FailIfDifferent(const std::string& field, const char* parser) {
  if (field.empty()) return;
  std::fprintf(stderr, "%s and ParseQueryFull differ in %s\n", parser, field.c_str());
  std::abort();
}

// The answer the fast path would send: BADVERS for a bad EDNS version, else
// NOERROR with the ECS echo and an empty weight option when asked for.
size_t Answer(std::span<const uint8_t> pkt, const ParseOptions& opts, const Query& q, bool badvers,
              uint8_t* out) {
  ResponseWriter w(out, 65535);
  FUZZ_CHECK(w.BeginResponse(pkt, q, Rcode::kNoError) == ParseError::kOk);
  if (q.edns.present) {
    FUZZ_CHECK(w.BeginOpt(1232, q.edns.do_bit, badvers ? 1 : 0) == ParseError::kOk);
    if (!badvers && q.edns.has_ecs) {
      ClientSubnet echo = q.edns.ecs;
      echo.scope_prefix = echo.source_prefix;
      FUZZ_CHECK(w.AddEcs(echo) == ParseError::kOk);
    }
    if (!badvers && q.edns.has_weight) {
      FUZZ_CHECK(w.AddWeights(opts.weight_option_code, {}) == ParseError::kOk);
    }
  }
  return w.Finish(q.udp_limit());
}

void Check(std::span<const uint8_t> pkt, const ParseOptions& opts) {
  Query reference, parsed, fast;
  testing::Scribble(&reference);
  testing::Scribble(&parsed);
  testing::Scribble(&fast);
  const ParseError e = ParseQueryFull(pkt, opts, &reference);
  const ParseError got = ParseQuery(pkt, opts, &parsed);
  FUZZ_CHECK(e < ParseError::kCount);
  FUZZ_CHECK(got == e);
  FailIfDifferent(testing::QueryDifference(e, reference, parsed), "ParseQuery");
  if (ParseQueryFast(pkt, opts, &fast)) {
    FUZZ_CHECK(e == ParseError::kOk);
    FailIfDifferent(testing::QueryDifference(e, reference, fast), "ParseQueryFast");
  }
  if (e != ParseError::kOk && e != ParseError::kBadEdnsVersion) return;
  FUZZ_CHECK(testing::QuestionParsed(reference));
  const bool badvers = e == ParseError::kBadEdnsVersion;
  const size_t a = Answer(pkt, opts, reference, badvers, g_reference_answer);
  const size_t b = Answer(pkt, opts, parsed, badvers, g_answer);
  FUZZ_CHECK(a == b);
  FUZZ_CHECK(std::memcmp(g_reference_answer, g_answer, a) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> pkt(data, size);
  Check(pkt, ParseOptions{});
  Check(pkt, ParseOptions{option::kCookie});
  return 0;
}
