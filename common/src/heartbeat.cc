#include "weir/common/heartbeat.h"

#include "weir/common/text.h"

namespace weir::common {

void HeartbeatMonitor::Watch(std::vector<NamedHeart> hearts, Clock::time_point now) {
  entries_.clear();
  for (NamedHeart& h : hearts) {
    if (h.heart == nullptr) continue;
    const uint64_t beats = h.heart->beats();
    entries_.push_back({std::move(h), beats, now});
  }
}

std::vector<std::string> HeartbeatMonitor::Stalled(Clock::time_point now, Clock::duration limit) {
  std::vector<std::string> out;
  for (Entry& e : entries_) {
    const uint64_t beats = e.heart.heart->beats();
    if (beats != e.last) {
      e.last = beats;
      e.changed = now;
      continue;
    }
    if (now - e.changed >= limit) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - e.changed).count();
      out.push_back(Cat(e.heart.name, " (no progress for ", ms, " ms)"));
    }
  }
  return out;
}

}  // namespace weir::common
