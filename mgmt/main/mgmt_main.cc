// weir-mgmt: the management daemon (DESIGN section 8).
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "weir/mgmt/server.h"

int main(int argc, char** argv) {
  CLI::App app{"weir-mgmt: stores weir's tags and city map and pushes them to every node"};
  std::string config_path;
  bool check_only = false;
  app.add_option("-c,--config", config_path, "TOML configuration file")->required();
  app.add_flag("--check", check_only, "validate the configuration and exit");
  CLI11_PARSE(app, argc, argv);

  auto config = weir::mgmt::LoadMgmtConfig(config_path);
  if (!config.ok()) {
    std::fprintf(stderr, "weir-mgmt: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  if (check_only) {
    std::printf("%s: ok\n", config_path.c_str());
    return 0;
  }
  signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  weir::mgmt::MgmtServer server(*config);
  absl::Status st = server.Start();
  if (!st.ok()) {
    std::fprintf(stderr, "weir-mgmt: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  std::printf("listening %s\nready\n", server.bound().ToString().c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  server.Stop();
  return 0;
}
