#include "weights_file.h"

#include <set>
#include <tuple>

#include "weir/common/text.h"

namespace weir::bench {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

absl::StatusOr<std::vector<WeightLine>> ParseWeightsFile(std::string_view text, std::string_view file_name) {
  std::vector<WeightLine> out;
  std::set<std::tuple<std::string, std::string, std::string>> seen;
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (const size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = Trim(line);
    if (line.empty()) continue;
    auto fail = [&](std::string_view why) {
      return absl::InvalidArgumentError(common::Cat(file_name, ":", line_no, ": ", why));
    };
    std::string_view f[4];
    size_t n = 0;
    for (std::string_view rest = line;; ++n) {
      const size_t comma = rest.find(',');
      if (n == 4) return fail("expected 4 fields name,city,address,weight");
      f[n] = Trim(rest.substr(0, comma));
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
    if (!partitions::ParseIp(f[2], &w.address)) return fail(common::Cat("invalid address '", f[2], "'"));
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
    if (!seen.emplace(name_text, w.city, partitions::IpToString(w.address)).second) {
      return fail(common::Cat("address ", f[2], " given twice for ", name_text, " in city ", w.city));
    }
    out.push_back(std::move(w));
  }
  if (out.empty()) return absl::InvalidArgumentError(common::Cat(file_name, ": no weights in the file"));
  return out;
}

}  // namespace weir::bench
