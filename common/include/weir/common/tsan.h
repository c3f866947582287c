// Hand-overs ThreadSanitizer cannot see. A library weir uses without
// instrumentation (urcu's grace periods, libfstrm's queue) orders memory
// with its own atomics, so under ThreadSanitizer the order is invisible and
// the hand-over reads as a race. Where weir knows the order holds, it
// declares it: Released(sync) on the giving side, Acquired(sync) on the
// taking side, on one object per hand-over. Outside a ThreadSanitizer build
// both are nothing.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define WEIR_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WEIR_TSAN 1
#endif
#endif

#ifdef WEIR_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace weir::common::tsan {

// The object a hand-over is declared on (any distinct address).
struct Sync {
  char byte = 0;
};

inline void Released([[maybe_unused]] Sync& sync) {
#ifdef WEIR_TSAN
  __tsan_release(&sync.byte);
#endif
}

inline void Acquired([[maybe_unused]] Sync& sync) {
#ifdef WEIR_TSAN
  __tsan_acquire(&sync.byte);
#endif
}

}  // namespace weir::common::tsan
