// The life of a weir daemon process, written once for weir-fastpath,
// weir-recursor and weir-mgmt: the shared command line, the messages and exit
// codes operators and tests rely on, and signal handling. Each main only
// loads its config and says how to start, reload and stop its server.
//
// Exit codes (docs/operator-guide.md#exit-codes): 0 after --help, --version, a
// passing --check, or a stop by SIGTERM/SIGINT; 1 when the server cannot
// start (a port in use, a failed privilege drop); 2 when the command line or
// the config is rejected, after printing why (nothing was started).
//
// Under systemd (Type=notify) the daemon tells the service manager READY=1
// once it serves, RELOADING=1 / READY=1 around a SIGHUP reload, STOPPING=1
// when it stops, and WATCHDOG=1 every second when the unit has WatchdogSec,
// but only while every loop the server names (ServeHooks::hearts) made
// progress within the stall limit (heartbeat.h).
//
// Control plane only; everything runs on the main thread.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "weir/common/fd_limit.h"
#include "weir/common/heartbeat.h"
#include "weir/common/log.h"

namespace weir::common {

struct DaemonOptions {
  std::string name{};         // "weir-fastpath": names the daemon in every log line
  std::string description{};  // the first line of --help
  // The help of --test-clock; empty: the daemon has no such flag.
  std::string test_clock_help{};
};

// How Daemon::Serve drives the server once the config is loaded.
struct ServeHooks {
  std::function<absl::Status()> start{};
  // What stdout shows once the daemon serves (its addresses, a line each),
  // before the line "ready" that Serve prints and flushes after it, since
  // tests and supervisors wait for it. "ready" is logged too (component
  // "startup"), and a stop by signal as "stopping (SIGTERM)" then "stopped"
  // (component "shutdown"), both at info, the same for every daemon.
  std::function<std::string()> ready_text{};
  // Run on SIGHUP, its outcome logged (component "config") as "LABEL: ok"
  // or "LABEL: reason".
  // Without it SIGHUP keeps its default action.
  std::function<absl::Status()> reload{};
  std::string reload_label = "reload";
  std::function<void()> stop{};
  // The server's loops, asked once after `start`; the watchdog is petted
  // only while each has beaten within the stall limit (half WatchdogSec,
  // at least 1 s; 5 s without a watchdog, when a stall is only logged).
  std::function<std::vector<NamedHeart>()> hearts{};
};

class Daemon {
 public:
  explicit Daemon(DaemonOptions options) : options_(std::move(options)) {}

  // Parses -c/--config, --check, --test-clock (when offered), --user,
  // --log-level, --log-target, --version and --help, and sets up the
  // process's log (log.h) with the daemon's name and the flags.
  // nullopt: go on; otherwise the process exits with the value (--help and
  // --version print to stdout and give 0, without a config; a usage error,
  // or a bad --log-level or --log-target value, prints why on stderr and
  // gives 2, as a rejected config does).
  std::optional<int> ParseFlags(int argc, char** argv);

  const std::string& config_path() const { return config_path_; }
  // --user USER[:GROUP]: who the daemon runs as once its sockets are bound
  // (empty: no change).
  const std::string& run_as() const { return run_as_; }
  bool test_clock() const { return test_clock_; }

  // After loading the config: nullopt to go on and serve; otherwise the exit
  // code, 2 for a rejected config (logged as an error of component
  // "config"), 0 when --check passed ("PATH: ok" on stdout). `log`: the
  // config's [log] table, applied unless a flag said otherwise.
  // `descriptors`: what the config needs open at once (fd_limit.h). A hard
  // RLIMIT_NOFILE below it rejects the config (exit 2, with --check too);
  // otherwise, unless --check, the soft limit is raised to it (never
  // lowered) and the raise logged; 1 when the raise itself fails.
  std::optional<int> ConfigLoaded(const absl::Status& loaded, const LogSettings* log = nullptr,
                                  const DescriptorNeed* descriptors = nullptr) const;

  // The config's [log] table (after a reload, say), under the flags.
  void ApplyLogSettings(const LogSettings& from_config) const;

  // Ignores SIGPIPE (a peer that resets a connection costs an EPIPE, never
  // the process) and blocks SIGTERM, SIGINT and, with a reload hook, SIGHUP
  // before `start` runs, so every thread the server starts inherits the mask
  // and only this thread takes them. Then starts, drops privileges when
  // --user was given (every socket is bound by then), prints the ready text,
  // tells systemd READY=1 and waits: SIGHUP reloads, SIGTERM/SIGINT stop;
  // once a second it writes the summaries of rate-limited log lines and
  // pets the systemd watchdog while no heart stalled (a stall is logged as
  // an error once, with the loops' names, and its end at info). Returns the
  // exit code.
  // The server must not start threads before `start`.
  int Serve(const ServeHooks& hooks) const;

 private:
  int Rejected(std::string_view reason) const;
  // ConfigLoaded's open-file limit: nullopt to go on, else the exit code.
  std::optional<int> OpenFileLimitFor(const DescriptorNeed& need) const;

  DaemonOptions options_;
  LogSettings log_flags_;
  std::string config_path_;
  std::string run_as_;
  bool check_only_ = false;
  bool test_clock_ = false;
};

}  // namespace weir::common
