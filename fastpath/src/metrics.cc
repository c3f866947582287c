#include "weir/fastpath/metrics.h"

#include "weir/common/text.h"

namespace weir::fastpath {

using common::Cat;
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

std::string RcodeName(unsigned rcode) {
  static constexpr std::string_view kNames[] = {
      "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN",  "NOTIMP",  "REFUSED", "YXDOMAIN", "YXRRSET",
      "NXRRSET", "NOTAUTH", "NOTZONE",  "DSOTYPENI", "",        "",        "",         "",
      "BADVERS", "BADKEY",  "BADTIME",  "BADMODE",   "BADNAME", "BADALG",  "BADTRUNC", "BADCOOKIE",
  };
  if (rcode < std::size(kNames) && !kNames[rcode].empty()) return std::string(kNames[rcode]);
  return Cat("RCODE", rcode);
}

}  // namespace weir::fastpath
