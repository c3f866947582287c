// weir-mgmt's account requests: a secret is shown once (the add or rotate
// that made it), every listing shows fingerprints, never a secret.
#include "weir/mgmt/accounts.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <regex>
#include <string>

namespace weir::mgmt {
namespace {

class AccountsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/weir-accounts-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto s = Store::Open(dir_ + "/mgmt.db");
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = *std::move(s);
  }
  void TearDown() override {
    store_.reset();
    std::system(("rm -rf " + dir_).c_str());
  }
  absl::StatusOr<AccountChange> Change(Command id, std::vector<std::string> args) {
    return ChangeAccount(*store_, id, args, "test");
  }
  std::string dir_;
  std::unique_ptr<Store> store_;
};

TEST(AccountSecrets, NewSecretsAre64LowercaseHexAndDiffer) {
  const std::string a = NewAccountSecret(), b = NewAccountSecret();
  EXPECT_TRUE(std::regex_match(a, std::regex("[0-9a-f]{64}"))) << a;
  EXPECT_NE(a, b);
}

TEST(AccountSecrets, FingerprintIsTheStartOfTheSha256) {
  // printf '%s' abc | sha256sum: ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad
  EXPECT_EQ(SecretFingerprint("abc"), "ba7816bf8f01");
  EXPECT_EQ(SecretFingerprint("abc").size(), 12u);
}

TEST_F(AccountsTest, AddShowsTheNewSecretOnceAndLsOnlyItsFingerprint) {
  auto added = Change(Command::kAccountAdd, {"acme", "unsigned=on", "rps=20"});
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(added->version, 1u);
  EXPECT_EQ(added->what, "account acme added");
  const Json& doc = added->reply.json();
  const std::string secret = doc["secret"].get<std::string>();
  EXPECT_TRUE(std::regex_match(secret, std::regex("[0-9a-f]{64}"))) << secret;
  EXPECT_EQ(store_->accounts()[0].secret, secret);
  EXPECT_EQ(doc["fingerprint"], SecretFingerprint(secret));
  const std::string text = added->reply.RenderText();
  EXPECT_NE(text.find(secret), std::string::npos) << text;
  EXPECT_EQ(text.find(secret), text.rfind(secret)) << "printed once: " << text;
  EXPECT_TRUE(store_->accounts()[0].allow_unsigned);
  EXPECT_EQ(store_->accounts()[0].rps, 20u);

  const StructuredReply ls = ListAccounts(*store_);
  const std::string ls_text = ls.RenderText(), ls_json = ls.RenderJson();
  EXPECT_EQ(ls_text.find(secret), std::string::npos) << ls_text;
  EXPECT_EQ(ls_json.find(secret), std::string::npos) << ls_json;
  EXPECT_NE(ls_text.find(SecretFingerprint(secret)), std::string::npos) << ls_text;
  const Json& row = ls.json()["accounts"][0];
  EXPECT_EQ(row["name"], "acme");
  EXPECT_EQ(row["unsigned"], true);
  EXPECT_EQ(row["legacy_md5"], false);
  EXPECT_EQ(row["rps"], 20);
  EXPECT_EQ(row["secrets"], 1);
  EXPECT_TRUE(row["rotated"].is_null());
  EXPECT_NE(ls_text.find("NAME"), std::string::npos);
}

TEST_F(AccountsTest, RotateTwoLiveThenRetire) {
  auto added = Change(Command::kAccountAdd, {"acme"});
  ASSERT_TRUE(added.ok()) << added.status();
  const std::string first = added->reply.json()["secret"];
  auto rotated = Change(Command::kAccountRotate, {"acme"});
  ASSERT_TRUE(rotated.ok()) << rotated.status();
  const std::string second = rotated->reply.json()["secret"];
  EXPECT_NE(first, second);
  EXPECT_EQ(rotated->reply.RenderText().find(first), std::string::npos) << "only the new one is shown";
  Json row = ListAccounts(*store_).json()["accounts"][0];
  EXPECT_EQ(row["secrets"], 2);
  EXPECT_EQ(row["fingerprints"], Json::array({SecretFingerprint(second), SecretFingerprint(first)}));
  EXPECT_FALSE(row["rotated"].is_null());
  ASSERT_TRUE(Change(Command::kAccountRetire, {"acme"}).ok());
  row = ListAccounts(*store_).json()["accounts"][0];
  EXPECT_EQ(row["secrets"], 1);
  EXPECT_EQ(row["fingerprints"], Json::array({SecretFingerprint(second)}));
}

TEST_F(AccountsTest, SecretGivenByTheOperatorIsNotSentBack) {
  const std::string mine = "operator-chosen-secret-1234";
  auto added = Change(Command::kAccountAdd, {"acme", "secret=" + mine});
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(store_->accounts()[0].secret, mine);
  EXPECT_EQ(added->reply.RenderText().find(mine), std::string::npos);
  EXPECT_EQ(added->reply.RenderJson().find(mine), std::string::npos);
  EXPECT_EQ(added->reply.json()["fingerprint"], SecretFingerprint(mine));
  const std::string next = "operator-chosen-secret-5678";
  auto rotated = Change(Command::kAccountRotate, {"acme", "secret=" + next});
  ASSERT_TRUE(rotated.ok()) << rotated.status();
  EXPECT_EQ(store_->accounts()[0].secret, next);
  EXPECT_EQ(store_->accounts()[0].previous_secret, mine);
  EXPECT_EQ(rotated->reply.RenderJson().find(next), std::string::npos);
}

TEST_F(AccountsTest, BadArgumentsAreRefusedWithoutShowingASecret) {
  ASSERT_TRUE(Change(Command::kAccountAdd, {"acme"}).ok());
  const std::string bad_secret = "has space inside the secret";
  const std::vector<std::pair<Command, std::vector<std::string>>> cases = {
      {Command::kAccountAdd, {"acme"}},
      {Command::kAccountAdd, {"new", "unsigned=yes"}},
      {Command::kAccountAdd, {"new", "rps=-1"}},
      {Command::kAccountAdd, {"new", "rps=4294967296"}},
      {Command::kAccountAdd, {"new", "colour=red"}},
      {Command::kAccountAdd, {"new", "secret=" + bad_secret}},
      {Command::kAccountAdd, {"new", "secret=short"}},
      {Command::kAccountRotate, {"acme", "secret=" + bad_secret}},
      {Command::kAccountRotate, {"acme", "rps=3"}},
      {Command::kAccountSet, {"acme", "secret=operator-chosen-secret-1234"}},
      {Command::kAccountSet, {"acme", "legacy_md5=maybe"}},
      {Command::kAccountRetire, {"acme"}},
      {Command::kAccountRm, {"nobody"}},
      {Command::kAccountLs, {"acme"}},
  };
  for (const auto& [id, args] : cases) {
    auto r = Change(id, args);
    ASSERT_FALSE(r.ok()) << SpecOf(id).verb << " " << args.back();
    const std::string msg(r.status().message());
    EXPECT_EQ(msg.find(bad_secret), std::string::npos) << msg;
    EXPECT_EQ(msg.find("operator-chosen"), std::string::npos) << msg;
    EXPECT_EQ(msg.find(store_->accounts()[0].secret), std::string::npos) << msg;
  }
  EXPECT_EQ(store_->version(), 1u);
}

}  // namespace
}  // namespace weir::mgmt
