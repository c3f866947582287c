// The load engine: sender threads, open loop at a rate or closed loop with
// K outstanding, matching every answer to its query, expiring the
// unanswered ones. The transport picks the sender once per thread:
//  * udp: each thread has its own UDP sockets (one or more per client
//    address, connected to the server) and TCP connections, sending in
//    sendmmsg batches and reading in recvmmsg batches (this file);
//  * dot, doh, doh-json: TLS connections bound to the same client addresses,
//    queries pipelined (DoT) or as HTTP/2 streams (DoH) (stream_engine.h).
//
// Before the measured run: a preflight query (a clear error when the server
// does not answer, or its TLS handshake fails), the weight-option probes
// that learn each (tagged name, city)'s weights, and the optional warm-up,
// all over the run's transport (doh-json: probes and warm-up in DoH's wire
// form, which can carry the weight option).
//
// Threading: Run() starts the sender threads and returns when they are done;
// the progress callback runs on the caller's thread once a second.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "options.h"
#include "query_mix.h"
#include "report.h"
#include "segment_check.h"
#include "shares.h"
#include "sources.h"

namespace weir::bench {

struct Planned;

class Engine {
 public:
  Engine(const Options& options, const QueryMix& mix, const Sources& sources);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Sends one query from the first source and waits for its answer (three
  // tries); an error names the server and what happened.
  absl::Status Preflight();
  // For every tagged question and city: one query with the weight option
  // from the city's first source; the answer's addresses and weights
  // become the expected set (weights of 1 each when the option is empty or
  // invalid). Sets from `file` are kept as they are.
  absl::Status Probe(ExpectedWeights* expected);
  // Every distinct question once from each city's first source, pipelined;
  // answers are not counted.
  absl::Status Warmup();

  // Called once a second during the run with the report so far.
  using ProgressFn = std::function<void(const Report&)>;
  // --segments-truth: answers to the model's names are checked against it
  // during the run (null: no check). Must outlive Run().
  void set_segment_check(const SegmentCheck* check) { segments_ = check; }

  // The measured run. `expected` is read-only during it.
  absl::StatusOr<Report> Run(const ExpectedWeights& expected, const ProgressFn& progress);

 private:
  struct Thread;
  // Sends `plan` from source `source` over the run's transport (doh-json:
  // as JSON queries when `json`, else in DoH's wire form) and returns the
  // answers in plan order, empty where none came.
  absl::StatusOr<std::vector<std::vector<uint8_t>>> Ask(uint32_t source, const std::vector<Planned>& plan,
                                                        int tries, bool json) const;
  const Options& o_;
  const QueryMix& mix_;
  const Sources& sources_;
  const SegmentCheck* segments_ = nullptr;
  // --subscriber-ecs: the ECS of the queries before the run (the map's
  // first /24). A query from a trusted forwarder without ECS would be asked
  // upstream for the forwarder's own address, which is no subscriber's: a
  // GSLB answers it with its default (scope 0), and a cache that learns
  // segments from scopes would take that for every subscriber's answer.
  std::optional<dns::ClientSubnet> subscriber_ecs_;
  const dns::ClientSubnet* SubscriberEcsOrNull() const {
    return subscriber_ecs_ ? &*subscriber_ecs_ : nullptr;
  }
};

}  // namespace weir::bench
