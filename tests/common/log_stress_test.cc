// Several threads log at once, into a pipe as under systemd or a test
// harness: every line arrives whole, none is lost. Also run under
// ThreadSanitizer (scripts/test.sh, *stress_test).
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "weir/common/log.h"

namespace weir::common {
namespace {

// The writer thread's number in a line the stress test wrote, as the logger
// formats it ("2026-12-02T01:23:45.678Z weir-recursor[7] warning stress:
// thread T line N aaaa..."), or -1 when the line is not whole. (A hand
// parser: GCC 12's std::regex trips -Wmaybe-uninitialized in the sanitizer build.)
int WriterOf(std::string_view line) {
  static constexpr std::string_view kTime = "dddd-dd-ddTdd:dd:dd.dddZ weir-recursor[7] ";
  if (line.size() < kTime.size()) return -1;
  for (size_t i = 0; i < kTime.size(); ++i) {
    const bool digit = line[i] >= '0' && line[i] <= '9';
    if (kTime[i] == 'd' ? !digit : line[i] != kTime[i]) return -1;
  }
  line.remove_prefix(kTime.size());
  if (line.starts_with("warning ")) {
    line.remove_prefix(8);
  } else if (line.starts_with("debug ")) {
    line.remove_prefix(6);
  } else {
    return -1;
  }
  static constexpr std::string_view kThread = "stress: thread ";
  if (!line.starts_with(kThread) || line.size() < kThread.size() + 1) return -1;
  line.remove_prefix(kThread.size());
  if (line[0] < '0' || line[0] > '9') return -1;
  const int thread = line[0] - '0';
  line.remove_prefix(1);
  if (!line.starts_with(" line ")) return -1;
  line.remove_prefix(6);
  size_t digits = 0;
  while (digits < line.size() && line[digits] >= '0' && line[digits] <= '9') ++digits;
  if (digits == 0 || digits + 1 >= line.size() || line[digits] != ' ') return -1;
  line.remove_prefix(digits + 1);
  for (char c : line) {
    if (c < 'a' || c > 'z') return -1;
  }
  return thread;
}

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
    const int t = WriterOf(line);
    ASSERT_GE(t, 0) << "not a whole line: " << line.substr(0, 120);
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
