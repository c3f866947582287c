// The whole check of a weir-fastpath config, shared by --check and the
// start: the file itself (config.cc), then what Node::Prepare reads.
#include <optional>
#include <string>

#include "weir/common/config_file.h"
#include "weir/common/line_errors.h"
#include "weir/common/text.h"
#include "weir/dns/httpdns.h"
#include "weir/fastpath/config.h"
#include "weir/mgmt/node_config.h"
#include "weir/net/tls.h"
#include "weir/partitions/citymap.h"

namespace weir::fastpath {

namespace {

using common::Cat;
using common::ToStd;

void AddLines(common::TomlChecker& c, const std::vector<std::string>& lines) {
  for (const std::string& l : lines) c.AddLine(l);
}

// The city map and the tags, as Node::LoadPartitions reads them (`files`
// false: the node starts from its stored mgmt snapshot and reads neither
// file, but the default city still applies to the snapshot's map).
void CheckPartitionFiles(common::TomlChecker& c, const toml::table& root, const std::string& path,
                         bool files) {
  partitions::CityMapOptions options;
  // A bad default city fails every map, with the file or without: it is
  // reported once, at its key.
  if (const toml::node* n = root.at_path("partitions.default_city").node(); n != nullptr && n->is_string()) {
    partitions::CityMapOptions wanted{.default_city = n->as_string()->get()};
    auto alone = partitions::CityMap::FromCsv("", wanted);
    if (alone.ok()) {
      options = wanted;
    } else {
      c.Fail(n->source(), Cat("[partitions] default_city: ", ToStd(alone.status().message())));
    }
  }
  if (!files) return;
  if (auto file = common::FindNamedFile(root, "partitions.citymap", path)) {
    if (std::optional<std::string> csv = common::ReadNamedFile(c, *file)) {
      common::LineErrors errors;
      if (!partitions::CityMap::FromCsv(*csv, options, &errors).ok()) AddLines(c, errors.Render(file->path));
    }
  }
  if (auto file = common::FindNamedFile(root, "partitions.tags", path)) mgmt::CheckTagFile(c, *file);
}

}  // namespace

absl::StatusOr<FastpathConfig> LoadAndCheckConfig(const std::string& path,
                                                  const std::vector<std::string>& built) {
  auto cfg = LoadConfig(path, built);
  absl::Status all =
      common::CheckNamedFiles(path, cfg.status(), [&](common::TomlChecker& c, const toml::table& root) {
        // With [mgmt] and a stored snapshot the node starts from the snapshot:
        // its own files are not read then.
        const bool from_snapshot = mgmt::CheckNodeMgmtFiles(c, root, path);
        CheckPartitionFiles(c, root, path, !from_snapshot);
        // The HTTPDNS accounts file as the node reads it (without [mgmt]).
        if (!from_snapshot && cfg.ok() && cfg->httpdns.enabled) {
          if (auto file = common::FindNamedFile(root, "httpdns.accounts_file", path)) {
            if (std::optional<std::string> text = common::ReadNamedFile(c, *file)) {
              if (auto accounts = dns::httpdns::ParseAccounts(*text); !accounts.ok())
                c.Fail(file->value->source(), Cat(file->path, ": ", ToStd(accounts.status().message())));
            }
          }
        }
        // The certificates and keys as the encrypted front loads them:
        // unreadable, expired, not yet valid, a key not the certificate's.
        if (cfg.ok() && !cfg->tls.certificates.empty()) {
          net::TlsServerOptions o;
          for (const TlsConfig::Certificate& cert : cfg->tls.certificates)
            o.certificates.push_back({cert.chain, cert.key});
          if (auto infos = net::TlsServerContext::Check(o); !infos.ok()) {
            const toml::node* n = root.at_path("tls.certificate").node();
            c.Fail(n != nullptr ? n->source() : root.source(),
                   Cat("[tls] ", ToStd(infos.status().message())));
          }
        }
      });
  if (!all.ok()) return all;
  return cfg;
}

}  // namespace weir::fastpath
