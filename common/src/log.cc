#include "weir/common/log.h"

#include <sys/uio.h>
#include <systemd/sd-journal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "absl/strings/str_cat.h"

namespace weir::common {

namespace {

// syslog(3) priorities, as the journal's PRIORITY field takes them.
int SyslogPriority(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return 3;
    case LogLevel::kWarning:
      return 4;
    case LogLevel::kInfo:
      return 6;
    case LogLevel::kDebug:
      return 7;
  }
  return 6;
}

// A message is one line: control characters (a newline in a name read off
// the wire, say) are written as \n, \r, \t or \xNN.
void AppendClean(std::string& out, std::string_view s) {
  for (unsigned char c : s) {
    if (c >= 0x20 && c != 0x7f) {
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
    }
  }
}

bool ParseDecimal(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

// The process's RateLimitedLogs, for FlushLogRepeats().
std::mutex& RepeatsMutex() {
  static std::mutex mu;
  return mu;
}
RateLimitedLog*& RepeatsHead() {
  static RateLimitedLog* head = nullptr;
  return head;
}

}  // namespace

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kDebug:
      return "debug";
  }
  return "info";
}

absl::StatusOr<LogLevel> ParseLogLevel(std::string_view text) {
  for (LogLevel l : {LogLevel::kError, LogLevel::kWarning, LogLevel::kInfo, LogLevel::kDebug}) {
    if (text == LogLevelName(l)) return l;
  }
  return absl::InvalidArgumentError(Cat("log level must be error, warning, info or debug, not '", text, "'"));
}

absl::StatusOr<LogTarget> ParseLogTarget(std::string_view text) {
  if (text == "stderr") return LogTarget::kStderr;
  if (text == "journal") return LogTarget::kJournal;
  if (text == "auto") return LogTarget::kAuto;
  return absl::InvalidArgumentError(Cat("log target must be stderr, journal or auto, not '", text, "'"));
}

// systemd.exec(5): "JOURNAL_STREAM ... contains the device and inode numbers
// of the file descriptor [...] separated by a colon", both in decimal.
bool IsJournalStream(const char* journal_stream, const struct stat& fd_stat) {
  if (journal_stream == nullptr) return false;
  const std::string_view v(journal_stream);
  const size_t colon = v.find(':');
  if (colon == std::string_view::npos) return false;
  uint64_t dev = 0, ino = 0;
  if (!ParseDecimal(v.substr(0, colon), &dev) || !ParseDecimal(v.substr(colon + 1), &ino)) return false;
  return dev == static_cast<uint64_t>(fd_stat.st_dev) && ino == static_cast<uint64_t>(fd_stat.st_ino);
}

LogTarget ResolveLogTarget(LogTarget requested) {
  if (requested != LogTarget::kAuto) return requested;
  struct stat st {};
  if (fstat(2, &st) != 0) return LogTarget::kStderr;
  return IsJournalStream(std::getenv("JOURNAL_STREAM"), st) ? LogTarget::kJournal : LogTarget::kStderr;
}

const SystemLogClock& SystemLogClock::Instance() {
  static const SystemLogClock clock;
  return clock;
}

std::string FormatLogTime(std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  const auto ms = duration_cast<milliseconds>(t.time_since_epoch()).count();
  time_t secs = static_cast<time_t>(ms / 1000);
  int milli = static_cast<int>(ms % 1000);
  if (milli < 0) {  // before 1970: floor, not truncation
    milli += 1000;
    --secs;
  }
  struct tm tm {};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}.{:03d}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, milli);
}

std::array<std::string, 4> JournalFields(std::string_view daemon, LogLevel level, std::string_view component,
                                         std::string_view message) {
  std::string text = Cat("MESSAGE=", component, ": ");
  AppendClean(text, message);
  return {std::move(text), Cat("PRIORITY=", SyslogPriority(level)), Cat("SYSLOG_IDENTIFIER=", daemon),
          Cat("WEIR_COMPONENT=", component)};
}

// ---------------------------------------------------------------- Logger

Logger::Logger() : Logger(Options{}) {}

Logger::Logger(Options options)
    : options_(std::move(options)), level_(options_.level), target_(ResolveLogTarget(options_.target)) {
  if (options_.pid == 0) options_.pid = static_cast<int>(getpid());
}

void Logger::Configure(std::string_view daemon, const LogSettings& settings) {
  if (!daemon.empty()) options_.daemon = std::string(daemon);
  if (settings.level) set_level(*settings.level);
  if (settings.target) target_.store(ResolveLogTarget(*settings.target), std::memory_order_relaxed);
}

std::string Logger::FormatLine(LogLevel level, std::string_view component, std::string_view message) const {
  std::string line = FormatLogTime(options_.clock->Now());
  CatTo(line, " ", options_.daemon, "[", options_.pid, "] ", LogLevelName(level), " ", component, ": ");
  AppendClean(line, message);
  if (line.size() > kMaxLine - 1) {
    line.resize(kMaxLine - 4);
    line += "...";
  }
  line += '\n';
  return line;
}

void Logger::WriteFd(const std::string& line) const {
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(options_.fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // nowhere to report a broken log; the daemon goes on
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void Logger::Write(LogLevel level, std::string_view component, std::string_view message) {
  if (!Enabled(level)) return;
  if (target() == LogTarget::kJournal) {
    const std::array<std::string, 4> fields = JournalFields(options_.daemon, level, component, message);
    std::array<iovec, 4> iov{};
    for (size_t i = 0; i < fields.size(); ++i) {
      iov[i].iov_base = const_cast<char*>(fields[i].data());
      iov[i].iov_len = fields[i].size();
    }
    // One datagram per entry to journald's socket; when that fails (no
    // journald), the line goes to stderr rather than nowhere.
    if (sd_journal_sendv(iov.data(), static_cast<int>(iov.size())) >= 0) return;
  }
  WriteFd(FormatLine(level, component, message));
}

namespace {
LogSettings& LogFlags() {
  static LogSettings flags;
  return flags;
}
}  // namespace

void SetLogFlags(const LogSettings& flags) { LogFlags() = flags; }

std::string ApplyConfigLogSettings(const LogSettings& previous, const LogSettings& next) {
  const LogSettings& flags = LogFlags();
  LogSettings apply;
  apply.level = flags.level ? flags.level : next.level.value_or(LogLevel::kInfo);
  apply.target = flags.target ? flags.target : next.target.value_or(LogTarget::kAuto);
  // No daemon name: the one string a concurrent line reads stays as it is.
  DefaultLogger().Configure("", apply);
  std::string what;
  const LogLevel was_level = previous.level.value_or(LogLevel::kInfo);
  const LogLevel level = next.level.value_or(LogLevel::kInfo);
  if (was_level != level) {
    CatTo(what, "log level ", LogLevelName(level));
    if (flags.level) CatTo(what, " (--log-level keeps ", LogLevelName(*flags.level), ")");
  }
  auto target_name = [](LogTarget t) {
    return t == LogTarget::kStderr ? "stderr" : t == LogTarget::kJournal ? "journal" : "auto";
  };
  const LogTarget was_target = previous.target.value_or(LogTarget::kAuto);
  const LogTarget target = next.target.value_or(LogTarget::kAuto);
  if (was_target != target) {
    CatTo(what, what.empty() ? "" : ", ", "log target ", target_name(target));
    if (flags.target) CatTo(what, " (--log-target keeps ", target_name(*flags.target), ")");
  }
  return what;
}

Logger& DefaultLogger() {
  // Never destroyed: threads may log during exit. Until the daemon says
  // otherwise: info, to the journal if stderr is its stream.
  static Logger* log = new Logger({.target = LogTarget::kAuto});
  return *log;
}

// ---------------------------------------------------------------- RateLimitedLog

RateLimitedLog::RateLimitedLog(Options options)
    : options_(std::move(options)), logger_(options_.logger != nullptr ? *options_.logger : DefaultLogger()) {
  window_ = logger_.clock().Monotonic();
  std::lock_guard<std::mutex> l(RepeatsMutex());
  next_ = RepeatsHead();
  if (next_ != nullptr) next_->prev_ = this;
  RepeatsHead() = this;
}

RateLimitedLog::~RateLimitedLog() {
  std::lock_guard<std::mutex> l(RepeatsMutex());
  if (prev_ != nullptr) prev_->next_ = next_;
  if (next_ != nullptr) next_->prev_ = prev_;
  if (RepeatsHead() == this) RepeatsHead() = next_;
}

bool RateLimitedLog::Admit() {
  uint64_t report = 0;
  bool admit = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    const auto now = logger_.clock().Monotonic();
    if (now - window_ >= options_.interval) {
      report = held_;
      held_ = 0;
      printed_ = 0;
      window_ = now;
    }
    if (printed_ < options_.burst) {
      ++printed_;
      admit = true;
    } else {
      ++held_;
      ++total_;
    }
  }
  if (!admit) logger_.AddSuppressed(1);
  if (report > 0) WriteSummary(report);
  return admit;
}

void RateLimitedLog::WriteSummary(uint64_t n) {
  logger_.Write(options_.level, options_.component, Cat("(", n, " similar lines suppressed)"));
}

void RateLimitedLog::Flush() {
  uint64_t report = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    const auto now = logger_.clock().Monotonic();
    if (held_ == 0 || now - window_ < options_.interval) return;
    report = held_;
    held_ = 0;
    printed_ = 0;
    window_ = now;
  }
  WriteSummary(report);
}

uint64_t RateLimitedLog::suppressed() const {
  std::lock_guard<std::mutex> l(mu_);
  return total_;
}

void FlushLogRepeats() {
  struct Summary {
    Logger* logger;
    LogLevel level;
    std::string component;
    uint64_t n;
  };
  std::vector<Summary> due;
  {
    std::lock_guard<std::mutex> l(RepeatsMutex());
    for (RateLimitedLog* r = RepeatsHead(); r != nullptr; r = r->next_) {
      std::lock_guard<std::mutex> rl(r->mu_);
      if (r->held_ == 0 || r->logger_.clock().Monotonic() - r->window_ < r->options_.interval) continue;
      due.push_back({&r->logger_, r->options_.level, r->options_.component, r->held_});
      r->held_ = 0;
      r->printed_ = 0;
      r->window_ = r->logger_.clock().Monotonic();
    }
  }
  // Written once no lock is held.
  for (const Summary& s : due) {
    s.logger->Write(s.level, s.component, Cat("(", s.n, " similar lines suppressed)"));
  }
}

}  // namespace weir::common
