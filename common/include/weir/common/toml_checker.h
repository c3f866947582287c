// Validation helpers for weir's TOML configuration files: typed getters with
// ranges, unknown-key rejection, and every error reported as
// "file:line:column: reason", in file order. Control plane only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "weir/common/log.h"
#include "weir/common/text.h"

namespace weir::common {

// Collects every error with its source position, so one run names all the
// operator must fix. A getter whose value fails records one error and
// leaves its output untouched; it returns false then (true when the key is
// absent or valid), so a rule that combines keys can skip a value that
// already failed instead of adding a confusing second error about it. The
// same error at the same position is recorded once.
class TomlChecker {
 public:
  explicit TomlChecker(std::string name) : name_(std::move(name)) {}

  bool ok() const { return errors_.empty() && extra_.empty(); }
  // How many errors so far: a block compares it before and after to see
  // whether anything of its own failed.
  size_t error_count() const { return errors_.size() + extra_.size(); }

  // Every error, one per entry: those of this file in file order
  // ("file:line:column: reason"), then those added with AddLine (errors of
  // the files the config names, in the order they were checked).
  std::vector<std::string> errors() const {
    std::vector<Error> sorted = errors_;
    std::stable_sort(sorted.begin(), sorted.end(), [](const Error& a, const Error& b) {
      return a.line != b.line ? a.line < b.line : a.column < b.column;
    });
    std::vector<std::string> out;
    for (const Error& e : sorted) out.push_back(e.text);
    out.insert(out.end(), extra_.begin(), extra_.end());
    return out;
  }
  // The errors joined by newlines, for a caller that wants one string.
  std::string error() const {
    std::string out;
    for (const std::string& e : errors()) CatTo(out, out.empty() ? "" : "\n", e);
    return out;
  }

  void Fail(const toml::source_region& where, std::string_view reason) {
    FailAt(where.begin.line, where.begin.column, reason);
  }
  // A rule of the whole file (several keys): reported at line 1.
  void FailWhole(std::string_view reason) { FailAt(1, 1, reason); }
  // An error that is not at a position of this file, already formatted.
  void AddLine(std::string line) { extra_.push_back(std::move(line)); }

  const std::string& name() const { return name_; }

  // Rejects keys not in `known`: a typo must not silently fall back to a default.
  void OnlyKeys(const toml::table& t, std::string_view table_name,
                std::initializer_list<std::string_view> known) {
    for (const auto& [k, v] : t) {
      bool found = false;
      for (auto n : known) found = found || k.str() == n;
      if (!found) Fail(k.source(), Cat("unknown key '", k.str(), "' in [", table_name, "]"));
    }
  }

  template <typename T>
  bool Int(const toml::table& t, std::string_view key, T* out, int64_t lo, int64_t hi) {
    const toml::node* n = t.get(key);
    if (n == nullptr) return true;
    auto v = n->value<int64_t>();
    if (!n->is_integer() || !v) return Bad(n->source(), Cat("'", key, "' must be an integer"));
    if (*v < lo || *v > hi) {
      return Bad(n->source(), Cat("'", key, "' must be between ", lo, " and ", hi, ", not ", *v));
    }
    *out = static_cast<T>(*v);
    return true;
  }

  bool Bool(const toml::table& t, std::string_view key, bool* out) {
    const toml::node* n = t.get(key);
    if (n == nullptr) return true;
    if (!n->is_boolean()) return Bad(n->source(), Cat("'", key, "' must be true or false"));
    *out = *n->value<bool>();
    return true;
  }

  bool String(const toml::table& t, std::string_view key, std::string* out) {
    const toml::node* n = t.get(key);
    if (n == nullptr) return true;
    if (!n->is_string()) return Bad(n->source(), Cat("'", key, "' must be a string"));
    *out = *n->value<std::string>();
    return true;
  }

  bool Double(const toml::table& t, std::string_view key, double* out, double lo, double hi) {
    const toml::node* n = t.get(key);
    if (n == nullptr) return true;
    auto v = n->value<double>();
    if (!v) return Bad(n->source(), Cat("'", key, "' must be a number"));
    if (*v < lo || *v > hi) return Bad(n->source(), Cat("'", key, "' must be between ", lo, " and ", hi));
    *out = *v;
    return true;
  }

  // An array of strings, each parsed by `parse` (returning StatusOr<T>);
  // every bad entry is reported. `out` gets the good entries.
  template <typename T, typename F>
  bool List(const toml::table& t, std::string_view key, std::vector<T>* out, F parse) {
    const toml::node* n = t.get(key);
    if (n == nullptr) return true;
    const toml::array* arr = n->as_array();
    if (arr == nullptr) return Bad(n->source(), Cat("'", key, "' must be an array of strings"));
    out->clear();
    bool good = true;
    for (const auto& e : *arr) {
      auto s = e.value<std::string>();
      if (!s) {
        good = Bad(e.source(), Cat("'", key, "' entries must be strings"));
        continue;
      }
      auto parsed = parse(*s);
      if (!parsed.ok()) {
        good = Bad(e.source(), ToStd(parsed.status().message()));
        continue;
      }
      out->push_back(*std::move(parsed));
    }
    return good;
  }

 private:
  struct Error {
    int64_t line;
    int64_t column;
    std::string text;
  };

  // Always false, so a getter can `return Bad(...)`.
  bool Bad(const toml::source_region& where, std::string_view reason) {
    FailAt(where.begin.line, where.begin.column, reason);
    return false;
  }

  void FailAt(int64_t line, int64_t column, std::string_view reason) {
    std::string text = Cat(name_, ":", line, ":", column, ": ", reason);
    for (const Error& e : errors_) {
      if (e.text == text) return;
    }
    errors_.push_back({line, column, std::move(text)});
  }

  std::string name_;
  std::vector<Error> errors_;
  std::vector<std::string> extra_;
};

inline const toml::table* SubTable(TomlChecker& c, const toml::table& root, std::string_view name) {
  const toml::node* n = root.get(name);
  if (n == nullptr) return nullptr;
  if (!n->is_table()) {
    c.Fail(n->source(), Cat("'", name, "' must be a table ([", name, "])"));
    return nullptr;
  }
  return n->as_table();
}

// The [log] table shared by the daemons' configs (docs/logging.md):
// level = "error" | "warning" | "info" | "debug",
// target = "stderr" | "journal" | "auto".
inline void ParseLogTable(TomlChecker& c, const toml::table& root, LogSettings* out) {
  const toml::table* t = SubTable(c, root, "log");
  if (t == nullptr) return;
  c.OnlyKeys(*t, "log", {"level", "target"});
  auto one = [&](std::string_view key, auto parse, auto* field) {
    const toml::node* n = t->get(key);
    if (n == nullptr) return;
    if (!n->is_string()) return c.Fail(n->source(), Cat("'", key, "' must be a string"));
    auto v = parse(*n->value<std::string>());
    if (!v.ok()) return c.Fail(n->source(), ToStd(v.status().message()));
    *field = *v;
  };
  one("level", ParseLogLevel, &out->level);
  one("target", ParseLogTarget, &out->target);
}

}  // namespace weir::common
