// Fuzzes the query path as the fast path runs it: ParseQuery, then (when the
// query is answerable) a response written with ResponseWriter and parsed back.
// Any broken invariant aborts, so libFuzzer reports it like a crash.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "fuzz_check.h"
#include "weir/dns/error.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"
#include "weir/dns/writer.h"

namespace {

using namespace weir::dns;

// The largest response: a TCP message.
uint8_t g_out[65535];

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> pkt(data, size);
  const ParseOptions opts;
  Query q;
  const ParseError e = ParseQuery(pkt, opts, &q);
  FUZZ_CHECK(e < ParseError::kCount);
  FUZZ_CHECK(!ParseErrorName(e).empty());
  if (e != ParseError::kOk && e != ParseError::kBadEdnsVersion) return 0;

  // The question is uncompressed and its key is in lower case.
  FUZZ_CHECK(q.qname.len >= 1 && q.qname.len <= kMaxNameWire);
  FUZZ_CHECK(q.question_end == kHeaderSize + q.qname.len + 4);
  FUZZ_CHECK(q.question_end <= size);
  FUZZ_CHECK(q.qname.bytes[q.qname.len - 1] == 0);
  for (size_t i = 0; i < q.qname.len; ++i) FUZZ_CHECK(!(q.qname.bytes[i] >= 'A' && q.qname.bytes[i] <= 'Z'));
  FUZZ_CHECK(q.udp_limit() >= kMaxUdpWithoutEdns);
  if (e == ParseError::kBadEdnsVersion) FUZZ_CHECK(q.edns.present && q.edns.version != 0);
  if (q.edns.has_weight) FUZZ_CHECK(size_t{q.edns.weight_offset} + q.edns.weight_len <= size);
  if (q.edns.has_cookie) FUZZ_CHECK(size_t{q.edns.cookie_offset} + q.edns.cookie_len <= size);

  // Answer it: the BADVERS form for a bad EDNS version, else NOERROR with
  // the ECS echo and an empty weight option when asked for.
  ResponseWriter w(g_out, sizeof g_out);
  FUZZ_CHECK(w.BeginResponse(pkt, q, Rcode::kNoError) == ParseError::kOk);
  const bool badvers = e == ParseError::kBadEdnsVersion;
  ClientSubnet echo = q.edns.ecs;
  if (q.edns.present) {
    FUZZ_CHECK(w.BeginOpt(1232, q.edns.do_bit, badvers ? 1 : 0) == ParseError::kOk);
    if (!badvers && q.edns.has_ecs) {
      echo.scope_prefix = echo.source_prefix;
      FUZZ_CHECK(w.AddEcs(echo) == ParseError::kOk);
    }
    if (!badvers && q.edns.has_weight) {
      FUZZ_CHECK(w.AddWeights(opts.weight_option_code, {}) == ParseError::kOk);
    }
  }
  const size_t len = w.Finish(q.udp_limit());
  FUZZ_CHECK(len <= q.udp_limit());

  Message m;
  const ParseError re = m.Parse({g_out, len}, opts);
  if (re != ParseError::kOk) {
    std::fprintf(stderr, "re-parse failed: %s\n", std::string(ParseErrorName(re)).c_str());
    std::abort();
  }
  FUZZ_CHECK(m.id() == q.id);
  FUZZ_CHECK((m.flags() & flag::kQr) != 0);
  FUZZ_CHECK((m.flags() & flag::kOpcodeMask) == (q.flags & flag::kOpcodeMask));
  FUZZ_CHECK(m.qname() == q.qname);
  FUZZ_CHECK(m.qtype() == q.qtype && m.qclass() == q.qclass);
  FUZZ_CHECK(m.count(Section::kAnswer) == 0 && m.count(Section::kAuthority) == 0);
  FUZZ_CHECK(m.edns().present == q.edns.present);
  if (badvers) FUZZ_CHECK(m.rcode() == static_cast<uint16_t>(Rcode::kBadVers));
  if (!badvers && q.edns.has_ecs) FUZZ_CHECK(m.edns().has_ecs && m.edns().ecs == echo);
  if (!badvers && q.edns.has_weight) FUZZ_CHECK(m.edns().has_weight && m.edns().weight_len == 0);
  // The client's spelling of the question is echoed byte for byte.
  for (size_t i = kHeaderSize; i < q.question_end; ++i) FUZZ_CHECK(g_out[i] == data[i]);
  return 0;
}
