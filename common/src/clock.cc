#include "weir/common/clock.h"

#include <time.h>

namespace weir::common {

uint32_t SystemClock::NowSeconds() const {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<uint32_t>(ts.tv_sec) + 1;
}

const SystemClock& SystemClock::Instance() {
  static const SystemClock clock;
  return clock;
}

}  // namespace weir::common
