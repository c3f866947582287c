// weir-recursor: the weight/ECS recursive tier (docs/recursor-config.md).
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "weir/recursor/config.h"
#include "weir/recursor/server.h"

int main(int argc, char** argv) {
  CLI::App app{"weir-recursor: the weir weight/ECS recursive tier"};
  std::string config_path;
  bool check_only = false;
  bool test_clock = false;
  app.add_option("-c,--config", config_path, "TOML configuration file")->required();
  app.add_flag("--check", check_only, "validate the configuration and exit");
  app.add_flag("--test-clock", test_clock,
               "tests only: a settable TTL clock, moved with the control command 'advance-clock N'");
  CLI11_PARSE(app, argc, argv);

  auto config = weir::recursor::LoadConfig(config_path);
  if (!config.ok()) {
    std::fprintf(stderr, "weir-recursor: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  if (check_only) {
    std::printf("%s: ok\n", config_path.c_str());
    return 0;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // every thread, libunbound's included, inherits the mask

  weir::partitions::FakeClock fake_clock(weir::partitions::SystemClock::Instance().NowSeconds());
  weir::recursor::Server server(*config, test_clock ? &fake_clock : nullptr);
  absl::Status st = server.Start();
  if (!st.ok()) {
    std::fprintf(stderr, "weir-recursor: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  std::printf("%s", server.DescribeListeners().c_str());
  std::fflush(stdout);
  for (;;) {
    int sig = 0;
    sigwait(&set, &sig);
    if (sig == SIGHUP) {
      absl::Status r = server.ReloadTags();
      std::fprintf(stderr, "weir-recursor: reload tags: %s\n",
                   r.ok() ? "ok" : std::string(r.message()).c_str());
      continue;
    }
    break;
  }
  server.Stop();
  return 0;
}
