// Fuzzes what the control channel parses (docs/operator-guide.md#cache-control):
// a request's key=value arguments (ControlArgs, as every node command reads
// them), the metrics text `weirctl stats` turns into a table and JSON, and
// the type mnemonics of `--type`. Byte 0 picks the parser.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "weir/dns/message.h"
#include "weir/mgmt/control.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      // Arguments, one per line, against a fixed set of keys.
      std::vector<std::string> args;
      size_t start = 0;
      while (start <= in.size()) {
        const size_t nl = in.find('\n', start);
        args.emplace_back(
            in.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start));
        if (nl == std::string_view::npos) break;
        start = nl + 1;
      }
      auto a = weir::mgmt::ControlArgs::Parse(args, {"name", "suffix", "partition", "type", "limit"});
      if (a.ok()) {
        (void)a->Number("limit", 1000, 1, 1000000);
        (void)a->Flag("suffix");
        // Every argument it accepted is readable back as given.
        for (const std::string& s : args) {
          const size_t eq = s.find('=');
          FUZZ_CHECK(eq != std::string::npos && a->Get(s.substr(0, eq)) == s.substr(eq + 1));
        }
      }
      break;
    }
    case 1: {
      const std::string json = weir::mgmt::MetricsAsJson(in);
      FUZZ_CHECK(json.size() >= 2 && json.front() == '[' && json.back() == ']');
      const std::string table = weir::mgmt::MetricsAsTable(in);
      FUZZ_CHECK(table.rfind("METRIC", 0) == 0);
      break;
    }
    case 2: {
      const uint16_t t = weir::dns::TypeFromText(in);
      if (t != 0) FUZZ_CHECK(weir::dns::TypeFromText(weir::dns::TypeToText(t)) == t);
      break;
    }
  }
  return 0;
}
