// Fuzzes the mapping of DoH requests to queries (dns::doh::FromHttp). The
// input is "method\ntarget\ncontent-type\nbody" (missing parts are empty;
// the body is the rest, binary). Whatever the request, FromHttp returns:
// an HTTP error with a one-line reason and no query, or a query of at most
// 65535 bytes that the resolver takes as one (a header, QR clear, one
// question); the JSON form's queries parse in full.
#include <cstdint>
#include <span>
#include <string_view>

#include "fuzz_check.h"
#include "weir/dns/doh.h"
#include "weir/dns/error.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"

namespace {

using namespace weir::dns;

std::string_view NextLine(std::string_view* in) {
  const size_t nl = in->find('\n');
  const std::string_view line = in->substr(0, nl);
  *in = nl == std::string_view::npos ? std::string_view() : in->substr(nl + 1);
  return line;
}

void Check(const doh::Request& r) {
  FUZZ_CHECK(r.status == 200 || r.status == 400 || r.status == 404 || r.status == 405 || r.status == 413 ||
             r.status == 415);
  if (r.status != 200) {
    FUZZ_CHECK(!r.error.empty() && r.error.find('\n') == std::string::npos);
    FUZZ_CHECK(r.query.empty());
    return;
  }
  FUZZ_CHECK(r.error.empty());
  FUZZ_CHECK(r.query.size() >= kHeaderSize && r.query.size() <= doh::kMaxMessage);
  FUZZ_CHECK((Load16(r.query.data() + kOffFlags) & flag::kQr) == 0);
  FUZZ_CHECK(Load16(r.query.data() + kOffQdcount) == 1);
  Query q;
  const ParseError e = ParseQuery(r.query, ParseOptions{}, &q);
  FUZZ_CHECK(e != ParseError::kTruncatedHeader && e != ParseError::kNotAQuery &&
             e != ParseError::kNoQuestion && e != ParseError::kMultipleQuestions);
  if (r.json) {
    FUZZ_CHECK(e == ParseError::kOk);
    FUZZ_CHECK(q.id == 0 && q.rd() && q.qclass == klass::kIn && q.qtype != 0 && q.edns.present);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const std::string_view method = NextLine(&in);
  const std::string_view target = NextLine(&in);
  const std::string_view content_type = NextLine(&in);
  const std::span<const uint8_t> body(reinterpret_cast<const uint8_t*>(in.data()), in.size());
  Check(doh::FromHttp(method, target, content_type, body, doh::Paths{}));
  // Both forms on one path, and on the root.
  Check(doh::FromHttp(method, target, content_type, body, doh::Paths{"/dns-query", "/dns-query"}));
  Check(doh::FromHttp(method, target, content_type, body, doh::Paths{"/", "/"}));
  return 0;
}
