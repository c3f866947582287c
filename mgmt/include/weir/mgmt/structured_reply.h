// A control reply built once, as data: the JSON document `weirctl --json`
// prints, and the layout of the text `weirctl` prints, whose tables and
// lines read that same document. Render() turns it into the ControlReply the
// wire carries (protocol.h: REPLY {"ok", text, json}): both forms come from
// one value, through one renderer, so they cannot disagree.
//
//   StructuredReply r;
//   r.json()["entries"] = Json::array();           // rows: JSON objects
//   r.Table("/entries", {StructuredReply::Field("NAME", "name"), ...});
//   r.Block([](const Json& doc) { return Cat("# ", doc["count"], " entries\n"); });
//   return r.Render();
//
// A document is never written by hand: it is an nlohmann::ordered_json (its
// members stay in the order they were set), dumped compact, invalid UTF-8
// replaced (a DNS name may hold any byte).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "weir/common/prometheus.h"
#include "weir/mgmt/control.h"

namespace weir::mgmt {

using Json = nlohmann::ordered_json;

class StructuredReply {
 public:
  // A table column: its header and the text of a row's cell.
  struct Column {
    std::string header;
    std::function<std::string(const Json& row)> cell;
  };
  // The column showing member `key` of each row (CellText).
  static Column Field(std::string header, std::string key);

  StructuredReply() = default;
  explicit StructuredReply(Json doc) : json_(std::move(doc)) {}

  // The document (an object unless set otherwise).
  Json& json() { return json_; }
  const Json& json() const { return json_; }

  // The text, block after block in the order they are added:
  // prose of the text alone (a heading, a note), as given;
  StructuredReply& Text(std::string text);
  // a table of the array at `pointer` (a JSON pointer: "/entries"; "" for
  // the document itself), a header line then one line per element, columns
  // padded to their widest cell;
  StructuredReply& Table(std::string pointer, std::vector<Column> columns);
  // anything else, made from the document.
  StructuredReply& Block(std::function<std::string(const Json& doc)> render);

  std::string RenderText() const;
  std::string RenderJson() const { return DumpJson(json_); }
  // {ok, RenderText(), RenderJson()}.
  ControlReply Render() const;

  // The compact text of `doc`, invalid UTF-8 replaced by U+FFFD.
  static std::string DumpJson(const Json& doc);

 private:
  Json json_ = Json::object();
  std::vector<std::function<std::string(const Json&)>> blocks_;
};

// A JSON value as a cell or a line shows it: a string as it is, null "-",
// true/false "yes"/"no", numbers as JSON writes them.
std::string CellText(const Json& v);
// The same of member `key` of `object`; "-" when it has none.
std::string CellText(const Json& object, const std::string& key);

// The pieces a cache dump's text shares in both daemons (`cache dump`): the
// heading "# N[+] entries at clock T; <note>" from the document's "count",
// "truncated" and "clock"; the LEFT column (an entry's "ttl_left", or
// "stale <stale_for>s" once expired); the closing hint when --limit cut the
// dump. The caller adds them to its reply in that order.
StructuredReply& CacheDumpHeading(StructuredReply& reply, std::string note);
StructuredReply::Column TtlLeftColumn();
StructuredReply& CacheDumpLimitHint(StructuredReply& reply, bool truncated, size_t limit);

// A time as replies' text shows it: "2025-01-31T12:00:00Z" (UTC); 0 "-".
std::string UtcTimeText(int64_t unix_seconds);

// A table: columns padded to their widest cell, the first row a header.
std::string TextTable(const std::vector<std::vector<std::string>>& rows);

// `weirctl stats`: the samples as JSON, [{"name": ..., "labels": {...},
// "value": ...}, ...] (NaN, +Inf and -Inf, which JSON numbers cannot be, as
// strings), and as a table METRIC (name{label=value,...}) / VALUE.
StructuredReply MetricsReply(std::span<const common::MetricSample> samples);

// A node's reply JSON as weir-mgmt embeds it in `weirctl --all`'s: the
// document, or null when it is empty or not JSON.
Json ParseNodeJson(std::string_view json);

}  // namespace weir::mgmt
