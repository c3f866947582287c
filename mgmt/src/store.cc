#include "weir/mgmt/store.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <ctime>
#include <optional>
#include <string_view>

#include "weir/common/text.h"
#include "weir/dns/httpdns.h"
#include "weir/partitions/citymap.h"
#include "weir/partitions/tagtable.h"

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

std::string JoinLines(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

// The prefix a city-map line maps, or nullopt for a blank or comment line
// (or one whose first field is not a prefix: the whole map would not load).
std::optional<common::Cidr> LineCidr(std::string_view line) {
  if (const size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
  const size_t comma = line.find(',');
  std::string_view field = line.substr(0, comma);
  while (!field.empty() && (field.front() == ' ' || field.front() == '\t')) field.remove_prefix(1);
  while (!field.empty() && (field.back() == ' ' || field.back() == '\t' || field.back() == '\r')) {
    field.remove_suffix(1);
  }
  if (field.empty()) return std::nullopt;
  auto cidr = common::Cidr::Parse(field);
  if (!cidr.ok()) return std::nullopt;
  return *cidr;
}

bool SameCidr(const common::Cidr& a, const common::Cidr& b) {
  return a.prefix == b.prefix && a.address == b.address;
}

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// The accounts as the snapshot carries them: the secrets newest first.
std::string AccountsText(const std::vector<AccountRecord>& records) {
  std::vector<dns::httpdns::Account> accounts;
  accounts.reserve(records.size());
  for (const AccountRecord& r : records) {
    dns::httpdns::Account& a = accounts.emplace_back();
    a.name = r.name;
    a.secrets.push_back(r.secret);
    if (!r.previous_secret.empty()) a.secrets.push_back(r.previous_secret);
    a.allow_unsigned = r.allow_unsigned;
    a.allow_legacy_md5 = r.allow_legacy_md5;
    a.rps = r.rps;
  }
  return dns::httpdns::FormatAccounts(accounts);
}

std::string_view OnOff(bool v) { return v ? "on" : "off"; }

// What an audit entry says of an account's settings.
std::string AccountSettingsText(const AccountRecord& a) {
  return Cat("unsigned=", OnOff(a.allow_unsigned), " legacy_md5=", OnOff(a.allow_legacy_md5), " rps=", a.rps);
}

absl::Status CheckAccountName(const std::string& name) {
  if (dns::httpdns::IsValidAccountName(name)) return absl::OkStatus();
  // The name is not repeated: it may be anything a caller typed (a secret
  // pasted in the wrong place), and errors are logged.
  return absl::InvalidArgumentError(
      "not an account name: 1..64 of A-Z a-z 0-9 _ . - (not \"-\", \".\" or \"..\")");
}

}  // namespace

absl::Status CheckAccountSecret(std::string_view secret) {
  if (secret.size() < 16 || secret.size() > 128) {
    return absl::InvalidArgumentError(Cat("a secret has 16 to 128 characters, this one ", secret.size()));
  }
  for (char c : secret) {
    if (c <= ' ' || c > '~')
      return absl::InvalidArgumentError("a secret is printable ASCII without spaces (this one is not)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path) {
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
  std::unique_ptr<Store> s(new Store(db));
  sqlite3_busy_timeout(db, 5000);
  if (absl::Status st = s->Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"); !st.ok()) return st;
  if (absl::Status st = s->Exec(kSchema); !st.ok()) return st;
  if (absl::Status st = s->LoadSnapshot(); !st.ok()) return st;
  return s;
}

Store::~Store() { sqlite3_close(db_); }

absl::Status Store::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err != nullptr ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    return absl::InternalError(Cat("database: ", msg));
  }
  return absl::OkStatus();
}

absl::Status Store::LoadSnapshot() {
  Snapshot snap;
  {
    Stmt q(db_, "SELECT key, value FROM meta");
    if (!q.ok()) return q.Error();
    int rc;
    while ((rc = q.Step()) == SQLITE_ROW) {
      const std::string key = q.Text(0);
      if (key == "version") {
        auto v = ParseU64(q.Text(1));
        if (!v.ok()) return absl::DataLossError("database: meta.version is not a number");
        snap.version = *v;
      } else if (key == "citymap") {
        snap.citymap = q.Text(1);
      } else if (key == "origin") {
        snap.origin = q.Text(1);
      }
    }
    if (rc != SQLITE_DONE) return q.Error();
  }
  std::vector<std::string> lines;
  {
    Stmt q(db_, "SELECT line FROM tags ORDER BY suffix");
    if (!q.ok()) return q.Error();
    int rc;
    while ((rc = q.Step()) == SQLITE_ROW) lines.push_back(q.Text(0));
    if (rc != SQLITE_DONE) return q.Error();
  }
  snap.tags = JoinLines(lines);
  std::vector<AccountRecord> accounts;
  {
    Stmt q(db_,
           "SELECT name, secret, previous_secret, allow_unsigned, allow_legacy_md5, rps, created, rotated "
           "FROM accounts ORDER BY name");
    if (!q.ok()) return q.Error();
    int rc;
    while ((rc = q.Step()) == SQLITE_ROW) {
      const int64_t rps = q.Int(5);
      if (rps < 0 || rps > UINT32_MAX) return absl::DataLossError("database: accounts.rps out of range");
      accounts.push_back(AccountRecord{q.Text(0), q.Text(1), q.Text(2), q.Int(3) != 0, q.Int(4) != 0,
                                       static_cast<uint32_t>(rps), q.Int(6), q.Int(7)});
    }
    if (rc != SQLITE_DONE) return q.Error();
  }
  snap.accounts = AccountsText(accounts);
  if (absl::Status st = ValidateSnapshot(snap); !st.ok()) {
    return absl::DataLossError(Cat("database holds an invalid snapshot: ", ToStd(st.message())));
  }
  version_ = snap.version;
  tag_lines_ = std::move(lines);
  accounts_ = std::move(accounts);
  snapshot_ = std::move(snap);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Store::Commit(std::vector<std::string> tag_lines, std::string citymap,
                                       std::vector<AccountRecord> accounts, const std::string& actor,
                                       const std::string& action, const std::string& detail) {
  std::sort(tag_lines.begin(), tag_lines.end(),
            [](const std::string& a, const std::string& b) { return SuffixOf(a) < SuffixOf(b); });
  std::sort(accounts.begin(), accounts.end(),
            [](const AccountRecord& a, const AccountRecord& b) { return a.name < b.name; });
  Snapshot next{version_ + 1, JoinLines(tag_lines), std::move(citymap), snapshot_.origin,
                AccountsText(accounts)};
  if (absl::Status st = ValidateSnapshot(next); !st.ok()) return st;
  // Nodes refuse frames above kMaxFrameBytes: never commit what none could load.
  if (const size_t bytes = Encode(SnapshotMessage(next)).size(); bytes > kMaxFrameBytes) {
    return absl::InvalidArgumentError(Cat("the snapshot would be ", bytes, " bytes, over the ",
                                          kMaxFrameBytes, "-byte limit of the push stream"));
  }

  if (absl::Status st = Exec("BEGIN IMMEDIATE"); !st.ok()) return st;
  auto fail = [&](absl::Status st) {
    (void)Exec("ROLLBACK");
    return st;
  };
  if (absl::Status st = Exec("DELETE FROM tags"); !st.ok()) return fail(st);
  for (const std::string& l : tag_lines) {
    Stmt ins(db_, "INSERT INTO tags(suffix, line) VALUES (?1, ?2)");
    if (absl::Status st = ins.Bind(1, SuffixOf(l)).Bind(2, l).Run(); !st.ok()) return fail(st);
  }
  if (absl::Status st = Exec("DELETE FROM accounts"); !st.ok()) return fail(st);
  for (const AccountRecord& a : accounts) {
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
  {
    Stmt up(db_, "UPDATE meta SET value = ?1 WHERE key = 'citymap'");
    if (absl::Status st = up.Bind(1, next.citymap).Run(); !st.ok()) return fail(st);
  }
  {
    Stmt up(db_, "UPDATE meta SET value = ?1 WHERE key = 'version'");
    if (absl::Status st = up.Bind(1, std::to_string(next.version)).Run(); !st.ok()) return fail(st);
  }
  {
    Stmt au(db_, "INSERT INTO audit(time, actor, action, detail, version) VALUES (?1, ?2, ?3, ?4, ?5)");
    au.Bind(1, Now()).Bind(2, actor).Bind(3, action).Bind(4, detail).Bind(5,
                                                                          static_cast<int64_t>(next.version));
    if (absl::Status st = au.Run(); !st.ok()) return fail(st);
  }
  if (absl::Status st = Exec("COMMIT"); !st.ok()) return fail(st);
  version_ = next.version;
  tag_lines_ = std::move(tag_lines);
  accounts_ = std::move(accounts);
  snapshot_ = std::move(next);
  return version_;
}

absl::StatusOr<uint64_t> Store::AddTag(const std::string& line, bool replace, const std::string& actor) {
  auto tag = partitions::ParseTagLine(line);
  if (!tag.ok()) return tag.status();
  const std::string canonical = partitions::FormatTag(*tag);
  const std::string suffix = SuffixOf(canonical);
  std::vector<std::string> lines = tag_lines_;
  auto it =
      std::find_if(lines.begin(), lines.end(), [&](const std::string& l) { return SuffixOf(l) == suffix; });
  if (it != lines.end()) {
    if (!replace) {
      return absl::AlreadyExistsError(
          Cat(suffix, " already has a tag: ", *it, " (use --replace to change it)"));
    }
    if (*it == canonical) return absl::AlreadyExistsError(Cat(suffix, " already has exactly this tag"));
    *it = canonical;
    return Commit(std::move(lines), snapshot_.citymap, accounts_, actor, "tag replace", canonical);
  }
  lines.push_back(canonical);
  return Commit(std::move(lines), snapshot_.citymap, accounts_, actor, "tag add", canonical);
}

absl::StatusOr<uint64_t> Store::RemoveTag(const std::string& suffix, const std::string& actor) {
  auto tag = partitions::ParseTagLine(suffix);
  if (!tag.ok() || suffix.find_first_of(" \t") != std::string::npos) {
    return absl::InvalidArgumentError(Cat("not a domain suffix: '", suffix, "'"));
  }
  const std::string key = SuffixOf(partitions::FormatTag(*tag));
  std::vector<std::string> lines = tag_lines_;
  auto it =
      std::find_if(lines.begin(), lines.end(), [&](const std::string& l) { return SuffixOf(l) == key; });
  if (it == lines.end()) return absl::NotFoundError(Cat("no tag for ", key));
  std::string removed = *it;
  lines.erase(it);
  return Commit(std::move(lines), snapshot_.citymap, accounts_, actor, "tag rm", removed);
}

absl::StatusOr<uint64_t> Store::ImportTags(const std::string& text, const std::string& actor) {
  auto table = partitions::TagTable::FromText(text);
  if (!table.ok()) return table.status();
  std::vector<std::string> lines;
  for (const partitions::Tag& t : (*table)->tags()) lines.push_back(partitions::FormatTag(t));
  const std::string detail = Cat(lines.size(), " tags");
  return Commit(std::move(lines), snapshot_.citymap, accounts_, actor, "tag import", detail);
}

absl::StatusOr<uint64_t> Store::ImportCitymap(const std::string& csv, const std::string& actor) {
  auto cm = partitions::CityMap::FromCsv(csv, partitions::CityMapOptions{});
  if (!cm.ok()) return cm.status();
  size_t lines = static_cast<size_t>(std::count(csv.begin(), csv.end(), '\n'));
  return Commit(tag_lines_, csv, accounts_, actor, "citymap import",
                Cat(lines, " lines, ", csv.size(), " bytes"));
}

absl::StatusOr<uint64_t> Store::EditTag(const std::string& suffix, const std::vector<std::string>& changes,
                                        const std::string& actor) {
  auto key_tag = partitions::ParseTagLine(suffix);
  if (!key_tag.ok() || suffix.find_first_of(" \t") != std::string::npos) {
    return absl::InvalidArgumentError(Cat("not a domain suffix: '", suffix, "'"));
  }
  if (changes.empty()) return absl::InvalidArgumentError("nothing to change: give key=value ...");
  const std::string key = SuffixOf(partitions::FormatTag(*key_tag));
  std::vector<std::string> lines = tag_lines_;
  auto it =
      std::find_if(lines.begin(), lines.end(), [&](const std::string& l) { return SuffixOf(l) == key; });
  if (it == lines.end()) return absl::NotFoundError(Cat("no tag for ", key, " (add one with tag add)"));
  // The stored line is canonical: "suffix key=value ...".
  std::vector<std::string> words;
  for (size_t start = 0; start < it->size();) {
    size_t end = it->find(' ', start);
    if (end == std::string::npos) end = it->size();
    if (end > start) words.push_back(it->substr(start, end - start));
    start = end + 1;
  }
  for (const std::string& change : changes) {
    const size_t eq = change.find('=');
    if (eq == std::string::npos || eq == 0 || change.find_first_of(" \t") != std::string::npos) {
      return absl::InvalidArgumentError(Cat("'", change, "' is not key=value"));
    }
    const std::string name = change.substr(0, eq + 1);
    auto w = std::find_if(words.begin() + 1, words.end(),
                          [&](const std::string& x) { return x.compare(0, name.size(), name) == 0; });
    if (w != words.end()) {
      *w = change;
    } else {
      words.push_back(change);
    }
  }
  std::string edited;
  for (const std::string& w : words) edited += (edited.empty() ? "" : " ") + w;
  auto tag = partitions::ParseTagLine(edited);
  if (!tag.ok()) return tag.status();
  const std::string canonical = partitions::FormatTag(*tag);
  if (canonical == *it)
    return absl::AlreadyExistsError(Cat(key, " already has exactly this tag: ", canonical));
  *it = canonical;
  return Commit(std::move(lines), snapshot_.citymap, accounts_, actor, "tag edit", canonical);
}

absl::StatusOr<uint64_t> Store::AddCityMapping(const std::string& line, bool replace,
                                               const std::string& actor) {
  if (line.find_first_of("\n#") != std::string::npos) {
    return absl::InvalidArgumentError("one mapping 'cidr,city[,ecs]', without a newline or a comment");
  }
  const std::optional<common::Cidr> cidr = LineCidr(line);
  if (!cidr || line.find(',') == std::string::npos) {
    return absl::InvalidArgumentError(
        Cat("not a city-map line 'cidr,city[,ecs_address/prefix]': '", line, "'"));
  }
  std::vector<std::string> lines = SplitLines(snapshot_.citymap);
  auto it = std::find_if(lines.begin(), lines.end(), [&](const std::string& l) {
    const auto c = LineCidr(l);
    return c && SameCidr(*c, *cidr);
  });
  std::string action = "citymap add";
  if (it != lines.end()) {
    if (!replace)
      return absl::AlreadyExistsError(Cat("already mapped: ", *it, " (use --replace to change it)"));
    *it = line;
    action = "citymap replace";
  } else {
    lines.push_back(line);
  }
  std::string csv = JoinLines(lines);
  // The whole map must still load (a city's ECS address given twice, ...).
  auto cm = partitions::CityMap::FromCsv(csv, partitions::CityMapOptions{});
  if (!cm.ok()) return cm.status();
  return Commit(tag_lines_, std::move(csv), accounts_, actor, action, line);
}

absl::StatusOr<uint64_t> Store::RemoveCityMapping(const std::string& cidr_text, const std::string& actor) {
  auto cidr = common::Cidr::Parse(cidr_text);
  if (!cidr.ok())
    return absl::InvalidArgumentError(Cat("not a prefix: '", cidr_text, "': ", cidr.status().message()));
  std::vector<std::string> lines = SplitLines(snapshot_.citymap);
  auto it = std::find_if(lines.begin(), lines.end(), [&](const std::string& l) {
    const auto c = LineCidr(l);
    return c && SameCidr(*c, *cidr);
  });
  if (it == lines.end()) return absl::NotFoundError(Cat("no city-map line maps ", cidr_text));
  const std::string removed = *it;
  lines.erase(it);
  std::string csv = JoinLines(lines);
  auto cm = partitions::CityMap::FromCsv(csv, partitions::CityMapOptions{});
  if (!cm.ok()) return cm.status();
  return Commit(tag_lines_, std::move(csv), accounts_, actor, "citymap rm", removed);
}

absl::StatusOr<size_t> Store::FindAccount(const std::string& name) const {
  if (absl::Status st = CheckAccountName(name); !st.ok()) return st;
  auto it = std::find_if(accounts_.begin(), accounts_.end(),
                         [&](const AccountRecord& a) { return a.name == name; });
  if (it == accounts_.end()) return absl::NotFoundError(Cat("no account '", name, "'"));
  return static_cast<size_t>(it - accounts_.begin());
}

absl::StatusOr<uint64_t> Store::AddAccount(const std::string& name, const std::string& secret,
                                           const AccountSettings& settings, const std::string& actor) {
  if (absl::Status st = CheckAccountName(name); !st.ok()) return st;
  if (absl::Status st = CheckAccountSecret(secret); !st.ok()) return st;
  if (FindAccount(name).ok()) return absl::AlreadyExistsError(Cat("account '", name, "' exists"));
  AccountRecord a;
  a.name = name;
  a.secret = secret;
  a.allow_unsigned = settings.allow_unsigned.value_or(false);
  a.allow_legacy_md5 = settings.allow_legacy_md5.value_or(false);
  a.rps = settings.rps.value_or(0);
  a.created = Now();
  const std::string detail = Cat(name, " ", AccountSettingsText(a));
  std::vector<AccountRecord> accounts = accounts_;
  accounts.push_back(std::move(a));
  return Commit(tag_lines_, snapshot_.citymap, std::move(accounts), actor, "account add", detail);
}

absl::StatusOr<uint64_t> Store::RotateAccount(const std::string& name, const std::string& secret,
                                              const std::string& actor) {
  auto i = FindAccount(name);
  if (!i.ok()) return i.status();
  if (absl::Status st = CheckAccountSecret(secret); !st.ok()) return st;
  std::vector<AccountRecord> accounts = accounts_;
  AccountRecord& a = accounts[*i];
  if (secret == a.secret || secret == a.previous_secret) {
    return absl::AlreadyExistsError(Cat("account '", name, "' already has this secret: give a new one"));
  }
  const bool dropped = !a.previous_secret.empty();
  a.previous_secret = std::move(a.secret);
  a.secret = secret;
  a.rotated = Now();
  return Commit(tag_lines_, snapshot_.citymap, std::move(accounts), actor, "account rotate",
                Cat(name, dropped ? " (the secret before the previous one dropped)" : ""));
}

absl::StatusOr<uint64_t> Store::RetireAccountSecret(const std::string& name, const std::string& actor) {
  auto i = FindAccount(name);
  if (!i.ok()) return i.status();
  std::vector<AccountRecord> accounts = accounts_;
  AccountRecord& a = accounts[*i];
  if (a.previous_secret.empty()) {
    return absl::FailedPreconditionError(Cat("account '", name, "' has one secret: nothing to retire"));
  }
  a.previous_secret.clear();
  return Commit(tag_lines_, snapshot_.citymap, std::move(accounts), actor, "account retire", name);
}

absl::StatusOr<uint64_t> Store::SetAccount(const std::string& name, const AccountSettings& settings,
                                           const std::string& actor) {
  auto i = FindAccount(name);
  if (!i.ok()) return i.status();
  if (settings.empty())
    return absl::InvalidArgumentError("nothing to change: give --unsigned, --legacy-md5 or --rps");
  std::vector<AccountRecord> accounts = accounts_;
  AccountRecord& a = accounts[*i];
  a.allow_unsigned = settings.allow_unsigned.value_or(a.allow_unsigned);
  a.allow_legacy_md5 = settings.allow_legacy_md5.value_or(a.allow_legacy_md5);
  a.rps = settings.rps.value_or(a.rps);
  if (a == accounts_[*i]) {
    return absl::AlreadyExistsError(
        Cat("account '", name, "' already has exactly this: ", AccountSettingsText(a)));
  }
  const std::string detail = Cat(name, " ", AccountSettingsText(a));
  return Commit(tag_lines_, snapshot_.citymap, std::move(accounts), actor, "account set", detail);
}

absl::StatusOr<uint64_t> Store::RemoveAccount(const std::string& name, const std::string& actor) {
  auto i = FindAccount(name);
  if (!i.ok()) return i.status();
  std::vector<AccountRecord> accounts = accounts_;
  accounts.erase(accounts.begin() + static_cast<ptrdiff_t>(*i));
  return Commit(tag_lines_, snapshot_.citymap, std::move(accounts), actor, "account rm", name);
}

absl::Status Store::NodeSeen(const std::string& node_id, const std::string& kind, const std::string& peer,
                             uint64_t version) {
  Stmt q(db_,
         "INSERT INTO nodes(node_id, kind, peer, last_seen, acked_version) VALUES (?1, ?2, ?3, ?4, ?5) "
         "ON CONFLICT(node_id) DO UPDATE SET kind = ?2, peer = ?3, last_seen = ?4, acked_version = ?5");
  return q.Bind(1, node_id)
      .Bind(2, kind)
      .Bind(3, peer)
      .Bind(4, Now())
      .Bind(5, static_cast<int64_t>(version))
      .Run();
}

absl::Status Store::NodeAck(const std::string& node_id, uint64_t version) {
  Stmt q(db_, "UPDATE nodes SET acked_version = ?2, last_seen = ?3 WHERE node_id = ?1");
  return q.Bind(1, node_id).Bind(2, static_cast<int64_t>(version)).Bind(3, Now()).Run();
}

absl::Status Store::NodeNack(const std::string& node_id, uint64_t version, const std::string& reason) {
  Stmt q(db_, "UPDATE nodes SET nack_version = ?2, nack_reason = ?3, last_seen = ?4 WHERE node_id = ?1");
  return q.Bind(1, node_id).Bind(2, static_cast<int64_t>(version)).Bind(3, reason).Bind(4, Now()).Run();
}

absl::Status Store::ForgetNode(const std::string& node_id) {
  Stmt q(db_, "DELETE FROM nodes WHERE node_id = ?1");
  if (absl::Status st = q.Bind(1, node_id).Run(); !st.ok()) return st;
  if (sqlite3_changes(db_) == 0) return absl::NotFoundError(Cat("no node '", node_id, "'"));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<NodeRecord>> Store::Nodes() const {
  Stmt q(db_,
         "SELECT node_id, kind, peer, acked_version, nack_version, nack_reason, last_seen FROM nodes "
         "ORDER BY node_id");
  if (!q.ok()) return q.Error();
  std::vector<NodeRecord> out;
  int rc;
  while ((rc = q.Step()) == SQLITE_ROW) {
    out.push_back(NodeRecord{q.Text(0), q.Text(1), q.Text(2), static_cast<uint64_t>(q.Int(3)),
                             static_cast<uint64_t>(q.Int(4)), q.Text(5), q.Int(6)});
  }
  if (rc != SQLITE_DONE) return q.Error();
  return out;
}

absl::StatusOr<std::vector<AuditRecord>> Store::Audit(int limit) const {
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
