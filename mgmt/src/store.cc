#include "weir/mgmt/store.h"

#include <algorithm>
#include <ctime>
#include <optional>
#include <string_view>

#include "absl/strings/strip.h"
#include "store_backends.h"
#include "weir/common/line_errors.h"
#include "weir/common/text.h"
#include "weir/dns/httpdns.h"
#include "weir/mgmt/calibration.h"
#include "weir/partitions/citymap.h"
#include "weir/partitions/tagtable.h"

namespace weir::mgmt {

using common::Cat;
using common::ToStd;

namespace {

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
// A rejected import: every bad line as "SOURCE:LINE: reason" (as --check
// prints a config's files), one per line.
absl::Status ImportRejected(const common::LineErrors& errors, const std::string& source) {
  std::string all;
  for (const std::string& e : errors.Render(source.empty() ? "import" : source))
    all += (all.empty() ? "" : "\n") + e;
  return absl::InvalidArgumentError(all);
}

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

// The weight factors the nodes get: those of the calibration state's sets
// whose name a calibrate=on tag covers (a tag that lost it stops its
// factors at once), every address of each (sets whose factors are all 1 left out).
absl::StatusOr<std::string> FactorsText(const std::string& tags_text, const std::string& calibration) {
  if (calibration.empty()) return std::string();
  // The state as committed: any factor the weight factors' format allows
  // (weir-mgmt's own [calibration] range was applied when it was made).
  CalibrationOptions wide;
  wide.min_factor = Calibrator::kMinStoredFactor;
  wide.max_factor = Calibrator::kMaxStoredFactor;
  Calibrator state(wide);
  common::LineErrors errors;
  if (absl::Status st = state.RestoreState(calibration, &errors); !st.ok())
    return absl::InvalidArgumentError(Cat("calibration: ", ToStd(st.message())));
  auto tags = partitions::TagTable::FromText(tags_text);
  if (!tags.ok()) return tags.status();
  return CalibratedFactorsText(state, **tags);
}

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
  auto backend = OpenSqliteBackend(path);
  if (!backend.ok()) return backend.status();
  return Open(*std::move(backend));
}

absl::StatusOr<std::unique_ptr<Store>> Store::Open(std::unique_ptr<StoreBackend> backend) {
  std::unique_ptr<Store> s(new Store(std::move(backend)));
  auto config = s->backend_->Load();
  if (!config.ok()) return config.status();
  if (absl::Status st = s->Take(*std::move(config)); !st.ok()) return st;
  return s;
}

Store::~Store() = default;

absl::Status Store::Take(StoredConfig config) {
  Snapshot snap{config.version, JoinLines(config.tag_lines), std::move(config.citymap), config.origin,
                AccountsText(config.accounts)};
  auto factors = FactorsText(snap.tags, config.calibration);
  if (!factors.ok()) {
    return absl::DataLossError(Cat("the store holds an invalid snapshot (version ", snap.version,
                                   "): ", ToStd(factors.status().message())));
  }
  snap.factors = *std::move(factors);
  // What this instance holds was checked: only the parts that differ are.
  if (absl::Status st = ValidateSnapshot(snap, snapshot_.version == 0 ? nullptr : &snapshot_); !st.ok()) {
    return absl::DataLossError(
        Cat("the store holds an invalid snapshot (version ", snap.version, "): ", ToStd(st.message())));
  }
  version_ = snap.version;
  tag_lines_ = std::move(config.tag_lines);
  accounts_ = std::move(config.accounts);
  calibration_ = std::move(config.calibration);
  snapshot_ = std::move(snap);
  return absl::OkStatus();
}

absl::StatusOr<bool> Store::Refresh() {
  auto head = backend_->Head();
  if (!head.ok()) return head.status();
  if (head->second == snapshot_.origin && head->first <= version_) return false;
  auto config = backend_->Load();
  if (!config.ok()) return config.status();
  // An older version of this store (a replica that lags) never replaces a
  // newer one; another origin is another store (restored): taken as it is.
  if (config->origin == snapshot_.origin && config->version <= version_) return false;
  if (absl::Status st = Take(*std::move(config)); !st.ok()) return st;
  return true;
}

absl::Status Store::NodeSeen(const std::string& node_id, const std::string& kind, const std::string& peer,
                             uint64_t version, const std::string& mgmt) {
  NodeRecord r;
  r.node_id = node_id;
  r.kind = kind;
  r.peer = peer;
  r.acked_version = version;
  r.last_seen = Now();
  r.mgmt = mgmt;
  r.connected = true;
  return backend_->NodeSeen(r);
}

absl::StatusOr<uint64_t> Store::Commit(std::vector<std::string> tag_lines, std::string citymap,
                                       std::vector<AccountRecord> accounts, const std::string& actor,
                                       const std::string& action, const std::string& detail) {
  return Commit(std::move(tag_lines), std::move(citymap), std::move(accounts), calibration_, actor, action,
                detail);
}

absl::StatusOr<uint64_t> Store::Commit(std::vector<std::string> tag_lines, std::string citymap,
                                       std::vector<AccountRecord> accounts, std::string calibration,
                                       const std::string& actor, const std::string& action,
                                       const std::string& detail) {
  std::sort(tag_lines.begin(), tag_lines.end(),
            [](const std::string& a, const std::string& b) { return SuffixOf(a) < SuffixOf(b); });
  std::sort(accounts.begin(), accounts.end(),
            [](const AccountRecord& a, const AccountRecord& b) { return a.name < b.name; });
  Snapshot next{version_ + 1, JoinLines(tag_lines), citymap, snapshot_.origin, AccountsText(accounts)};
  // The factors follow the tags (a tag that does not parse fails here or
  // below, as a tag error); then every part is checked as a node reads it.
  auto factors = FactorsText(next.tags, calibration);
  if (!factors.ok()) {
    if (absl::Status st = ValidateSnapshot(next, &snapshot_); !st.ok()) return st;
    return factors.status();
  }
  next.factors = *std::move(factors);
  if (absl::Status st = ValidateSnapshot(next, &snapshot_); !st.ok()) return st;
  // Nodes refuse frames above kMaxFrameBytes: never commit what none could load.
  if (const size_t bytes = EncodedSnapshotBytes(next); bytes > kMaxFrameBytes) {
    return absl::InvalidArgumentError(Cat("the snapshot would be ", bytes, " bytes, over the ",
                                          kMaxFrameBytes, "-byte limit of the push stream"));
  }
  StoredConfig base{version_, snapshot_.origin, tag_lines_, snapshot_.citymap, accounts_, calibration_};
  StoredConfig to{0,
                  snapshot_.origin,
                  std::move(tag_lines),
                  std::move(citymap),
                  std::move(accounts),
                  std::move(calibration)};
  AuditRecord audit;
  audit.time = Now();
  audit.actor = actor;
  audit.action = action;
  audit.detail = detail;
  auto version = backend_->Commit(base, to, audit);
  if (!version.ok()) {
    if (version.status().code() == absl::StatusCode::kAborted) {
      // Another instance committed first: this one catches up, so that
      // the operator's retry is computed against what the store holds.
      auto refreshed = Refresh();
      return absl::AbortedError(
          Cat("conflict: the configuration changed (now version ", version_,
              ") while this change was made; nothing was changed, retry",
              refreshed.ok() ? "" : Cat(" (", ToStd(refreshed.status().message()), ")")));
    }
    return version.status();
  }
  version_ = *version;
  tag_lines_ = std::move(to.tag_lines);
  accounts_ = std::move(to.accounts);
  calibration_ = std::move(to.calibration);
  next.version = *version;
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

absl::StatusOr<uint64_t> Store::ImportTags(const std::string& text, const std::string& actor,
                                           const std::string& source) {
  common::LineErrors errors;
  auto table = partitions::TagTable::FromText(text, &errors);
  if (!errors.empty()) return ImportRejected(errors, source);
  if (!table.ok()) return table.status();
  std::vector<std::string> lines;
  for (const partitions::Tag& t : (*table)->tags()) lines.push_back(partitions::FormatTag(t));
  const std::string detail = Cat(lines.size(), " tags");
  return Commit(std::move(lines), snapshot_.citymap, accounts_, actor, "tag import", detail);
}

absl::StatusOr<uint64_t> Store::ImportCitymap(const std::string& csv, const std::string& actor,
                                              const std::string& source) {
  common::LineErrors errors;
  auto cm = partitions::CityMap::FromCsv(csv, partitions::CityMapOptions{}, &errors);
  if (!errors.empty()) return ImportRejected(errors, source);
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
  // The line alone first, so that its fault is named as an import of it
  // would name it (host bits set, a bad ECS address, ...).
  common::LineErrors errors;
  if (!partitions::CityMap::FromCsv(line, partitions::CityMapOptions{}, &errors).ok() || !errors.empty()) {
    absl::Status first = errors.First();
    absl::string_view reason = first.message();
    absl::ConsumePrefix(&reason, "line 1: ");
    if (!reason.empty()) return absl::InvalidArgumentError(Cat("'", line, "': ", reason));
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

absl::StatusOr<uint64_t> Store::SetCalibration(std::string state, const std::string& actor,
                                               const std::string& action, const std::string& detail) {
  if (state == calibration_) return absl::AlreadyExistsError("the calibration state is unchanged");
  return Commit(tag_lines_, snapshot_.citymap, accounts_, std::move(state), actor, action, detail);
}

}  // namespace weir::mgmt
