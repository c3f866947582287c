// The DNS over TLS and DNS over HTTPS senders (--transport dot, doh,
// doh-json): per thread, TLS connections to the server, each bound to one
// client address of one city (the server sees the same subscribers as over
// UDP), carrying pipelined queries (DoT, answers matched by ID and question
// in any order) or concurrent HTTP/2 streams (DoH).
//
// Load as over UDP: closed loop (K outstanding per thread, spread over
// --connections connections in proportion to the cities' shares) or open
// loop (--rate); every city gets its share of the queries by the same
// smooth weighted round-robin. A connection that carried
// --queries-per-connection queries takes no more, is closed once they are
// answered, and another opens from the city's next address, offering the
// last session ticket (--tls-resume). --new-connections-per-second is an
// open loop of connections instead: each carries its queries and closes.
//
// Threading: as Sender: one thread per sender; StreamExchange runs on the
// caller's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "options.h"
#include "query_mix.h"
#include "sender.h"
#include "sources.h"

namespace weir::bench {

// A sender for o.transport dot, doh or doh-json.
std::unique_ptr<Sender> MakeStreamSender();

// Connections per thread: --connections, or one per 100 outstanding
// queries and one per city at least; in new-connection mode the most open
// at once (--connections, default 1000).
uint32_t StreamConnectionsPerThread(const Options& o, const Sources& sources);

// Sends `plan` from source `source` on one connection of the run's
// transport, up to `tries` connections for the queries still unanswered,
// and returns the answers in plan order (empty where none came): wire
// messages, or with `json` (doh-json) the JSON bodies. An error when no
// connection could be set up (its reason: refused, TLS verification, not
// TLS at all).
absl::StatusOr<std::vector<std::vector<uint8_t>>> StreamExchange(const Options& o, const QueryMix& mix,
                                                                 const Sources& sources, uint32_t source,
                                                                 const std::vector<Planned>& plan, int tries,
                                                                 bool json);

}  // namespace weir::bench
