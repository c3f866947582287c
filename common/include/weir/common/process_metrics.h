// The families every weir daemon exposes besides its own: the standard
// process families, named as Prometheus' Go and Python clients name them
// (process_cpu_seconds_total, process_resident_memory_bytes, ...), read from
// /proc, and weir_build_info.
//
// The /proc parsers take the text so that they can be tested on any text: a
// short or malformed text is an error, and the families it would have given
// are left out of the scrape, never guessed.
//
// Threading: every function is thread-safe (it reads /proc and getrlimit,
// and writes only the writer it is given, which its caller owns).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "weir/common/prometheus.h"

namespace weir::common {

// The fields of /proc/<pid>/stat (proc(5)) the process families need.
struct ProcSelfStat {
  uint64_t utime_ticks = 0;      // field 14
  uint64_t stime_ticks = 0;      // field 15
  uint64_t starttime_ticks = 0;  // field 22: since boot
  uint64_t vsize_bytes = 0;      // field 23
  uint64_t rss_pages = 0;        // field 24
};

// Parses /proc/self/stat. The command name (field 2) may hold spaces and
// parentheses: the fields after it are counted from its last ')'.
absl::StatusOr<ProcSelfStat> ParseProcSelfStat(std::string_view text);

// The boot time (the `btime` line of /proc/stat), in seconds since the epoch.
absl::StatusOr<uint64_t> ParseProcBootTime(std::string_view text);

// One reading of the process, each part absent when it could not be read.
struct ProcessSample {
  std::optional<double> cpu_seconds;
  std::optional<uint64_t> resident_bytes;
  std::optional<uint64_t> virtual_bytes;
  std::optional<double> start_time_seconds;
  std::optional<uint64_t> open_fds;
  std::optional<uint64_t> max_fds;
};

// What the texts say (either may be empty or bad: its parts are then
// absent), with the system's clock ticks per second and page size.
ProcessSample ProcessSampleFrom(std::string_view self_stat, std::string_view proc_stat,
                                uint64_t ticks_per_second, uint64_t page_size);

// The process now: /proc/self/stat, /proc/stat, /proc/self/fd, RLIMIT_NOFILE.
ProcessSample ReadProcessSample();

// The process families of `sample` (the absent ones left out).
void AddProcessMetrics(PrometheusWriter& w, const ProcessSample& sample);
// The same, for the process now, and the allocator's families
// (allocator_metrics.h) when jemalloc is linked.
void AddProcessMetrics(PrometheusWriter& w);

// weir_build_info{daemon, version, commit} 1. `daemon`: "weir-recursor", ...
void AddBuildInfo(PrometheusWriter& w, std::string_view daemon);

// The release (the CMake project version) and the source's
// `git describe --always --dirty` when it was built ("unknown" outside a
// git checkout).
std::string_view BuildVersion();
std::string_view BuildCommit();
// CMAKE_BUILD_TYPE of the build ("Release", "RelWithDebInfo", ...).
std::string_view BuildType();
// Whether weir-fastpath's DPDK poll-mode backend was built in (WEIR_WITH_DPDK).
bool BuildHasDpdk();
// What `--version` prints for `program`, one line:
// "weir-fastpath 0.1.0 (commit 55062e2, Release build, DPDK yes)".
std::string VersionLine(std::string_view program);

}  // namespace weir::common
