#include "weir/net/http_session.h"

#include <algorithm>
#include <cstring>

namespace weir::net {

bool LooksLikeHttp2Preface(std::span<const uint8_t> first) {
  static constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  const size_t n = std::min(first.size(), sizeof(kPreface) - 1);
  return n == 0 || std::memcmp(first.data(), kPreface, n) == 0;
}

bool IsValidFieldValue(std::string_view value) {
  return value.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

}  // namespace weir::net
