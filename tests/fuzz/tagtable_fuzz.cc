// Fuzzes the tag text parser and the suffix lookup: the first input line
// (up to 255 bytes) is also used as a raw qname key, malformed or not.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

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
  (void)(*t)->Lookup({data, n});
  return 0;
}
