#include "weir/dns/wire.h"

#include <iterator>
#include <string_view>

namespace weir::dns {

std::string RcodeName(unsigned rcode) {
  static constexpr std::string_view kNames[] = {
      "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN",  "NOTIMP",  "REFUSED", "YXDOMAIN", "YXRRSET",
      "NXRRSET", "NOTAUTH", "NOTZONE",  "DSOTYPENI", "",        "",        "",         "",
      "BADVERS", "BADKEY",  "BADTIME",  "BADMODE",   "BADNAME", "BADALG",  "BADTRUNC", "BADCOOKIE",
  };
  if (rcode < std::size(kNames) && !kNames[rcode].empty()) return std::string(kNames[rcode]);
  return "RCODE" + std::to_string(rcode);
}

}  // namespace weir::dns
