// weir-mgmt: the management daemon (DESIGN section 8). One event loop thread
// serves both kinds of peers on one TCP port: nodes (a HELLO, then snapshots
// pushed on every change, ACK/NACK back) and weirctl (one REQUEST, one
// REPLY). Every peer presents the shared token. Control plane only.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "weir/common/socket_address.h"

namespace weir::mgmt {

struct MgmtConfig {
  common::SocketAddress listen;
  std::string database;  // SQLite file
  std::string token_file;
  int max_connections = 1024;
  std::string path;  // the config file, for messages
};

// Errors read "path:line:column: reason". Every key: docs/mgmt.md.
absl::StatusOr<MgmtConfig> LoadMgmtConfig(const std::string& path);
absl::StatusOr<MgmtConfig> ParseMgmtConfig(std::string_view text, const std::string& name);

class MgmtServer {
 public:
  explicit MgmtServer(MgmtConfig config);
  ~MgmtServer();
  // Opens the database, reads the token, binds; then serves on a thread.
  absl::Status Start();
  void Stop();
  // The bound address (the port when 0 was configured).
  common::SocketAddress bound() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir::mgmt
