#include "weir/common/daemon.h"

#include "weir/common/process_metrics.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <vector>

namespace weir::common {
namespace {

// Every usage error exits 2, the code of a rejected configuration.
constexpr int kUsageError = 2;

std::optional<int> Parse(Daemon& d, std::vector<std::string> args) {
  args.insert(args.begin(), "weir-test");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return d.ParseFlags(static_cast<int>(argv.size()), argv.data());
}

Daemon WithClock() {
  return Daemon({.name = "weir-test", .description = "d", .test_clock_help = "tests only"});
}
Daemon WithoutClock() { return Daemon({.name = "weir-test", .description = "d"}); }

TEST(DaemonTest, SharedFlags) {
  Daemon d = WithClock();
  EXPECT_EQ(Parse(d, {"-c", "a.toml", "--test-clock"}), std::nullopt);
  EXPECT_EQ(d.config_path(), "a.toml");
  EXPECT_TRUE(d.test_clock());
  Daemon e = WithClock();
  EXPECT_EQ(Parse(e, {"--config", "b.toml"}), std::nullopt);
  EXPECT_EQ(e.config_path(), "b.toml");
  EXPECT_FALSE(e.test_clock());
}

TEST(DaemonTest, UsageErrorsExitTwo) {
  Daemon d = WithClock();
  EXPECT_EQ(Parse(d, {}), kUsageError);
  Daemon e = WithoutClock();
  EXPECT_EQ(Parse(e, {"-c", "a.toml", "--test-clock"}), kUsageError) << "only daemons that have it take it";
  Daemon f = WithoutClock();
  EXPECT_EQ(Parse(f, {"-c"}), kUsageError) << "-c without its value";
  Daemon h = WithoutClock();
  EXPECT_EQ(Parse(h, {"--help"}), 0);
}

TEST(DaemonTest, VersionNeedsNoConfig) {
  Daemon d = WithoutClock();
  testing::internal::CaptureStdout();
  EXPECT_EQ(Parse(d, {"--version"}), 0);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(out.rfind("weir-test " + std::string(BuildVersion()) + " (commit ", 0), 0u) << out;
  EXPECT_NE(out.find(" build, DPDK "), std::string::npos) << out;
}

TEST(DaemonTest, UserFlag) {
  Daemon d = WithoutClock();
  EXPECT_EQ(Parse(d, {"-c", "a.toml", "--user", "nobody:nogroup"}), std::nullopt);
  EXPECT_EQ(d.run_as(), "nobody:nogroup");
}

TEST(DaemonTest, ConfigOutcome) {
  Daemon d = WithoutClock();
  ASSERT_EQ(Parse(d, {"-c", "a.toml"}), std::nullopt);
  EXPECT_EQ(d.ConfigLoaded(absl::InvalidArgumentError("a.toml:1:1: bad")), 2);
  EXPECT_EQ(d.ConfigLoaded(absl::OkStatus()), std::nullopt);
  Daemon c = WithoutClock();
  ASSERT_EQ(Parse(c, {"-c", "a.toml", "--check"}), std::nullopt);
  EXPECT_EQ(c.ConfigLoaded(absl::OkStatus()), 0);
  EXPECT_EQ(c.ConfigLoaded(absl::InvalidArgumentError("bad")), 2) << "--check still rejects a bad config";
}

// A config that needs more descriptors than the hard limit is rejected as a
// bad config, by --check too; one within the soft limit goes on.
TEST(DaemonTest, OpenFileLimit) {
  auto limit = ReadOpenFileLimit();
  ASSERT_TRUE(limit.ok());
  if (limit->hard == OpenFileLimit::kUnlimited) GTEST_SKIP() << "no hard limit to exceed";
  DescriptorNeed too_many;
  too_many.Add("tcp_max_connections", limit->hard + 1, "[server] tcp_max_connections");
  DescriptorNeed few;
  few.Add("8 fixed", 8);
  Daemon d = WithoutClock();
  ASSERT_EQ(Parse(d, {"-c", "a.toml"}), std::nullopt);
  EXPECT_EQ(d.ConfigLoaded(absl::OkStatus(), nullptr, &too_many), kUsageError);
  EXPECT_EQ(d.ConfigLoaded(absl::OkStatus(), nullptr, &few), std::nullopt);
  EXPECT_EQ(ReadOpenFileLimit()->soft, limit->soft) << "a limit that covers the need is kept";
  Daemon c = WithoutClock();
  ASSERT_EQ(Parse(c, {"-c", "a.toml", "--check"}), std::nullopt);
  EXPECT_EQ(c.ConfigLoaded(absl::OkStatus(), nullptr, &too_many), kUsageError);
}

TEST(DaemonTest, LogFlags) {
  Daemon d = WithoutClock();
  ASSERT_EQ(Parse(d, {"-c", "a.toml", "--log-level", "debug", "--log-target", "stderr"}), std::nullopt);
  EXPECT_EQ(DefaultLogger().level(), LogLevel::kDebug);
  EXPECT_EQ(DefaultLogger().target(), LogTarget::kStderr);
  // The flag wins over the config's [log] level.
  const LogSettings quiet{LogLevel::kError};
  EXPECT_EQ(d.ConfigLoaded(absl::OkStatus(), &quiet), std::nullopt);
  EXPECT_EQ(DefaultLogger().level(), LogLevel::kDebug);
  Daemon e = WithoutClock();
  ASSERT_EQ(Parse(e, {"-c", "a.toml"}), std::nullopt);
  const LogSettings from_config{LogLevel::kWarning};
  EXPECT_EQ(e.ConfigLoaded(absl::OkStatus(), &from_config), std::nullopt);
  EXPECT_EQ(DefaultLogger().level(), LogLevel::kWarning);
  DefaultLogger().set_level(LogLevel::kInfo);
}

TEST(DaemonTest, BadLogFlagsAreRejectedLikeABadConfig) {
  Daemon d = WithoutClock();
  EXPECT_EQ(Parse(d, {"-c", "a.toml", "--log-level", "verbose"}), 2);
  Daemon e = WithoutClock();
  EXPECT_EQ(Parse(e, {"-c", "a.toml", "--log-target", "syslog"}), 2);
}

TEST(DaemonTest, StartFailureExitsOne) {
  Daemon d = WithoutClock();
  bool stopped = false;
  EXPECT_EQ(d.Serve({.start = [] { return absl::UnavailableError("bind: in use"); },
                     .ready_text = [] { return std::string("listening udp 127.0.0.1:53\n"); },
                     .stop = [&] { stopped = true; }}),
            1);
  EXPECT_FALSE(stopped);
}

// SIGHUP reloads and SIGTERM stops; both are raised by the daemon itself, so
// nothing waits on time.
TEST(DaemonTest, SighupReloadsSigtermStops) {
  Daemon d = WithoutClock();
  int reloads = 0;
  bool stopped = false;
  EXPECT_EQ(d.Serve({.start =
                         [] {
                           raise(SIGHUP);
                           return absl::OkStatus();
                         },
                     .ready_text = [] { return std::string("listening udp 127.0.0.1:53\n"); },
                     .reload =
                         [&] {
                           ++reloads;
                           raise(SIGTERM);
                           return absl::OkStatus();
                         },
                     .stop = [&] { stopped = true; }}),
            0);
  EXPECT_EQ(reloads, 1);
  EXPECT_TRUE(stopped);
  EXPECT_EQ(signal(SIGPIPE, SIG_DFL), SIG_IGN);
}

}  // namespace
}  // namespace weir::common
