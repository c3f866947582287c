#include "weir/common/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace weir::common {
namespace {

using namespace std::chrono_literals;

class FakeLogClock final : public LogClock {
 public:
  std::chrono::system_clock::time_point Now() const override { return wall; }
  std::chrono::steady_clock::time_point Monotonic() const override { return mono; }
  void Advance(std::chrono::milliseconds d) {
    wall += d;
    mono += d;
  }
  // 2026-12-02T01:23:45.678Z
  std::chrono::system_clock::time_point wall{std::chrono::milliseconds(1796174625678)};
  std::chrono::steady_clock::time_point mono{};
};

// A logger writing into a pipe; Lines() drains what it wrote.
class PipeLog {
 public:
  explicit PipeLog(const FakeLogClock* clock, LogLevel level = LogLevel::kInfo) {
    EXPECT_EQ(pipe(fds_), 0);
    log_.emplace(Logger::Options{.daemon = "weir-fastpath",
                                 .level = level,
                                 .target = LogTarget::kStderr,
                                 .fd = fds_[1],
                                 .clock = clock,
                                 .pid = 1234});
  }
  ~PipeLog() {
    close(fds_[0]);
    if (fds_[1] >= 0) close(fds_[1]);
  }
  Logger& log() { return *log_; }
  std::vector<std::string> Lines() {
    close(fds_[1]);
    fds_[1] = -1;
    std::string all;
    char buf[4096];
    for (ssize_t n; (n = read(fds_[0], buf, sizeof(buf))) > 0;) all.append(buf, static_cast<size_t>(n));
    std::vector<std::string> lines;
    for (size_t at = 0; at < all.size();) {
      const size_t nl = all.find('\n', at);
      EXPECT_NE(nl, std::string::npos) << "a line without its newline";
      if (nl == std::string::npos) break;
      lines.push_back(all.substr(at, nl - at));
      at = nl + 1;
    }
    return lines;
  }

 private:
  int fds_[2] = {-1, -1};
  std::optional<Logger> log_;
};

TEST(LogTest, LineFormat) {
  FakeLogClock clock;
  PipeLog p(&clock);
  p.log().Write(LogLevel::kWarning, "upstream", "127.0.0.1:5353 marked down after 3 timeouts");
  clock.Advance(1ms);
  p.log().Write(LogLevel::kError, "config", "bad\nvalue");
  EXPECT_EQ(p.Lines(), (std::vector<std::string>{
                           "2026-12-02T01:23:45.678Z weir-fastpath[1234] warning upstream: 127.0.0.1:5353 "
                           "marked down after 3 timeouts",
                           "2026-12-02T01:23:45.679Z weir-fastpath[1234] error config: bad\\nvalue",
                       }));
}

// A message stays one line whatever bytes it carries (a name off the wire):
// control bytes are escaped, the rest (UTF-8, quotes, backslashes) is kept.
TEST(LogTest, ControlBytesAreEscaped) {
  FakeLogClock clock;
  PipeLog p(&clock);
  p.log().Write(LogLevel::kInfo, "dns", std::string("a\x00\x01\x1f\x7f\r\t\"\\\xc3\xa9\xff", 12));
  EXPECT_EQ(p.Lines(), (std::vector<std::string>{"2026-12-02T01:23:45.678Z weir-fastpath[1234] info dns: "
                                                 "a\\x00\\x01\\x1f\\x7f\\r\\t\"\\\xc3\xa9\xff"}));
}

TEST(LogTest, TimeIsUtcWithMilliseconds) {
  EXPECT_EQ(FormatLogTime(std::chrono::system_clock::time_point{}), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(FormatLogTime(std::chrono::system_clock::time_point{std::chrono::milliseconds(951782400005)}),
            "2000-02-29T00:00:00.005Z");
}

TEST(LogTest, LongLinesAreCutBelowPipeBuf) {
  FakeLogClock clock;
  PipeLog p(&clock);
  p.log().Write(LogLevel::kInfo, "mgmt", std::string(10000, 'x'));
  const std::vector<std::string> lines = p.Lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].size() + 1, Logger::kMaxLine);
  EXPECT_TRUE(lines[0].ends_with("xxx...")) << lines[0].substr(lines[0].size() - 10);
}

TEST(LogTest, LevelFiltering) {
  FakeLogClock clock;
  PipeLog p(&clock, LogLevel::kWarning);
  EXPECT_TRUE(p.log().Enabled(LogLevel::kError));
  EXPECT_TRUE(p.log().Enabled(LogLevel::kWarning));
  EXPECT_FALSE(p.log().Enabled(LogLevel::kInfo));
  p.log().Write(LogLevel::kInfo, "a", "hidden");
  p.log().Write(LogLevel::kDebug, "a", "hidden");
  p.log().Write(LogLevel::kError, "a", "shown");
  p.log().set_level(LogLevel::kDebug);
  p.log().Write(LogLevel::kDebug, "a", "now shown");
  const std::vector<std::string> lines = p.Lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(lines[0].ends_with("error a: shown"));
  EXPECT_TRUE(lines[1].ends_with("debug a: now shown"));
}

TEST(LogTest, ParseLevelAndTarget) {
  EXPECT_EQ(*ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(*ParseLogLevel("error"), LogLevel::kError);
  EXPECT_FALSE(ParseLogLevel("warn").ok());
  EXPECT_EQ(*ParseLogTarget("journal"), LogTarget::kJournal);
  EXPECT_EQ(*ParseLogTarget("auto"), LogTarget::kAuto);
  const absl::StatusOr<LogTarget> bad = ParseLogTarget("syslog");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "log target must be stderr, journal or auto, not 'syslog'");
}

TEST(LogTest, JournalStreamDetection) {
  struct stat st {};
  st.st_dev = 25;
  st.st_ino = 123456;
  EXPECT_TRUE(IsJournalStream("25:123456", st));
  EXPECT_FALSE(IsJournalStream(nullptr, st));
  EXPECT_FALSE(IsJournalStream("", st));
  EXPECT_FALSE(IsJournalStream("25:123457", st));  // stderr was redirected since
  EXPECT_FALSE(IsJournalStream("26:123456", st));
  EXPECT_FALSE(IsJournalStream("25", st));
  EXPECT_FALSE(IsJournalStream("25:123456x", st));
  EXPECT_FALSE(IsJournalStream(":123456", st));
}

TEST(LogTest, JournalFields) {
  EXPECT_EQ(JournalFields("weir-recursor", LogLevel::kWarning, "unbound", "lame\ndelegation"),
            (std::array<std::string, 4>{"MESSAGE=unbound: lame\\ndelegation", "PRIORITY=4",
                                        "SYSLOG_IDENTIFIER=weir-recursor", "WEIR_COMPONENT=unbound"}));
  EXPECT_EQ(JournalFields("d", LogLevel::kError, "c", "m")[1], "PRIORITY=3");
  EXPECT_EQ(JournalFields("d", LogLevel::kInfo, "c", "m")[1], "PRIORITY=6");
  EXPECT_EQ(JournalFields("d", LogLevel::kDebug, "c", "m")[1], "PRIORITY=7");
}

TEST(LogTest, RateLimitPrintsBurstThenSummaryOnNextLine) {
  FakeLogClock clock;
  PipeLog p(&clock);
  RateLimitedLog repeats({.component = "upstream", .burst = 3, .interval = 10s, .logger = &p.log()});
  for (int i = 0; i < 10; ++i) repeats("malformed answer ", i);
  EXPECT_EQ(repeats.suppressed(), 7u);
  EXPECT_EQ(p.log().suppressed(), 7u);
  clock.Advance(9999ms);
  repeats("malformed answer late");  // still the first interval: held back
  clock.Advance(1ms);
  repeats("malformed answer next");
  const std::vector<std::string> lines = p.Lines();
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_TRUE(lines[0].ends_with("warning upstream: malformed answer 0")) << lines[0];
  EXPECT_TRUE(lines[2].ends_with("warning upstream: malformed answer 2")) << lines[2];
  EXPECT_TRUE(lines[3].ends_with("warning upstream: (8 similar lines suppressed)")) << lines[3];
  EXPECT_TRUE(lines[4].ends_with("warning upstream: malformed answer next")) << lines[4];
}

TEST(LogTest, RateLimitSummaryWhenTheIntervalEnds) {
  FakeLogClock clock;
  PipeLog p(&clock);
  RateLimitedLog repeats({.component = "mgmt", .burst = 2, .interval = 5s, .logger = &p.log()});
  for (int i = 0; i < 5; ++i) repeats("refused snapshot");
  FlushLogRepeats();  // interval not over: nothing yet
  clock.Advance(5s);
  FlushLogRepeats();
  FlushLogRepeats();  // reported once
  const std::vector<std::string> lines = p.Lines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_TRUE(lines[2].ends_with("warning mgmt: (3 similar lines suppressed)")) << lines[2];
}

TEST(LogTest, RateLimitIsPerCallSiteAndSkipsFilteredLevels) {
  FakeLogClock clock;
  PipeLog p(&clock, LogLevel::kWarning);
  RateLimitedLog a({.component = "a", .burst = 1, .logger = &p.log()});
  RateLimitedLog b({.component = "b", .burst = 1, .logger = &p.log()});
  RateLimitedLog quiet({.level = LogLevel::kDebug, .component = "c", .burst = 1, .logger = &p.log()});
  a("one");
  a("two");
  b("one");
  quiet("x");
  quiet("y");
  EXPECT_EQ(p.log().suppressed(), 1u);  // a filtered level is not counted as suppressed
  EXPECT_EQ(p.Lines().size(), 2u);
}

TEST(ConfigLogSettingsTest, AppliesLiveUnderTheFlagsAndSaysWhatChanged) {
  Logger& log = DefaultLogger();
  const LogLevel before = log.level();
  const LogSettings info{LogLevel::kInfo, LogTarget::kStderr};
  const LogSettings debug{LogLevel::kDebug, LogTarget::kStderr};
  EXPECT_EQ(ApplyConfigLogSettings(info, debug), "log level debug");
  EXPECT_EQ(log.level(), LogLevel::kDebug);
  EXPECT_EQ(ApplyConfigLogSettings(debug, debug), "");
  EXPECT_EQ(ApplyConfigLogSettings(debug, LogSettings{}), "log level info, log target auto");  // the defaults
  EXPECT_EQ(log.level(), LogLevel::kInfo);
  SetLogFlags({LogLevel::kWarning, std::nullopt});
  EXPECT_EQ(ApplyConfigLogSettings(info, debug), "log level debug (--log-level keeps warning)");
  EXPECT_EQ(log.level(), LogLevel::kWarning);
  SetLogFlags({});
  log.set_level(before);
}

}  // namespace
}  // namespace weir::common
