// weir-mgmt's configuration store (docs/behaviour.md#management): tags, city
// map, HTTPDNS accounts, node registry and audit log. Every change is
// computed against the version this instance holds, validated as the whole
// resulting snapshot, and committed only if the store is still at that
// version: a change that fails leaves the store exactly as it was, and two
// weir-mgmt instances that commit at once never lose one (the second gets a
// conflict). Where it is kept is a StoreBackend: SQLite (one weir-mgmt, the
// embedded default) or etcd (several weir-mgmt instances, docs/mgmt.md#etcd).
// Single-threaded (the mgmt event loop). Control plane only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "weir/mgmt/snapshot.h"

namespace weir::mgmt {

struct NodeRecord {
  std::string node_id;
  std::string kind;  // "fastpath" | "recursor"
  std::string peer;  // last address it connected from
  uint64_t acked_version = 0;
  uint64_t nack_version = 0;  // 0: never rejected one
  std::string nack_reason;
  int64_t last_seen = 0;  // unix seconds
  // The weir-mgmt instance the node is (or was last) connected to, and
  // whether it is connected now (as that instance last recorded it).
  std::string mgmt;
  bool connected = false;
};

struct AuditRecord {
  int64_t id = 0;
  int64_t time = 0;
  std::string actor;
  std::string action;
  std::string detail;
  uint64_t version = 0;
};

// An HTTPDNS account as stored (the `accounts` table). The secrets are the
// nodes' to check signatures with: nothing here ever logs or audits them.
struct AccountRecord {
  std::string name;
  std::string secret;           // current
  std::string previous_secret;  // still live after a rotation until retired; "" none
  bool allow_unsigned = false;
  bool allow_legacy_md5 = false;
  uint32_t rps = 0;     // 0: no limit
  int64_t created = 0;  // unix seconds
  int64_t rotated = 0;  // unix seconds of the last rotation; 0 never
  friend bool operator==(const AccountRecord&, const AccountRecord&) = default;
};

// What `account add` / `account set` give; unset keys keep their value
// (add: the defaults, off / off / 0).
struct AccountSettings {
  std::optional<bool> allow_unsigned;
  std::optional<bool> allow_legacy_md5;
  std::optional<uint32_t> rps;
  bool empty() const { return !allow_unsigned && !allow_legacy_md5 && !rps; }
};

// Whether `secret` may be an account's: 16..128 printable ASCII octets, no
// space (dns/httpdns.h). The error never shows the secret.
absl::Status CheckAccountSecret(std::string_view secret);

// The configuration as a backend keeps it.
struct StoredConfig {
  uint64_t version = 0;                 // 0: nothing committed yet
  std::string origin;                   // the store's id (Snapshot::origin)
  std::vector<std::string> tag_lines;   // canonical tag lines, sorted by suffix
  std::string citymap;                  // the city-map CSV as imported
  std::vector<AccountRecord> accounts;  // sorted by name
  // The traffic-share calibrator's state (Calibrator::FormatState text;
  // "" none): kept with the configuration so that another weir-mgmt, or
  // this one restarted, goes on from the same factors.
  std::string calibration;
};

// Where the store is kept. Every call is synchronous and bounded in time
// (the backend's timeouts). Errors: a failure of the backend itself is
// Internal or DataLoss (SQLite) / Unavailable or Unknown (etcd unreachable,
// or the outcome of a commit unknown); a commit whose base is no longer
// the stored version is Aborted and changes nothing.
class StoreBackend {
 public:
  virtual ~StoreBackend() = default;
  // "sqlite PATH", "etcd ENDPOINTS prefix P": for the start line and status.
  virtual std::string Describe() const = 0;
  virtual absl::StatusOr<StoredConfig> Load() = 0;
  // The stored version and origin alone (a cheap read: has it changed?).
  virtual absl::StatusOr<std::pair<uint64_t, std::string>> Head() = 0;
  // Stores `next` (its version is ignored) if the stored version is still
  // `base.version`; returns the new version. `audit` (its version and id are
  // filled in) is written with it.
  virtual absl::StatusOr<uint64_t> Commit(const StoredConfig& base, const StoredConfig& next,
                                          const AuditRecord& audit) = 0;
  // The node registry. `mgmt` names this weir-mgmt instance.
  virtual absl::Status NodeSeen(const NodeRecord& record) = 0;
  virtual absl::Status NodeAck(const std::string& node_id, uint64_t version) = 0;
  virtual absl::Status NodeNack(const std::string& node_id, uint64_t version, const std::string& reason) = 0;
  // The node's session on this instance ended (a record another instance
  // wrote since stays as it is).
  virtual absl::Status NodeGone(const std::string& node_id) = 0;
  virtual absl::StatusOr<std::vector<NodeRecord>> Nodes() = 0;
  virtual absl::Status ForgetNode(const std::string& node_id) = 0;
  // The newest `limit` entries, oldest first.
  virtual absl::StatusOr<std::vector<AuditRecord>> Audit(int limit) = 0;
  // The versions committed after `version`, oldest first (at most `limit`).
  virtual absl::StatusOr<std::vector<uint64_t>> VersionsAfter(uint64_t version, int limit) = 0;
  // Writes node-registry changes the backend holds back (a thousand ACKs
  // are one transaction, not a thousand disk syncs on the mgmt loop);
  // weir-mgmt calls it every half second and at stop. Nodes() sees them
  // before they are written.
  virtual void FlushNodeRecords() {}
  // Calls `changed` (on a thread of the backend's) when another instance
  // may have committed: the owner then calls Store::Refresh on its own
  // thread. SQLite has no other writer and never calls it.
  virtual void OnExternalChange(std::function<void()> changed) { (void)changed; }
};

class Store {
 public:
  // Opens (creating if needed) the SQLite database at `path` (":memory:" for tests).
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path);
  // A store on `backend`: loads what it holds.
  static absl::StatusOr<std::unique_ptr<Store>> Open(std::unique_ptr<StoreBackend> backend);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  uint64_t version() const { return version_; }
  const Snapshot& snapshot() const { return snapshot_; }
  StoreBackend& backend() { return *backend_; }

  // Reads the backend again and takes what it holds when it is newer than
  // this instance's copy (a higher version, or another origin: a restored
  // store). Returns true when the snapshot changed. Never goes back to an
  // older version.
  absl::StatusOr<bool> Refresh();

  // Each returns the new version. `line` is one line of the tag text format;
  // without `replace`, a suffix that already has a tag is an error.
  absl::StatusOr<uint64_t> AddTag(const std::string& line, bool replace, const std::string& actor);
  absl::StatusOr<uint64_t> RemoveTag(const std::string& suffix, const std::string& actor);
  // Replaces every tag; a bad line rejects the whole text, and the status
  // names every bad line, one per line: "SOURCE:N: reason" (SOURCE: the
  // file the operator imported, "import" when not given).
  absl::StatusOr<uint64_t> ImportTags(const std::string& text, const std::string& actor,
                                      const std::string& source = "");
  // Replaces the city map; a bad line rejects the whole CSV, every bad line
  // named as ImportTags names them.
  absl::StatusOr<uint64_t> ImportCitymap(const std::string& csv, const std::string& actor,
                                         const std::string& source = "");
  // Changes the tag of `suffix` in place: each "key=value" of `changes`
  // replaces that key (or is added); the other keys stay.
  absl::StatusOr<uint64_t> EditTag(const std::string& suffix, const std::vector<std::string>& changes,
                                   const std::string& actor);
  // Adds one city-map line ("cidr,city[,ecs]"); without `replace`, a prefix
  // that is already mapped is an error. The map's other lines, comments
  // included, stay as they are.
  absl::StatusOr<uint64_t> AddCityMapping(const std::string& line, bool replace, const std::string& actor);
  // Removes the line that maps exactly `cidr`.
  absl::StatusOr<uint64_t> RemoveCityMapping(const std::string& cidr, const std::string& actor);

  // HTTPDNS accounts. Errors never show a secret; audit entries name the
  // account and the action, never a secret.
  // A new account; an existing name, or a name IsValidAccountName refuses, is an error.
  absl::StatusOr<uint64_t> AddAccount(const std::string& name, const std::string& secret,
                                      const AccountSettings& settings, const std::string& actor);
  // `secret` becomes current; the current one stays live as the previous
  // one; the previous one is dropped. A secret the account has is refused.
  absl::StatusOr<uint64_t> RotateAccount(const std::string& name, const std::string& secret,
                                         const std::string& actor);
  // Drops the previous secret: the end of a rotation's overlap.
  absl::StatusOr<uint64_t> RetireAccountSecret(const std::string& name, const std::string& actor);
  // Changes the settings given; a change that changes nothing is refused.
  absl::StatusOr<uint64_t> SetAccount(const std::string& name, const AccountSettings& settings,
                                      const std::string& actor);
  absl::StatusOr<uint64_t> RemoveAccount(const std::string& name, const std::string& actor);
  // Sorted by name.
  const std::vector<AccountRecord>& accounts() const { return accounts_; }

  // The traffic-share calibration (calibration.h): its state as text, and a
  // commit of a new state (an import stepped, factors decayed). The
  // snapshot's factors are the state's for the names a calibrate=on tag
  // covers. AlreadyExists when `state` is what the store holds.
  const std::string& calibration() const { return calibration_; }
  absl::StatusOr<uint64_t> SetCalibration(std::string state, const std::string& actor,
                                          const std::string& action, const std::string& detail);

  // A node connected, running `version` (what it says in its HELLO).
  absl::Status NodeSeen(const std::string& node_id, const std::string& kind, const std::string& peer,
                        uint64_t version, const std::string& mgmt = {});
  absl::Status NodeAck(const std::string& node_id, uint64_t version) {
    return backend_->NodeAck(node_id, version);
  }
  absl::Status NodeNack(const std::string& node_id, uint64_t version, const std::string& reason) {
    return backend_->NodeNack(node_id, version, reason);
  }
  absl::StatusOr<std::vector<NodeRecord>> Nodes() const { return backend_->Nodes(); }
  // Forgets a retired node (NotFound when it was never seen); it comes back
  // when it connects again.
  absl::Status ForgetNode(const std::string& node_id) { return backend_->ForgetNode(node_id); }
  absl::StatusOr<std::vector<AuditRecord>> Audit(int limit) const { return backend_->Audit(limit); }

 private:
  explicit Store(std::unique_ptr<StoreBackend> backend) : backend_(std::move(backend)) {}
  // Takes `config` as this instance's copy (validated).
  absl::Status Take(StoredConfig config);
  // Commits the changed tag lines / citymap / accounts with the audit
  // entry: validates the whole snapshot, then the backend writes it if the
  // store is still at this instance's version (else a conflict, and this
  // instance reads the store again).
  absl::StatusOr<uint64_t> Commit(std::vector<std::string> tag_lines, std::string citymap,
                                  std::vector<AccountRecord> accounts, const std::string& actor,
                                  const std::string& action, const std::string& detail);
  // The same with a new calibration state.
  absl::StatusOr<uint64_t> Commit(std::vector<std::string> tag_lines, std::string citymap,
                                  std::vector<AccountRecord> accounts, std::string calibration,
                                  const std::string& actor, const std::string& action,
                                  const std::string& detail);
  // The account named `name` in `accounts_`, or NotFound.
  absl::StatusOr<size_t> FindAccount(const std::string& name) const;

  std::unique_ptr<StoreBackend> backend_;
  uint64_t version_ = 0;
  std::vector<std::string> tag_lines_;   // canonical lines, sorted by suffix
  std::vector<AccountRecord> accounts_;  // sorted by name
  std::string calibration_;
  Snapshot snapshot_;
};

}  // namespace weir::mgmt
