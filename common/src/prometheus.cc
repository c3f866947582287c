#include "weir/common/prometheus.h"

#include <charconv>
#include <cmath>

#include "absl/status/status.h"
#include "weir/common/text.h"

namespace weir::common {
namespace {

// [a-zA-Z_:][a-zA-Z0-9_:]* for metric names; label names have no colon.
bool ValidName(std::string_view s, bool allow_colon) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alpha =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':');
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

std::string_view TypeName(MetricType t) {
  switch (t) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

void AppendEscapedHelp(std::string* out, std::string_view help) {
  for (char c : help) {
    if (c == '\\') {
      *out += "\\\\";
    } else if (c == '\n') {
      *out += "\\n";
    } else {
      *out += c;
    }
  }
}

void AppendUnsigned(std::string* out, uint64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, r.ptr);
}

}  // namespace

std::string PrometheusDouble(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  // The shortest form that reads back the same, %g style as Go's
  // FormatFloat(v, 'g', -1, 64) writes it (Prometheus' own clients): 0.0005, 1e-07, 2.5.
  const auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::general);
  return std::string(buf, r.ptr);
}

std::string PrometheusEscapeLabelValue(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void PrometheusWriter::Fail(std::string message) {
  if (error_.empty()) error_ = std::move(message);
}

PrometheusWriter::Family& PrometheusWriter::Declare(std::string_view name, std::string_view help,
                                                    MetricType type) {
  if (auto it = by_name_.find(name); it != by_name_.end()) {
    Family& f = *it->second;
    if (f.type_ != type || f.help_ != help) {
      Fail(Cat("metric family ", name, " declared twice: as ", TypeName(f.type_), " \"", f.help_,
               "\" and as ", TypeName(type), " \"", help, "\""));
    }
    return f;
  }
  if (!ValidName(name, /*allow_colon=*/true)) Fail(Cat("invalid metric name \"", name, "\""));
  families_.push_back(std::unique_ptr<Family>(new Family(*this, std::string(name), std::string(help), type)));
  Family& f = *families_.back();
  by_name_.emplace(f.name_, &f);
  return f;
}

bool PrometheusWriter::Family::BeginSample(std::string_view suffix, MetricLabels labels,
                                           std::string_view le) {
  for (const MetricLabel& l : labels.span()) {
    if (!ValidName(l.name, /*allow_colon=*/false)) {
      writer_.Fail(Cat(name_, ": invalid label name \"", l.name, "\""));
      return false;
    }
    if (type_ == MetricType::kHistogram && l.name == "le") {
      writer_.Fail(Cat(name_, ": a histogram cannot have a label named le"));
      return false;
    }
  }
  MetricSample& s = samples_.emplace_back();
  s.name = Cat(name_, suffix);
  s.labels.reserve(labels.span().size() + (le.empty() ? 0 : 1));
  for (const MetricLabel& l : labels.span()) s.labels.emplace_back(l.name, l.value);
  if (!le.empty()) s.labels.emplace_back("le", le);
  s.value = uint64_t{0};
  return true;
}

void PrometheusWriter::Family::AddUnsigned(MetricLabels labels, uint64_t v) {
  if (type_ == MetricType::kHistogram) {
    writer_.Fail(Cat(name_, ": a plain sample on a histogram"));
    return;
  }
  if (!BeginSample("", labels, "")) return;
  samples_.back().value = v;
}

void PrometheusWriter::Family::AddSigned(MetricLabels labels, int64_t v) {
  if (v >= 0) return AddUnsigned(labels, static_cast<uint64_t>(v));
  if (type_ == MetricType::kCounter) {
    writer_.Fail(Cat(name_, ": a counter cannot be negative (", v, ")"));
    return;
  }
  if (type_ == MetricType::kHistogram) {
    writer_.Fail(Cat(name_, ": a plain sample on a histogram"));
    return;
  }
  if (!BeginSample("", labels, "")) return;
  samples_.back().value = v;
}

void PrometheusWriter::Family::AddDouble(MetricLabels labels, double v) {
  if (type_ == MetricType::kHistogram) {
    writer_.Fail(Cat(name_, ": a plain sample on a histogram"));
    return;
  }
  if (type_ == MetricType::kCounter && (v < 0 || std::isnan(v))) {
    writer_.Fail(Cat(name_, ": a counter cannot be negative or NaN (", PrometheusDouble(v), ")"));
    return;
  }
  if (!BeginSample("", labels, "")) return;
  samples_.back().value = v;
}

void PrometheusWriter::Family::Histogram(MetricLabels labels, std::span<const double> bounds,
                                         std::span<const uint64_t> buckets, double sum) {
  if (type_ != MetricType::kHistogram) {
    writer_.Fail(Cat(name_, ": a histogram sample on a ", TypeName(type_)));
    return;
  }
  if (buckets.size() != bounds.size() + 1) {
    writer_.Fail(
        Cat(name_, ": ", buckets.size(), " buckets for ", bounds.size(), " bounds (want bounds + 1)"));
    return;
  }
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (std::isnan(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1]))) {
      writer_.Fail(Cat(name_, ": histogram bounds must increase"));
      return;
    }
  }
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds.size(); ++i) {
    cumulative += buckets[i];
    const std::string le = i < bounds.size() ? PrometheusDouble(bounds[i]) : std::string("+Inf");
    if (!BeginSample("_bucket", labels, le)) return;
    samples_.back().value = cumulative;
  }
  if (BeginSample("_sum", labels, "")) samples_.back().value = sum;
  if (BeginSample("_count", labels, "")) samples_.back().value = cumulative;
}

absl::StatusOr<std::string> PrometheusWriter::Render() const {
  if (!error_.empty()) return absl::InternalError(error_);
  std::string out;
  size_t size = 0;
  for (const auto& f : families_)
    size += f->samples_.size() * 64 + f->help_.size() + 2 * f->name_.size() + 32;
  out.reserve(size);
  for (const auto& f : families_) {
    out += "# HELP ";
    out += f->name_;
    out += ' ';
    AppendEscapedHelp(&out, f->help_);
    out += "\n# TYPE ";
    out += f->name_;
    out += ' ';
    out += TypeName(f->type_);
    out += '\n';
    for (const MetricSample& s : f->samples_) {
      out += s.name;
      if (!s.labels.empty()) {
        out += '{';
        for (size_t i = 0; i < s.labels.size(); ++i) {
          if (i > 0) out += ',';
          out += s.labels[i].first;
          out += "=\"";
          out += PrometheusEscapeLabelValue(s.labels[i].second);
          out += '"';
        }
        out += '}';
      }
      out += ' ';
      if (const auto* u = std::get_if<uint64_t>(&s.value)) {
        AppendUnsigned(&out, *u);
      } else if (const auto* i = std::get_if<int64_t>(&s.value)) {
        char buf[24];
        const auto r = std::to_chars(buf, buf + sizeof(buf), *i);
        out.append(buf, r.ptr);
      } else {
        out += PrometheusDouble(std::get<double>(s.value));
      }
      out += '\n';
    }
  }
  return out;
}

absl::StatusOr<std::vector<MetricSample>> PrometheusWriter::Samples() const {
  if (!error_.empty()) return absl::InternalError(error_);
  std::vector<MetricSample> out;
  size_t n = 0;
  for (const auto& f : families_) n += f->samples_.size();
  out.reserve(n);
  for (const auto& f : families_) out.insert(out.end(), f->samples_.begin(), f->samples_.end());
  return out;
}

}  // namespace weir::common
