#include "weir/fastpath/descriptors.h"

#include <sys/socket.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tls/tls_server.h"
#include "weir/common/metrics_http.h"
#include "weir/common/text.h"
#include "weir/mgmt/control.h"

namespace weir::fastpath {

using common::Cat;

// Every term is the most the daemon holds at once of that kind, as the
// code that opens them bounds it (the file named in each comment).
common::DescriptorNeed DescriptorsNeeded(const FastpathConfig& config) {
  common::DescriptorNeed need;
  // Subscribers' DNS-over-TCP connections (kernel/tcp_server.cc: one
  // table, refused past max_connections).
  if (config.tcp) {
    need.Add(Cat("tcp_max_connections ", config.tcp_limits.max_connections),
             config.tcp_limits.max_connections, "[server] tcp_max_connections");
  }
  // DoT, DoH and HTTPDNS connections share one table (tls/tls_server.cc).
  if (config.front_enabled()) {
    need.Add(Cat("[tls] max_connections ", config.tls.limits.max_connections),
             config.tls.limits.max_connections, "[tls] max_connections");
    // Closed sessions still reading what their clients sent (TlsServer::Linger).
    need.Add(Cat("closing sessions ", tls::TlsServer::kMaxLingering), tls::TlsServer::kMaxLingering);
  }
  // A recursor in both `ordinary` and `weighted` (weighted defaults to
  // ordinary) is one endpoint of the forwarder (forwarder_core.cc); each
  // group's health keeps its own probe.
  const uint64_t listed = config.ordinary.size() + config.weighted.size();
  std::vector<std::string> distinct;
  bool family[2] = {false, false};
  for (const auto* list : {&config.ordinary, &config.weighted}) {
    for (const UpstreamConfig& u : *list) {
      family[u.address.family() == AF_INET ? 0 : 1] = true;
      const std::string a = u.address.ToString();
      if (std::find(distinct.begin(), distinct.end(), a) == distinct.end()) distinct.push_back(a);
    }
  }
  const uint64_t recursors = distinct.size();
  const uint64_t families = uint64_t{family[0]} + uint64_t{family[1]};
  // The upstream UDP pool, per address family of the recursors
  // (socket_transport.cc): a rotated socket stays open for its late answers
  // beside its replacement, so twice the pool at most.
  need.Add(Cat("udp_sockets ", config.udp_sockets, " x ", families, families == 1 ? " family" : " families",
               " x 2 (rotation)"),
           uint64_t(config.udp_sockets) * families * 2, "[upstream] udp_sockets");
  // The upstream TCP pool: at most tcp_connections per recursor, retired
  // ones included (upstream_tcp_pool.cc); a health probe's own UDP socket
  // per recursor that is down.
  need.Add(Cat("tcp_connections ", config.upstream_tcp_connections, " x ", recursors,
               recursors == 1 ? " recursor" : " recursors"),
           uint64_t(config.upstream_tcp_connections) * recursors, "[upstream] tcp_connections");
  need.Add(Cat(listed, " health probes"), listed);
  // Listeners on every [server] listen address: UDP, one per worker
  // (kernel/socket_backend.cc), TCP, and the encrypted front's DoT, DoH and
  // plain HTTP ports (tls/tls_front.cc).
  const uint64_t addresses = config.listen.size();
  uint64_t per_address = config.backend == "kernel" ? uint64_t(config.workers) : 0;
  if (config.tcp) ++per_address;
  if (config.tls.enabled())
    per_address += uint64_t{config.tls.dot_port != 0} + uint64_t{config.tls.doh_port != 0};
  if (config.httpdns.enabled && config.httpdns.http_port != 0) ++per_address;
  need.Add(Cat(addresses * per_address, addresses * per_address == 1 ? " listener" : " listeners"),
           addresses * per_address, "[server] listen");
  // Each worker's event loop (epoll and its wake eventfd) and the eventfd
  // the forwarder wakes it with (kernel/udp_worker.cc).
  need.Add(Cat("workers ", config.workers, " x 3"), uint64_t(config.workers) * 3, "[server] workers");
  // The Prometheus endpoint (metrics_http.h).
  if (config.metrics_enabled) {
    const uint64_t n = common::MetricsHttpServer::Options{}.descriptors();
    need.Add(Cat(n, " metrics"), n);
  }
  // The control channel: the unix and TCP listeners and their connections
  // (mgmt/control.h).
  need.Add(Cat(2 * mgmt::kMaxControlConnections + 2, " control"), 2 * mgmt::kMaxControlConnections + 2);
  if (config.backend == "dpdk") need.Add(Cat(kDpdkDescriptors, " DPDK"), kDpdkDescriptors);
  need.Add(Cat(kFastpathFixedDescriptors, " fixed"), kFastpathFixedDescriptors);
  return need;
}

}  // namespace weir::fastpath
