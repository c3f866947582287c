// zone-check: weir-mgmt asks it of every connected recursor after a tag
// change that adds suffixes (docs/mgmt.md#zone-check). For each name, the
// recursor walks to its zone cut the way a tagged query does
// (ZoneCutFinder: NS, SOA, the servers' addresses, through libunbound) and
// says which zone it found, or that it found none: the suffix's tagged
// queries would get SERVFAIL. A cut already cached answers at once.
//
// Arguments: `name=NAME` (one per name, at most mgmt::kMaxZoneCheckNames) and
// `timeout_ms=N` (how long to wait for the walks, 100..10000, default
// 2000); a name still being looked up then is reported as not checked.
//
// Threading: on the loop thread that owns the finder; `done` is called
// once, on it (at once for a bad request). Nothing blocks: the mgmt
// client's thread goes on taking pushes while the walks run.
#pragma once

#include <functional>

#include "weir/mgmt/control.h"
#include "weir/net/event_loop.h"
#include "weir/recursor/zone_cuts.h"

namespace weir::recursor {

void StartZoneCheck(const mgmt::ControlRequest& r, ZoneCutFinder& finder, net::EventLoop& loop,
                    std::function<void(mgmt::ControlReply)> done);

}  // namespace weir::recursor
