// weirctl's commands on weir-recursor (docs/recursor-config.md#control-channel):
// cache-flush, cache-dump and cache-stats over the recursor's own caches
// (the tagged answers by ECS scope, the /0 answers, the ordinary answers,
// the zone cuts), stats (the Prometheus families as a table), reload (the
// tag file and the config's live keys, as SIGHUP), upstreams and partitions. They arrive through the
// control channel (mgmt::ControlServer on the recursor's loop) or from
// weir-mgmt (weirctl --all), which the server hands to the loop first.
//
// libunbound keeps caches of its own for the ordinary names (and the NS
// records behind the zone cuts) that weir cannot flush: libunbound 1.17 has
// no call for it. A flush says so in its reply.
//
// Threading: the recursor's loop thread, where the caches live.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "control.h"
#include "weir/common/clock.h"
#include "weir/common/prometheus.h"
#include "weir/mgmt/control.h"
#include "weir/recursor/config.h"
#include "weir/recursor/tagged_resolver.h"

namespace weir::recursor {

class ControlCommands {
 public:
  struct Deps {
    const RecursorConfig* cfg = nullptr;
    const common::Clock* clock = nullptr;  // the TTL clock
    const TaggedResolver::Tags* tags = nullptr;
    const Control::Parts* parts = nullptr;
    // The daemon's metric samples, as its Prometheus families hold them (on the loop thread).
    std::function<absl::StatusOr<std::vector<common::MetricSample>>()> metric_samples;
    // What SIGHUP does: re-read the tag file (an error when tags come from
    // weir-mgmt) and the config's [log] and [dnstap]; what was reloaded
    // ("the tags (tags.txt), log level debug"), or why nothing was.
    std::function<absl::StatusOr<std::string>()> reload;
  };
  explicit ControlCommands(Deps deps) : d_(std::move(deps)) {}

  mgmt::ControlReply Handle(const mgmt::ControlRequest& r);

 private:
  mgmt::ControlReply Flush(const mgmt::ControlRequest& r);
  mgmt::ControlReply Dump(const mgmt::ControlRequest& r);
  mgmt::ControlReply CacheStats() const;
  mgmt::ControlReply Upstreams() const;
  mgmt::ControlReply Partitions() const;

  Deps d_;
  // Tagged answers flushed (the scoped cache counts whole names only).
  uint64_t tagged_answers_flushed_ = 0;
};

}  // namespace weir::recursor
