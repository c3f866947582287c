// weir-fastpath: the front cache, on kernel sockets or the DPDK poll-mode backend.
#include "weir/common/daemon.h"
#include "weir/fastpath/backend.h"
#include "weir/fastpath/config.h"
#include "weir/fastpath/descriptors.h"
#include "weir/fastpath/server.h"

int main(int argc, char** argv) {
  weir::common::Daemon daemon({
      .name = "weir-fastpath",
      .description = "weir-fastpath: the weir front cache",
      .test_clock_help =
          "tests only: a settable clock, advanced with GET /test/advance-clock?seconds=N on the metrics port",
  });
  if (auto exit = daemon.ParseFlags(argc, argv)) return *exit;
  auto config = weir::fastpath::LoadAndCheckConfig(daemon.config_path(), weir::fastpath::BuiltBackends());
  // The open-file limit the config needs (raised now, or the start refused).
  const weir::common::DescriptorNeed fds =
      config.ok() ? weir::fastpath::DescriptorsNeeded(*config) : weir::common::DescriptorNeed{};
  if (auto exit = daemon.ConfigLoaded(config.status(), config.ok() ? &config->log : nullptr, &fds))
    return *exit;

  weir::common::FakeClock fake_clock(weir::common::SystemClock::Instance().NowSeconds());
  weir::fastpath::Server server(*config, daemon.test_clock() ? &fake_clock : nullptr);
  return daemon.Serve({
      .start = [&] { return server.Start(); },
      .ready_text = [&] { return server.DescribeListeners(); },
      .reload = [&] { return server.Reload(); },
      .reload_label = "reload",
      .stop = [&] { server.Stop(); },
      .hearts = [&] { return server.Hearts(); },
  });
}
