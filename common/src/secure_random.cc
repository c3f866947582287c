#include "weir/common/secure_random.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

namespace weir::common {

void SecureRandom::Refill() {
  size_t got = 0;
  while (got < buf_.size()) {
    const ssize_t n = getrandom(buf_.data() + got, buf_.size() - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (errno != EINTR) {
      // Without GRND_NONBLOCK getrandom blocks until the pool is seeded, so
      // it fails only on a bad buffer: never here. Going on with bits a
      // forger could predict would be worse than stopping.
      std::abort();
    }
  }
  pos_ = 0;
}

void SecureRandom::Fill(uint8_t* out, size_t len) {
  while (len > 0) {
    if (pos_ == buf_.size()) Refill();
    const size_t n = std::min(len, buf_.size() - pos_);
    std::memcpy(out, buf_.data() + pos_, n);
    pos_ += n;
    out += n;
    len -= n;
  }
}

uint64_t SecureRandom::Next64() {
  uint64_t v = 0;
  Fill(reinterpret_cast<uint8_t*>(&v), sizeof(v));
  return v;
}

uint32_t SecureRandom::Below(uint32_t n) {
  const uint32_t limit = UINT32_MAX - UINT32_MAX % n;
  for (;;) {
    const auto v = static_cast<uint32_t>(Next64());
    if (v < limit) return v % n;
  }
}

}  // namespace weir::common
