// The control port's commands (docs/recursor-config.md): stats, flush,
// reload-tags, and advance-clock for tests.
//
// Threading: the recursor's loop thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "forwarder_relay.h"
#include "front.h"
#include "ordinary_resolver.h"
#include "query_router.h"
#include "socket_last_hop.h"
#include "unbound_resolver.h"
#include "weir/common/clock.h"
#include "weir/common/log.h"
#include "weir/dnstap/dnstap.h"
#include "weir/recursor/tagged_resolver.h"
#include "weir/recursor/zone_cuts.h"

namespace weir::recursor {

class Control {
 public:
  // What the commands read and act on.
  struct Parts {
    common::FakeClock* test_clock = nullptr;  // advance-clock; null without --test-clock
    const Front* front = nullptr;
    const FrontReplies* replies = nullptr;
    const QueryRouter* router = nullptr;
    OrdinaryResolver* ordinary = nullptr;
    TaggedResolver* tagged = nullptr;
    const SocketLastHop* last_hop = nullptr;
    const ForwarderRelay* relay = nullptr;  // libunbound's forwarders through weir's last hop
    ZoneCutFinder* cuts = nullptr;
    const UnboundResolver* ub = nullptr;  // its restarts
    const common::Logger* log = nullptr;  // log_suppressed: its rate-limited lines held back
    // The dnstap writer, null without [dnstap] (read when stats are asked).
    std::function<const dnstap::Writer*()> dnstap;
    // Re-reads the tag file and applies it (an error when tags come from mgmt).
    std::function<absl::Status()> reload_tags;
  };
  explicit Control(Parts parts) : p_(std::move(parts)) {}

  // One command line; the reply without its newline.
  std::string Handle(const std::string& line);
  std::string StatsJson() const;
  // The dnstap writer's counters (all zero without [dnstap]).
  dnstap::Writer::Totals DnstapTotals() const;
  const Parts& parts() const { return p_; }

 private:
  Parts p_;
};

}  // namespace weir::recursor
