#include "weir/mgmt/snapshot.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "weir/common/hash.h"
#include "weir/common/text.h"
#include "weir/dns/httpdns.h"
#include "weir/partitions/citymap.h"
#include "weir/partitions/tagtable.h"
#include "weir/partitions/weight_factors.h"

namespace weir::mgmt {

using common::Cat;
using common::ToStd;

namespace {

constexpr std::string_view kFileMagic = "weir-snapshot/1\n";

absl::Status Errno(std::string_view what, const std::string& path) {
  return absl::InternalError(Cat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("write", path);
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

}  // namespace

std::string PersistedSnapshotChecksum(std::string_view body) {
  // FNV-1a from 1469598103934665603: the standard basis (14695981039346656037)
  // with its last digit lost when this format was first written. Every stored
  // file carries it, so it stays.
  constexpr uint64_t kBasis = 1469598103934665603ull;
  return absl::StrCat(absl::Hex(common::Fnv1a64(body.data(), body.size(), kBasis), absl::kZeroPad16));
}

Message SnapshotMessage(const Snapshot& s) {
  Message m{MsgType::kSnapshot, {std::to_string(s.version), s.tags, s.citymap, s.origin}};
  // A node older than the accounts refuses a fifth field: without accounts
  // (every recursor's push) the message stays the one it knows; likewise a
  // sixth for the factors.
  if (!s.accounts.empty() || !s.factors.empty()) m.fields.push_back(s.accounts);
  if (!s.factors.empty()) m.fields.push_back(s.factors);
  return m;
}

absl::StatusOr<Snapshot> SnapshotFromMessage(const Message& m) {
  if (m.type != MsgType::kSnapshot || m.fields.size() < 4 || m.fields.size() > 6) {
    return absl::InvalidArgumentError(
        "a snapshot has 4 to 6 fields: version, tags, citymap, origin[, accounts[, factors]]");
  }
  auto v = ParseU64(m.fields[0]);
  if (!v.ok()) return v.status();
  return Snapshot{*v,
                  m.fields[1],
                  m.fields[2],
                  m.fields[3],
                  m.fields.size() >= 5 ? m.fields[4] : std::string(),
                  m.fields.size() == 6 ? m.fields[5] : std::string()};
}

absl::Status ValidateSnapshot(const Snapshot& s, const Snapshot* valid) {
  if (valid == nullptr || s.tags != valid->tags) {
    auto tags = partitions::TagTable::FromText(s.tags);
    if (!tags.ok()) return absl::InvalidArgumentError(Cat("tags: ", ToStd(tags.status().message())));
  }
  if (valid == nullptr || s.citymap != valid->citymap) {
    auto cm = partitions::CityMap::FromCsv(s.citymap, partitions::CityMapOptions{});
    if (!cm.ok()) return absl::InvalidArgumentError(Cat("citymap: ", ToStd(cm.status().message())));
  }
  if (valid == nullptr || s.accounts != valid->accounts) {
    auto accounts = dns::httpdns::ParseAccounts(s.accounts);
    if (!accounts.ok())
      return absl::InvalidArgumentError(Cat("accounts: ", ToStd(accounts.status().message())));
  }
  if (valid == nullptr || s.factors != valid->factors) {
    auto factors = partitions::WeightFactors::FromText(s.factors);
    if (!factors.ok()) return absl::InvalidArgumentError(Cat("factors: ", ToStd(factors.status().message())));
  }
  return absl::OkStatus();
}

size_t EncodedSnapshotBytes(const Snapshot& s) {
  // The frame's length and type, then each field's length and bytes
  // (SnapshotMessage: version, tags, citymap, origin[, accounts[, factors]]).
  size_t bytes =
      4 + 1 + 4 * 4 + std::to_string(s.version).size() + s.tags.size() + s.citymap.size() + s.origin.size();
  if (!s.accounts.empty() || !s.factors.empty()) bytes += 4 + s.accounts.size();
  if (!s.factors.empty()) bytes += 4 + s.factors.size();
  return bytes;
}

absl::Status PersistSnapshot(const std::string& dir, const Snapshot& s) {
  const std::string body = Encode(SnapshotMessage(s));
  const std::string data = Cat(kFileMagic, PersistedSnapshotChecksum(body), "\n", body);
  const std::string path = dir + "/snapshot";
  const std::string tmp = path + ".tmp";
  // 0600: the file holds the HTTPDNS accounts' secrets. fchmod too, for a
  // temporary file an older version left behind with its wider mode.
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot create", tmp);
  absl::Status st = fchmod(fd, 0600) == 0 ? absl::OkStatus() : Errno("chmod", tmp);
  if (st.ok()) st = WriteAll(fd, data, tmp);
  if (st.ok() && fsync(fd) != 0) st = Errno("fsync", tmp);
  close(fd);
  if (!st.ok()) {
    unlink(tmp.c_str());
    return st;
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    st = Errno("rename to", path);
    unlink(tmp.c_str());
    return st;
  }
  int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return absl::OkStatus();
}

absl::StatusOr<Snapshot> LoadPersistedSnapshot(const std::string& dir) {
  const std::string path = dir + "/snapshot";
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(Cat("no stored snapshot in ", dir));
    return Errno("cannot open", path);
  }
  std::string data;
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status st = Errno("read", path);
      close(fd);
      return st;
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
    if (data.size() > kMaxFrameBytes + 64) {
      close(fd);
      return absl::DataLossError(Cat(path, ": larger than any snapshot"));
    }
  }
  close(fd);
  const size_t header = kFileMagic.size() + 17;
  if (data.size() < header || std::string_view(data).substr(0, kFileMagic.size()) != kFileMagic ||
      data[header - 1] != '\n') {
    return absl::DataLossError(Cat(path, ": not a weir snapshot file"));
  }
  std::string_view body = std::string_view(data).substr(header);
  if (std::string_view(data).substr(kFileMagic.size(), 16) != PersistedSnapshotChecksum(body)) {
    return absl::DataLossError(Cat(path, ": checksum mismatch (damaged file)"));
  }
  FrameReader r;
  r.Feed(body);
  auto m = r.Next();
  if (!m.ok() || !m->has_value() || r.buffered() != 0) {
    return absl::DataLossError(Cat(path, ": damaged snapshot frame"));
  }
  auto s = SnapshotFromMessage(**m);
  if (!s.ok()) return absl::DataLossError(Cat(path, ": ", ToStd(s.status().message())));
  return s;
}

namespace {

constexpr std::array<const char*, 4> kPartNames = {"tags", "citymap", "accounts", "factors"};
// The parts only weir-fastpath is given.
constexpr size_t kFirstFastpathPart = 2;

std::string& PartOf(Snapshot& s, size_t i) {
  return i == 0 ? s.tags : i == 1 ? s.citymap : i == 2 ? s.accounts : s.factors;
}
const std::string& PartOf(const Snapshot& s, size_t i) {
  return i == 0 ? s.tags : i == 1 ? s.citymap : i == 2 ? s.accounts : s.factors;
}
bool& FlagOf(SnapshotParts& p, size_t i) {
  return i == 0 ? p.tags : i == 1 ? p.citymap : i == 2 ? p.accounts : p.factors;
}

}  // namespace

SnapshotParts DiffParts(const Snapshot& a, const Snapshot& b) {
  return SnapshotParts{a.tags != b.tags, a.citymap != b.citymap, a.accounts != b.accounts,
                       a.factors != b.factors};
}

SnapshotDelta MakeDelta(const Snapshot& base, const Snapshot& target, bool fastpath_parts) {
  SnapshotDelta d;
  d.version = target.version;
  d.base_version = base.version;
  d.origin = target.origin;
  for (size_t i = 0; i < kPartNames.size(); ++i) {
    if (i >= kFirstFastpathPart && !fastpath_parts) continue;
    const std::string& from = PartOf(base, i);
    const std::string& to = PartOf(target, i);
    if (from == to) continue;
    const size_t limit = std::min(from.size(), to.size());
    size_t prefix = 0;
    while (prefix < limit && from[prefix] == to[prefix]) ++prefix;
    size_t suffix = 0;
    while (suffix < limit - prefix && from[from.size() - 1 - suffix] == to[to.size() - 1 - suffix]) ++suffix;
    d.parts.push_back(SnapshotDelta::Part{kPartNames[i], prefix, suffix,
                                          to.substr(prefix, to.size() - prefix - suffix), ContentDigest(to)});
  }
  return d;
}

Message DeltaMessage(const SnapshotDelta& d) {
  Message m{MsgType::kDelta, {std::to_string(d.version), std::to_string(d.base_version), d.origin}};
  for (const SnapshotDelta::Part& p : d.parts) {
    m.fields.push_back(p.name);
    m.fields.push_back(Cat(p.prefix, " ", p.suffix));
    m.fields.push_back(p.middle);
    m.fields.push_back(p.sha256);
  }
  return m;
}

absl::StatusOr<SnapshotDelta> DeltaFromMessage(const Message& m) {
  if (m.type != MsgType::kDelta || m.fields.size() < 3 || (m.fields.size() - 3) % 4 != 0 ||
      m.fields.size() > 3 + 4 * kPartNames.size()) {
    return absl::InvalidArgumentError(
        "a delta has a version, a base version, an origin and 4 fields per part (at most 4 parts)");
  }
  SnapshotDelta d;
  auto v = ParseU64(m.fields[0]);
  if (!v.ok()) return v.status();
  auto b = ParseU64(m.fields[1]);
  if (!b.ok()) return b.status();
  d.version = *v;
  d.base_version = *b;
  d.origin = m.fields[2];
  for (size_t f = 3; f < m.fields.size(); f += 4) {
    SnapshotDelta::Part p;
    p.name = m.fields[f];
    if (std::find(kPartNames.begin(), kPartNames.end(), p.name) == kPartNames.end())
      return absl::InvalidArgumentError(Cat("a delta names an unknown part '", p.name.substr(0, 32), "'"));
    for (const SnapshotDelta::Part& q : d.parts) {
      if (q.name == p.name) return absl::InvalidArgumentError(Cat("a delta names ", p.name, " twice"));
    }
    const std::string& splice = m.fields[f + 1];
    const size_t space = splice.find(' ');
    if (space == std::string::npos)
      return absl::InvalidArgumentError("a delta's splice is not 'PREFIX SUFFIX'");
    auto prefix = ParseU64(std::string_view(splice).substr(0, space));
    auto suffix = ParseU64(std::string_view(splice).substr(space + 1));
    if (!prefix.ok() || !suffix.ok())
      return absl::InvalidArgumentError("a delta's splice is not 'PREFIX SUFFIX'");
    p.prefix = static_cast<size_t>(*prefix);
    p.suffix = static_cast<size_t>(*suffix);
    p.middle = m.fields[f + 2];
    p.sha256 = m.fields[f + 3];
    d.parts.push_back(std::move(p));
  }
  return d;
}

absl::StatusOr<Snapshot> ApplyDelta(const Snapshot& base, const SnapshotDelta& d, SnapshotParts* changed) {
  if (d.origin != base.origin || d.base_version != base.version) {
    return absl::FailedPreconditionError(Cat("the delta is from version ", d.base_version,
                                             " of another store or version, this node runs ", base.version));
  }
  Snapshot out = base;
  out.version = d.version;
  SnapshotParts parts = SnapshotParts::None();
  for (const SnapshotDelta::Part& p : d.parts) {
    const size_t i =
        static_cast<size_t>(std::find(kPartNames.begin(), kPartNames.end(), p.name) - kPartNames.begin());
    const std::string& from = PartOf(base, i);
    if (p.prefix > from.size() || p.suffix > from.size() - p.prefix) {
      return absl::FailedPreconditionError(Cat("the delta's ", p.name, " splice does not fit this node's ",
                                               p.name, " (", from.size(), " bytes)"));
    }
    std::string to;
    to.reserve(p.prefix + p.middle.size() + p.suffix);
    to.append(from, 0, p.prefix);
    to += p.middle;
    to.append(from, from.size() - p.suffix, p.suffix);
    if (ContentDigest(to) != p.sha256) {
      return absl::FailedPreconditionError(
          Cat("the delta's ", p.name, " does not come out as its SHA-256 says: this node's base differs"));
    }
    PartOf(out, i) = std::move(to);
    FlagOf(parts, i) = true;
  }
  if (changed != nullptr) *changed = parts;
  return out;
}

std::string ContentDigest(std::string_view part) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(part.data(), part.size(), md, &len, EVP_sha256(), nullptr) != 1) return "";
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(md), len));
}

}  // namespace weir::mgmt
