// weir-fastpath: the front cache on kernel sockets.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "weir/fastpath/config.h"
#include "weir/fastpath/server.h"

int main(int argc, char** argv) {
  CLI::App app{"weir-fastpath: the weir front cache"};
  std::string config_path;
  bool check_only = false;
  app.add_option("-c,--config", config_path, "TOML configuration file")->required();
  app.add_flag("--check", check_only, "validate the configuration and exit");
  bool test_clock = false;
  app.add_flag(
      "--test-clock", test_clock,
      "tests only: a settable clock, advanced with GET /test/advance-clock?seconds=N on the metrics port");
  CLI11_PARSE(app, argc, argv);

  auto config = weir::fastpath::LoadConfig(config_path);
  if (!config.ok()) {
    std::fprintf(stderr, "weir-fastpath: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  if (check_only) {
    std::printf("%s: ok\n", config_path.c_str());
    return 0;
  }
  // A peer that resets a connection must cost an EPIPE, never the process.
  signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // threads inherit the mask

  weir::partitions::FakeClock fake_clock(weir::partitions::SystemClock::Instance().NowSeconds());
  weir::fastpath::Server server(*config, test_clock ? &fake_clock : nullptr);
  absl::Status st = server.Start();
  if (!st.ok()) {
    std::fprintf(stderr, "weir-fastpath: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  std::printf("%s", server.DescribeListeners().c_str());
  std::fflush(stdout);
  for (;;) {
    int sig = 0;
    sigwait(&set, &sig);
    if (sig == SIGHUP) {
      absl::Status r = server.Reload();
      std::fprintf(stderr, "weir-fastpath: reload: %s\n", r.ok() ? "ok" : std::string(r.message()).c_str());
      continue;
    }
    break;
  }
  server.Stop();
  return 0;
}
