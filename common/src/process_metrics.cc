#include "weir/common/process_metrics.h"

#include "weir/common/allocator_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string>

namespace weir::common {

namespace {

std::optional<uint64_t> ParseU64(std::string_view s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// The whole of a /proc file ("" when it cannot be read). /proc files report
// a size of 0: read until the end rather than by their size.
std::string ReadProcFile(const char* path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<uint64_t> CountOpenFds() {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return std::nullopt;
  uint64_t n = 0;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] != '.')
      ++n;  // not "." nor ".."; the directory's own descriptor counts, as in Go's client
  }
  closedir(d);
  return n;
}

}  // namespace

absl::StatusOr<ProcSelfStat> ParseProcSelfStat(std::string_view text) {
  const size_t close = text.rfind(')');
  if (close == std::string_view::npos || text.find('(') == std::string_view::npos) {
    return absl::InvalidArgumentError("/proc/self/stat: no command name in parentheses");
  }
  // Field 3 (state) onwards, separated by single spaces.
  std::array<std::string_view, 22> fields;  // fields 3..24
  size_t n = 0;
  std::string_view rest = text.substr(close + 1);
  while (n < fields.size()) {
    const size_t start = rest.find_first_not_of(" \n");
    if (start == std::string_view::npos) break;
    rest.remove_prefix(start);
    const size_t end = rest.find_first_of(" \n");
    fields[n++] = rest.substr(0, end);
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end);
  }
  if (n < fields.size()) {
    return absl::InvalidArgumentError("/proc/self/stat: fewer than 24 fields");
  }
  auto field = [&](size_t number) { return ParseU64(fields[number - 3]); };
  const auto utime = field(14), stime = field(15), start = field(22), vsize = field(23), rss = field(24);
  if (!utime || !stime || !start || !vsize || !rss) {
    return absl::InvalidArgumentError("/proc/self/stat: a time or memory field is not a number");
  }
  return ProcSelfStat{*utime, *stime, *start, *vsize, *rss};
}

absl::StatusOr<uint64_t> ParseProcBootTime(std::string_view text) {
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (!line.starts_with("btime ")) continue;
    line.remove_prefix(6);
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.remove_suffix(1);
    if (auto v = ParseU64(line)) return *v;
    return absl::InvalidArgumentError("/proc/stat: btime is not a number");
  }
  return absl::InvalidArgumentError("/proc/stat: no btime line");
}

ProcessSample ProcessSampleFrom(std::string_view self_stat, std::string_view proc_stat,
                                uint64_t ticks_per_second, uint64_t page_size) {
  ProcessSample s;
  auto stat = ParseProcSelfStat(self_stat);
  if (stat.ok()) {
    s.virtual_bytes = stat->vsize_bytes;
    if (page_size > 0) s.resident_bytes = stat->rss_pages * page_size;
    if (ticks_per_second > 0) {
      const double tps = static_cast<double>(ticks_per_second);
      s.cpu_seconds = static_cast<double>(stat->utime_ticks + stat->stime_ticks) / tps;
      auto boot = ParseProcBootTime(proc_stat);
      if (boot.ok())
        s.start_time_seconds = static_cast<double>(*boot) + static_cast<double>(stat->starttime_ticks) / tps;
    }
  }
  return s;
}

ProcessSample ReadProcessSample() {
  const long tps = sysconf(_SC_CLK_TCK);
  const long page = sysconf(_SC_PAGESIZE);
  ProcessSample s =
      ProcessSampleFrom(ReadProcFile("/proc/self/stat"), ReadProcFile("/proc/stat"),
                        tps > 0 ? static_cast<uint64_t>(tps) : 0, page > 0 ? static_cast<uint64_t>(page) : 0);
  s.open_fds = CountOpenFds();
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) s.max_fds = rl.rlim_cur;
  return s;
}

void AddProcessMetrics(PrometheusWriter& w, const ProcessSample& s) {
  if (s.cpu_seconds) {
    w.Counter("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.")
        .Add({}, *s.cpu_seconds);
  }
  if (s.resident_bytes) {
    w.Gauge("process_resident_memory_bytes", "Resident memory size in bytes.").Add({}, *s.resident_bytes);
  }
  if (s.virtual_bytes) {
    w.Gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.").Add({}, *s.virtual_bytes);
  }
  if (s.open_fds) w.Gauge("process_open_fds", "Number of open file descriptors.").Add({}, *s.open_fds);
  if (s.max_fds) w.Gauge("process_max_fds", "Maximum number of open file descriptors.").Add({}, *s.max_fds);
  if (s.start_time_seconds) {
    w.Gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.")
        .Add({}, *s.start_time_seconds);
  }
}

void AddProcessMetrics(PrometheusWriter& w) {
  AddProcessMetrics(w, ReadProcessSample());
  AddAllocatorMetrics(w);
}

void AddBuildInfo(PrometheusWriter& w, std::string_view daemon) {
  w.Gauge("weir_build_info",
          "1, labelled with the daemon, its release and the source commit it was built from.")
      .Add({{"daemon", daemon}, {"version", BuildVersion()}, {"commit", BuildCommit()}}, 1);
}

}  // namespace weir::common
