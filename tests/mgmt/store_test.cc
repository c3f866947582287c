#include "weir/mgmt/store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "weir/mgmt/etcd_client.h"
#include "weir/mgmt/etcd_store.h"

#include "etcd_member.h"

namespace weir::mgmt {
namespace {

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/weir-store-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/mgmt.db";
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::unique_ptr<Store> Open() {
    auto s = Store::Open(path_);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }
  std::string dir_, path_;
};

TEST_F(StoreTest, ChangesBumpTheVersionAndSurviveReopen) {
  {
    auto s = Open();
    EXPECT_EQ(s->version(), 0u);
    EXPECT_EQ(*s->AddTag("CDN.Example weight=on ecs=on", false, "alice"), 1u);
    EXPECT_EQ(*s->AddTag("example.org", false, "alice"), 2u);
    EXPECT_EQ(*s->ImportCitymap("# map\n10.0.0.0/8,bj,192.0.2.0/24\n", "bob"), 3u);
    EXPECT_EQ(*s->AddTag("cdn.example weight=on", true, "alice"), 4u);
    EXPECT_EQ(*s->RemoveTag("example.org.", "bob"), 5u);
  }
  auto s = Open();
  EXPECT_EQ(s->version(), 5u);
  EXPECT_EQ(s->snapshot().version, 5u);
  EXPECT_EQ(s->snapshot().tags, "cdn.example. weight=on ecs=off policy=iterate answer=single level=global\n");
  EXPECT_EQ(s->snapshot().citymap, "# map\n10.0.0.0/8,bj,192.0.2.0/24\n");
  auto audit = s->Audit(10);
  ASSERT_TRUE(audit.ok());
  ASSERT_EQ(audit->size(), 5u);
  EXPECT_EQ((*audit)[0].action, "tag add");
  EXPECT_EQ((*audit)[0].actor, "alice");
  EXPECT_EQ((*audit)[0].version, 1u);
  EXPECT_EQ((*audit)[3].action, "tag replace");
  EXPECT_EQ((*audit)[4].action, "tag rm");
  EXPECT_EQ((*audit)[4].version, 5u);
}

TEST_F(StoreTest, RejectedChangesLeaveEverythingAsItWas) {
  auto s = Open();
  ASSERT_TRUE(s->AddTag("cdn.example weight=on", false, "a").ok());
  ASSERT_TRUE(s->ImportCitymap("10.0.0.0/8,bj,192.0.2.0/24\n", "a").ok());
  const Snapshot before = s->snapshot();

  auto r =
      s->ImportCitymap("10.0.0.0/8,bj,192.0.2.0/24\n11.0.0.0/8,sh,198.51.100.0/24\n12.0.0.0/40,gz,\n", "a");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("import:3: "), std::string::npos) << r.status();
  r = s->ImportTags("a.example weight=on\nb.example weight=maybe\n", "a");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("import:2: "), std::string::npos) << r.status();
  r = s->AddTag("cdn.example ecs=on", false, "a");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
  r = s->AddTag("cdn.example weight=on", true, "a");  // the same tag again: no new version
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
  r = s->RemoveTag("nothing.example", "a");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  r = s->RemoveTag("cdn.example weight=on", "a");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  r = s->AddTag("bad..name", false, "a");
  EXPECT_FALSE(r.ok());

  EXPECT_EQ(s->snapshot(), before);
  s.reset();
  auto again = Open();
  EXPECT_EQ(again->snapshot(), before);
  EXPECT_EQ(again->Audit(100)->size(), 2u);
}

TEST_F(StoreTest, TagImportReplacesEveryTag) {
  auto s = Open();
  ASSERT_TRUE(s->AddTag("old.example weight=on", false, "a").ok());
  auto v = s->ImportTags("# tags\nb.example ecs=on\na.example weight=on answer=ordered\n", "a");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(s->snapshot().tags,
            "a.example. weight=on ecs=off policy=iterate answer=ordered level=global\n"
            "b.example. weight=off ecs=on policy=iterate answer=single level=city\n");
}

TEST_F(StoreTest, TagEditChangesOnlyTheKeysGiven) {
  auto s = Open();
  ASSERT_TRUE(s->AddTag("cdn.example weight=on ecs=on answer=ordered", false, "alice").ok());
  auto v = s->EditTag("CDN.example.", {"ecs=off", "level=subnet"}, "bob");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 2u);
  const std::string& tags = s->snapshot().tags;
  EXPECT_NE(tags.find("weight=on"), std::string::npos) << tags;
  EXPECT_NE(tags.find("answer=ordered"), std::string::npos) << tags;
  EXPECT_NE(tags.find("level=subnet"), std::string::npos) << tags;
  EXPECT_EQ(tags.find("ecs=on"), std::string::npos) << tags;
  // Refused, nothing changed: no such tag, a bad value, not key=value, no change at all.
  EXPECT_EQ(s->EditTag("other.example", {"ecs=on"}, "bob").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(s->EditTag("cdn.example", {"ecs=maybe"}, "bob").ok());
  EXPECT_FALSE(s->EditTag("cdn.example", {"ecs"}, "bob").ok());
  EXPECT_FALSE(s->EditTag("cdn.example", {}, "bob").ok());
  EXPECT_FALSE(s->EditTag("cdn.example", {"level=subnet"}, "bob").ok()) << "no change";
  EXPECT_EQ(s->version(), 2u);
  EXPECT_EQ(s->snapshot().tags, tags);
}

TEST_F(StoreTest, CityMappingsAreAddedReplacedAndRemovedOneAtATime) {
  auto s = Open();
  const std::string base = "# the operator's map\n10.0.0.0/8,bj,192.0.2.0/24\n";
  ASSERT_TRUE(s->ImportCitymap(base, "alice").ok());
  auto v = s->AddCityMapping("10.1.0.0/16,sh,198.51.100.0/24", false, "alice");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(s->snapshot().citymap, base + "10.1.0.0/16,sh,198.51.100.0/24\n") << "comments and order kept";
  auto again = s->AddCityMapping("10.1.0.0/16,gz,203.0.113.0/24", false, "alice");
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(s->AddCityMapping("10.1.0.0/16, gz, 203.0.113.0/24", true, "alice").ok());
  EXPECT_EQ(s->snapshot().citymap, base + "10.1.0.0/16, gz, 203.0.113.0/24\n");
  // A line that would break the whole map is refused: a second ECS address for bj.
  EXPECT_FALSE(s->AddCityMapping("10.2.0.0/16,bj,192.0.2.128/25", false, "alice").ok());
  EXPECT_FALSE(s->AddCityMapping("10.3.0.1/16,bj,", false, "alice").ok()) << "host bits set";
  EXPECT_FALSE(s->AddCityMapping("10.3.0.0/16", false, "alice").ok()) << "no city";
  EXPECT_FALSE(s->AddCityMapping("10.3.0.0/16,bj\n10.4.0.0/16,bj", false, "alice").ok());
  const uint64_t before = s->version();
  EXPECT_EQ(s->RemoveCityMapping("10.9.0.0/16", "bob").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(s->RemoveCityMapping("10.1.0.0", "bob").ok());
  EXPECT_EQ(s->version(), before);
  ASSERT_TRUE(s->RemoveCityMapping("10.1.0.0/16", "bob").ok());
  EXPECT_EQ(s->snapshot().citymap, base);
}

constexpr char kSecretA[] = "secret-a-0123456789abcdef";
constexpr char kSecretB[] = "secret-b-0123456789abcdef";
constexpr char kSecretC[] = "secret-c-0123456789abcdef";

// No audit entry holds any of the secrets.
void ExpectNoSecretInAudit(Store& s) {
  auto audit = s.Audit(1000);
  ASSERT_TRUE(audit.ok());
  for (const AuditRecord& a : *audit) {
    for (const char* secret : {kSecretA, kSecretB, kSecretC}) {
      EXPECT_EQ(a.detail.find(secret), std::string::npos) << a.action << ": " << a.detail;
      EXPECT_EQ(a.action.find(secret), std::string::npos) << a.action;
    }
  }
}

TEST_F(StoreTest, AccountsAreAddedRotatedRetiredSetAndRemovedAsVersions) {
  {
    auto s = Open();
    ASSERT_TRUE(s->AddTag("cdn.example weight=on", false, "alice").ok());
    AccountSettings settings;
    settings.allow_legacy_md5 = true;
    settings.rps = 200;
    auto v = s->AddAccount("acme", kSecretA, settings, "alice");
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, 2u);
    ASSERT_EQ(s->accounts().size(), 1u);
    const AccountRecord& a = s->accounts()[0];
    EXPECT_EQ(a.secret, kSecretA);
    EXPECT_EQ(a.previous_secret, "");
    EXPECT_FALSE(a.allow_unsigned);
    EXPECT_TRUE(a.allow_legacy_md5);
    EXPECT_EQ(a.rps, 200u);
    EXPECT_GT(a.created, 0);
    EXPECT_EQ(a.rotated, 0);
    EXPECT_EQ(s->snapshot().accounts,
              std::string("acme unsigned=off legacy_md5=on rps=200 secret=") + kSecretA + "\n")
        << "the snapshot carries the FormatAccounts text";

    // Rotate: two live, newest first; a second rotation drops the oldest.
    EXPECT_EQ(*s->RotateAccount("acme", kSecretB, "bob"), 3u);
    EXPECT_EQ(s->accounts()[0].secret, kSecretB);
    EXPECT_EQ(s->accounts()[0].previous_secret, kSecretA);
    EXPECT_GT(s->accounts()[0].rotated, 0);
    EXPECT_NE(s->snapshot().accounts.find(std::string("secret=") + kSecretB + " secret=" + kSecretA),
              std::string::npos)
        << s->snapshot().accounts;
    EXPECT_EQ(*s->RotateAccount("acme", kSecretC, "bob"), 4u);
    EXPECT_EQ(s->accounts()[0].secret, kSecretC);
    EXPECT_EQ(s->accounts()[0].previous_secret, kSecretB);
    EXPECT_EQ(s->snapshot().accounts.find(kSecretA), std::string::npos);

    // Retire: the previous one goes; once only.
    EXPECT_EQ(*s->RetireAccountSecret("acme", "bob"), 5u);
    EXPECT_EQ(s->accounts()[0].previous_secret, "");
    EXPECT_EQ(s->snapshot().accounts.find(kSecretB), std::string::npos);
    EXPECT_EQ(s->RetireAccountSecret("acme", "bob").status().code(), absl::StatusCode::kFailedPrecondition);

    // Set changes only what it is given.
    AccountSettings on;
    on.allow_unsigned = true;
    EXPECT_EQ(*s->SetAccount("acme", on, "carol"), 6u);
    EXPECT_TRUE(s->accounts()[0].allow_unsigned);
    EXPECT_TRUE(s->accounts()[0].allow_legacy_md5);
    EXPECT_EQ(s->accounts()[0].rps, 200u);

    ASSERT_TRUE(s->AddAccount("beta", kSecretA, {}, "alice").ok());
    EXPECT_EQ(s->version(), 7u);
  }
  // Everything survives a reopen, the tags beside it.
  auto s = Open();
  EXPECT_EQ(s->version(), 7u);
  ASSERT_EQ(s->accounts().size(), 2u);
  EXPECT_EQ(s->accounts()[0].name, "acme");
  EXPECT_EQ(s->accounts()[0].secret, kSecretC);
  EXPECT_TRUE(s->accounts()[0].allow_unsigned);
  EXPECT_EQ(s->accounts()[1].name, "beta");
  EXPECT_EQ(s->snapshot().tags, "cdn.example. weight=on ecs=off policy=iterate answer=single level=global\n");
  EXPECT_EQ(s->snapshot().accounts, std::string("acme unsigned=on legacy_md5=on rps=200 secret=") + kSecretC +
                                        "\nbeta unsigned=off legacy_md5=off rps=0 secret=" + kSecretA + "\n");

  EXPECT_EQ(*s->RemoveAccount("acme", "dave"), 8u);
  ASSERT_EQ(s->accounts().size(), 1u);
  EXPECT_EQ(s->snapshot().accounts.find("acme"), std::string::npos);

  auto audit = s->Audit(100);
  ASSERT_TRUE(audit.ok());
  std::vector<std::string> actions;
  for (const AuditRecord& a : *audit) actions.push_back(a.action);
  EXPECT_EQ(actions,
            (std::vector<std::string>{"tag add", "account add", "account rotate", "account rotate",
                                      "account retire", "account set", "account add", "account rm"}));
  for (const AuditRecord& a : *audit) {
    if (a.action.starts_with("account")) {
      EXPECT_TRUE(a.detail.starts_with("acme") || a.detail.starts_with("beta")) << a.detail;
    }
  }
  EXPECT_EQ((*audit)[1].detail, "acme unsigned=off legacy_md5=on rps=200");
  EXPECT_EQ((*audit)[7].actor, "dave");
  EXPECT_EQ((*audit)[7].version, 8u);
  ExpectNoSecretInAudit(*s);
}

TEST_F(StoreTest, RefusedAccountChangesChangeNothingAndShowNoSecret) {
  auto s = Open();
  ASSERT_TRUE(s->AddAccount("acme", kSecretA, {}, "a").ok());
  const Snapshot before = s->snapshot();
  const std::vector<AccountRecord> accounts = s->accounts();
  std::vector<absl::Status> refused = {
      s->AddAccount("acme", kSecretB, {}, "a").status(),                // exists
      s->AddAccount("bad/name", kSecretB, {}, "a").status(),            // invalid name
      s->AddAccount("", kSecretB, {}, "a").status(),                    // empty name
      s->AddAccount(std::string(65, 'x'), kSecretB, {}, "a").status(),  // too long
      s->AddAccount("short", "tooshort-secret", {}, "a").status(),      // 15 characters
      s->AddAccount("long", std::string(129, 'k'), {}, "a").status(),
      s->AddAccount("spaced", "a secret with spaces", {}, "a").status(),
      s->AddAccount("ctl", std::string("0123456789abcdef\n"), {}, "a").status(),
      s->RotateAccount("acme", kSecretA, "a").status(),  // the current one again
      s->RotateAccount("nobody", kSecretB, "a").status(),
      s->RetireAccountSecret("acme", "a").status(),                           // one secret: nothing to retire
      s->SetAccount("acme", {}, "a").status(),                                // nothing given
      s->SetAccount("acme", AccountSettings{false, false, 0}, "a").status(),  // nothing changes
      s->SetAccount("nobody", AccountSettings{true, {}, {}}, "a").status(),
      s->RemoveAccount("nobody", "a").status(),
  };
  EXPECT_EQ(refused[0].code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(refused[1].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused[9].code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(refused[14].code(), absl::StatusCode::kNotFound);
  for (const absl::Status& st : refused) {
    EXPECT_FALSE(st.ok());
    const std::string msg(st.message());
    for (const std::string& secret : std::vector<std::string>{
             kSecretA, kSecretB, "tooshort-secret", "a secret with spaces", std::string(129, 'k')}) {
      EXPECT_EQ(msg.find(secret), std::string::npos) << "a secret in: " << msg;
    }
  }
  EXPECT_EQ(s->snapshot(), before);
  EXPECT_EQ(s->accounts(), accounts);
  s.reset();
  auto again = Open();
  EXPECT_EQ(again->snapshot(), before);
  EXPECT_EQ(again->Audit(100)->size(), 1u);
  ExpectNoSecretInAudit(*again);
}

TEST_F(StoreTest, TagChangesKeepTheAccounts) {
  auto s = Open();
  ASSERT_TRUE(s->AddAccount("acme", kSecretA, {}, "a").ok());
  ASSERT_TRUE(s->ImportTags("a.example weight=on\n", "a").ok());
  ASSERT_TRUE(s->ImportCitymap("10.0.0.0/8,bj,192.0.2.0/24\n", "a").ok());
  ASSERT_EQ(s->accounts().size(), 1u);
  EXPECT_NE(s->snapshot().accounts.find(kSecretA), std::string::npos);
  EXPECT_EQ(s->version(), 3u);
}

TEST_F(StoreTest, NodeRegistry) {
  auto s = Open();
  ASSERT_TRUE(s->NodeSeen("fp-1", "fastpath", "127.0.0.1:4000", 0).ok());
  ASSERT_TRUE(s->NodeAck("fp-1", 3).ok());
  ASSERT_TRUE(s->NodeNack("fp-1", 4, "tags: line 1: bad").ok());
  ASSERT_TRUE(s->NodeSeen("rec-1", "recursor", "127.0.0.1:4001", 0).ok());
  auto nodes = s->Nodes();
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].node_id, "fp-1");
  EXPECT_EQ((*nodes)[0].acked_version, 3u);
  EXPECT_EQ((*nodes)[0].nack_version, 4u);
  EXPECT_EQ((*nodes)[0].nack_reason, "tags: line 1: bad");
  EXPECT_EQ((*nodes)[1].kind, "recursor");
}

TEST_F(StoreTest, EachDatabaseHasItsOwnOrigin) {
  std::string origin;
  {
    auto s = Open();
    origin = s->snapshot().origin;
    EXPECT_EQ(origin.size(), 32u);
    ASSERT_TRUE(s->AddTag("a.example", false, "a").ok());
    EXPECT_EQ(s->snapshot().origin, origin);
  }
  EXPECT_EQ(Open()->snapshot().origin, origin);
  auto other = Store::Open(dir_ + "/other.db");
  ASSERT_TRUE(other.ok());
  EXPECT_NE((*other)->snapshot().origin, origin);
}

TEST_F(StoreTest, SnapshotsBeyondTheFrameLimitAreRefused) {
  auto s = Open();
  std::string csv;
  csv.reserve(kMaxFrameBytes + 1000);
  csv = "10.0.0.0/8,bj,192.0.2.0/24\n";
  while (csv.size() <= kMaxFrameBytes)
    csv += "# padding padding padding padding padding padding padding padding\n";
  auto r = s->ImportCitymap(csv, "a");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("limit of the push stream"), std::string::npos)
      << r.status();
  EXPECT_EQ(s->version(), 0u);
}

TEST_F(StoreTest, UnopenableDatabaseIsAnError) {
  auto s = Store::Open(dir_ + "/no/such/dir/mgmt.db");
  EXPECT_FALSE(s.ok());
}

// The backends themselves (StoreBackend::Load and Commit), each on its real
// engine: SQLite in a temporary file, etcd as one member on free loopback
// ports. What they are tested on here is the calibrator's state, the part
// of the configuration added last.

using test::EtcdMember;

// The member every etcd test of the run shares (each under its own prefix),
// started by the first one that needs it.
struct SharedEtcd {
  EtcdMember member;
  ::testing::AssertionResult started = member.Start();
};
SharedEtcd& Etcd() {
  static SharedEtcd etcd;
  return etcd;
}

enum class Engine { kSqlite, kEtcd };
void PrintTo(Engine e, std::ostream* os) { *os << (e == Engine::kSqlite ? "sqlite" : "etcd"); }

// Two calibrator states as Calibrator::FormatState writes them.
constexpr char kCalibrationA[] =
    "cdn.example. bj 192.0.2.1 1 1.25 0.02 1000000 1000000 3\n"
    "cdn.example. bj 192.0.2.2 3 0.9166666666666666 -0.01 1000000 1000000 3\n";
constexpr char kCalibrationB[] = "cdn.example. sh 2001:db8::1 2 0.5 -0.3 1000600 1000600 4\n";

// A configuration with every part filled, `calibration` as given.
StoredConfig FullConfig(const std::string& calibration) {
  StoredConfig c;
  c.tag_lines = {"cdn.example. weight=on ecs=off policy=iterate answer=single level=global"};
  c.citymap = "10.0.0.0/8,bj,192.0.2.0/24\n";
  c.accounts = {AccountRecord{"acme", kSecretA, "", false, true, 200, 1700000000, 0}};
  c.calibration = calibration;
  return c;
}

AuditRecord Audit(const std::string& action) {
  AuditRecord a;
  a.time = 1700000000;
  a.actor = "test";
  a.action = action;
  return a;
}

// The stored parts of `got` are those of `want` (version and origin aside).
void ExpectParts(const StoredConfig& got, const StoredConfig& want) {
  EXPECT_EQ(got.tag_lines, want.tag_lines);
  EXPECT_EQ(got.citymap, want.citymap);
  EXPECT_EQ(got.accounts, want.accounts);
  EXPECT_EQ(got.calibration, want.calibration);
}

// A backend as weir-mgmt opens it: SQLite through Store::Open (its opener
// is private to the library), etcd through OpenEtcdBackend.
struct OpenBackend {
  std::unique_ptr<Store> store;
  std::unique_ptr<StoreBackend> etcd;
  StoreBackend* operator->() { return store ? &store->backend() : etcd.get(); }
};

class BackendFixture : public ::testing::Test {
 protected:
  explicit BackendFixture(Engine engine) : engine_(engine) {}
  void SetUp() override {
    char tmpl[] = "/tmp/weir-store-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
    prefix_ = std::string("/t/") + t->test_suite_name() + "/" + t->name() + "/";
    if (engine_ == Engine::kEtcd) {
      ASSERT_TRUE(Etcd().started) << Etcd().started.message();
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  etcd::ClientOptions EtcdClientOptions() const {
    etcd::ClientOptions o;
    o.endpoints = {Etcd().member.endpoint()};
    return o;
  }
  // Opens this test's database or prefix (again: as a restarted weir-mgmt,
  // or a second instance).
  OpenBackend Open() {
    OpenBackend b;
    if (engine_ == Engine::kSqlite) {
      auto s = Store::Open(dir_ + "/mgmt.db");
      EXPECT_TRUE(s.ok()) << s.status();
      if (s.ok()) b.store = *std::move(s);
    } else {
      EtcdStoreOptions o;
      o.client = EtcdClientOptions();
      o.prefix = prefix_;
      o.instance = "test";
      auto e = OpenEtcdBackend(o);
      EXPECT_TRUE(e.ok()) << e.status();
      if (e.ok()) b.etcd = *std::move(e);
    }
    return b;
  }
  // Loads, failing the test on an error.
  static StoredConfig Load(OpenBackend& b) {
    auto c = b->Load();
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : StoredConfig{};
  }

  Engine engine_;
  std::string dir_, prefix_;
};

class BackendTest : public BackendFixture, public ::testing::WithParamInterface<Engine> {
 protected:
  BackendTest() : BackendFixture(GetParam()) {}
};

INSTANTIATE_TEST_SUITE_P(Engines, BackendTest, ::testing::Values(Engine::kSqlite, Engine::kEtcd),
                         [](const ::testing::TestParamInfo<Engine>& i) {
                           return i.param == Engine::kSqlite ? "Sqlite" : "Etcd";
                         });

TEST_P(BackendTest, CalibrationIsCommittedAndReadBack) {
  const StoredConfig want = FullConfig(kCalibrationA);
  uint64_t version = 0;
  {
    OpenBackend b = Open();
    const StoredConfig empty = Load(b);
    EXPECT_EQ(empty.version, 0u);
    EXPECT_EQ(empty.calibration, "");
    auto v = b->Commit(empty, want, Audit("import"));
    ASSERT_TRUE(v.ok()) << v.status();
    version = *v;
    const StoredConfig got = Load(b);
    EXPECT_EQ(got.version, version);
    ExpectParts(got, want);
  }
  OpenBackend again = Open();
  const StoredConfig got = Load(again);
  EXPECT_EQ(got.version, version);
  ExpectParts(got, want);
}

TEST_P(BackendTest, ChangingOnePartKeepsTheOthers) {
  OpenBackend b = Open();
  StoredConfig want = FullConfig("");
  ASSERT_TRUE(b->Commit(Load(b), want, Audit("import")).ok());

  // The calibration alone, set, changed, then cleared.
  for (const char* calibration : {kCalibrationA, kCalibrationB, ""}) {
    const StoredConfig base = Load(b);
    want = base;
    want.calibration = calibration;
    auto v = b->Commit(base, want, Audit("calibrate"));
    ASSERT_TRUE(v.ok()) << v.status();
    const StoredConfig got = Load(b);
    EXPECT_EQ(got.version, *v);
    ExpectParts(got, want);
  }

  // The other parts change; the calibration stays.
  StoredConfig base = Load(b);
  want = base;
  want.calibration = kCalibrationB;
  ASSERT_TRUE(b->Commit(base, want, Audit("calibrate")).ok());
  base = Load(b);
  want = base;
  want.tag_lines = {"other.example. weight=off ecs=on policy=iterate answer=single level=city"};
  want.citymap = "11.0.0.0/8,sh,198.51.100.0/24\n";
  want.accounts.clear();
  ASSERT_TRUE(b->Commit(base, want, Audit("import")).ok());
  ExpectParts(Load(b), want);
  OpenBackend again = Open();
  ExpectParts(Load(again), want);
}

TEST_P(BackendTest, ACommitAbortedOnConflictLeavesTheCalibration) {
  OpenBackend a = Open();
  ASSERT_TRUE(a->Commit(Load(a), FullConfig(kCalibrationA), Audit("import")).ok());
  // A second instance reads the store; the first commits meanwhile.
  OpenBackend b = Open();
  const StoredConfig stale = Load(b);
  EXPECT_EQ(stale.calibration, kCalibrationA);
  StoredConfig want = Load(a);
  want.calibration = kCalibrationB;
  auto committed = a->Commit(Load(a), want, Audit("calibrate"));
  ASSERT_TRUE(committed.ok()) << committed.status();

  StoredConfig lost = stale;
  lost.calibration = "cdn.example. gz 192.0.2.9 1 2 0 1000900 1000900 1\n";
  auto r = b->Commit(stale, lost, Audit("calibrate"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAborted) << r.status();
  for (OpenBackend* o : {&a, &b}) {
    const StoredConfig got = Load(*o);
    EXPECT_EQ(got.version, *committed);
    ExpectParts(got, want);
  }
}

class SqliteBackendTest : public BackendFixture {
 protected:
  SqliteBackendTest() : BackendFixture(Engine::kSqlite) {}
};

TEST_F(SqliteBackendTest, ADatabaseWithoutTheCalibrationRowReadsAsNoneAndTakesOne) {
  {
    OpenBackend b = Open();
    ASSERT_TRUE(b->Commit(Load(b), FullConfig(kCalibrationA), Audit("import")).ok());
  }
  // An earlier weir-mgmt kept no calibration in its database.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ + "/mgmt.db").c_str(), &db), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(db, "DELETE FROM meta WHERE key = 'calibration'", nullptr, nullptr, nullptr),
            SQLITE_OK);
  EXPECT_EQ(sqlite3_changes(db), 1);
  sqlite3_close(db);

  StoredConfig want = FullConfig("");
  {
    OpenBackend b = Open();
    const StoredConfig old = Load(b);
    EXPECT_EQ(old.version, 1u);
    ExpectParts(old, want);
    want.calibration = kCalibrationB;
    auto v = b->Commit(old, want, Audit("calibrate"));
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, 2u);
    ExpectParts(Load(b), want);
  }
  OpenBackend again = Open();
  ExpectParts(Load(again), want);
}

class EtcdBackendTest : public BackendFixture {
 protected:
  EtcdBackendTest() : BackendFixture(Engine::kEtcd) {}
  // How many blob chunks are stored under this test's prefix.
  size_t BlobChunks() {
    etcd::Client c(EtcdClientOptions());
    const std::string blobs = prefix_ + "blob/";
    auto r = c.Range(blobs, etcd::PrefixEnd(blobs), 0, /*keys_only=*/true);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->kvs.size() : 0;
  }
};

TEST_F(EtcdBackendTest, AHeadWithoutCalibrationReadsAsNoneAndTakesOne) {
  StoredConfig want = FullConfig("");
  {
    OpenBackend b = Open();
    ASSERT_TRUE(b->Commit(Load(b), want, Audit("import")).ok());
  }
  // The head as an earlier weir-mgmt writes it: no "calibration" member.
  etcd::Client client(EtcdClientOptions());
  auto head = client.Range(prefix_ + "head");
  ASSERT_TRUE(head.ok()) << head.status();
  ASSERT_EQ(head->kvs.size(), 1u);
  nlohmann::json j = nlohmann::json::parse(head->kvs[0].value);
  ASSERT_TRUE(j.contains("calibration")) << j.dump();
  j.erase("calibration");
  ASSERT_TRUE(client.Put(prefix_ + "head", j.dump()).ok());

  OpenBackend b = Open();
  const StoredConfig old = Load(b);
  ExpectParts(old, want);
  want.calibration = kCalibrationA;
  ASSERT_TRUE(b->Commit(old, want, Audit("calibrate")).ok());
  ExpectParts(Load(b), want);
  OpenBackend again = Open();
  ExpectParts(Load(again), want);
}

TEST_F(EtcdBackendTest, ReplacedAndAbortedCalibrationBlobsAreDeleted) {
  OpenBackend b = Open();
  // Every part fits in one chunk: one key per non-empty part.
  ASSERT_TRUE(b->Commit(Load(b), FullConfig(kCalibrationA), Audit("import")).ok());
  EXPECT_EQ(BlobChunks(), 4u);
  StoredConfig base = Load(b);
  StoredConfig next = base;
  next.calibration = kCalibrationB;
  ASSERT_TRUE(b->Commit(base, next, Audit("calibrate")).ok());
  EXPECT_EQ(BlobChunks(), 4u) << "the replaced calibration blob stays";
  // Aborted: its new blob is deleted again.
  next.calibration = kCalibrationA;
  EXPECT_EQ(b->Commit(base, next, Audit("calibrate")).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(BlobChunks(), 4u);
  base = Load(b);
  EXPECT_EQ(base.calibration, kCalibrationB);
  next = base;
  next.calibration = "";
  ASSERT_TRUE(b->Commit(base, next, Audit("calibrate")).ok());
  EXPECT_EQ(BlobChunks(), 3u) << "an empty part has no blob";
  ExpectParts(Load(b), next);
}

}  // namespace
}  // namespace weir::mgmt
