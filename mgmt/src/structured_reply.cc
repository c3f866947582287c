#include "weir/mgmt/structured_reply.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <variant>

namespace weir::mgmt {

StructuredReply::Column StructuredReply::Field(std::string header, std::string key) {
  return {std::move(header), [key = std::move(key)](const Json& row) { return CellText(row, key); }};
}

StructuredReply& StructuredReply::Text(std::string text) {
  blocks_.push_back([text = std::move(text)](const Json&) { return text; });
  return *this;
}

StructuredReply& StructuredReply::Table(std::string pointer, std::vector<Column> columns) {
  blocks_.push_back([pointer = Json::json_pointer(pointer), columns = std::move(columns)](const Json& doc) {
    std::vector<std::vector<std::string>> rows(1);
    for (const Column& c : columns) rows[0].push_back(c.header);
    if (doc.contains(pointer)) {
      for (const Json& row : doc.at(pointer)) {
        std::vector<std::string>& cells = rows.emplace_back();
        for (const Column& c : columns) cells.push_back(c.cell(row));
      }
    }
    return TextTable(rows);
  });
  return *this;
}

StructuredReply& StructuredReply::Block(std::function<std::string(const Json& doc)> render) {
  blocks_.push_back(std::move(render));
  return *this;
}

std::string StructuredReply::RenderText() const {
  std::string out;
  for (const auto& b : blocks_) out += b(json_);
  return out;
}

ControlReply StructuredReply::Render() const { return {true, RenderText(), RenderJson()}; }

std::string StructuredReply::DumpJson(const Json& doc) {
  return doc.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string CellText(const Json& v) {
  if (v.is_string()) return v.get_ref<const std::string&>();
  if (v.is_null()) return "-";
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  return StructuredReply::DumpJson(v);
}

StructuredReply& CacheDumpHeading(StructuredReply& reply, std::string note) {
  return reply.Block([note = std::move(note)](const Json& doc) {
    return common::Cat("# ", CellText(doc, "count"), doc.value("truncated", false) ? "+" : "",
                       " entries at clock ", CellText(doc, "clock"), "; ", note, "\n");
  });
}

StructuredReply::Column TtlLeftColumn() {
  return {"LEFT", [](const Json& e) {
            return e.value("ttl_left", int64_t{0}) > 0 ? CellText(e, "ttl_left")
                                                       : common::Cat("stale ", CellText(e, "stale_for"), "s");
          }};
}

StructuredReply& CacheDumpLimitHint(StructuredReply& reply, bool truncated, size_t limit) {
  if (!truncated) return reply;
  return reply.Text(
      common::Cat("# more entries match: raise --limit (", limit, ") or narrow with --name/--partition\n"));
}

std::string CellText(const Json& object, const std::string& key) {
  auto it = object.find(key);
  return it == object.end() ? std::string("-") : CellText(*it);
}

std::string UtcTimeText(int64_t unix_seconds) {
  if (unix_seconds == 0) return "-";
  const std::time_t tt = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char b[32];
  std::strftime(b, sizeof(b), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return b;
}

std::string TextTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    if (r.size() > width.size()) width.resize(r.size());
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line.append(width[i] - r[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

namespace {

// A sample's value as JSON: integers as they are; a double that is a whole
// number the exposition writes without a fraction ("2") as an integer;
// NaN, +Inf and -Inf as the exposition's strings.
Json SampleValue(const common::MetricSample& s) {
  if (const auto* u = std::get_if<uint64_t>(&s.value)) return *u;
  if (const auto* i = std::get_if<int64_t>(&s.value)) return *i;
  const double d = std::get<double>(s.value);
  if (!std::isfinite(d)) return common::PrometheusDouble(d);
  if (d == std::trunc(d) && std::fabs(d) < 9007199254740992.0) return static_cast<int64_t>(d);
  return d;
}

}  // namespace

StructuredReply MetricsReply(std::span<const common::MetricSample> samples) {
  StructuredReply r(Json::array());
  for (const common::MetricSample& s : samples) {
    Json labels = Json::object();
    for (const auto& [k, v] : s.labels) labels[k] = v;
    r.json().push_back(Json{{"name", s.name}, {"labels", std::move(labels)}, {"value", SampleValue(s)}});
  }
  r.Table("", {{"METRIC",
                [](const Json& row) {
                  std::string name = row["name"].get<std::string>();
                  const Json& labels = row["labels"];
                  if (labels.empty()) return name;
                  name += "{";
                  bool first = true;
                  for (const auto& [k, v] : labels.items()) {
                    name += (first ? "" : ",") + k + "=" + v.get<std::string>();
                    first = false;
                  }
                  return name + "}";
                }},
               StructuredReply::Field("VALUE", "value")});
  return r;
}

Json ParseNodeJson(std::string_view json) {
  if (json.empty()) return nullptr;
  Json doc = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  return doc.is_discarded() ? Json(nullptr) : doc;
}

}  // namespace weir::mgmt
