// Fuzzes the tag text parser and the suffix lookup: the first input line
// (up to 255 bytes) is also used as a raw qname key, malformed or not.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string_view>
#include <vector>

#include "weir/partitions/tagtable.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 16384) return 0;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto t = weir::partitions::TagTable::FromText(text);
  if (!t.ok()) {
    if (t.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  // Every tag reads back from its canonical text.
  for (const auto& tag : (*t)->tags()) {
    auto again = weir::partitions::ParseTagLine(weir::partitions::FormatTag(tag));
    if (!again.ok() || !(again->suffix == tag.suffix) || again->level != tag.level) std::abort();
    // A tag's own suffix finds itself.
    const weir::partitions::Tag* found = (*t)->Lookup(tag.suffix.span());
    if (found == nullptr || !(found->suffix == tag.suffix)) std::abort();
  }
  const size_t n = size < 255 ? size : 255;
  const std::span<const uint8_t> q(data, n);
  const weir::partitions::Tag* plain = (*t)->Lookup(q);
  // Label starts as the caller gives them: arbitrary bytes (a wrong start
  // may give a wrong answer, never a read outside the name), then the
  // name's own, which must agree with the walk, alone and in a burst.
  const size_t m = size - n < 128 ? size - n : 128;
  (void)(*t)->Lookup(q, {data + n, m});
  std::vector<uint8_t> starts;
  for (size_t pos = 0; pos < n; pos += 1 + data[pos]) {
    starts.push_back(static_cast<uint8_t>(pos));
    if (data[pos] == 0 || starts.size() == 128) break;
  }
  if ((*t)->Lookup(q, starts) != plain && !starts.empty() && starts.back() + size_t{1} == n &&
      data[n - 1] == 0)
    std::abort();
  const std::span<const uint8_t> names[2] = {q, q};
  const std::span<const uint8_t> given[2] = {starts, {data + n, m}};
  const weir::partitions::Tag* out[2];
  (*t)->LookupBurst(names, given, out, 2);
  (*t)->LookupBurst(names, nullptr, out, 2);
  if (out[0] != plain || out[1] != plain) std::abort();
  return 0;
}
