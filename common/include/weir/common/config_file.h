// Reading an operator's configuration file: the steps every weir daemon
// shares before its own validation. Control plane only.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include <toml++/toml.h>

#include "absl/status/statusor.h"

namespace weir::common {

// The whole file, or NotFound naming the path.
absl::StatusOr<std::string> ReadConfigFile(const std::string& path);

// Parses TOML text; a syntax error reads "name:line:column: reason".
// (Debian's toml++ throws; the exception stops here.)
absl::StatusOr<toml::table> ParseToml(std::string_view text, const std::string& name);

// Makes each relative file name in `paths` relative to the directory of
// `config_path`, not to the directory the daemon was started from.
void ResolveRelativeTo(const std::string& config_path, std::initializer_list<std::string*> paths);

}  // namespace weir::common
