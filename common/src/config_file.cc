#include "weir/common/config_file.h"

#include <fstream>
#include <sstream>

#include "weir/common/text.h"

namespace weir::common {

absl::StatusOr<std::string> ReadConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(Cat(path, ": cannot open config file"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<toml::table> ParseToml(std::string_view text, const std::string& name) {
  try {
    return toml::parse(text, name);
  } catch (const toml::parse_error& err) {
    return absl::InvalidArgumentError(
        Cat(name, ":", err.source().begin.line, ":", err.source().begin.column, ": ", err.description()));
  }
}

void ResolveRelativeTo(const std::string& config_path, std::initializer_list<std::string*> paths) {
  const size_t slash = config_path.rfind('/');
  if (slash == std::string::npos) return;
  const std::string dir = config_path.substr(0, slash + 1);
  for (std::string* p : paths) {
    if (!p->empty() && p->front() != '/') *p = dir + *p;
  }
}

}  // namespace weir::common
