// weir-mgmt: the management daemon (docs/behaviour.md#management). One event loop thread
// serves both kinds of peers on one TCP port: nodes (a HELLO, then snapshots
// pushed on every change, ACK/NACK back) and weirctl (one REQUEST, one
// REPLY). Every peer presents the shared token. Control plane only.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "weir/common/socket_address.h"
#include "weir/mgmt/calibration.h"
#include "weir/mgmt/etcd_store.h"

namespace weir::mgmt {

// The port of `mgmt.metrics_listen` when the address names none
// (weir-fastpath's is 9153, weir-recursor's 9154).
inline constexpr uint16_t kDefaultMetricsPort = 9155;

// [tls]: the listener speaks TLS only and every peer presents a client
// certificate signed by `ca_file`; its subject's OU says what it may do
// (docs/mgmt.md#tls).
struct MgmtTlsConfig {
  bool enabled = false;
  std::string cert_file;  // PEM chain, the leaf first
  std::string key_file;
  std::string ca_file;  // signs the nodes' and operators' certificates
};

// [calibration]: the traffic-share calibration of the weights
// (docs/calibration.md). The controller always runs for names tagged
// calibrate=on; the HTTP feedback endpoint only with `feedback_listen`.
struct MgmtCalibrationConfig {
  CalibrationOptions options;
  // Stale sets hold, then decay, one step this often.
  int step_interval_s = 300;
  // POST /v1/traffic: the JSON feedback document, with its own bearer
  // token (the CDN side's credential, not the operators').
  bool feedback_enabled = false;
  common::SocketAddress feedback_listen;
  std::string feedback_token_file;
  int max_feedback_bytes = 8 << 20;
};

// The port of `calibration.feedback_listen` when the address names none.
inline constexpr uint16_t kDefaultFeedbackPort = 8055;

struct MgmtConfig {
  common::SocketAddress listen;
  // Where the store is kept: "sqlite" (the embedded default: `database`)
  // or "etcd" (the [etcd] table; several weir-mgmt instances share it).
  std::string store = "sqlite";
  std::string database;  // SQLite file
  EtcdStoreOptions etcd;
  // This instance's name in the node registry (`weirctl nodes`); default
  // the host name and the listen port.
  std::string instance;
  std::string token_file;  // optional with [tls]
  MgmtTlsConfig tls;
  int max_connections = 1024;
  // A version goes out to this many nodes at a time, the next batch this
  // long after (a commit to a thousand nodes is written out over a few
  // milliseconds, in a random order).
  int push_batch = 64;
  int push_batch_interval_ms = 2;
  // After a tag change adds suffixes, each connected recursor is asked
  // whether it finds their zones, for this long (the reply waits up to a
  // second more); 0: not asked.
  int zone_check_ms = 2000;
  // The Prometheus endpoint (GET/HEAD /metrics); off unless configured.
  bool metrics_enabled = false;
  common::SocketAddress metrics_listen;
  MgmtCalibrationConfig calibration;
  std::string path;  // the config file, for messages
};

// Errors read "path:line:column: reason". Every key: docs/mgmt.md.
absl::StatusOr<MgmtConfig> LoadMgmtConfig(const std::string& path);
absl::StatusOr<MgmtConfig> ParseMgmtConfig(std::string_view text, const std::string& name);
// Everything the start checks before it binds anything, and --check runs the
// same: LoadMgmtConfig, then the token file (missing, unreadable, too
// short). Every error is one line of the message.
absl::StatusOr<MgmtConfig> LoadAndCheckMgmtConfig(const std::string& path);

class MgmtServer {
 public:
  explicit MgmtServer(MgmtConfig config);
  ~MgmtServer();
  // Opens the database, reads the token, binds; then serves on a thread.
  absl::Status Start();
  void Stop();
  // Rebuilds the TLS context from the [tls] files now (SIGHUP); the loop
  // also does it when a file changes. Any thread.
  absl::Status ReloadTls();
  // The bound address (the port when 0 was configured).
  common::SocketAddress bound() const;
  // "listening A", then "metrics http A" and "feedback http A" when those
  // endpoints are on.
  std::string DescribeListeners() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir::mgmt
