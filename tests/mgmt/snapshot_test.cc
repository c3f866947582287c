// Snapshots with HTTPDNS accounts: the message with and without them (a mgmt
// that predates accounts), their validation, and the node's private file.
#include "weir/mgmt/snapshot.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "weir/mgmt/protocol.h"

namespace weir::mgmt {
namespace {

constexpr char kSecret[] = "s3cret-0123456789abcdef";
constexpr char kOldSecret[] = "old-secret-0123456789";

Snapshot WithAccounts() {
  Snapshot s{7, "cdn.example weight=on\n", "10.0.0.0/8,bj,192.0.2.0/24\n", "db-1"};
  s.accounts = std::string("acme unsigned=off legacy_md5=on rps=50 secret=") + kSecret +
               " secret=" + kOldSecret + "\nbeta secret=" + kSecret + "\n";
  return s;
}

TEST(SnapshotAccounts, RoundTripWithAccounts) {
  const Snapshot s = WithAccounts();
  const Message m = SnapshotMessage(s);
  ASSERT_EQ(m.fields.size(), 5u);
  auto back = SnapshotFromMessage(m);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, s);
  EXPECT_TRUE(ValidateSnapshot(s).ok()) << ValidateSnapshot(s);
}

TEST(SnapshotSize, EncodedBytesWithoutEncoding) {
  Snapshot without{123456789, "a.example ecs=on\n", "10.0.0.0/8,bj\n", "origin-1"};
  EXPECT_EQ(EncodedSnapshotBytes(without), Encode(SnapshotMessage(without)).size());
  EXPECT_EQ(EncodedSnapshotBytes(WithAccounts()), Encode(SnapshotMessage(WithAccounts())).size());
  EXPECT_EQ(EncodedSnapshotBytes(Snapshot{}), Encode(SnapshotMessage(Snapshot{})).size());
}

TEST(SnapshotValidate, PartsEqualToAValidSnapshotAreNotParsedAgain) {
  Snapshot valid = WithAccounts();
  Snapshot bad_tags = valid;
  bad_tags.tags = "not a tag line !!\n";
  EXPECT_FALSE(ValidateSnapshot(bad_tags, &valid).ok());
  // A part that differs is checked; one equal to the valid one is taken as is.
  Snapshot bad_citymap = valid;
  bad_citymap.citymap = "10.0.0.1/8,bj\n";
  auto st = ValidateSnapshot(bad_citymap, &valid);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("citymap"), std::string::npos) << st;
  EXPECT_TRUE(ValidateSnapshot(bad_citymap, &bad_citymap).ok());
}

TEST(SnapshotDelta, SplicesEachChangedPartAndRoundTrips) {
  const Snapshot base = WithAccounts();
  Snapshot target = base;
  target.version = 9;
  target.tags = "a.example ecs=on\ncdn.example weight=on\n";  // a line added before
  auto d = MakeDelta(base, target, /*with_accounts=*/true);
  ASSERT_EQ(d.parts.size(), 1u);  // only the tags changed
  EXPECT_EQ(d.parts[0].name, "tags");
  EXPECT_EQ(d.parts[0].middle, "a.example ecs=on\n");
  EXPECT_EQ(d.parts[0].prefix, 0u);
  auto wire = DeltaFromMessage(DeltaMessage(d));
  ASSERT_TRUE(wire.ok()) << wire.status();
  SnapshotParts changed;
  auto next = ApplyDelta(base, *wire, &changed);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, target);
  EXPECT_TRUE(changed.tags);
  EXPECT_FALSE(changed.citymap);
  EXPECT_FALSE(changed.accounts);
  // Every part changed, one of them emptied, accounts left out for a recursor.
  Snapshot all{10, "", "10.0.0.0/8,sh\n11.0.0.0/8,gz\n", base.origin, "beta secret=0123456789abcdef\n"};
  auto without = MakeDelta(base, all, /*with_accounts=*/false);
  EXPECT_EQ(without.parts.size(), 2u);
  auto with = MakeDelta(base, all, /*with_accounts=*/true);
  ASSERT_EQ(with.parts.size(), 3u);
  auto whole = ApplyDelta(base, with, &changed);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(*whole, all);
}

TEST(SnapshotDelta, ABaseThatDiffersIsRefusedAndChangesNothing) {
  const Snapshot base = WithAccounts();
  Snapshot target = base;
  target.version = 8;
  target.tags += "z.example ecs=on\n";
  const SnapshotDelta d = MakeDelta(base, target, true);
  Snapshot other = base;
  other.tags = "cdn.example weight=off\n";  // same version, other content
  auto r = ApplyDelta(other, d, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("SHA-256"), std::string::npos) << r.status();
  Snapshot older = base;
  older.version = 6;
  EXPECT_FALSE(ApplyDelta(older, d, nullptr).ok());
  Snapshot short_base = base;
  short_base.tags = "x\n";
  EXPECT_FALSE(ApplyDelta(short_base, d, nullptr).ok());
  // Malformed deltas: unknown part, a part twice, a bad splice.
  Message m = DeltaMessage(d);
  Message unknown = m;
  unknown.fields[3] = "zones";
  EXPECT_FALSE(DeltaFromMessage(unknown).ok());
  Message twice = m;
  twice.fields.insert(twice.fields.end(), m.fields.begin() + 3, m.fields.begin() + 7);
  EXPECT_FALSE(DeltaFromMessage(twice).ok());
  Message splice = m;
  splice.fields[4] = "12";
  EXPECT_FALSE(DeltaFromMessage(splice).ok());
}

TEST(SnapshotAccounts, NoAccountsIsTheMessageOlderNodesKnow) {
  Snapshot s = WithAccounts();
  s.accounts.clear();
  const Message m = SnapshotMessage(s);
  EXPECT_EQ(m.fields.size(), 4u) << "an older node refuses a fifth field";
  auto back = SnapshotFromMessage(m);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->accounts, "");
  EXPECT_EQ(*back, s);
}

TEST(SnapshotAccounts, MessageOfAnOlderMgmtDecodesWithoutAccounts) {
  // What a mgmt that predates accounts sends: exactly four fields.
  const Message old{MsgType::kSnapshot, {"3", "a.example weight=on\n", "", "db-old"}};
  auto s = SnapshotFromMessage(old);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->version, 3u);
  EXPECT_EQ(s->origin, "db-old");
  EXPECT_TRUE(s->accounts.empty());
  EXPECT_TRUE(ValidateSnapshot(*s).ok());
  // Nor fewer, nor more than the accounts and the factors.
  EXPECT_FALSE(SnapshotFromMessage(Message{MsgType::kSnapshot, {"3", "", ""}}).ok());
  EXPECT_FALSE(SnapshotFromMessage(Message{MsgType::kSnapshot, {"3", "", "", "o", "", "x", "y"}}).ok());
}

// The calibration's weight factors: a sixth field, sent only when there are
// some (with the accounts' field before it, empty or not), and a delta part
// that only weir-fastpath gets.
TEST(SnapshotFactors, SixthFieldOnlyWithFactors) {
  Snapshot s{4, "a.example weight=on calibrate=on\n", "", "db"};
  s.factors = "a.example. common 192.0.2.1 1.25\n";
  const Message m = SnapshotMessage(s);
  ASSERT_EQ(m.fields.size(), 6u);
  EXPECT_EQ(m.fields[4], "");
  EXPECT_EQ(EncodedSnapshotBytes(s), Encode(m).size());
  auto back = SnapshotFromMessage(m);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, s);
  EXPECT_TRUE(ValidateSnapshot(s).ok());
  s.factors = "a.example. common 192.0.2.1 0\n";
  EXPECT_NE(std::string(ValidateSnapshot(s).message()).find("factors: line 1"), std::string::npos)
      << ValidateSnapshot(s);
}

TEST(SnapshotFactors, DeltaCarriesFactorsToTheFastpathOnly) {
  const Snapshot base{4, "a.example weight=on calibrate=on\n", "", "db"};
  Snapshot next = base;
  next.version = 5;
  next.factors = "a.example. common 192.0.2.1 1.25\n";
  const SnapshotDelta to_recursor = MakeDelta(base, next, false);
  EXPECT_TRUE(to_recursor.parts.empty());
  auto d = DeltaFromMessage(DeltaMessage(MakeDelta(base, next, true)));
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->parts.size(), 1u);
  EXPECT_EQ(d->parts[0].name, "factors");
  SnapshotParts changed;
  auto applied = ApplyDelta(base, *d, &changed);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(*applied, next);
  EXPECT_TRUE(changed.factors);
  EXPECT_FALSE(changed.tags || changed.citymap || changed.accounts);
  EXPECT_EQ(DiffParts(base, next).factors, true);
}

TEST(SnapshotAccounts, ValidationNamesThePartAndLineNeverTheSecret) {
  struct Case {
    std::string accounts;
    std::string error;
  };
  const std::string secret = kSecret;
  const std::vector<Case> cases = {
      {"acme secret=" + secret + "\nacme secret=" + secret + "\n", "accounts: line 2"},  // a duplicate
      {"# c\nbad/name secret=" + secret + "\n", "accounts: line 2"},
      {"acme rps=many secret=" + secret + "\n", "accounts: line 1"},
      {"acme unsigned=on\n", "accounts: line 1"},  // no secret
      {"acme secret=short\n", "accounts: line 1"},
      {"acme secret=" + secret + " secret=" + secret + "x secret=" + secret + "y\n", "accounts: line 1"},
  };
  for (const Case& c : cases) {
    Snapshot s = WithAccounts();
    s.accounts = c.accounts;
    const absl::Status st = ValidateSnapshot(s);
    ASSERT_FALSE(st.ok()) << c.accounts;
    const std::string msg(st.message());
    EXPECT_NE(msg.find(c.error), std::string::npos) << msg;
    EXPECT_EQ(msg.find(secret), std::string::npos) << "an error shows a secret: " << msg;
    EXPECT_EQ(msg.find("short"), std::string::npos) << "an error shows a secret: " << msg;
  }
  // The tags and the city map are still checked first, as before.
  Snapshot bad = WithAccounts();
  bad.tags = "x.example color=red\n";
  EXPECT_NE(std::string(ValidateSnapshot(bad).message()).find("tags: line 1"), std::string::npos);
}

class PersistedAccounts : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/weir-snapshot-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::string dir_;
};

TEST_F(PersistedAccounts, FileKeepsTheAccountsAndIsPrivate) {
  const mode_t old = umask(0);  // the mode is the file's own, not the umask's
  const Snapshot s = WithAccounts();
  const absl::Status st = PersistSnapshot(dir_, s);
  umask(old);
  ASSERT_TRUE(st.ok()) << st;
  struct stat sb {};
  ASSERT_EQ(stat((dir_ + "/snapshot").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
  auto back = LoadPersistedSnapshot(dir_);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, s);
}

TEST_F(PersistedAccounts, LeftoverTemporaryFileIsMadePrivateToo) {
  // An older version's temporary file, group-readable, left by a crash.
  const std::string tmp = dir_ + "/snapshot.tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  ASSERT_EQ(chmod(tmp.c_str(), 0644), 0);
  ASSERT_TRUE(PersistSnapshot(dir_, WithAccounts()).ok());
  struct stat sb {};
  ASSERT_EQ(stat((dir_ + "/snapshot").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
}

}  // namespace
}  // namespace weir::mgmt
