#include "weir/common/rcu.h"

#include <urcu-qsbr.h>

#include <time.h>

#include <chrono>
#include <thread>

#include "weir/common/tsan.h"

namespace weir::common {
namespace {

// ThreadSanitizer cannot see urcu's grace-period machinery (the library is
// not instrumented), so without help it would report every reclamation as a
// race with the readers. A release on one sync object at each quiescent
// state and an acquire after each grace period tell it the truth.
tsan::Sync g_grace_sync;
inline void AnnotateQuiescent() { tsan::Released(g_grace_sync); }
inline void AnnotateGraceEnd() { tsan::Acquired(g_grace_sync); }

thread_local int t_registered = 0;
thread_local bool t_online = false;

struct RetireNode {
  rcu_head head;
  void* p;
  void (*fn)(void*);
};

void RunRetire(rcu_head* head) {
  AnnotateGraceEnd();
  RetireNode* n = caa_container_of(head, RetireNode, head);
  n->fn(n->p);
  delete n;
}

}  // namespace

RcuThread::RcuThread() {
  if (t_registered++ == 0) {
    rcu_register_thread();
    t_online = true;
  }
}

RcuThread::~RcuThread() {
  if (--t_registered == 0) {
    AnnotateQuiescent();
    if (!t_online) rcu_thread_online();
    rcu_unregister_thread();
    t_online = false;
  }
}

void RcuThread::Quiescent() {
  AnnotateQuiescent();
  rcu_quiescent_state();
}

void RcuThread::Offline() {
  if (!t_online) return;
  AnnotateQuiescent();
  rcu_thread_offline();
  t_online = false;
}

void RcuThread::Online() {
  if (t_online || t_registered == 0) return;
  rcu_thread_online();
  t_online = true;
}

bool RcuThread::CurrentIsOnline() { return t_registered > 0 && t_online; }

RcuOfflineScope::RcuOfflineScope() : was_online_(RcuThread::CurrentIsOnline()) {
  if (was_online_) {
    AnnotateQuiescent();
    rcu_thread_offline();
    t_online = false;
  }
}

RcuOfflineScope::~RcuOfflineScope() {
  if (was_online_) {
    rcu_thread_online();
    t_online = true;
  }
}

void RcuSynchronize() {
  // The calling thread's own reads are finished too.
  AnnotateQuiescent();
  synchronize_rcu();
  AnnotateGraceEnd();
}

void RcuRetire(void* p, void (*fn)(void*)) {
  if (RcuThread::CurrentIsOnline()) {
    AnnotateQuiescent();
    call_rcu(&(new RetireNode{{}, p, fn})->head, RunRetire);
    return;
  }
  RcuSynchronize();
  fn(p);
}

// Not urcu's rcu_barrier(): its bookkeeping is invisible to TSAN. A marker
// callback queued behind everything retired so far does the same job, since
// weir creates no per-CPU or per-thread call_rcu workers: all callbacks go
// through the default worker, in order.
void RcuBarrier() {
  struct Marker {
    rcu_head head;
    std::atomic<bool> done{false};
  };
  Marker marker;
  const bool was_registered = t_registered > 0;
  const bool was_online = t_online;
  {
    RcuThread registration;  // call_rcu needs a registered, online caller
    if (!t_online) {
      rcu_thread_online();
      t_online = true;
    }
    AnnotateQuiescent();  // hands `marker` to the call_rcu worker
    call_rcu(&marker.head, [](rcu_head* h) {
      AnnotateGraceEnd();
      caa_container_of(h, Marker, head)->done.store(true, std::memory_order_release);
    });
    {
      RcuOfflineScope offline;  // never hold up the grace period we wait for
      while (!marker.done.load(std::memory_order_acquire)) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    if (was_registered && !was_online) {
      rcu_thread_offline();
      t_online = false;
    }
  }
  AnnotateGraceEnd();
}

}  // namespace weir::common
