#include "weir/recursor/descriptors.h"

#include "weir/common/metrics_http.h"
#include "weir/common/text.h"
#include "weir/mgmt/control.h"

namespace weir::recursor {

using common::Cat;

// Every term is the most the daemon holds at once of that kind, as the
// code that opens them bounds it (the file named in each comment).
common::DescriptorNeed DescriptorsNeeded(const RecursorConfig& config) {
  common::DescriptorNeed need;
  // The fronts' DNS-over-TCP connections (front.cc: one table, refused past
  // max_connections).
  if (config.tcp) {
    need.Add(Cat("tcp_max_connections ", config.tcp_limits.max_connections),
             config.tcp_limits.max_connections, "[server] tcp_max_connections");
  }
  // The last hop opens a socket per query (socket_last_hop.cc); each
  // resolution in flight has one query out at a time: a tagged one
  // (tagged_resolver.cc) or a libunbound fetch whose forwarded query goes
  // through weir's relay (forwarder_relay.cc). Both are resolutions the
  // router admits under the one max_inflight (query_router.cc), so
  // max_inflight sockets at most.
  need.Add(Cat("max_inflight ", config.max_inflight, " (last hop)"), config.max_inflight,
           "[server] max_inflight");
  const bool relay =
      !config.forwarders.empty() && config.forwarder_transport == RecursorConfig::ForwarderTransport::kWeir;
  // libunbound's resolving process (unbound_resolver.cc) is forked from
  // this one and inherits its limit: its UDP ports (outgoing-range) and its
  // TCP streams (outgoing_tcp) are counted on top of this process's own, so
  // one limit covers both processes.
  need.Add(Cat("libunbound outgoing-range ", kLibunboundOutgoingRange), kLibunboundOutgoingRange);
  need.Add(Cat("outgoing_tcp ", config.outgoing_tcp), config.outgoing_tcp, "[resolver] outgoing_tcp");
  // Listeners (front.cc): UDP and TCP on each listen address, the control
  // port; the relay's sockets.
  uint64_t listeners = config.listen.size() * (config.tcp ? 2 : 1) + (config.control_enabled ? 1 : 0);
  if (relay) listeners += config.forwarders.size();
  need.Add(Cat(listeners, listeners == 1 ? " listener" : " listeners"), listeners, "[server] listen");
  if (config.control_enabled) {
    need.Add(Cat(kServerControlConnections, " server control"), kServerControlConnections);
  }
  // The control channel: the unix and TCP listeners and their connections
  // (mgmt/control.h).
  need.Add(Cat(2 * mgmt::kMaxControlConnections + 2, " control"), 2 * mgmt::kMaxControlConnections + 2);
  // The Prometheus endpoint (metrics_http.h).
  if (config.metrics_enabled) {
    const uint64_t n = common::MetricsHttpServer::Options{}.descriptors();
    need.Add(Cat(n, " metrics"), n);
  }
  need.Add(Cat(kRecursorFixedDescriptors, " fixed"), kRecursorFixedDescriptors);
  return need;
}

}  // namespace weir::recursor
