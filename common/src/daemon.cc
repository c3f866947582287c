#include "weir/common/daemon.h"

#include <pthread.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>

namespace weir::common {

std::optional<int> Daemon::ParseFlags(int argc, char** argv) {
  CLI::App app{options_.description};
  app.add_option("-c,--config", config_path_, "TOML configuration file")->required();
  app.add_flag("--check", check_only_, "validate the configuration and exit");
  if (!options_.test_clock_help.empty()) app.add_flag("--test-clock", test_clock_, options_.test_clock_help);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return std::nullopt;
}

std::optional<int> Daemon::ConfigLoaded(const absl::Status& loaded) const {
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s: %s\n", options_.name.c_str(), std::string(loaded.message()).c_str());
    return 2;
  }
  if (check_only_) {
    std::printf("%s: ok\n", config_path_.c_str());
    return 0;
  }
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

  if (absl::Status st = hooks.start(); !st.ok()) {
    std::fprintf(stderr, "%s: %s\n", options_.name.c_str(), std::string(st.message()).c_str());
    return 1;
  }
  std::fputs(hooks.ready_text().c_str(), stdout);
  std::fflush(stdout);
  for (;;) {
    int sig = 0;
    sigwait(&set, &sig);
    if (sig != SIGHUP) break;
    absl::Status r = hooks.reload();
    std::fprintf(stderr, "%s: %s: %s\n", options_.name.c_str(), hooks.reload_label.c_str(),
                 r.ok() ? "ok" : std::string(r.message()).c_str());
  }
  hooks.stop();
  return 0;
}

}  // namespace weir::common
