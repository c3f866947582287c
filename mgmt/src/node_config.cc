#include "weir/mgmt/node_config.h"

#include <unistd.h>

#include <algorithm>

#include "weir/common/line_errors.h"
#include "weir/common/text.h"
#include "weir/mgmt/snapshot.h"
#include "weir/net/tls.h"
#include "weir/partitions/tagtable.h"

namespace weir::mgmt {

using common::Cat;
using common::ToStd;

namespace {

// `address`: "ip:port", or an array of them (the instances of one weir-mgmt
// cluster, in the order the node tries them). Each error at its element.
void ParseMgmtAddresses(common::TomlChecker& c, const toml::table& m,
                        std::vector<common::SocketAddress>* out) {
  const toml::node* n = m.get("address");
  if (n == nullptr) {
    out->assign(1, *common::SocketAddress::Parse("127.0.0.1:8054"));
    return;
  }
  std::vector<const toml::node*> entries;
  if (n->is_string()) {
    entries.push_back(n);
  } else if (const toml::array* arr = n->as_array()) {
    if (arr->empty())
      return c.Fail(n->source(), "[mgmt] address: the array is empty (list 1 to 16 weir-mgmt addresses)");
    if (arr->size() > kMaxMgmtAddresses) {
      return c.Fail(n->source(), Cat("[mgmt] address: at most ", kMaxMgmtAddresses,
                                     " weir-mgmt addresses, not ", arr->size()));
    }
    for (const toml::node& e : *arr) entries.push_back(&e);
  } else {
    return c.Fail(n->source(), "[mgmt] address must be a string (\"ip:port\") or an array of them");
  }
  std::vector<common::SocketAddress> parsed;
  for (const toml::node* e : entries) {
    auto text = e->value<std::string>();
    if (!e->is_string() || !text) {
      c.Fail(e->source(), "[mgmt] address: every entry must be a string (\"ip:port\")");
      continue;
    }
    auto a = common::SocketAddress::Parse(*text, 8054);
    if (!a.ok()) {
      c.Fail(e->source(), Cat("[mgmt] address: ", ToStd(a.status().message())));
      continue;
    }
    const std::string key = a->ToString();
    if (std::any_of(parsed.begin(), parsed.end(),
                    [&](const common::SocketAddress& p) { return p.ToString() == key; })) {
      c.Fail(e->source(), Cat("[mgmt] address: ", key, " is listed twice"));
      continue;
    }
    parsed.push_back(*a);
  }
  if (parsed.size() == entries.size()) *out = std::move(parsed);
}

}  // namespace

void ParseNodeMgmt(common::TomlChecker& c, const toml::table& root, const std::string& kind,
                   NodeMgmtConfig* out) {
  const toml::table* m = common::SubTable(c, root, "mgmt");
  if (m == nullptr) return;
  out->enabled = true;
  const size_t errors_before = c.error_count();
  c.OnlyKeys(*m, "mgmt",
             {"address", "node_id", "token_file", "state_dir", "tls_cert_file", "tls_key_file", "tls_ca_file",
              "tls_server_name"});
  ParseMgmtAddresses(c, *m, &out->addresses);
  c.String(*m, "node_id", &out->node_id);
  c.String(*m, "token_file", &out->token_file);
  c.String(*m, "state_dir", &out->state_dir);
  c.String(*m, "tls_cert_file", &out->tls_cert_file);
  c.String(*m, "tls_key_file", &out->tls_key_file);
  c.String(*m, "tls_ca_file", &out->tls_ca_file);
  c.String(*m, "tls_server_name", &out->tls_server_name);
  if (c.error_count() != errors_before) return;  // the rules below would repeat those errors
  const int tls_files = !out->tls_cert_file.empty() + !out->tls_key_file.empty() + !out->tls_ca_file.empty();
  if (tls_files != 0 && tls_files != 3) {
    return c.Fail(m->source(),
                  "[mgmt] tls_cert_file, tls_key_file and tls_ca_file go together (all three or none)");
  }
  if (tls_files == 0 && !out->tls_server_name.empty())
    return c.Fail(m->get("tls_server_name")->source(),
                  "[mgmt] tls_server_name needs tls_cert_file, tls_key_file and tls_ca_file");
  if (out->token_file.empty() && tls_files == 0)
    return c.Fail(m->source(), "[mgmt] needs 'token_file' (mgmt authenticates nodes), or the tls_* files");
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
  // The TLS files, as each connect loads them: readable, PEM, the key the
  // certificate's, not expired nor not yet valid, the CA loadable.
  auto cert = common::FindNamedFile(root, "mgmt.tls_cert_file", config_path);
  auto key = common::FindNamedFile(root, "mgmt.tls_key_file", config_path);
  auto ca = common::FindNamedFile(root, "mgmt.tls_ca_file", config_path);
  if (cert && key && ca) {
    net::TlsClientOptions client;
    client.certificate = {cert->path, key->path};
    client.ca = ca->path;
    net::TlsServerOptions dated;  // the same checks as a server's, the dates included
    dated.certificates.push_back(client.certificate);
    auto ctx = net::TlsClientContext::Create(client);
    if (!ctx.ok()) {
      c.Fail(cert->value->source(), Cat("[mgmt] TLS: ", ToStd(ctx.status().message())));
    } else if (auto dates = net::TlsServerContext::Check(dated); !dates.ok()) {
      c.Fail(cert->value->source(), Cat("[mgmt] TLS: ", ToStd(dates.status().message())));
    }
  }
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
