#include "weir/mgmt/descriptors.h"

#include "weir/common/metrics_http.h"
#include "weir/common/text.h"

namespace weir::mgmt {

using common::Cat;

common::DescriptorNeed DescriptorsNeeded(const MgmtConfig& config) {
  common::DescriptorNeed need;
  // Every node holds one connection, and each weirctl request one more
  // (server.cc: refused past max_connections); and the listener.
  need.Add(Cat("max_connections ", config.max_connections), config.max_connections, "[mgmt] max_connections");
  need.Add("1 listener", 1);
  if (config.store == "etcd") {
    need.Add(Cat(kEtcdDescriptors, " etcd"), kEtcdDescriptors);
  } else {
    need.Add(Cat(kSqliteDescriptors, " SQLite"), kSqliteDescriptors);
  }
  // The Prometheus endpoint (metrics_http.h).
  if (config.metrics_enabled) {
    const uint64_t n = common::MetricsHttpServer::Options{}.descriptors();
    need.Add(Cat(n, " metrics"), n);
  }
  // The calibration's feedback endpoint: the same server.
  if (config.calibration.feedback_enabled) {
    const uint64_t n = common::MetricsHttpServer::Options{}.descriptors();
    need.Add(Cat(n, " feedback"), n);
  }
  need.Add(Cat(kMgmtFixedDescriptors, " fixed"), kMgmtFixedDescriptors);
  return need;
}

}  // namespace weir::mgmt
