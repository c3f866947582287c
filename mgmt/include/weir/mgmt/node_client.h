// The node side of mgmt's push stream (docs/behaviour.md#management), used by
// weir-fastpath and weir-recursor: one thread keeps a TCP connection to
// weir-mgmt, receives versioned snapshots, hands each to the node's apply
// function (validate + RCU swap), stores the applied one on disk and ACKs
// the version, or NACKs it with the reason and keeps the last good one.
// Knows one or more weir-mgmt instances (one etcd-backed cluster): when a
// session is lost it tries the next address at once, and backs off only
// after a whole round of addresses failed; the node keeps answering.
//
// Threading: Start() and Stop() on the owner's thread; the connection runs on
// the client's own net::EventLoop thread; the getters from any thread.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "weir/common/log.h"
#include "weir/common/prometheus.h"
#include "weir/common/socket_address.h"
#include "weir/mgmt/control.h"
#include "weir/mgmt/snapshot.h"

namespace weir::net {
class EventLoop;
}

namespace weir::mgmt {

struct NodeClientOptions {
  // The weir-mgmt instances, tried in this order starting with the first
  // (at least one).
  std::vector<common::SocketAddress> mgmt;
  std::string token;
  std::string node_id;
  std::string kind;       // "fastpath" | "recursor"
  std::string state_dir;  // where the last good snapshot is kept; empty: not kept
  // The back-off between rounds (every address failed in a row), doubling.
  int reconnect_min_ms = 200;
  int reconnect_max_ms = 5000;
  // Per address: a black-holed instance must not delay the move to a live one.
  // Bounds the TLS handshake too.
  int connect_timeout_ms = 1000;
  // TLS with a client certificate (docs/mgmt.md#tls), when tls_cert_file is
  // set: the files are read at each connect, so a renewed certificate is
  // used from the next session. tls_server_name: the name weir-mgmt's
  // certificate must carry ("": only its signature by tls_ca_file counts).
  std::string tls_cert_file, tls_key_file, tls_ca_file, tls_server_name;
};

// Reads a token file: the first line, surrounding whitespace removed; at
// least 16 characters.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

class NodeClient {
 public:
  // Validates and swaps in a snapshot; an error is sent back as the NACK
  // reason. `changed` names the parts that differ from what the node runs
  // (the others may be kept as built).
  using ApplyFn = std::function<absl::Status(const Snapshot&, const SnapshotParts& changed)>;

  NodeClient(NodeClientOptions options, ApplyFn apply);
  ~NodeClient();
  NodeClient(const NodeClient&) = delete;
  NodeClient& operator=(const NodeClient&) = delete;

  // Control requests weir-mgmt fans out to its nodes (weirctl --all) are
  // answered by `handler`, on the client's thread; without one they are
  // answered with an error. Before Start().
  void SetControlHandler(ControlHandler handler) { control_ = std::move(handler); }
  // A control verb whose work runs elsewhere and is answered later, so
  // that the client's thread goes on taking pushes meanwhile: `handler`
  // is called on the client's thread and calls `reply` once, from any
  // thread (a reply after the session ended goes nowhere). Before Start().
  using ControlReplyFn = std::function<void(ControlReply)>;
  using AsyncControlHandler = std::function<void(const ControlRequest&, ControlReplyFn reply)>;
  void SetAsyncControlHandler(std::string verb, AsyncControlHandler handler) {
    async_control_[std::move(verb)] = std::move(handler);
  }

  // `have_version` / `have_origin`: what the node already runs (its stored
  // snapshot), 0 / "" for none.
  absl::Status Start(uint64_t have_version, std::string have_origin);
  // Starts from the snapshot the node stored: with its content known, the
  // node takes incremental pushes (DELTA) against it from the first session.
  absl::Status Start(Snapshot stored);
  void Stop();

  uint64_t applied_version() const { return applied_.load(std::memory_order_relaxed); }
  bool connected() const { return connected_.load(std::memory_order_relaxed); }
  uint64_t rejected() const { return rejected_.load(std::memory_order_relaxed); }
  std::string last_error() const;
  // The weir-mgmt address of the live session ("ip:port"), "" when none.
  std::string current_mgmt() const;
  // Sessions opened to another address than the one of the session before.
  uint64_t failovers() const { return failovers_.load(std::memory_order_relaxed); }
  // The node's mgmt families (weir_mgmt_snapshot_version, weir_mgmt_connected,
  // weir_mgmt_rejected_total, weir_mgmt_failovers_total). Any thread.
  void RenderMetrics(common::PrometheusWriter& w) const;

 private:
  struct Session;

  // One connection's lifetime, on the loop thread: Connect() opens it to
  // options_.mgmt[next_], OnConnected() sends HELLO, OnSession() moves the
  // stream, End() closes it with the reason and schedules the Connect() to
  // the next address: at once, or after the back-off when that completes a
  // round of failures.
  void Connect();
  void OnConnected();
  // With TLS: drives the handshake on; once done, the session starts.
  void Handshake();
  // The session proper: HELLO goes out.
  void StartSession();
  void OnSession(uint32_t events);
  // The snapshots and errors received; a non-OK status ends the session.
  absl::Status HandleFrames();
  // ACK, NACK or apply one snapshot; the reply goes to the session's output.
  // Applies (or refuses) a snapshot; `parts`: the parts a delta changed
  // (null: compared with what the node runs).
  void HandleSnapshot(const Snapshot& snap, const SnapshotParts* parts);
  void HandleDelta(const SnapshotDelta& delta);
  void End(const absl::Status& why);
  void SetError(std::string e);
  void SetCurrent(std::string address);

  NodeClientOptions options_;
  ApplyFn apply_;
  ControlHandler control_;
  std::map<std::string, AsyncControlHandler> async_control_;
  // Work posted to the client's thread by other threads (late replies).
  void Post(std::function<void()> fn);
  std::mutex posted_mu_;
  std::vector<std::function<void()>> posted_;
  uint64_t session_serial_ = 0;  // the loop thread's: which session a late reply belongs to
  std::thread thread_;
  std::unique_ptr<net::EventLoop> loop_;
  std::unique_ptr<Session> session_;  // none between connections
  // The loop thread's: the address the next Connect() uses, the index of the
  // last session that reached TCP connect (-1: none yet), the sessions that
  // failed in a row in this round, and the back-off after the round.
  size_t next_ = 0;
  int last_connected_ = -1;
  size_t round_failures_ = 0;
  int backoff_ms_ = 0;
  std::atomic<bool> running_{false};
  std::atomic<uint64_t> applied_{0};
  std::string applied_origin_;  // the client thread's, after Start
  std::atomic<bool> connected_{false};
  std::atomic<uint64_t> rejected_{0};
  std::atomic<uint64_t> failovers_{0};
  std::atomic<uint64_t> deltas_applied_{0};
  std::atomic<uint64_t> deltas_refused_{0};               // a base that differs: the whole snapshot follows
  std::array<std::atomic<uint64_t>, 4> applied_parts_{};  // tags, citymap, accounts, factors rebuilt
  // What the node runs, in full: the base of the next delta (client thread).
  std::optional<Snapshot> current_;
  // A mgmt that keeps pushing what this node refuses, or that cannot be
  // reached, must not flood the log.
  common::RateLimitedLog rejected_log_{{.component = "mgmt"}};
  common::RateLimitedLog connection_log_{{.component = "mgmt"}};
  common::RateLimitedLog failover_log_{{.level = common::LogLevel::kInfo, .component = "mgmt"}};
  mutable std::mutex mu_;
  std::string last_error_;    // guarded by mu_
  std::string current_mgmt_;  // guarded by mu_
};

}  // namespace weir::mgmt

namespace weir::mgmt {

struct NodeMgmtConfig;

// What a node needs before it answers: the token, and the snapshot it
// stored last time (nullopt when none, or when the file is damaged: that
// is logged and the node starts from its files, then mgmt's push).
struct NodeStart {
  std::string token;
  std::optional<Snapshot> stored;
};
absl::StatusOr<NodeStart> PrepareNode(const NodeMgmtConfig& config, const std::string& kind);

NodeClientOptions MakeNodeClientOptions(const NodeMgmtConfig& config, const std::string& kind,
                                        const std::string& token);

}  // namespace weir::mgmt
