// The whole check of a weir-mgmt config, shared by --check and the start:
// the file itself (ParseMgmtConfig), then the token file the start reads.
#include "weir/common/config_file.h"
#include "weir/mgmt/node_config.h"
#include "weir/mgmt/server.h"

namespace weir::mgmt {

absl::StatusOr<MgmtConfig> LoadAndCheckMgmtConfig(const std::string& path) {
  auto cfg = LoadMgmtConfig(path);
  absl::Status all =
      common::CheckNamedFiles(path, cfg.status(), [&](common::TomlChecker& c, const toml::table& root) {
        if (auto token = common::FindNamedFile(root, "mgmt.token_file", path)) CheckTokenFile(c, *token);
      });
  if (!all.ok()) return all;
  return cfg;
}

}  // namespace weir::mgmt
