// weir-mgmt: the management daemon (docs/behaviour.md#management).
#include "weir/common/daemon.h"
#include "weir/common/text.h"
#include "weir/mgmt/descriptors.h"
#include "weir/mgmt/server.h"

int main(int argc, char** argv) {
  weir::common::Daemon daemon({
      .name = "weir-mgmt",
      .description = "weir-mgmt: stores weir's tags and city map and pushes them to every node",
  });
  if (auto exit = daemon.ParseFlags(argc, argv)) return *exit;
  auto config = weir::mgmt::LoadAndCheckMgmtConfig(daemon.config_path());
  // The open-file limit the config needs (raised now, or the start refused).
  const weir::common::DescriptorNeed fds =
      config.ok() ? weir::mgmt::DescriptorsNeeded(*config) : weir::common::DescriptorNeed{};
  if (auto exit = daemon.ConfigLoaded(config.status(), nullptr, &fds)) return *exit;

  weir::mgmt::MgmtServer server(*config);
  return daemon.Serve({
      .start = [&] { return server.Start(); },
      .ready_text = [&] { return server.DescribeListeners(); },
      // SIGHUP: the [tls] certificate, key and CA again (they are also
      // taken when a file changes).
      .reload = config->tls.enabled ? std::function<absl::Status()>([&] { return server.ReloadTls(); })
                                    : std::function<absl::Status()>(),
      .reload_label = "TLS reload",
      .stop = [&] { server.Stop(); },
  });
}
