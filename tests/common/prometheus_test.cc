#include "weir/common/prometheus.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace weir::common {
namespace {

using ::testing::HasSubstr;

// A strict reader of the text format, enough to read back what the writer
// writes: HELP and TYPE before each family's samples, every family once and
// contiguous, label values unescaped.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  std::string value;
};
struct ParsedFamily {
  std::string help;
  std::string type;
  std::vector<Sample> samples;
};
struct Parsed {
  std::vector<std::string> order;
  std::map<std::string, ParsedFamily> families;
};

std::string UnescapeHelp(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      ++i;
      out += s[i] == 'n' ? '\n' : s[i];
    } else {
      out += s[i];
    }
  }
  return out;
}

// The family a sample name belongs to: the histogram's base name for its
// _bucket/_sum/_count lines.
std::string FamilyOf(const Parsed& p, const std::string& name) {
  for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
    if (name.size() > suffix.size() && name.ends_with(suffix)) {
      const std::string base = name.substr(0, name.size() - suffix.size());
      auto it = p.families.find(base);
      if (it != p.families.end() && it->second.type == "histogram") return base;
    }
  }
  return name;
}

Parsed Parse(const std::string& text) {
  Parsed p;
  std::string current;
  std::istringstream in(text);
  std::string line;
  EXPECT_TRUE(text.empty() || text.back() == '\n');
  while (std::getline(in, line)) {
    if (line.starts_with("# HELP ")) {
      const size_t sp = line.find(' ', 7);
      const std::string name = line.substr(7, sp - 7);
      EXPECT_EQ(p.families.count(name), 0u) << "family twice: " << name;
      p.order.push_back(name);
      p.families[name].help = UnescapeHelp(line.substr(sp + 1));
      current = name;
      std::string type_line;
      EXPECT_TRUE(std::getline(in, type_line));
      EXPECT_TRUE(type_line.starts_with("# TYPE " + name + " ")) << type_line;
      p.families[name].type = type_line.substr(8 + name.size());
      continue;
    }
    if (line.starts_with("#")) ADD_FAILURE() << "comment inside a family: " << line;
    Sample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = line.substr(0, i);
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (line[i] != '}') {
        const size_t eq = line.find('=', i);
        const std::string label = line.substr(i, eq - i);
        EXPECT_EQ(line[eq + 1], '"');
        std::string value;
        size_t j = eq + 2;
        for (; line[j] != '"'; ++j) {
          if (line[j] == '\\') {
            ++j;
            EXPECT_TRUE(line[j] == '\\' || line[j] == '"' || line[j] == 'n') << line;
            value += line[j] == 'n' ? '\n' : line[j];
          } else {
            value += line[j];
          }
        }
        s.labels[label] = value;
        i = j + 1;
        if (line[i] == ',') ++i;
      }
      ++i;
    }
    EXPECT_EQ(line[i], ' ') << line;
    s.value = line.substr(i + 1);
    EXPECT_EQ(FamilyOf(p, s.name), current) << "sample outside its family: " << line;
    p.families[current].samples.push_back(s);
  }
  return p;
}

TEST(PrometheusWriter, FamiliesAreContiguousWithHelpAndTypeFirst) {
  PrometheusWriter w;
  auto& up = w.Gauge("weir_upstream_up", "1 when the upstream is up.");
  auto& lat = w.Histogram("weir_upstream_latency_seconds", "Upstream latency.");
  auto& to = w.Counter("weir_upstream_timeouts_total", "Upstream timeouts.");
  const std::array<double, 2> bounds = {0.001, 0.5};
  for (std::string_view u : {"a", "b"}) {
    // Interleaved on purpose: the writer groups them.
    up.Add({{"upstream", u}}, 1);
    lat.Histogram({{"upstream", u}}, bounds, std::array<uint64_t, 3>{1, 2, 3}, 1.25);
    to.Add({{"upstream", u}}, uint64_t{7});
  }
  auto text = w.Render();
  ASSERT_TRUE(text.ok()) << text.status();
  const Parsed p = Parse(*text);
  EXPECT_THAT(p.order, ::testing::ElementsAre("weir_upstream_up", "weir_upstream_latency_seconds",
                                              "weir_upstream_timeouts_total"));
  EXPECT_EQ(p.families.at("weir_upstream_up").type, "gauge");
  EXPECT_EQ(p.families.at("weir_upstream_timeouts_total").type, "counter");
  EXPECT_EQ(p.families.at("weir_upstream_up").samples.size(), 2u);
  const ParsedFamily& h = p.families.at("weir_upstream_latency_seconds");
  EXPECT_EQ(h.type, "histogram");
  EXPECT_EQ(h.help, "Upstream latency.");
  ASSERT_EQ(h.samples.size(), 2u * 5);
  // Cumulative buckets, +Inf last, then _sum and _count.
  EXPECT_EQ(h.samples[0].name, "weir_upstream_latency_seconds_bucket");
  EXPECT_EQ(h.samples[0].labels.at("le"), "0.001");
  EXPECT_EQ(h.samples[0].labels.at("upstream"), "a");
  EXPECT_EQ(h.samples[0].value, "1");
  EXPECT_EQ(h.samples[1].labels.at("le"), "0.5");
  EXPECT_EQ(h.samples[1].value, "3");
  EXPECT_EQ(h.samples[2].labels.at("le"), "+Inf");
  EXPECT_EQ(h.samples[2].value, "6");
  EXPECT_EQ(h.samples[3].name, "weir_upstream_latency_seconds_sum");
  EXPECT_EQ(h.samples[3].value, "1.25");
  EXPECT_EQ(h.samples[4].name, "weir_upstream_latency_seconds_count");
  EXPECT_EQ(h.samples[4].value, "6");
  EXPECT_EQ(h.samples[4].labels.count("le"), 0u);
}

TEST(PrometheusWriter, EscapesLabelValuesAndHelp) {
  PrometheusWriter w;
  const std::string nasty = "a\\b\"c\nd";
  w.Counter("x_total", "Help with a \\ and a\nnewline.").Add({{"name", nasty}, {"other", ""}}, 1);
  auto text = w.Render();
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("# HELP x_total Help with a \\\\ and a\\nnewline.\n"));
  EXPECT_THAT(*text, HasSubstr("x_total{name=\"a\\\\b\\\"c\\nd\",other=\"\"} 1\n"));
  const Parsed p = Parse(*text);
  EXPECT_EQ(p.families.at("x_total").help, "Help with a \\ and a\nnewline.");
  EXPECT_EQ(p.families.at("x_total").samples.at(0).labels.at("name"), nasty);
  EXPECT_EQ(PrometheusEscapeLabelValue("plain"), "plain");
}

TEST(PrometheusWriter, IntegersExactDoublesParsable) {
  PrometheusWriter w;
  auto& g = w.Gauge("g", "A gauge.");
  g.Add({{"k", "max"}}, UINT64_MAX);
  g.Add({{"k", "neg"}}, int64_t{-5});
  g.Add({{"k", "small"}}, 0.0005);
  g.Add({{"k", "tiny"}}, 1e-7);
  g.Add({{"k", "third"}}, 1.0 / 3);
  g.Add({{"k", "nan"}}, std::nan(""));
  g.Add({{"k", "inf"}}, INFINITY);
  g.Add({{"k", "ninf"}}, -INFINITY);
  g.Add({}, 0);
  auto text = w.Render();
  ASSERT_TRUE(text.ok()) << text.status();
  std::map<std::string, std::string> v;
  const Parsed p = Parse(*text);
  for (const Sample& s : p.families.at("g").samples) v[s.labels.count("k") ? s.labels.at("k") : ""] = s.value;
  EXPECT_EQ(v["max"], "18446744073709551615");
  EXPECT_EQ(v["neg"], "-5");
  EXPECT_EQ(v["small"], "0.0005");
  EXPECT_EQ(std::strtod(v["tiny"].c_str(), nullptr), 1e-7);
  EXPECT_EQ(std::strtod(v["third"].c_str(), nullptr), 1.0 / 3);  // round-trips
  EXPECT_EQ(v["nan"], "NaN");
  EXPECT_EQ(v["inf"], "+Inf");
  EXPECT_EQ(v["ninf"], "-Inf");
  EXPECT_EQ(v[""], "0");
  EXPECT_THAT(*text, HasSubstr("\ng 0\n"));  // no braces without labels
}

TEST(PrometheusWriter, FamilyDeclaredTwiceIsMerged) {
  PrometheusWriter w;
  w.Counter("a_total", "A.").Add({{"k", "1"}}, 1);
  w.Counter("b_total", "B.").Add({}, 2);
  w.Counter("a_total", "A.").Add({{"k", "2"}}, 3);
  auto text = w.Render();
  ASSERT_TRUE(text.ok()) << text.status();
  const Parsed p = Parse(*text);
  EXPECT_THAT(p.order, ::testing::ElementsAre("a_total", "b_total"));
  EXPECT_EQ(p.families.at("a_total").samples.size(), 2u);
}

TEST(PrometheusWriter, ConflictsAndInvalidInputAreRejected) {
  auto fails = [](auto build, std::string_view why) {
    PrometheusWriter w;
    build(w);
    auto text = w.Render();
    EXPECT_FALSE(text.ok()) << why;
    if (!text.ok()) {
      EXPECT_THAT(std::string(text.status().message()), HasSubstr(why));
    }
  };
  fails(
      [](PrometheusWriter& w) {
        w.Counter("a_total", "A.");
        w.Gauge("a_total", "A.");
      },
      "declared twice");
  fails(
      [](PrometheusWriter& w) {
        w.Counter("a_total", "A.");
        w.Counter("a_total", "Other.");
      },
      "declared twice");
  fails([](PrometheusWriter& w) { w.Counter("1bad", "A."); }, "invalid metric name");
  fails(
      [](PrometheusWriter& w) {
        w.Counter("a_total", "A.").Add({{"bad-label", "x"}}, 1);
      },
      "invalid label name");
  fails([](PrometheusWriter& w) { w.Counter("a_total", "A.").Add({}, -1); }, "cannot be negative");
  fails([](PrometheusWriter& w) { w.Histogram("h_seconds", "H.").Add({}, 1); }, "plain sample");
  fails(
      [](PrometheusWriter& w) {
        const std::array<double, 1> b = {1};
        w.Counter("c_total", "C.").Histogram({}, b, std::array<uint64_t, 2>{1, 1}, 1);
      },
      "histogram sample on a counter");
  fails(
      [](PrometheusWriter& w) {
        const std::array<double, 1> b = {1};
        w.Histogram("h_seconds", "H.").Histogram({{"le", "x"}}, b, std::array<uint64_t, 2>{1, 1}, 1);
      },
      "label named le");
  fails(
      [](PrometheusWriter& w) {
        const std::array<double, 2> b = {1, 2};
        w.Histogram("h_seconds", "H.").Histogram({}, b, std::array<uint64_t, 2>{1, 1}, 1);
      },
      "buckets");
}

TEST(PrometheusWriter, EmptyFamilyStillHasHelpAndType) {
  PrometheusWriter w;
  w.Counter("nothing_yet_total", "Nothing counted yet.");
  auto text = w.Render();
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "# HELP nothing_yet_total Nothing counted yet.\n# TYPE nothing_yet_total counter\n");
}

}  // namespace
}  // namespace weir::common
