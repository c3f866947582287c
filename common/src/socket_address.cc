#include "weir/common/socket_address.h"

#include <arpa/inet.h>

#include <charconv>

#include "weir/common/text.h"

namespace weir::common {

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

void SocketAddress::set_port(uint16_t port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
}

const uint8_t* SocketAddress::addr_bytes() const {
  if (family() == AF_INET) {
    return reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr);
  }
  return reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr);
}

std::string SocketAddress::ToString() const {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (family() == AF_INET) {
    inet_ntop(AF_INET, addr_bytes(), buf, sizeof(buf));
    return Cat(buf, ":", port());
  }
  if (family() == AF_INET6) {
    inet_ntop(AF_INET6, addr_bytes(), buf, sizeof(buf));
    return Cat("[", buf, "]:", port());
  }
  return "unset";
}

SocketAddress SocketAddress::FromSockaddr(const sockaddr* sa, socklen_t len) {
  SocketAddress a;
  std::memcpy(&a.storage, sa, len < sizeof(a.storage) ? len : sizeof(a.storage));
  a.len = len;
  return a;
}

absl::StatusOr<SocketAddress> SocketAddress::Parse(std::string_view text, int default_port) {
  std::string host;
  int port = default_port;
  auto parse_port = [&](std::string_view p) -> bool {
    int v = 0;
    auto r = std::from_chars(p.data(), p.data() + p.size(), v);
    if (r.ec != std::errc() || r.ptr != p.data() + p.size() || v < 0 || v > 65535) return false;
    port = v;
    return true;
  };
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return absl::InvalidArgumentError(Cat("bad address '", text, "'"));
    host = std::string(text.substr(1, close - 1));
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':' || !parse_port(rest.substr(1))) {
        return absl::InvalidArgumentError(Cat("bad port in '", text, "'"));
      }
    }
  } else {
    const size_t colon = text.rfind(':');
    if (colon != std::string_view::npos && text.find(':') == colon) {  // exactly one colon: v4:port
      host = std::string(text.substr(0, colon));
      if (!parse_port(text.substr(colon + 1))) {
        return absl::InvalidArgumentError(Cat("bad port in '", text, "'"));
      }
    } else {
      host = std::string(text);  // bare v4 or bare v6
    }
  }
  if (port < 0) return absl::InvalidArgumentError(Cat("address '", text, "' needs a port"));
  SocketAddress a;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&a.storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    a.len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    a.len = sizeof(sockaddr_in6);
  } else {
    return absl::InvalidArgumentError(Cat("'", host, "' is not an IPv4 or IPv6 address"));
  }
  return a;
}

}  // namespace weir::common
