// weir-mgmt's database (docs/behaviour.md#management): tags, city map, HTTPDNS
// accounts, node registry and audit log in SQLite. Every change is one transaction that validates the
// whole resulting snapshot before it commits and bumps the global version;
// a change that fails leaves the database exactly as it was.
// Single-threaded (the mgmt event loop). Control plane only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "weir/mgmt/snapshot.h"

struct sqlite3;

namespace weir::mgmt {

struct NodeRecord {
  std::string node_id;
  std::string kind;  // "fastpath" | "recursor"
  std::string peer;  // last address it connected from
  uint64_t acked_version = 0;
  uint64_t nack_version = 0;  // 0: never rejected one
  std::string nack_reason;
  int64_t last_seen = 0;  // unix seconds
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

class Store {
 public:
  // Opens (creating if needed) the database at `path` (":memory:" for tests).
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  uint64_t version() const { return version_; }
  const Snapshot& snapshot() const { return snapshot_; }

  // Each returns the new version. `line` is one line of the tag text format;
  // without `replace`, a suffix that already has a tag is an error.
  absl::StatusOr<uint64_t> AddTag(const std::string& line, bool replace, const std::string& actor);
  absl::StatusOr<uint64_t> RemoveTag(const std::string& suffix, const std::string& actor);
  // Replaces every tag; a bad line rejects the whole text ("line N: ...").
  absl::StatusOr<uint64_t> ImportTags(const std::string& text, const std::string& actor);
  // Replaces the city map; a bad line rejects the whole CSV ("line N: ...").
  absl::StatusOr<uint64_t> ImportCitymap(const std::string& csv, const std::string& actor);
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

  // A node connected, running `version` (what it says in its HELLO).
  absl::Status NodeSeen(const std::string& node_id, const std::string& kind, const std::string& peer,
                        uint64_t version);
  absl::Status NodeAck(const std::string& node_id, uint64_t version);
  absl::Status NodeNack(const std::string& node_id, uint64_t version, const std::string& reason);
  absl::StatusOr<std::vector<NodeRecord>> Nodes() const;
  // Forgets a retired node (NotFound when it was never seen); it comes back
  // when it connects again.
  absl::Status ForgetNode(const std::string& node_id);
  absl::StatusOr<std::vector<AuditRecord>> Audit(int limit) const;

 private:
  explicit Store(sqlite3* db) : db_(db) {}
  absl::Status Exec(const char* sql);
  absl::Status LoadSnapshot();
  // Writes the changed tag lines / citymap / accounts inside one
  // transaction: validates the whole snapshot, writes, bumps the version,
  // logs the audit entry.
  absl::StatusOr<uint64_t> Commit(std::vector<std::string> tag_lines, std::string citymap,
                                  std::vector<AccountRecord> accounts, const std::string& actor,
                                  const std::string& action, const std::string& detail);
  // The account named `name` in `accounts_`, or NotFound.
  absl::StatusOr<size_t> FindAccount(const std::string& name) const;

  sqlite3* db_;
  uint64_t version_ = 0;
  std::vector<std::string> tag_lines_;   // canonical lines, sorted by suffix
  std::vector<AccountRecord> accounts_;  // sorted by name
  Snapshot snapshot_;
};

}  // namespace weir::mgmt
