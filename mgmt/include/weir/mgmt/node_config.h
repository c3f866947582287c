// The [mgmt] table a node's (fastpath, recursor) configuration file may
// carry: where weir-mgmt is and where the node keeps its last good snapshot.
// Documented in docs/mgmt.md. Control plane only.
#pragma once

#include <string>

#include <toml++/toml.h>

#include "weir/common/socket_address.h"
#include "weir/common/toml_checker.h"

namespace weir::mgmt {

struct NodeMgmtConfig {
  bool enabled = false;  // the table is present
  common::SocketAddress address;
  std::string node_id;     // default: the host name + "-" + kind
  std::string token_file;  // required
  std::string state_dir;   // required: the node starts from its stored snapshot when mgmt is down
};

// Reads root["mgmt"] into `out` (errors go to the checker with their
// position). Relative paths are left as written: the caller resolves them
// against the config file's directory.
void ParseNodeMgmt(common::TomlChecker& c, const toml::table& root, const std::string& kind,
                   NodeMgmtConfig* out);

}  // namespace weir::mgmt
