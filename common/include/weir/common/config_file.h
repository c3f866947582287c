// Reading an operator's configuration file: the steps every weir daemon
// shares before its own validation. Control plane only.
#pragma once

#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "absl/status/statusor.h"
#include "weir/common/toml_checker.h"

namespace weir::common {

// The whole file, or NotFound naming the path.
absl::StatusOr<std::string> ReadConfigFile(const std::string& path);

// Parses TOML text; a syntax error reads "name:line:column: reason".
// (Debian's toml++ throws; the exception stops here.)
absl::StatusOr<toml::table> ParseToml(std::string_view text, const std::string& name);

// Makes each relative file name in `paths` relative to the directory of
// `config_path`, not to the directory the daemon was started from.
void ResolveRelativeTo(const std::string& config_path, std::initializer_list<std::string*> paths);

// A file a config names at `dotted_key` ("partitions.citymap"): the value's
// node (for positions) and its path, made relative to the config's
// directory. nullopt when the key is absent, not a string (the config's own
// check reports that) or empty.
struct NamedFile {
  const toml::node* value = nullptr;
  std::string key;  // as the operator reads it: "[partitions] citymap"
  std::string path;
};
std::optional<NamedFile> FindNamedFile(const toml::table& root, std::string_view dotted_key,
                                       const std::string& config_path);

// Reads a named file whole, as the start would. A missing or unreadable
// file is one error at the key's value: "CONFIG:L:C: [partitions] citymap
// 'PATH': No such file or directory".
std::optional<std::string> ReadNamedFile(TomlChecker& c, const NamedFile& file);

// Every error of a rejected config, one per entry (the lines of a status
// built from TomlChecker::error() and of the files it names).
std::vector<std::string> ErrorLines(std::string_view message);

// The second half of a daemon's whole config check: `loaded` is the outcome
// of loading and validating the config at `path`; `check_files` then
// checks the files it names as the start would read them (on the parsed
// TOML, so it runs even when some other key was rejected). OK, or every
// error of both, one per line of the message: the config's in file order,
// then the files'.
absl::Status CheckNamedFiles(const std::string& path, const absl::Status& loaded,
                             const std::function<void(TomlChecker&, const toml::table&)>& check_files);

}  // namespace weir::common
