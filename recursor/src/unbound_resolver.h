// libunbound behind the recursor's event loop: full recursion for ordinary
// names and the lookups that find zone cuts (NS, then A/AAAA of the NS
// names; never with ECS: libunbound cannot send it).
//
// The context resolves in a process of its own (ub_ctx_async(ctx, 0): forked
// at the first lookup, after the daemon dropped its privileges); results are
// delivered through ub_fd(), which the loop polls, and callbacks run in
// Process() on the loop thread. When that process ends (killed, crashed, a
// fatal exit inside libunbound) Process() starts a new context and fails the
// lookups that were in flight: the daemon itself never exits for it.
// Threading: every call on the loop thread.
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
  // How the loop watches fd(): `watch(fd, false)` before Process() closes it
  // to replace the context, `watch(fd, true)` for the new one (none when no
  // context could be created: lookups are refused then).
  void SetFdWatcher(std::function<void(int fd, bool watch)> watch) { watch_fd_ = std::move(watch); }
  // Times the resolving process was replaced.
  uint64_t restarts() const { return restarts_; }
  // Starts a lookup; false when libunbound refused it (the callback is not called).
  bool Resolve(const std::string& name, uint16_t type, uint16_t klass, Callback cb) override;
  size_t pending() const { return pending_.size(); }

 private:
  struct Request {
    UnboundResolver* self;
    Callback cb;
  };
  static void Done(void* arg, int err, ub_result* result);
  absl::Status Create();

  RecursorConfig config_;
  ub_ctx* ctx_ = nullptr;
  uint64_t restarts_ = 0;
  std::function<void(int, bool)> watch_fd_;
  absl::flat_hash_set<Request*> pending_;
};

}  // namespace weir::recursor
