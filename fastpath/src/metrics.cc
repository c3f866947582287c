#include "weir/fastpath/metrics.h"

#include "weir/common/text.h"

namespace weir::fastpath {

using common::ToStd;

std::string_view DropReasonName(DropReason r) {
  switch (r) {
    case DropReason::kGarbage:
      return "garbage";
    case DropReason::kRateLimited:
      return "rate_limited";
    case DropReason::kAcl:
      return "acl";
    case DropReason::kMissQueueFull:
      return "miss_queue_full";
    case DropReason::kNoRoom:
      return "no_room";
    case DropReason::kCount:
      break;
  }
  return "unknown";
}

std::string_view ErrorReasonName(ErrorReason r) {
  switch (r) {
    case ErrorReason::kFormErr:
      return "formerr";
    case ErrorReason::kAcl:
      return "acl";
    case ErrorReason::kNotImpl:
      return "notimp";
    case ErrorReason::kBadVers:
      return "badvers";
    case ErrorReason::kClass:
      return "class";
    case ErrorReason::kUpstreamFailure:
      return "upstream_failure";
    case ErrorReason::kCount:
      break;
  }
  return "unknown";
}

}  // namespace weir::fastpath
