// The [mgmt] table a node's (fastpath, recursor) configuration file may
// carry: where weir-mgmt is and where the node keeps its last good snapshot.
// Documented in docs/mgmt.md. Control plane only.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "absl/status/statusor.h"
#include "weir/common/config_file.h"
#include "weir/common/socket_address.h"
#include "weir/common/toml_checker.h"

namespace weir::mgmt {

inline constexpr size_t kMaxMgmtAddresses = 16;

struct NodeMgmtConfig {
  bool enabled = false;  // the table is present
  // `address`: one "ip:port" or an array of 1..kMaxMgmtAddresses, each a
  // weir-mgmt instance of one cluster, tried in this order.
  std::vector<common::SocketAddress> addresses;
  std::string node_id;     // default: the host name + "-" + kind
  std::string token_file;  // required without TLS
  std::string state_dir;   // required: the node starts from its stored snapshot when mgmt is down
  // TLS with a client certificate (all three or none; docs/mgmt.md#tls);
  // tls_server_name: the name weir-mgmt's certificate must carry (optional).
  std::string tls_cert_file, tls_key_file, tls_ca_file, tls_server_name;
};

// Reads root["mgmt"] into `out` (errors go to the checker with their
// position). Relative paths are left as written: the caller resolves them
// against the config file's directory.
void ParseNodeMgmt(common::TomlChecker& c, const toml::table& root, const std::string& kind,
                   NodeMgmtConfig* out);

// The token a token file holds: its first line, surrounding whitespace
// removed; at least 16 characters.
absl::StatusOr<std::string> TokenFromText(std::string_view text);

// The token file a config names (`file`), checked as the start reads it:
// missing, unreadable or too short is one error at the key's value.
void CheckTokenFile(common::TomlChecker& c, const common::NamedFile& file);

// A tag file a config names, checked as the start reads it: every bad line
// as "PATH:LINE: reason".
void CheckTagFile(common::TomlChecker& c, const common::NamedFile& file);

// What a node's start reads of its [control] table (the TCP token file) and
// of its [mgmt] table (`root` is the parsed
// config at `config_path`): the token file, and the snapshot stored in
// state_dir. Returns true when the start will take the tags and the city
// map from that snapshot, so the files the config names for them are not
// read (and may be absent).
bool CheckNodeMgmtFiles(common::TomlChecker& c, const toml::table& root, const std::string& config_path);

}  // namespace weir::mgmt
