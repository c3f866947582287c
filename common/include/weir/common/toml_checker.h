// Validation helpers for weir's TOML configuration files: typed getters with
// ranges, unknown-key rejection, and the first error reported as
// "file:line:column: reason". Control plane only.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "weir/common/log.h"
#include "weir/common/text.h"

namespace weir::common {

// Collects the first error with its source position; later calls are no-ops
// so the message names the first thing the operator must fix.
class TomlChecker {
 public:
  explicit TomlChecker(std::string name) : name_(std::move(name)) {}

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  void Fail(const toml::source_region& where, std::string_view reason) {
    if (!error_.empty()) return;
    error_ = Cat(name_, ":", where.begin.line, ":", where.begin.column, ": ", reason);
  }

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
  void Int(const toml::table& t, std::string_view key, T* out, int64_t lo, int64_t hi) {
    const toml::node* n = t.get(key);
    if (n == nullptr) return;
    auto v = n->value<int64_t>();
    if (!n->is_integer() || !v) return Fail(n->source(), Cat("'", key, "' must be an integer"));
    if (*v < lo || *v > hi) {
      return Fail(n->source(), Cat("'", key, "' must be between ", lo, " and ", hi, ", not ", *v));
    }
    *out = static_cast<T>(*v);
  }

  void Bool(const toml::table& t, std::string_view key, bool* out) {
    const toml::node* n = t.get(key);
    if (n == nullptr) return;
    if (!n->is_boolean()) return Fail(n->source(), Cat("'", key, "' must be true or false"));
    *out = *n->value<bool>();
  }

  void String(const toml::table& t, std::string_view key, std::string* out) {
    const toml::node* n = t.get(key);
    if (n == nullptr) return;
    if (!n->is_string()) return Fail(n->source(), Cat("'", key, "' must be a string"));
    *out = *n->value<std::string>();
  }

  void Double(const toml::table& t, std::string_view key, double* out, double lo, double hi) {
    const toml::node* n = t.get(key);
    if (n == nullptr) return;
    auto v = n->value<double>();
    if (!v) return Fail(n->source(), Cat("'", key, "' must be a number"));
    if (*v < lo || *v > hi) return Fail(n->source(), Cat("'", key, "' must be between ", lo, " and ", hi));
    *out = *v;
  }

  // An array of strings, each parsed by `parse` (returning StatusOr<T>).
  template <typename T, typename F>
  void List(const toml::table& t, std::string_view key, std::vector<T>* out, F parse) {
    const toml::node* n = t.get(key);
    if (n == nullptr) return;
    const toml::array* arr = n->as_array();
    if (arr == nullptr) return Fail(n->source(), Cat("'", key, "' must be an array of strings"));
    out->clear();
    for (const auto& e : *arr) {
      auto s = e.value<std::string>();
      if (!s) return Fail(e.source(), Cat("'", key, "' entries must be strings"));
      auto parsed = parse(*s);
      if (!parsed.ok()) return Fail(e.source(), ToStd(parsed.status().message()));
      out->push_back(*std::move(parsed));
    }
  }

 private:
  std::string name_;
  std::string error_;
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
