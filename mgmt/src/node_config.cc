#include "weir/mgmt/node_config.h"

#include <unistd.h>

#include "weir/common/text.h"

namespace weir::mgmt {

using common::Cat;
using common::ToStd;

void ParseNodeMgmt(common::TomlChecker& c, const toml::table& root, const std::string& kind,
                   NodeMgmtConfig* out) {
  const toml::table* m = common::SubTable(c, root, "mgmt");
  if (m == nullptr) return;
  out->enabled = true;
  c.OnlyKeys(*m, "mgmt", {"address", "node_id", "token_file", "state_dir"});
  std::string address = "127.0.0.1:8054";
  c.String(*m, "address", &address);
  c.String(*m, "node_id", &out->node_id);
  c.String(*m, "token_file", &out->token_file);
  c.String(*m, "state_dir", &out->state_dir);
  if (!c.ok()) return;
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

}  // namespace weir::mgmt
