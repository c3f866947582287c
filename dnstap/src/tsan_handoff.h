// libfstrm hands each message from a producer to its I/O thread through its
// own lock-free queue, ordered by its own atomics. Debian's libfstrm is not
// built with ThreadSanitizer, so under it that order is invisible and the
// I/O thread's write of a message would read as a race with the producer
// that encoded it. In a ThreadSanitizer build the hand-over is declared: a
// release when a producer submits, an acquire when the I/O thread writes.
// Elsewhere both are nothing.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define WEIR_DNSTAP_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WEIR_DNSTAP_TSAN 1
#endif
#endif

#ifdef WEIR_DNSTAP_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace weir::dnstap {

inline char fstrm_handoff;  // the address the hand-over is declared on

inline void HandoffReleased() {
#ifdef WEIR_DNSTAP_TSAN
  __tsan_release(&fstrm_handoff);
#endif
}

inline void HandoffAcquired() {
#ifdef WEIR_DNSTAP_TSAN
  __tsan_acquire(&fstrm_handoff);
#endif
}

}  // namespace weir::dnstap
