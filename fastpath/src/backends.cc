// The backend factory: the one place that knows every backend. A new
// backend is a folder under fastpath/src/ and one line in each table here.
#include "kernel/socket_backend.h"
#include "weir/common/text.h"
#include "weir/fastpath/backend.h"
#ifdef WEIR_HAVE_DPDK
#include "dpdk/backend.h"
#endif

namespace weir::fastpath {

namespace {

struct BackendEntry {
  const char* name;
  std::unique_ptr<Backend> (*make)(const FastpathConfig&);
};

template <typename T>
std::unique_ptr<Backend> Make(const FastpathConfig& config) {
  return std::make_unique<T>(config);
}

constexpr BackendEntry kBackends[] = {
    {"kernel", &Make<kernel::SocketBackend>},
#ifdef WEIR_HAVE_DPDK
    {"dpdk", &Make<dpdk::Backend>},
#endif
};

}  // namespace

const std::vector<std::string>& BuiltBackends() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const BackendEntry& e : kBackends) v.emplace_back(e.name);
    return v;
  }();
  return names;
}

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const FastpathConfig& config) {
  for (const BackendEntry& e : kBackends) {
    if (config.backend == e.name) return e.make(config);
  }
  return absl::FailedPreconditionError(
      common::Cat("server.backend \"", config.backend, "\": this weir-fastpath was built without it"));
}

}  // namespace weir::fastpath
