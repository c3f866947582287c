#include "weir/common/daemon.h"

#include <pthread.h>
#include <signal.h>

#include <time.h>

#include <systemd/sd-daemon.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "weir/common/config_file.h"
#include "weir/common/log.h"
#include "weir/common/privileges.h"
#include "weir/common/process_metrics.h"

namespace weir::common {

std::optional<int> Daemon::ParseFlags(int argc, char** argv) {
  CLI::App app{options_.description};
  app.set_version_flag("--version", VersionLine(options_.name),
                       "print the version, commit and build, and exit");
  // Required unless --help or --version, which CLI11 handles before any
  // requirement: checked below, so the usage line does not say REQUIRED.
  app.add_option("-c,--config", config_path_, "TOML configuration file (required)");
  app.add_flag("--check", check_only_, "validate the configuration and exit");
  app.add_option("--user", run_as_,
                 "USER[:GROUP]: run as this user once the sockets are bound (when started as root without "
                 "systemd)");
  // For the integration tests only: hidden (the empty group) from --help and
  // so from the manual pages help2man makes of it.
  if (!options_.test_clock_help.empty())
    app.add_flag("--test-clock", test_clock_, options_.test_clock_help)->group("");
  std::string level, target;
  app.add_option("--log-level", level,
                 "error, warning, info or debug; overrides the config's [log] level (default info)");
  app.add_option("--log-target", target,
                 "stderr, journal, or auto: the journal when stderr is connected to it (the default); "
                 "overrides the config's [log] target");
  DefaultLogger().Configure(options_.name, {});
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version: 0; any usage error: 2, the code of a rejected
    // configuration, after CLI11 printed the reason.
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (config_path_.empty()) {
    std::fprintf(stderr, "%s: -c/--config is required\nRun with --help for more information.\n",
                 options_.name.c_str());
    return 2;
  }
  // A bad value is a rejected configuration: exit code 2, like the config file's.
  if (!level.empty()) {
    auto l = ParseLogLevel(level);
    if (!l.ok()) return Rejected(Cat("--log-level: ", ToStd(l.status().message())));
    log_flags_.level = *l;
  }
  if (!target.empty()) {
    auto t = ParseLogTarget(target);
    if (!t.ok()) return Rejected(Cat("--log-target: ", ToStd(t.status().message())));
    log_flags_.target = *t;
  }
  DefaultLogger().Configure(options_.name, log_flags_);
  SetLogFlags(log_flags_);  // a reload's [log] stays under them
  return std::nullopt;
}

int Daemon::Rejected(std::string_view reason) const {
  // A rejected config carries every error, one per line: each is a line of
  // the log, as --check prints them.
  for (const std::string& line : ErrorLines(reason)) LogError("config", line);
  return 2;
}

void Daemon::ApplyLogSettings(const LogSettings& from_config) const {
  LogSettings s = from_config;
  if (log_flags_.level) s.level = log_flags_.level;  // the command line wins
  if (log_flags_.target) s.target = log_flags_.target;
  DefaultLogger().Configure(options_.name, s);
}

std::optional<int> Daemon::ConfigLoaded(const absl::Status& loaded, const LogSettings* log,
                                        const DescriptorNeed* descriptors) const {
  if (!loaded.ok()) return Rejected(ToStd(loaded.message()));
  if (log != nullptr) ApplyLogSettings(*log);
  LogDebug("config", config_path_, ": loaded");
  if (descriptors != nullptr) {
    if (auto exit = OpenFileLimitFor(*descriptors)) return exit;
  }
  if (check_only_) {
    std::printf("%s: ok\n", config_path_.c_str());
    return 0;
  }
  return std::nullopt;
}

std::optional<int> Daemon::OpenFileLimitFor(const DescriptorNeed& need) const {
  absl::StatusOr<OpenFileLimit> limit = ReadOpenFileLimit();
  if (!limit.ok()) {
    LogError("startup", ToStd(limit.status().message()));
    return 1;
  }
  const OpenFileLimitDecision d = DecideOpenFileLimit(need.Total(), *limit);
  using Action = OpenFileLimitDecision::Action;
  // The same line for --check and the start: a start would be refused for it.
  if (d.action == Action::kRefuse)
    return Rejected(Cat(config_path_, ": ", OpenFileLimitRefusal(need, *limit)));
  // --check changes nothing.
  if (check_only_) return std::nullopt;
  if (d.action == Action::kKeep) {
    LogDebug("startup", "open-file limit ", GroupedCount(limit->soft), " covers the ",
             GroupedCount(need.Total()), " descriptors the config needs (", need.Explain(), ")");
    return std::nullopt;
  }
  if (absl::Status st = SetOpenFileSoftLimit(d.soft, limit->hard); !st.ok()) {
    LogError("startup", ToStd(st.message()));
    return 1;
  }
  LogInfo("startup", "open-file limit raised from ", GroupedCount(limit->soft), " to ", GroupedCount(d.soft),
          " (hard limit ", GroupedCount(limit->hard), "): the config needs ", GroupedCount(need.Total()),
          " descriptors (", need.Explain(), ")");
  return std::nullopt;
}

int Daemon::Serve(const ServeHooks& hooks) const {
  signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  if (hooks.reload) sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  // The user is looked up before anything starts: a typo is a usage error.
  std::optional<RunAs> run_as;
  if (!run_as_.empty()) {
    absl::StatusOr<RunAs> r = ResolveRunAs(run_as_);
    if (!r.ok()) return Rejected(ToStd(r.status().message()));
    run_as = *r;
  }
  if (absl::Status st = hooks.start(); !st.ok()) {
    LogError("startup", ToStd(st.message()));
    sd_notifyf(0, "STATUS=start failed: %s", std::string(st.message()).c_str());
    return 1;
  }
  if (run_as) {
    if (absl::Status st = DropPrivileges(*run_as); !st.ok()) {
      LogError("startup", ToStd(st.message()));
      hooks.stop();
      return 1;
    }
    LogInfo("startup", "running as user ", run_as->user, " (uid ", run_as->uid, ", gid ", run_as->gid, ")");
  }
  // The same start line for every daemon, on stdout (after the addresses)
  // and in the log.
  std::fputs((hooks.ready_text ? hooks.ready_text() : std::string()).c_str(), stdout);
  std::fputs("ready\n", stdout);
  std::fflush(stdout);
  LogInfo("startup", "ready");
  sd_notify(0, "READY=1\nSTATUS=serving");
  // The systemd watchdog (WatchdogSec in the unit): petted from this loop
  // while every loop of the server makes progress, so a wedged worker gets
  // the daemon restarted as a wedged control thread does.
  uint64_t watchdog_usec = 0;
  const bool watchdog = sd_watchdog_enabled(0, &watchdog_usec) > 0;
  const std::chrono::steady_clock::duration stall_limit =
      watchdog ? std::max<std::chrono::steady_clock::duration>(std::chrono::microseconds(watchdog_usec / 2),
                                                               std::chrono::seconds(1))
               : std::chrono::seconds(5);
  HeartbeatMonitor monitor;
  if (hooks.hearts) monitor.Watch(hooks.hearts(), std::chrono::steady_clock::now());
  bool stalled = false;
  auto check_and_pet = [&] {
    const std::vector<std::string> stuck = monitor.Stalled(std::chrono::steady_clock::now(), stall_limit);
    if (stuck.empty()) {
      if (stalled) {
        LogInfo("watchdog", "every loop makes progress again");
        sd_notify(0, "STATUS=serving");
        stalled = false;
      }
      if (watchdog) sd_notify(0, "WATCHDOG=1");
      return;
    }
    if (stalled) return;
    stalled = true;
    std::string list;
    for (const std::string& s : stuck) list += (list.empty() ? "" : ", ") + s;
    LogError("watchdog", "stalled: ", list,
             watchdog ? ": the systemd watchdog is no longer petted (the service manager restarts the daemon)"
                      : "");
    sd_notifyf(0, "STATUS=stalled: %s", list.c_str());
  };
  // Woken once a second to write the summaries of rate-limited lines whose
  // interval is over (log.h), so a burst that stops is still reported.
  const timespec tick{1, 0};
  for (;;) {
    const int sig = sigtimedwait(&set, nullptr, &tick);
    check_and_pet();
    if (sig < 0) {
      FlushLogRepeats();
      continue;
    }
    if (sig != SIGHUP) {
      LogInfo("shutdown", "stopping (", sig == SIGTERM ? "SIGTERM" : "SIGINT", ")");
      break;
    }
    sd_notify(0, "RELOADING=1");
    absl::Status r = hooks.reload();
    if (r.ok()) {
      LogInfo("config", hooks.reload_label, ": ok");
      sd_notify(0, "READY=1\nSTATUS=serving");
    } else {
      LogError("config", hooks.reload_label, ": ", ToStd(r.message()));
      sd_notifyf(0, "READY=1\nSTATUS=serving; last reload failed: %s", std::string(r.message()).c_str());
    }
  }
  sd_notify(0, "STOPPING=1");
  FlushLogRepeats();
  hooks.stop();
  LogInfo("shutdown", "stopped");
  return 0;
}

}  // namespace weir::common
