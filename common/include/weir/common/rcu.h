// Read-copy-update for weir's shared read-mostly data (city map, tag table,
// cache index), on liburcu's QSBR flavour.
//
// Threading contract, for every structure in this folder that says "RCU":
// * Readers are threads holding an RcuThread. A pointer obtained from an RCU
//   structure stays valid until that thread's next Quiescent(), Offline() or
//   the RcuThread's destruction. Workers call Quiescent() once per burst,
//   between packets, never while holding such a pointer.
// * A registered thread that idles (blocks in epoll, sleeps, waits on a lock
//   another registered thread may hold during a grace period) must go
//   Offline() first, or grace periods, and with them memory reclamation,
//   stop.
// * Readers never block, never take a lock and never do an atomic
//   read-modify-write: QSBR read-side costs nothing but the quiescent-state
//   announcement per burst.
#pragma once

#include <atomic>
#include <memory>

namespace weir::common {

// Registers the calling thread as a QSBR reader for its lifetime (online).
// Create one at the top of each worker's thread function.
class RcuThread {
 public:
  RcuThread();
  ~RcuThread();
  RcuThread(const RcuThread&) = delete;
  RcuThread& operator=(const RcuThread&) = delete;

  // "I hold no RCU-protected pointer now." Call between bursts.
  void Quiescent();
  // Stop / resume being waited for (around blocking calls).
  void Offline();
  void Online();

  // True when the calling thread is registered and online.
  static bool CurrentIsOnline();
};

// Takes the calling thread offline for a scope (if it is registered and
// online), e.g. around a blocking wait.
class RcuOfflineScope {
 public:
  RcuOfflineScope();
  ~RcuOfflineScope();
  RcuOfflineScope(const RcuOfflineScope&) = delete;
  RcuOfflineScope& operator=(const RcuOfflineScope&) = delete;

 private:
  bool was_online_;
};

// Waits for a grace period: every reader has passed a quiescent state since
// the call began. Safe from registered (it goes offline while waiting) and
// unregistered threads. Control plane only: it blocks.
void RcuSynchronize();

// Frees `p` with `fn(p)` after a grace period. Does not block when the caller
// is a registered online thread (urcu call_rcu); otherwise waits for a grace
// period and frees inline.
void RcuRetire(void* p, void (*fn)(void*));

// Waits until every RcuRetire() callback queued so far has run.
void RcuBarrier();

// An immutable snapshot published under RCU: readers get the current one
// with Get() (one acquire load), the control plane swaps in a new one with
// Publish(); the old one is deleted after a grace period.
//
// Threading: Get() from any reader thread (see above). Publish() from any
// one control-plane thread at a time; it blocks for a grace period.
template <typename T>
class RcuSnapshot {
 public:
  RcuSnapshot() = default;
  explicit RcuSnapshot(std::unique_ptr<const T> initial) : current_(initial.release()) {}
  ~RcuSnapshot() { delete current_.load(std::memory_order_relaxed); }
  RcuSnapshot(const RcuSnapshot&) = delete;
  RcuSnapshot& operator=(const RcuSnapshot&) = delete;

  // Valid until the calling reader's next quiescent state. May be null
  // before the first Publish().
  const T* Get() const { return current_.load(std::memory_order_acquire); }

  // Swaps in `next` atomically: readers see the old or the new snapshot,
  // never a mix. Returns after the old one has been freed.
  // Like Publish() but never waits: the old snapshot is freed after a grace
  // period through RcuRetire (for a registered, online writer thread that
  // must not block, such as the fastpath's forwarder).
  void PublishDeferred(std::unique_ptr<const T> next) {
    const T* old = current_.exchange(next.release(), std::memory_order_acq_rel);
    if (old != nullptr) {
      RcuRetire(const_cast<T*>(old), [](void* p) { delete static_cast<T*>(p); });
    }
  }

  void Publish(std::unique_ptr<const T> next) {
    const T* old = current_.exchange(next.release(), std::memory_order_acq_rel);
    if (old != nullptr) {
      RcuSynchronize();
      delete old;
    }
  }

 private:
  std::atomic<const T*> current_{nullptr};
};

}  // namespace weir::common
