// The one log of every weir daemon (docs/logging.md). Each line reads
//
//   2026-12-02T01:23:45.678Z weir-fastpath[1234] warning upstream: 127.0.0.1:5353 marked down
//
// (RFC 3339 UTC time with milliseconds, daemon[pid], level, component,
// message) on stderr, or goes to the systemd journal as one entry with
// PRIORITY, SYSLOG_IDENTIFIER and WEIR_COMPONENT. Messages are built as
// Cat() builds them (text.h).
//
//   LogWarning("upstream", server, " marked down after ", n, " timeouts");
//
// A message that can repeat at the rate of the traffic (upstream failures,
// malformed answers, refused snapshots, accept failures) goes through a
// RateLimitedLog owned by its call site: at most `burst` lines per interval,
// then one "(N similar lines suppressed)" line.
//
// Threading: every function may be called from any thread. A line is
// formatted outside any lock and written with one write(2) (lines are cut at
// kMaxLine bytes, below PIPE_BUF, so lines from several threads never
// interleave); no lock is held across I/O. The level check is one relaxed
// atomic load, done before anything is formatted. Not for the per-packet
// path of the fast path: there, drops are counted, and the code that notices
// a state change logs it.
#pragma once

#include <sys/stat.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "weir/common/text.h"

namespace weir::common {

enum class LogLevel : uint8_t { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3 };

// kAuto: the journal when stderr is the journal's stream (systemd sets
// JOURNAL_STREAM to its device:inode), else stderr.
enum class LogTarget : uint8_t { kAuto, kStderr, kJournal };

// "error", "warning", "info", "debug".
std::string_view LogLevelName(LogLevel level);
absl::StatusOr<LogLevel> ParseLogLevel(std::string_view text);
// "stderr", "journal", "auto".
absl::StatusOr<LogTarget> ParseLogTarget(std::string_view text);

// True when `journal_stream` (the value of JOURNAL_STREAM, "DEV:INODE" in
// decimal; null when unset) names the file `fd_stat` describes.
bool IsJournalStream(const char* journal_stream, const struct stat& fd_stat);
// kAuto resolved against the environment and stderr; others unchanged.
LogTarget ResolveLogTarget(LogTarget requested);

// The [log] table of a daemon's config or its --log-level/--log-target
// flags; unset fields keep what the log had.
struct LogSettings {
  std::optional<LogLevel> level{};
  std::optional<LogTarget> target{};
};

// The command line's --log-level and --log-target, recorded once by the
// daemon before any thread starts: they win over the config's [log].
void SetLogFlags(const LogSettings& flags);
// A config's [log] table applied to the process's log under those flags;
// an unset field is the default (info, auto). Returns what changed from
// `previous` in words ("log level debug, log target stderr"; with a flag
// in the way: "log level debug (--log-level keeps warning)"), empty when
// nothing did. Any thread, also while others log: only atomics change.
std::string ApplyConfigLogSettings(const LogSettings& previous, const LogSettings& next);

// Time for the timestamps and for rate limiting; tests inject their own.
class LogClock {
 public:
  virtual ~LogClock() = default;
  virtual std::chrono::system_clock::time_point Now() const = 0;
  virtual std::chrono::steady_clock::time_point Monotonic() const = 0;
};

class SystemLogClock final : public LogClock {
 public:
  std::chrono::system_clock::time_point Now() const override { return std::chrono::system_clock::now(); }
  std::chrono::steady_clock::time_point Monotonic() const override {
    return std::chrono::steady_clock::now();
  }
  static const SystemLogClock& Instance();
};

// "2026-12-02T01:23:45.678Z".
std::string FormatLogTime(std::chrono::system_clock::time_point t);

// The journal entry's fields, "KEY=value" each: MESSAGE (component: text),
// PRIORITY (syslog's: 3, 4, 6, 7), SYSLOG_IDENTIFIER, WEIR_COMPONENT.
std::array<std::string, 4> JournalFields(std::string_view daemon, LogLevel level, std::string_view component,
                                         std::string_view message);

class Logger {
 public:
  // Longest line written (newline included); longer messages are cut and
  // end in "...". Below PIPE_BUF, so one write(2) to a pipe is atomic.
  static constexpr size_t kMaxLine = 4000;

  struct Options {
    std::string daemon = "weir";  // "weir-fastpath"
    LogLevel level = LogLevel::kInfo;
    LogTarget target = LogTarget::kStderr;  // kAuto is resolved by Configure()
    int fd = 2;                             // the stderr target's file descriptor
    const LogClock* clock = &SystemLogClock::Instance();
    int pid = 0;  // 0: getpid()
  };
  Logger();
  explicit Logger(Options options);

  // Changes the daemon name, level or target of a running log; the rest
  // stays. Control plane: call before threads log, or accept that a line
  // written concurrently may carry the old name.
  void Configure(std::string_view daemon, const LogSettings& settings);

  bool Enabled(LogLevel level) const { return level <= level_.load(std::memory_order_relaxed); }
  LogLevel level() const { return level_.load(std::memory_order_relaxed); }
  void set_level(LogLevel level) { level_.store(level, std::memory_order_relaxed); }
  LogTarget target() const { return target_.load(std::memory_order_relaxed); }
  const LogClock& clock() const { return *options_.clock; }

  // One line, unless `level` is filtered out.
  void Write(LogLevel level, std::string_view component, std::string_view message);
  // The stderr form of a line, newline included (tests, and the journal's fallback).
  std::string FormatLine(LogLevel level, std::string_view component, std::string_view message) const;

  // Lines RateLimitedLog held back, over the process's life.
  uint64_t suppressed() const { return suppressed_.load(std::memory_order_relaxed); }
  void AddSuppressed(uint64_t n) { suppressed_.fetch_add(n, std::memory_order_relaxed); }

 private:
  void WriteFd(const std::string& line) const;

  Options options_;
  std::atomic<LogLevel> level_;
  std::atomic<LogTarget> target_;
  std::atomic<uint64_t> suppressed_{0};
};

// The process's log: info, target auto, until the daemon configures it.
Logger& DefaultLogger();

template <typename... A>
void Log(LogLevel level, std::string_view component, const A&... a) {
  Logger& log = DefaultLogger();
  if (!log.Enabled(level)) return;
  log.Write(level, component, Cat(a...));
}
template <typename... A>
void LogError(std::string_view component, const A&... a) {
  Log(LogLevel::kError, component, a...);
}
template <typename... A>
void LogWarning(std::string_view component, const A&... a) {
  Log(LogLevel::kWarning, component, a...);
}
template <typename... A>
void LogInfo(std::string_view component, const A&... a) {
  Log(LogLevel::kInfo, component, a...);
}
template <typename... A>
void LogDebug(std::string_view component, const A&... a) {
  Log(LogLevel::kDebug, component, a...);
}

// One repeating message (a call site, or one reason at it): at most `burst`
// lines per `interval`; the lines past that are counted, and their number
// is logged as "(N similar lines suppressed)" before the next line that is
// printed in a later interval, or by FlushLogRepeats() once the interval is
// over. Registered with the process's list while it lives, for that flush.
class RateLimitedLog {
 public:
  struct Options {
    LogLevel level = LogLevel::kWarning;
    std::string component{};
    int burst = 10;
    std::chrono::steady_clock::duration interval = std::chrono::seconds(10);
    Logger* logger = nullptr;  // null: DefaultLogger()
  };
  explicit RateLimitedLog(Options options);
  ~RateLimitedLog();
  RateLimitedLog(const RateLimitedLog&) = delete;
  RateLimitedLog& operator=(const RateLimitedLog&) = delete;

  template <typename... A>
  void operator()(const A&... a) {
    if (!logger_.Enabled(options_.level)) return;
    if (!Admit()) return;
    logger_.Write(options_.level, options_.component, Cat(a...));
  }
  // The summary line, if the interval is over and lines were held back.
  void Flush();

  uint64_t suppressed() const;  // by this one, over its life

 private:
  bool Admit();
  void WriteSummary(uint64_t n);

  friend void FlushLogRepeats();
  Options options_;
  Logger& logger_;
  mutable std::mutex mu_;
  std::chrono::steady_clock::time_point window_{};
  int printed_ = 0;                 // in the current window
  uint64_t held_ = 0;               // in the current window, not yet reported
  uint64_t total_ = 0;              // over its life
  RateLimitedLog* next_ = nullptr;  // the process's list
  RateLimitedLog* prev_ = nullptr;
};

// Writes the summary of every RateLimitedLog whose interval is over. The
// daemons call it once a second from their main thread (daemon.h).
void FlushLogRepeats();

}  // namespace weir::common
