// libfstrm hands each message from a producer to its I/O thread through its
// own lock-free queue, ordered by its own atomics. Debian's libfstrm is not
// built with ThreadSanitizer, so under it that order is invisible and the
// I/O thread's write of a message would read as a race with the producer
// that encoded it. In a ThreadSanitizer build the hand-over is declared
// (weir/common/tsan.h): a release when a producer submits, an acquire when
// the I/O thread writes. Elsewhere both are nothing.
#pragma once

#include "weir/common/tsan.h"

namespace weir::dnstap {

inline common::tsan::Sync fstrm_handoff;  // the object the hand-over is declared on

inline void HandoffReleased() { common::tsan::Released(fstrm_handoff); }
inline void HandoffAcquired() { common::tsan::Acquired(fstrm_handoff); }

}  // namespace weir::dnstap
