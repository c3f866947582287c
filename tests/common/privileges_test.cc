#include "weir/common/privileges.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

namespace weir::common {
namespace {

TEST(PrivilegesTest, ResolvesUserAndGroupByNameOrNumber) {
  auto root = ResolveRunAs("root");
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(root->uid, 0u);
  EXPECT_EQ(root->gid, 0u);
  EXPECT_FALSE(root->explicit_group);

  auto by_number = ResolveRunAs("0:0");
  ASSERT_TRUE(by_number.ok()) << by_number.status();
  EXPECT_EQ(by_number->user, "root") << "the name is looked up for messages";
  EXPECT_TRUE(by_number->explicit_group);
}

TEST(PrivilegesTest, RejectsUnknownOrMalformed) {
  EXPECT_FALSE(ResolveRunAs("").ok());
  EXPECT_FALSE(ResolveRunAs(":root").ok());
  EXPECT_FALSE(ResolveRunAs("root:").ok());
  auto unknown = ResolveRunAs("no-such-user-weir-test");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("no such user 'no-such-user-weir-test'"), std::string::npos)
      << unknown.status();
  auto bad_group = ResolveRunAs("root:no-such-group-weir-test");
  ASSERT_FALSE(bad_group.ok());
  EXPECT_NE(bad_group.status().message().find("no such group"), std::string::npos) << bad_group.status();
}

TEST(PrivilegesTest, WithoutRootOnlyTheSameUserIsAccepted) {
  if (geteuid() == 0) GTEST_SKIP() << "runs as root: the drop itself is tested below";
  RunAs self{.user = "self", .uid = geteuid(), .gid = getegid()};
  EXPECT_TRUE(DropPrivileges(self).ok());
  RunAs root{.user = "root", .uid = 0, .gid = 0};
  EXPECT_FALSE(DropPrivileges(root).ok());
}

// The drop is irreversible, so it runs in a child process.
TEST(PrivilegesTest, RootBecomesTheUserAndCannotComeBack) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  auto nobody = ResolveRunAs("nobody");
  if (!nobody.ok()) GTEST_SKIP() << "no user 'nobody' on this system";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (!DropPrivileges(*nobody).ok()) _exit(10);
    if (getuid() != nobody->uid || geteuid() != nobody->uid) _exit(11);
    if (getgid() != nobody->gid || getegid() != nobody->gid) _exit(12);
    if (setuid(0) == 0) _exit(13);
    gid_t groups[64];
    const int n = getgroups(64, groups);
    for (int i = 0; i < n; ++i) {
      if (groups[i] == 0) _exit(14);  // root's supplementary group dropped
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace weir::common
