// weir-recursor: the weight/ECS recursive tier (docs/behaviour.md#the-recursive-tier).
//
// One event-loop thread (epoll) owns everything: the UDP/TCP listeners for
// the front tier, the control port, libunbound's result descriptor, the
// last-hop sockets to authoritative servers, the ordinary answer cache, the
// ECS-scope cache and the zone-cut cache. Nothing is shared with other
// threads except through Stop() and ReloadTags().
//
// Ordinary names are resolved by libunbound. Tagged names (weight and/or
// ecs in the tag table, or a query carrying ECS or the weight option, which
// the front only adds for tagged names) get their last hop from weir: the
// zone cut and its servers come from libunbound (policy iterate) or from
// the tag (policy forward); weir queries them with the front's ECS and the
// empty weight option, follows the CNAME chain (each step the same way),
// and caches the chain per ECS scope (RFC 7871 7.3).
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "weir/common/clock.h"
#include "weir/common/heartbeat.h"
#include "weir/recursor/config.h"

namespace weir::recursor {

class Server {
 public:
  // `test_clock`: when not null, the TTL clock, moved by the control
  // command `advance-clock N`. Otherwise the system clock.
  Server(RecursorConfig config, common::FakeClock* test_clock);
  ~Server();

  // Binds the sockets, loads the tag file, sets up libunbound and starts the
  // loop thread.
  absl::Status Start();
  // "listening udp A tcp A" lines, "control A" (the daemon prints "ready" after them).
  std::string DescribeListeners() const;
  // The loop the watchdog goes by (the one thread that resolves).
  std::vector<common::NamedHeart> Hearts() const;
  // Re-reads the tag file; applied by the loop thread. Any thread.
  absl::Status ReloadTags();
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir::recursor
