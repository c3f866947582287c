// Several threads log at once, into a pipe as under systemd or a test
// harness: every line arrives whole, none is lost. Also run under
// ThreadSanitizer (scripts/test.sh, *stress_test).
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "weir/common/log.h"

namespace weir::common {
namespace {

TEST(LogStressTest, LinesFromManyThreadsNeverInterleave) {
  constexpr int kThreads = 8;
  constexpr int kLines = 2000;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  Logger log({.daemon = "weir-recursor", .level = LogLevel::kDebug, .fd = fds[1], .pid = 7});
  RateLimitedLog limited({.component = "limited", .burst = 5, .logger = &log});

  std::string all;
  std::thread reader([&] {
    char buf[65536];
    for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) all.append(buf, static_cast<size_t>(n));
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      // Long enough that a torn write would show: 1 KB of payload per line.
      const std::string payload(1000, static_cast<char>('a' + t));
      for (int i = 0; i < kLines; ++i) {
        LogLevel level = i % 2 ? LogLevel::kDebug : LogLevel::kWarning;
        log.Write(level, "stress", Cat("thread ", t, " line ", i, " ", payload));
        limited("repeat ", t);
      }
    });
  }
  for (std::thread& w : writers) w.join();
  FlushLogRepeats();
  close(fds[1]);
  reader.join();
  close(fds[0]);

  const std::regex line_re(
      R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z weir-recursor\[7\] (warning|debug) stress: thread (\d) line (\d+) ([a-z])+$)");
  std::map<int, int> per_thread;
  int limited_lines = 0;
  size_t at = 0;
  while (at < all.size()) {
    const size_t nl = all.find('\n', at);
    ASSERT_NE(nl, std::string::npos);
    const std::string line = all.substr(at, nl - at);
    at = nl + 1;
    if (line.find(" limited: ") != std::string::npos) {
      ++limited_lines;
      continue;
    }
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, line_re)) << line.substr(0, 120);
    const int t = std::stoi(m[2]);
    EXPECT_EQ(line.substr(line.size() - 1000), std::string(1000, static_cast<char>('a' + t)));
    ++per_thread[t];
  }
  ASSERT_EQ(per_thread.size(), static_cast<size_t>(kThreads));
  for (const auto& [t, n] : per_thread) EXPECT_EQ(n, kLines) << "thread " << t;
  // Within one 10 s window: 5 lines, and the rest held back (the summary
  // waits for the interval to end).
  EXPECT_EQ(limited_lines, 5);
  EXPECT_EQ(log.suppressed(), static_cast<uint64_t>(kThreads * kLines - 5));
}

}  // namespace
}  // namespace weir::common
