// A writer of the Prometheus text exposition format, version 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/).
//
// Every family is written contiguously, `# HELP` and `# TYPE` first, in the
// order the families were first declared, whatever order the samples were
// added in. A family declared twice with the same type and help is merged
// (its samples are written together); declared again with another type or
// help, it is rejected: Render() fails naming the family. Invalid metric or
// label names, a sample of the wrong kind for its family (a plain value on a
// histogram, a histogram on a counter), a negative counter or a histogram
// with a label named `le` are rejected the same way, so a programming error
// shows as a failed scrape, never as a malformed exposition.
//
// Label values are escaped (`\\`, `\"`, `\n`), HELP text likewise (`\\`,
// `\n`). Integers are written exactly; doubles in the shortest form that
// reads back to the same value ("0.0005", "1e-07"), NaN, +Inf and -Inf as
// Prometheus spells them.
//
// The samples are kept as values (Samples()): weirctl's `stats` shows them
// as a table and JSON without parsing the exposition back.
//
// Threading: none; one writer per rendering.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace weir::common {

enum class MetricType { kCounter, kGauge, kHistogram };

struct MetricLabel {
  std::string_view name;
  std::string_view value;
};

// One sample as the exposition writes it: `name` is the family's, with
// `_bucket`, `_sum` or `_count` for a histogram's series; a bucket's `le`
// is its last label.
struct MetricSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;
  std::variant<uint64_t, int64_t, double> value;
};

// A borrowed list of labels, for a call's arguments only: a braced list
// ({{"port", "p0"}}; never keep one in a variable, its array dies with the
// full expression), an array or a span.
class MetricLabels {
 public:
  MetricLabels() = default;
  MetricLabels(std::initializer_list<MetricLabel> l) : labels_(l.begin(), l.size()) {}
  MetricLabels(std::span<const MetricLabel> l) : labels_(l) {}
  template <size_t N>
  MetricLabels(const std::array<MetricLabel, N>& l) : labels_(l) {}
  std::span<const MetricLabel> span() const { return labels_; }

 private:
  std::span<const MetricLabel> labels_;
};

class PrometheusWriter {
 public:
  class Family {
   public:
    // One sample. Counters take non-negative values.
    template <typename T>
    requires std::is_arithmetic_v<T>
    void Add(MetricLabels labels, T value) {
      static_assert(!std::is_same_v<T, bool>, "Add: write 1 or 0");
      if constexpr (std::is_floating_point_v<T>) {
        AddDouble(labels, static_cast<double>(value));
      } else if constexpr (std::is_signed_v<T>) {
        AddSigned(labels, static_cast<int64_t>(value));
      } else {
        AddUnsigned(labels, static_cast<uint64_t>(value));
      }
    }

    // One histogram series: `buckets[i]` is the count of observations in
    // (bounds[i-1], bounds[i]], and buckets[bounds.size()] those above the
    // last bound, so buckets has bounds.size() + 1 entries. The writer
    // writes them cumulative with `le`, the +Inf bucket, `_sum` and `_count`
    // (the total of the buckets, so +Inf and _count always agree).
    void Histogram(MetricLabels labels, std::span<const double> bounds, std::span<const uint64_t> buckets,
                   double sum);

    std::string_view name() const { return name_; }

   private:
    friend class PrometheusWriter;
    Family(PrometheusWriter& writer, std::string name, std::string help, MetricType type)
        : writer_(writer), name_(std::move(name)), help_(std::move(help)), type_(type) {}
    void AddSigned(MetricLabels labels, int64_t v);
    void AddUnsigned(MetricLabels labels, uint64_t v);
    void AddDouble(MetricLabels labels, double v);
    // Appends a sample `<name><suffix>{labels[,le="..."]}` (its value 0) to
    // samples_; false (and the writer's error set) when a label name is invalid.
    bool BeginSample(std::string_view suffix, MetricLabels labels, std::string_view le);

    PrometheusWriter& writer_;
    std::string name_;
    std::string help_;
    MetricType type_;
    std::vector<MetricSample> samples_;
  };

  PrometheusWriter() = default;
  PrometheusWriter(const PrometheusWriter&) = delete;
  PrometheusWriter& operator=(const PrometheusWriter&) = delete;

  // Declares family `name` (or finds it, see above). The reference stays
  // valid for the writer's lifetime.
  Family& Counter(std::string_view name, std::string_view help) {
    return Declare(name, help, MetricType::kCounter);
  }
  Family& Gauge(std::string_view name, std::string_view help) {
    return Declare(name, help, MetricType::kGauge);
  }
  Family& Histogram(std::string_view name, std::string_view help) {
    return Declare(name, help, MetricType::kHistogram);
  }

  // The exposition, or the first error met while it was built.
  absl::StatusOr<std::string> Render() const;
  // The same samples in the same order, or that error.
  absl::StatusOr<std::vector<MetricSample>> Samples() const;

 private:
  Family& Declare(std::string_view name, std::string_view help, MetricType type);
  void Fail(std::string message);

  std::vector<std::unique_ptr<Family>> families_;  // declaration order
  std::map<std::string, Family*, std::less<>> by_name_;
  std::string error_;  // the first error; empty when none
};

// A Prometheus-parsable text of `v`: shortest round-trip form, "NaN", "+Inf", "-Inf".
std::string PrometheusDouble(double v);

// `v` escaped for a label value: backslash, double quote and newline.
std::string PrometheusEscapeLabelValue(std::string_view v);

// The Content-Type of the text format.
inline constexpr std::string_view kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace weir::common
