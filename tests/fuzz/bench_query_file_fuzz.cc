// Fuzzes weir-bench's dnsperf-format query file parser: any input either
// fails with a line-numbered InvalidArgument or gives questions that are
// valid names with known types, at most one per line.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "query_mix.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 65536) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto qs = weir::bench::ParseQueryFile(text, "fuzz.txt");
  if (!qs.ok()) {
    FUZZ_CHECK(qs.status().code() == absl::StatusCode::kInvalidArgument);
    FUZZ_CHECK(qs.status().message().substr(0, 8) == "fuzz.txt");
    return 0;
  }
  size_t lines = 1;
  for (char c : text) lines += c == '\n';
  FUZZ_CHECK(!qs->empty());
  FUZZ_CHECK(qs->size() <= lines);
  for (const weir::bench::Question& q : *qs) {
    FUZZ_CHECK(q.qname.len >= 1 && q.qname.len <= weir::dns::kMaxNameWire);
    FUZZ_CHECK(q.qname.bytes[q.qname.len - 1] == 0);
    FUZZ_CHECK(q.qtype != 0);
    FUZZ_CHECK(weir::bench::TypeFromText(weir::bench::TypeToText(q.qtype)) == q.qtype);
    FUZZ_CHECK(!q.tagged);
    FUZZ_CHECK(q.text == weir::dns::NameKeyToText(q.qname.span()));
    FUZZ_CHECK(!q.text.empty() && q.text.back() == '.');
  }
  return 0;
}
