// weir-recursor: the weight/ECS recursive tier (docs/recursor-config.md).
#include "weir/common/daemon.h"
#include "weir/recursor/config.h"
#include "weir/recursor/descriptors.h"
#include "weir/recursor/server.h"

int main(int argc, char** argv) {
  weir::common::Daemon daemon({
      .name = "weir-recursor",
      .description = "weir-recursor: the weir weight/ECS recursive tier",
      .test_clock_help = "tests only: a settable TTL clock, moved with the control command 'advance-clock N'",
  });
  if (auto exit = daemon.ParseFlags(argc, argv)) return *exit;
  auto config = weir::recursor::LoadAndCheckConfig(daemon.config_path());
  // The open-file limit the config needs (raised now, or the start refused).
  const weir::common::DescriptorNeed fds =
      config.ok() ? weir::recursor::DescriptorsNeeded(*config) : weir::common::DescriptorNeed{};
  if (auto exit = daemon.ConfigLoaded(config.status(), config.ok() ? &config->log : nullptr, &fds))
    return *exit;

  weir::common::FakeClock fake_clock(weir::common::SystemClock::Instance().NowSeconds());
  weir::recursor::Server server(*config, daemon.test_clock() ? &fake_clock : nullptr);
  return daemon.Serve({
      .start = [&] { return server.Start(); },
      .ready_text = [&] { return server.DescribeListeners(); },
      .reload = [&] { return server.ReloadTags(); },
      .reload_label = "reload tags",
      .stop = [&] { server.Stop(); },
      .hearts = [&] { return server.Hearts(); },
  });
}
