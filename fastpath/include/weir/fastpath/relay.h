// An upstream answer the cache cannot hold (DNSSEC-aware, REFUSED, too big,
// uncacheable), prepared once on the upstream side so that each waiting
// client's worker writes its own answer from it with the query handler's
// response rules (QueryHandler::WriteRelayed).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "weir/dns/message.h"

namespace weir::fastpath {

struct RelayedAnswer {
  uint16_t flags = 0;         // the upstream's header flags (RCODE, AD)
  uint16_t counts[3] = {};    // answer, authority, additional (without OPT)
  std::vector<uint8_t> body;  // the records after the question, up to the OPT
  bool has_ecs = false;       // the upstream answered with ECS
  uint8_t ecs_scope = 0;
  bool has_weight = false;  // the upstream answered with the weight option
  std::vector<uint8_t> weight;
  bool too_big = false;  // the records do not fit a message: header + question with TC
};

// The relay of `up` (parsed from `bytes`) to clients that asked `qtype`.
// Records up to the upstream's OPT are kept verbatim (the question has the
// same length in every client's copy, so compression offsets hold), or,
// for clients without DO (`strip_dnssec`), without the DNSSEC records they
// did not ask for (RFC 3225, RFC 4035 3.2.1), names then decompressed.
std::shared_ptr<const RelayedAnswer> PrepareRelay(const dns::Message& up, uint16_t qtype, bool strip_dnssec);

}  // namespace weir::fastpath
