#include "weir/common/config_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
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

std::optional<NamedFile> FindNamedFile(const toml::table& root, std::string_view dotted_key,
                                       const std::string& config_path) {
  const toml::node* n = root.at_path(dotted_key).node();
  if (n == nullptr || !n->is_string() || n->as_string()->get().empty()) return std::nullopt;
  NamedFile f;
  f.value = n;
  const size_t dot = dotted_key.rfind('.');
  f.key = dot == std::string_view::npos
              ? std::string(dotted_key)
              : Cat("[", dotted_key.substr(0, dot), "] ", dotted_key.substr(dot + 1));
  f.path = n->as_string()->get();
  ResolveRelativeTo(config_path, {&f.path});
  return f;
}

std::optional<std::string> ReadNamedFile(TomlChecker& c, const NamedFile& file) {
  auto fail = [&](int err) -> std::optional<std::string> {
    c.Fail(file.value->source(), Cat(file.key, " '", file.path, "': ", std::strerror(err)));
    return std::nullopt;
  };
  const int fd = open(file.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(errno);
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;  // EISDIR for a directory
      close(fd);
      return fail(err);
    }
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

absl::Status CheckNamedFiles(const std::string& path, const absl::Status& loaded,
                             const std::function<void(TomlChecker&, const toml::table&)>& check_files) {
  // An unreadable config or a TOML syntax error: nothing names any file.
  auto text = ReadConfigFile(path);
  if (!text.ok()) return loaded;
  auto root = ParseToml(*text, path);
  if (!root.ok()) return loaded;
  TomlChecker c(path);
  check_files(c, *root);
  if (c.ok()) return loaded;
  std::string all = loaded.ok() ? std::string() : std::string(ToStd(loaded.message()));
  for (const std::string& e : c.errors()) CatTo(all, all.empty() ? "" : "\n", e);
  return absl::InvalidArgumentError(all);
}

std::vector<std::string> ErrorLines(std::string_view message) {
  std::vector<std::string> out;
  while (!message.empty()) {
    const size_t nl = message.find('\n');
    if (nl != 0) out.emplace_back(message.substr(0, nl));
    if (nl == std::string_view::npos) break;
    message.remove_prefix(nl + 1);
  }
  return out;
}

}  // namespace weir::common
