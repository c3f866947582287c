#include "weights_file.h"

#include <set>
#include <tuple>

#include "weir/common/text.h"

namespace weir::bench {

absl::StatusOr<std::vector<WeightLine>> ParseWeightsFile(std::string_view text, std::string_view file_name) {
  std::vector<WeightLine> out;
  std::set<std::tuple<std::string, std::string, std::string>> seen;
  absl::Status error;
  common::ForEachLine(text, [&](int line_no, std::string_view line) {
    auto fail = [&](std::string_view why) {
      error = absl::InvalidArgumentError(common::Cat(file_name, ":", line_no, ": ", why));
      return false;
    };
    std::string_view f[4];
    size_t n = 0;
    for (std::string_view rest = line;; ++n) {
      const size_t comma = rest.find(',');
      if (n == 4) return fail("expected 4 fields name,city,address,weight");
      f[n] = common::Trim(rest.substr(0, comma));
      if (comma == std::string_view::npos) {
        ++n;
        break;
      }
      rest = rest.substr(comma + 1);
    }
    if (n != 4) return fail("expected 4 fields name,city,address,weight");
    WeightLine w;
    // An empty field would parse as the root: a line missing its name, not a weight for ".".
    if (f[0].empty()) return fail("empty name");
    if (!dns::NameKeyFromText(f[0], &w.name)) return fail(common::Cat("invalid name '", f[0], "'"));
    if (f[1].empty()) return fail("empty city");
    w.city = std::string(f[1]);
    if (!common::ParseIp(f[2], &w.address)) return fail(common::Cat("invalid address '", f[2], "'"));
    uint64_t v = 0;
    for (char c : f[3]) {
      if (c < '0' || c > '9' || v > 1000000)
        return fail(common::Cat("weight '", f[3], "' is not 1..1000000"));
      v = v * 10 + static_cast<uint64_t>(c - '0');
    }
    if (f[3].empty() || v == 0 || v > 1000000)
      return fail(common::Cat("weight '", f[3], "' is not 1..1000000"));
    w.weight = static_cast<uint32_t>(v);
    const std::string name_text = dns::NameKeyToText(w.name.span());
    if (!seen.emplace(name_text, w.city, common::IpToString(w.address)).second) {
      return fail(common::Cat("address ", f[2], " given twice for ", name_text, " in city ", w.city));
    }
    out.push_back(std::move(w));
    return true;
  });
  if (!error.ok()) return error;
  if (out.empty()) return absl::InvalidArgumentError(common::Cat(file_name, ": no weights in the file"));
  return out;
}

}  // namespace weir::bench
