#include "weir/mgmt/node_config.h"

#include <unistd.h>

#include "weir/common/line_errors.h"
#include "weir/common/text.h"
#include "weir/mgmt/snapshot.h"
#include "weir/partitions/tagtable.h"

namespace weir::mgmt {

using common::Cat;
using common::ToStd;

void ParseNodeMgmt(common::TomlChecker& c, const toml::table& root, const std::string& kind,
                   NodeMgmtConfig* out) {
  const toml::table* m = common::SubTable(c, root, "mgmt");
  if (m == nullptr) return;
  out->enabled = true;
  const size_t errors_before = c.error_count();
  c.OnlyKeys(*m, "mgmt", {"address", "node_id", "token_file", "state_dir"});
  std::string address = "127.0.0.1:8054";
  c.String(*m, "address", &address);
  c.String(*m, "node_id", &out->node_id);
  c.String(*m, "token_file", &out->token_file);
  c.String(*m, "state_dir", &out->state_dir);
  if (c.error_count() != errors_before) return;  // the rules below would repeat those errors
  auto a = common::SocketAddress::Parse(address, 8054);
  if (!a.ok()) {
    const toml::node* n = m->get("address");
    return c.Fail(n != nullptr ? n->source() : m->source(),
                  Cat("[mgmt] address: ", ToStd(a.status().message())));
  }
  out->address = *a;
  if (out->token_file.empty())
    return c.Fail(m->source(), "[mgmt] needs 'token_file' (mgmt authenticates nodes)");
  if (out->state_dir.empty()) {
    return c.Fail(m->source(), "[mgmt] needs 'state_dir' (where the last good snapshot is kept)");
  }
  if (out->node_id.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    out->node_id = Cat(host, "-", kind);
  }
  if (out->node_id.size() > 255)
    return c.Fail(m->get("node_id")->source(), "[mgmt] node_id: at most 255 bytes");
}

absl::StatusOr<std::string> TokenFromText(std::string_view text) {
  std::string_view line = text.substr(0, text.find('\n'));
  const size_t b = line.find_first_not_of(" \t\r\n");
  const size_t e = line.find_last_not_of(" \t\r\n");
  line = b == std::string_view::npos ? std::string_view() : line.substr(b, e - b + 1);
  if (line.size() < 16) return absl::InvalidArgumentError("the token must have at least 16 characters");
  return std::string(line);
}

void CheckTokenFile(common::TomlChecker& c, const common::NamedFile& file) {
  std::optional<std::string> text = common::ReadNamedFile(c, file);
  if (!text) return;
  auto token = TokenFromText(*text);
  if (!token.ok())
    c.Fail(file.value->source(), Cat(file.key, " '", file.path, "': ", ToStd(token.status().message())));
}

bool CheckNodeMgmtFiles(common::TomlChecker& c, const toml::table& root, const std::string& config_path) {
  // The control channel's TCP token, as ControlServer::Bind reads it.
  if (auto token = common::FindNamedFile(root, "control.token_file", config_path)) CheckTokenFile(c, *token);
  if (!root.contains("mgmt")) return false;
  if (auto token = common::FindNamedFile(root, "mgmt.token_file", config_path)) CheckTokenFile(c, *token);
  // As PrepareNode: an intact, valid stored snapshot is what the node starts from.
  auto dir = common::FindNamedFile(root, "mgmt.state_dir", config_path);
  if (!dir) return false;
  auto stored = LoadPersistedSnapshot(dir->path);
  return stored.ok() && ValidateSnapshot(*stored).ok();
}

void CheckTagFile(common::TomlChecker& c, const common::NamedFile& file) {
  std::optional<std::string> text = common::ReadNamedFile(c, file);
  if (!text) return;
  common::LineErrors errors;
  if (partitions::TagTable::FromText(*text, &errors).ok()) return;
  for (const std::string& l : errors.Render(file.path)) c.AddLine(l);
}

}  // namespace weir::mgmt
