// weir-recursor's own Prometheus families (docs/metrics.md), read from the
// counters of the daemon's units.
//
// Threading: the loop thread. The units' counters are plain integers and
// their caches plain hash maps, owned by that thread; the metrics endpoint
// gets here through net::LoopMailbox (server.cc).
#pragma once

#include "control.h"
#include "weir/common/prometheus.h"

namespace weir::recursor {

void WriteRecursorMetrics(const Control::Parts& parts, common::PrometheusWriter& w);

}  // namespace weir::recursor
