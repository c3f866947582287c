// The whole check of a weir-mgmt config, shared by --check and the start:
// the file itself (ParseMgmtConfig), then the token file the start reads.
#include "peer_tls.h"
#include "weir/common/config_file.h"
#include "weir/common/text.h"
#include "weir/mgmt/node_config.h"
#include "weir/mgmt/server.h"

namespace weir::mgmt {

absl::StatusOr<MgmtConfig> LoadAndCheckMgmtConfig(const std::string& path) {
  auto cfg = LoadMgmtConfig(path);
  absl::Status all =
      common::CheckNamedFiles(path, cfg.status(), [&](common::TomlChecker& c, const toml::table& root) {
        if (auto token = common::FindNamedFile(root, "mgmt.token_file", path)) CheckTokenFile(c, *token);
        if (auto token = common::FindNamedFile(root, "calibration.feedback_token_file", path))
          CheckTokenFile(c, *token);
        // etcd's TLS files: readable as the start reads them (libcurl loads
        // them at the first call; a start must not wait for that to fail).
        for (const char* key : {"etcd.ca_file", "etcd.cert_file", "etcd.key_file"}) {
          if (auto file = common::FindNamedFile(root, key, path)) common::ReadNamedFile(c, *file);
        }
        // [tls]: as the start loads them: readable, PEM, the key the
        // certificate's, not expired nor not yet valid, the CA loadable.
        if (cfg.ok() && cfg->tls.enabled) {
          if (auto infos = net::TlsServerContext::Check(MgmtTlsOptions(cfg->tls)); !infos.ok()) {
            const toml::node* n = root.at_path("tls").node();
            c.Fail(n != nullptr ? n->source() : root.source(),
                   common::Cat("[tls] ", common::ToStd(infos.status().message())));
          }
        }
      });
  if (!all.ok()) return all;
  return cfg;
}

}  // namespace weir::mgmt
