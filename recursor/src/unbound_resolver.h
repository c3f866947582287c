// libunbound behind the recursor's event loop: full recursion for ordinary
// names and the lookups that find zone cuts (NS, then A/AAAA of the NS
// names; never with ECS: libunbound cannot send it).
//
// The context runs its own resolving thread (ub_ctx_async(ctx, 1)); results
// are delivered through ub_fd(), which the loop polls, and callbacks run in
// Process() on the loop thread. Threading: every call on the loop thread.
#pragma once

#include <unbound.h>

#include <cstdint>
#include <functional>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "weir/recursor/config.h"
#include "weir/recursor/resolver.h"

namespace weir::recursor {

class UnboundResolver : public Resolver {
 public:
  UnboundResolver() = default;
  ~UnboundResolver() override;
  UnboundResolver(const UnboundResolver&) = delete;
  UnboundResolver& operator=(const UnboundResolver&) = delete;

  // Root hints, trust anchor and forwarders from the config. libunbound is
  // never left with its compiled-in root hints (the config requires one or
  // the other) and may query loopback servers (the test hierarchy).
  absl::Status Init(const RecursorConfig& config);
  int fd() const;
  // Delivers finished results (call when fd() is readable).
  void Process();
  // Starts a lookup; false when libunbound refused it (the callback is not called).
  bool Resolve(const std::string& name, uint16_t type, uint16_t klass, Callback cb) override;
  size_t pending() const { return pending_.size(); }

 private:
  struct Request {
    UnboundResolver* self;
    Callback cb;
  };
  static void Done(void* arg, int err, ub_result* result);

  ub_ctx* ctx_ = nullptr;
  absl::flat_hash_set<Request*> pending_;
};

}  // namespace weir::recursor
