// Fuzzes what the control channel parses (docs/operator-guide.md#cache-control):
// a request's key=value arguments (ControlArgs, as every node command reads
// them), a node's reply JSON as weir-mgmt embeds it in `weirctl --all`'s
// (ParseNodeJson), with the metric samples `weirctl stats` shows as a table
// and JSON, and the type mnemonics of `--type`. Byte 0 picks the parser.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "weir/common/prometheus.h"
#include "weir/dns/message.h"
#include "weir/mgmt/control.h"
#include "weir/mgmt/structured_reply.h"

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
      using weir::mgmt::Json;
      // A node's reply: a document or null; what weir-mgmt writes of it
      // reads back the same.
      const Json doc = weir::mgmt::ParseNodeJson(in);
      const Json back =
          weir::mgmt::ParseNodeJson(weir::mgmt::StructuredReply::DumpJson(Json{{"result", doc}}));
      FUZZ_CHECK(back.is_object() && back["result"] == doc);
      // The same bytes as samples, one a line: NAME[ LABEL_VALUE]. A sample
      // the writer refuses (an invalid name) fails the whole set.
      weir::common::PrometheusWriter w;
      size_t start = 0;
      while (start < in.size()) {
        const size_t nl = std::min(in.find('\n', start), in.size());
        const std::string_view line = in.substr(start, nl - start);
        const size_t space = std::min(line.find(' '), line.size());
        const std::string_view value = space < line.size() ? line.substr(space + 1) : std::string_view();
        w.Gauge(line.substr(0, space), "fuzz").Add({{"label", value}}, static_cast<double>(line.size()) / 3);
        start = nl + 1;
      }
      auto samples = w.Samples();
      auto text = w.Render();
      FUZZ_CHECK(samples.ok() == text.ok());
      if (samples.ok()) {
        const weir::mgmt::ControlReply r = weir::mgmt::MetricsReply(*samples).Render();
        FUZZ_CHECK(r.ok && r.text.rfind("METRIC", 0) == 0);
        const Json rows = weir::mgmt::ParseNodeJson(r.json);
        FUZZ_CHECK(rows.is_array() && rows.size() == samples->size());
        for (size_t i = 0; i < samples->size(); ++i) FUZZ_CHECK(rows[i]["name"] == (*samples)[i].name);
      }
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
