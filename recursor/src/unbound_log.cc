#include "weir/recursor/unbound_log.h"

#include <sys/types.h>

#include <mutex>
#include <string>

namespace weir::recursor {

UnboundLine ParseUnboundLine(std::string_view line) {
  UnboundLine out{common::LogLevel::kInfo, line};
  std::string_view rest = line;
  if (!rest.empty() && rest.front() == '[') {  // "[seconds] "
    const size_t end = rest.find("] ");
    if (end == std::string_view::npos) return out;
    rest.remove_prefix(end + 2);
  }
  const size_t ident_end = rest.find("] ");  // "libunbound[pid:tid] "
  if (ident_end == std::string_view::npos) return out;
  rest.remove_prefix(ident_end + 2);
  const size_t colon = rest.find(": ");
  if (colon == std::string_view::npos) return out;
  const std::string_view type = rest.substr(0, colon);
  if (type == "error" || type == "fatal error") {
    out.level = common::LogLevel::kError;
  } else if (type == "warning") {
    out.level = common::LogLevel::kWarning;
  } else if (type == "debug") {
    out.level = common::LogLevel::kDebug;
  } else if (type != "notice" && type != "info" && type != "query" && type != "reply") {
    return out;  // not a type libunbound writes: keep the whole line
  }
  out.message = rest.substr(colon + 2);
  return out;
}

namespace {

// What has been written since the last newline. stdio serialises writes to
// one FILE, the mutex makes that explicit.
// Errors and warnings can repeat with traffic (an upstream down, a flood):
// rate-limited like weir's own lines. Made with the stream, in the daemon,
// before libunbound's process is forked from it.
struct LineSplitter {
  std::mutex mu;
  std::string partial;
  common::RateLimitedLog errors{{.level = common::LogLevel::kError, .component = "unbound"}};
  common::RateLimitedLog warnings{{.level = common::LogLevel::kWarning, .component = "unbound"}};
};

ssize_t WriteUnbound(void* cookie, const char* buf, size_t size) {
  auto* s = static_cast<LineSplitter*>(cookie);
  std::string lines;
  {
    std::lock_guard<std::mutex> l(s->mu);
    s->partial.append(buf, size);
    const size_t last_nl = s->partial.rfind('\n');
    if (last_nl == std::string::npos) {
      // A runaway line without a newline is cut rather than held forever.
      if (s->partial.size() < common::Logger::kMaxLine) return static_cast<ssize_t>(size);
      lines.swap(s->partial);
    } else {
      lines = s->partial.substr(0, last_nl);
      s->partial.erase(0, last_nl + 1);
    }
  }
  std::string_view rest = lines;
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    if (line.empty()) continue;
    const UnboundLine u = ParseUnboundLine(line);
    // Info and debug lines come only at the verbosity the operator asked
    // for, and all of them.
    if (u.level == common::LogLevel::kError) {
      s->errors(u.message);
    } else if (u.level == common::LogLevel::kWarning) {
      s->warnings(u.message);
    } else {
      common::Log(u.level, "unbound", u.message);
    }
  }
  return static_cast<ssize_t>(size);
}

}  // namespace

FILE* UnboundLogStream() {
  static FILE* stream = [] {
    cookie_io_functions_t io{};
    io.write = WriteUnbound;
    FILE* f = fopencookie(new LineSplitter, "w", io);
    if (f != nullptr) setvbuf(f, nullptr, _IOLBF, 0);
    return f;
  }();
  return stream;
}

}  // namespace weir::recursor
