#include "weir/common/fd_limit.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <string>

namespace weir::common {
namespace {

using Action = OpenFileLimitDecision::Action;

TEST(FdLimitTest, KeepsASoftLimitThatCovers) {
  const OpenFileLimitDecision d = DecideOpenFileLimit(1000, {.soft = 4096, .hard = 4096});
  EXPECT_EQ(d.action, Action::kKeep);
  EXPECT_EQ(d.soft, 4096u) << "a limit is never lowered to the need";
  EXPECT_EQ(DecideOpenFileLimit(4096, {.soft = 4096, .hard = 4096}).action, Action::kKeep);
}

TEST(FdLimitTest, RaisesALowSoftLimitToTheNeed) {
  const OpenFileLimitDecision d = DecideOpenFileLimit(2500, {.soft = 64, .hard = 65536});
  EXPECT_EQ(d.action, Action::kRaise);
  EXPECT_EQ(d.soft, 2500u);
  const OpenFileLimitDecision exact = DecideOpenFileLimit(65536, {.soft = 1024, .hard = 65536});
  EXPECT_EQ(exact.action, Action::kRaise) << "a hard limit equal to the need is enough";
  EXPECT_EQ(exact.soft, 65536u);
  const OpenFileLimitDecision unlimited =
      DecideOpenFileLimit(70000, {.soft = 1024, .hard = OpenFileLimit::kUnlimited});
  EXPECT_EQ(unlimited.action, Action::kRaise);
  EXPECT_EQ(unlimited.soft, 70000u);
}

TEST(FdLimitTest, RefusesWhenTheHardLimitIsBelowTheNeed) {
  const OpenFileLimitDecision d = DecideOpenFileLimit(21312, {.soft = 1024, .hard = 1024});
  EXPECT_EQ(d.action, Action::kRefuse);
  EXPECT_EQ(d.soft, 1024u);
  EXPECT_EQ(DecideOpenFileLimit(257, {.soft = 64, .hard = 256}).action, Action::kRefuse);
}

TEST(FdLimitTest, NeedSumsItsTermsAndNamesTheLargestKeys) {
  DescriptorNeed need;
  need.Add("tcp_max_connections 20000", 20000, "[server] tcp_max_connections");
  need.Add("nothing", 0, "[server] ignored");
  need.Add("udp_sockets 256 x 2", 512, "[upstream] udp_sockets");
  need.Add("[tls] max_connections 800", 800, "[tls] max_connections");
  need.Add("64 fixed", 64);
  EXPECT_EQ(need.Total(), 21376u);
  EXPECT_EQ(need.terms().size(), 4u) << "a zero count adds no term";
  EXPECT_EQ(need.Explain(),
            "tcp_max_connections 20000 + udp_sockets 256 x 2 + [tls] max_connections 800 + 64 fixed");
  EXPECT_EQ(need.LargestKeys(2),
            (std::vector<std::string>{"[server] tcp_max_connections", "[tls] max_connections"}));
}

TEST(FdLimitTest, RefusalIsOneLineWithTheNeedTheLimitAndTheKeys) {
  DescriptorNeed need;
  need.Add("tcp_max_connections 20000", 20000, "[server] tcp_max_connections");
  need.Add("max_inflight 1000", 1000, "[server] max_inflight");
  need.Add("max_inflight 1000", 1000, "[server] max_inflight");
  need.Add("312 fixed", 312);
  const std::string line = OpenFileLimitRefusal(need, {.soft = 1024, .hard = 1024});
  EXPECT_EQ(
      line,
      "open-file limit: the config needs 22,312 descriptors (tcp_max_connections 20000 + max_inflight 1000 "
      "+ max_inflight 1000 + 312 fixed), the hard limit is 1,024: raise LimitNOFILE in the systemd unit (or "
      "the hard limit it is started under) or lower [server] tcp_max_connections or [server] max_inflight");
  EXPECT_EQ(line.find('\n'), std::string::npos);
}

TEST(FdLimitTest, GroupedCount) {
  EXPECT_EQ(GroupedCount(0), "0");
  EXPECT_EQ(GroupedCount(999), "999");
  EXPECT_EQ(GroupedCount(1000), "1,000");
  EXPECT_EQ(GroupedCount(1048576), "1,048,576");
  EXPECT_EQ(GroupedCount(OpenFileLimit::kUnlimited), "unlimited");
}

// The syscall wrapper against the process's real limit: a lower soft limit
// is read back, and raising it again within the hard limit restores it.
TEST(FdLimitTest, ReadsAndSetsTheProcessLimit) {
  auto before = ReadOpenFileLimit();
  ASSERT_TRUE(before.ok()) << before.status();
  rlimit r{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &r), 0);
  EXPECT_EQ(before->hard, r.rlim_max == RLIM_INFINITY ? OpenFileLimit::kUnlimited : r.rlim_max);
  if (before->soft < 2 || before->soft == OpenFileLimit::kUnlimited) GTEST_SKIP() << "no finite soft limit";
  const uint64_t lower = before->soft / 2;
  ASSERT_TRUE(SetOpenFileSoftLimit(lower, before->hard).ok());
  EXPECT_EQ(ReadOpenFileLimit()->soft, lower);
  ASSERT_TRUE(SetOpenFileSoftLimit(before->soft, before->hard).ok());
  EXPECT_EQ(ReadOpenFileLimit()->soft, before->soft);
  EXPECT_EQ(ReadOpenFileLimit()->hard, before->hard);
}

}  // namespace
}  // namespace weir::common
