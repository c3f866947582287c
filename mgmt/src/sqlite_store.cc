// The SQLite StoreBackend: weir-mgmt's embedded default, one instance per
// database file. Every commit is one IMMEDIATE transaction that checks the
// stored version first. Control plane only.
#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <optional>
#include <utility>

#include "store_backends.h"
#include "weir/common/log.h"
#include "weir/common/text.h"

namespace weir::mgmt {

using common::Cat;
using common::ToStd;

namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tags(suffix TEXT PRIMARY KEY, line TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS nodes(node_id TEXT PRIMARY KEY, kind TEXT NOT NULL, peer TEXT NOT NULL,
  acked_version INTEGER NOT NULL DEFAULT 0, nack_version INTEGER NOT NULL DEFAULT 0,
  nack_reason TEXT NOT NULL DEFAULT '', last_seen INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS accounts(name TEXT PRIMARY KEY, secret TEXT NOT NULL, previous_secret TEXT,
  allow_unsigned INTEGER NOT NULL DEFAULT 0, allow_legacy_md5 INTEGER NOT NULL DEFAULT 0,
  rps INTEGER NOT NULL DEFAULT 0, created INTEGER NOT NULL, rotated INTEGER);
CREATE TABLE IF NOT EXISTS audit(id INTEGER PRIMARY KEY AUTOINCREMENT, time INTEGER NOT NULL,
  actor TEXT NOT NULL, action TEXT NOT NULL, detail TEXT NOT NULL, version INTEGER NOT NULL);
INSERT OR IGNORE INTO meta(key, value) VALUES ('version', '0');
INSERT OR IGNORE INTO meta(key, value) VALUES ('citymap', '');
INSERT OR IGNORE INTO meta(key, value) VALUES ('origin', lower(hex(randomblob(16))));
)sql";

// A prepared statement, finalized on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) { rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  bool ok() const { return rc_ == SQLITE_OK; }
  Stmt& Bind(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& Bind(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  Stmt& BindNull(int i) {
    sqlite3_bind_null(s_, i);
    return *this;
  }
  // SQLITE_ROW, SQLITE_DONE or an error code.
  int Step() { return sqlite3_step(s_); }
  std::string Text(int col) const {
    const unsigned char* t = sqlite3_column_text(s_, col);
    return t == nullptr ? std::string()
                        : std::string(reinterpret_cast<const char*>(t),
                                      static_cast<size_t>(sqlite3_column_bytes(s_, col)));
  }
  int64_t Int(int col) const { return sqlite3_column_int64(s_, col); }
  absl::Status Error() const { return absl::InternalError(Cat("database: ", sqlite3_errmsg(db_))); }
  // Runs a statement that returns no rows.
  absl::Status Run() {
    if (!ok()) return Error();
    int rc = Step();
    return rc == SQLITE_DONE ? absl::OkStatus() : Error();
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  int rc_;
};

int64_t Now() { return static_cast<int64_t>(std::time(nullptr)); }

// The canonical suffix text of a tag line ("cdn.example."), used as the key.
std::string SuffixOf(const std::string& canonical_line) {
  return canonical_line.substr(0, canonical_line.find(' '));
}

class SqliteBackend final : public StoreBackend {
 public:
  explicit SqliteBackend(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  ~SqliteBackend() override {
    FlushNodeRecords();
    sqlite3_close(db_);
  }
  absl::Status Exec(const char* sql);

  std::string Describe() const override { return Cat("sqlite ", path_); }
  absl::StatusOr<StoredConfig> Load() override;
  absl::StatusOr<std::pair<uint64_t, std::string>> Head() override;
  absl::StatusOr<uint64_t> Commit(const StoredConfig& base, const StoredConfig& next,
                                  const AuditRecord& audit) override;
  absl::Status NodeSeen(const NodeRecord& record) override;
  absl::Status NodeAck(const std::string& node_id, uint64_t version) override;
  absl::Status NodeNack(const std::string& node_id, uint64_t version, const std::string& reason) override;
  absl::Status NodeGone(const std::string& node_id) override;
  absl::StatusOr<std::vector<NodeRecord>> Nodes() override;
  absl::Status ForgetNode(const std::string& node_id) override;
  absl::StatusOr<std::vector<AuditRecord>> Audit(int limit) override;
  absl::StatusOr<std::vector<uint64_t>> VersionsAfter(uint64_t version, int limit) override;
  void FlushNodeRecords() override;

 private:
  // A node's registry changes not written yet (NodeSeen replaces the record).
  struct PendingNode {
    std::optional<NodeRecord> seen;
    std::optional<uint64_t> ack;
    std::optional<std::pair<uint64_t, std::string>> nack;
    int64_t last_seen = 0;
  };
  absl::Status WriteNodeRecords();
  std::map<std::string, PendingNode> pending_;
  absl::StatusOr<uint64_t> StoredVersion();

  sqlite3* db_;
  std::string path_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StoreBackend>> OpenSqliteBackend(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::UnavailableError(Cat("cannot open database ", path, ": ", msg));
  }
  // The database holds the HTTPDNS accounts' secrets: owner only (SQLite
  // gives its -wal and -shm files the database's mode). Not a file (an
  // in-memory database): nothing to do.
  if (path != ":memory:" && !path.empty()) chmod(path.c_str(), 0600);
  auto s = std::make_unique<SqliteBackend>(db, path);
  sqlite3_busy_timeout(db, 5000);
  if (absl::Status st = s->Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"); !st.ok()) return st;
  if (absl::Status st = s->Exec(kSchema); !st.ok()) return st;
  return s;
}

absl::Status SqliteBackend::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err != nullptr ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    return absl::InternalError(Cat("database: ", msg));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> SqliteBackend::StoredVersion() {
  Stmt q(db_, "SELECT value FROM meta WHERE key = 'version'");
  if (!q.ok()) return q.Error();
  if (q.Step() != SQLITE_ROW) return q.Error();
  auto v = ParseU64(q.Text(0));
  if (!v.ok()) return absl::DataLossError("database: meta.version is not a number");
  return *v;
}

absl::StatusOr<std::pair<uint64_t, std::string>> SqliteBackend::Head() {
  auto version = StoredVersion();
  if (!version.ok()) return version.status();
  Stmt q(db_, "SELECT value FROM meta WHERE key = 'origin'");
  if (!q.ok()) return q.Error();
  if (q.Step() != SQLITE_ROW) return q.Error();
  return std::make_pair(*version, q.Text(0));
}

absl::StatusOr<StoredConfig> SqliteBackend::Load() {
  StoredConfig out;
  {
    Stmt q(db_, "SELECT key, value FROM meta");
    if (!q.ok()) return q.Error();
    int rc;
    while ((rc = q.Step()) == SQLITE_ROW) {
      const std::string key = q.Text(0);
      if (key == "version") {
        auto v = ParseU64(q.Text(1));
        if (!v.ok()) return absl::DataLossError("database: meta.version is not a number");
        out.version = *v;
      } else if (key == "citymap") {
        out.citymap = q.Text(1);
      } else if (key == "origin") {
        out.origin = q.Text(1);
      } else if (key == "calibration") {
        out.calibration = q.Text(1);
      }
    }
    if (rc != SQLITE_DONE) return q.Error();
  }
  {
    Stmt q(db_, "SELECT line FROM tags ORDER BY suffix");
    if (!q.ok()) return q.Error();
    int rc;
    while ((rc = q.Step()) == SQLITE_ROW) out.tag_lines.push_back(q.Text(0));
    if (rc != SQLITE_DONE) return q.Error();
  }
  {
    Stmt q(db_,
           "SELECT name, secret, previous_secret, allow_unsigned, allow_legacy_md5, rps, created, rotated "
           "FROM accounts ORDER BY name");
    if (!q.ok()) return q.Error();
    int rc;
    while ((rc = q.Step()) == SQLITE_ROW) {
      const int64_t rps = q.Int(5);
      if (rps < 0 || rps > UINT32_MAX) return absl::DataLossError("database: accounts.rps out of range");
      out.accounts.push_back(AccountRecord{q.Text(0), q.Text(1), q.Text(2), q.Int(3) != 0, q.Int(4) != 0,
                                           static_cast<uint32_t>(rps), q.Int(6), q.Int(7)});
    }
    if (rc != SQLITE_DONE) return q.Error();
  }
  return out;
}

absl::StatusOr<uint64_t> SqliteBackend::Commit(const StoredConfig& base, const StoredConfig& next,
                                               const AuditRecord& audit) {
  if (absl::Status st = Exec("BEGIN IMMEDIATE"); !st.ok()) return st;
  auto fail = [&](absl::Status st) {
    (void)Exec("ROLLBACK");
    return st;
  };
  // Another process on the same file (two weir-mgmt on one database) may
  // have committed since this one read it.
  auto stored = StoredVersion();
  if (!stored.ok()) return fail(stored.status());
  if (*stored != base.version) {
    return fail(absl::AbortedError(Cat("the database is at version ", *stored, ", not ", base.version)));
  }
  const uint64_t version = base.version + 1;
  if (next.tag_lines != base.tag_lines) {
    if (absl::Status st = Exec("DELETE FROM tags"); !st.ok()) return fail(st);
    for (const std::string& l : next.tag_lines) {
      Stmt ins(db_, "INSERT INTO tags(suffix, line) VALUES (?1, ?2)");
      if (absl::Status st = ins.Bind(1, SuffixOf(l)).Bind(2, l).Run(); !st.ok()) return fail(st);
    }
  }
  if (next.accounts != base.accounts) {
    if (absl::Status st = Exec("DELETE FROM accounts"); !st.ok()) return fail(st);
    for (const AccountRecord& a : next.accounts) {
      Stmt ins(db_,
               "INSERT INTO accounts(name, secret, previous_secret, allow_unsigned, allow_legacy_md5, rps, "
               "created, rotated) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
      ins.Bind(1, a.name).Bind(2, a.secret);
      if (a.previous_secret.empty()) {
        ins.BindNull(3);
      } else {
        ins.Bind(3, a.previous_secret);
      }
      ins.Bind(4, int64_t{a.allow_unsigned}).Bind(5, int64_t{a.allow_legacy_md5}).Bind(6, int64_t{a.rps});
      ins.Bind(7, a.created);
      if (a.rotated == 0) {
        ins.BindNull(8);
      } else {
        ins.Bind(8, a.rotated);
      }
      if (absl::Status st = ins.Run(); !st.ok()) return fail(st);
    }
  }
  if (next.citymap != base.citymap) {
    Stmt up(db_, "UPDATE meta SET value = ?1 WHERE key = 'citymap'");
    if (absl::Status st = up.Bind(1, next.citymap).Run(); !st.ok()) return fail(st);
  }
  if (next.calibration != base.calibration) {
    // A database from before the calibration was stored has no row for it
    // (read as ""): the first commit that sets it adds the row.
    Stmt up(db_,
            "INSERT INTO meta(key, value) VALUES ('calibration', ?1) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value");
    if (absl::Status st = up.Bind(1, next.calibration).Run(); !st.ok()) return fail(st);
  }
  {
    Stmt up(db_, "UPDATE meta SET value = ?1 WHERE key = 'version'");
    if (absl::Status st = up.Bind(1, std::to_string(version)).Run(); !st.ok()) return fail(st);
  }
  {
    Stmt au(db_, "INSERT INTO audit(time, actor, action, detail, version) VALUES (?1, ?2, ?3, ?4, ?5)");
    au.Bind(1, audit.time).Bind(2, audit.actor).Bind(3, audit.action).Bind(4, audit.detail);
    au.Bind(5, static_cast<int64_t>(version));
    if (absl::Status st = au.Run(); !st.ok()) return fail(st);
  }
  if (absl::Status st = Exec("COMMIT"); !st.ok()) return fail(st);
  return version;
}

void SqliteBackend::FlushNodeRecords() {
  if (pending_.empty()) return;
  if (absl::Status st = WriteNodeRecords(); !st.ok()) {
    // Kept for the next flush: the registry is status, not configuration.
    common::LogWarning("store", "cannot write ", pending_.size(), " node records: ", ToStd(st.message()));
  }
}

absl::Status SqliteBackend::WriteNodeRecords() {
  if (absl::Status st = Exec("BEGIN IMMEDIATE"); !st.ok()) return st;
  auto fail = [&](absl::Status st) {
    (void)Exec("ROLLBACK");
    return st;
  };
  for (const auto& [id, p] : pending_) {
    if (p.seen) {
      Stmt q(db_,
             "INSERT INTO nodes(node_id, kind, peer, last_seen, acked_version) VALUES (?1, ?2, ?3, ?4, ?5) "
             "ON CONFLICT(node_id) DO UPDATE SET kind = ?2, peer = ?3, last_seen = ?4, acked_version = ?5");
      const NodeRecord& r = *p.seen;
      if (absl::Status st = q.Bind(1, r.node_id)
                                .Bind(2, r.kind)
                                .Bind(3, r.peer)
                                .Bind(4, r.last_seen)
                                .Bind(5, static_cast<int64_t>(r.acked_version))
                                .Run();
          !st.ok())
        return fail(st);
    }
    if (p.ack) {
      Stmt q(db_, "UPDATE nodes SET acked_version = ?2, last_seen = ?3 WHERE node_id = ?1");
      if (absl::Status st = q.Bind(1, id).Bind(2, static_cast<int64_t>(*p.ack)).Bind(3, p.last_seen).Run();
          !st.ok())
        return fail(st);
    }
    if (p.nack) {
      Stmt q(db_, "UPDATE nodes SET nack_version = ?2, nack_reason = ?3, last_seen = ?4 WHERE node_id = ?1");
      if (absl::Status st = q.Bind(1, id)
                                .Bind(2, static_cast<int64_t>(p.nack->first))
                                .Bind(3, p.nack->second)
                                .Bind(4, p.last_seen)
                                .Run();
          !st.ok())
        return fail(st);
    }
  }
  if (absl::Status st = Exec("COMMIT"); !st.ok()) return fail(st);
  pending_.clear();
  return absl::OkStatus();
}

absl::Status SqliteBackend::NodeGone(const std::string& node_id) {
  // One weir-mgmt per database: the server knows its own connections.
  (void)node_id;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint64_t>> SqliteBackend::VersionsAfter(uint64_t version, int limit) {
  Stmt q(db_, "SELECT DISTINCT version FROM audit WHERE version > ?1 ORDER BY version LIMIT ?2");
  if (!q.ok()) return q.Error();
  q.Bind(1, static_cast<int64_t>(version)).Bind(2, static_cast<int64_t>(limit));
  std::vector<uint64_t> out;
  int rc;
  while ((rc = q.Step()) == SQLITE_ROW) out.push_back(static_cast<uint64_t>(q.Int(0)));
  if (rc != SQLITE_DONE) return q.Error();
  return out;
}

absl::Status SqliteBackend::NodeSeen(const NodeRecord& r) {
  PendingNode& p = pending_[r.node_id];
  p = PendingNode{};
  p.seen = r;
  p.last_seen = r.last_seen;
  return absl::OkStatus();
}

absl::Status SqliteBackend::NodeAck(const std::string& node_id, uint64_t version) {
  PendingNode& p = pending_[node_id];
  p.ack = version;
  p.last_seen = Now();
  return absl::OkStatus();
}

absl::Status SqliteBackend::NodeNack(const std::string& node_id, uint64_t version,
                                     const std::string& reason) {
  PendingNode& p = pending_[node_id];
  p.nack = std::make_pair(version, reason);
  p.last_seen = Now();
  return absl::OkStatus();
}

absl::Status SqliteBackend::ForgetNode(const std::string& node_id) {
  FlushNodeRecords();
  Stmt q(db_, "DELETE FROM nodes WHERE node_id = ?1");
  if (absl::Status st = q.Bind(1, node_id).Run(); !st.ok()) return st;
  if (sqlite3_changes(db_) == 0) return absl::NotFoundError(Cat("no node '", node_id, "'"));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<NodeRecord>> SqliteBackend::Nodes() {
  if (!pending_.empty()) {
    if (absl::Status st = WriteNodeRecords(); !st.ok()) return st;
  }
  Stmt q(db_,
         "SELECT node_id, kind, peer, acked_version, nack_version, nack_reason, last_seen FROM nodes "
         "ORDER BY node_id");
  if (!q.ok()) return q.Error();
  std::vector<NodeRecord> out;
  int rc;
  while ((rc = q.Step()) == SQLITE_ROW) {
    NodeRecord& r = out.emplace_back();
    r.node_id = q.Text(0);
    r.kind = q.Text(1);
    r.peer = q.Text(2);
    r.acked_version = static_cast<uint64_t>(q.Int(3));
    r.nack_version = static_cast<uint64_t>(q.Int(4));
    r.nack_reason = q.Text(5);
    r.last_seen = q.Int(6);
  }
  if (rc != SQLITE_DONE) return q.Error();
  return out;
}

absl::StatusOr<std::vector<AuditRecord>> SqliteBackend::Audit(int limit) {
  Stmt q(db_, "SELECT id, time, actor, action, detail, version FROM audit ORDER BY id DESC LIMIT ?1");
  if (!q.ok()) return q.Error();
  q.Bind(1, static_cast<int64_t>(limit));
  std::vector<AuditRecord> out;
  int rc;
  while ((rc = q.Step()) == SQLITE_ROW) {
    out.push_back(
        AuditRecord{q.Int(0), q.Int(1), q.Text(2), q.Text(3), q.Text(4), static_cast<uint64_t>(q.Int(5))});
  }
  if (rc != SQLITE_DONE) return q.Error();
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace weir::mgmt
