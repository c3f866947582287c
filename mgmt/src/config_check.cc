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
        // etcd's TLS files: readable as the start reads them (libcurl loads
        // them at the first call; a start must not wait for that to fail).
        for (const char* key : {"etcd.ca_file", "etcd.cert_file", "etcd.key_file"}) {
          if (auto file = common::FindNamedFile(root, key, path)) common::ReadNamedFile(c, *file);
        }
      });
  if (!all.ok()) return all;
  return cfg;
}

}  // namespace weir::mgmt
