// dnstap.Dnstap encoding with protobuf-c's generated code (dnstap.proto,
// compiled at build time).
#include <sys/socket.h>

#include <cstring>

#include "dnstap.pb-c.h"
#include "weir/dnstap/dnstap.h"

namespace weir::dnstap {
namespace {

ProtobufCBinaryData Bytes(std::span<const uint8_t> s) {
  // protobuf-c only reads through the pointer when packing.
  return {s.size(), const_cast<uint8_t*>(s.data())};
}

ProtobufCBinaryData Bytes(std::string_view s) {
  return {s.size(), reinterpret_cast<uint8_t*>(const_cast<char*>(s.data()))};
}

void SetEndpoint(const Endpoint& e, protobuf_c_boolean* has_addr, ProtobufCBinaryData* addr,
                 protobuf_c_boolean* has_port, uint32_t* port) {
  if (e.family != 4 && e.family != 6) return;
  *has_addr = true;
  *addr = {e.family == 4 ? size_t{4} : size_t{16}, const_cast<uint8_t*>(e.bytes.data())};
  *has_port = true;
  *port = e.port;
}

}  // namespace

Endpoint EndpointOf(const common::SocketAddress& a) {
  Endpoint e;
  if (a.family() != AF_INET && a.family() != AF_INET6) return e;
  e.family = a.family() == AF_INET ? 4 : 6;
  std::memcpy(e.bytes.data(), a.addr_bytes(), a.addr_len());
  e.port = a.port();
  return e;
}

EncodedPayload Encode(const Message& m, std::string_view identity, std::string_view version, size_t* len) {
  Dnstap__Message msg = DNSTAP__MESSAGE__INIT;
  msg.type = static_cast<Dnstap__Message__Type>(m.type);
  const uint8_t family = m.query_address.family != 0 ? m.query_address.family : m.response_address.family;
  if (family == 4 || family == 6) {
    msg.has_socket_family = true;
    msg.socket_family = family == 4 ? DNSTAP__SOCKET_FAMILY__INET : DNSTAP__SOCKET_FAMILY__INET6;
  }
  msg.has_socket_protocol = true;
  switch (m.protocol) {
    case Protocol::kUdp:
      msg.socket_protocol = DNSTAP__SOCKET_PROTOCOL__UDP;
      break;
    case Protocol::kTcp:
      msg.socket_protocol = DNSTAP__SOCKET_PROTOCOL__TCP;
      break;
    case Protocol::kDot:
      msg.socket_protocol = DNSTAP__SOCKET_PROTOCOL__DOT;
      break;
    case Protocol::kDoh:
      msg.socket_protocol = DNSTAP__SOCKET_PROTOCOL__DOH;
      break;
  }
  SetEndpoint(m.query_address, &msg.has_query_address, &msg.query_address, &msg.has_query_port,
              &msg.query_port);
  SetEndpoint(m.response_address, &msg.has_response_address, &msg.response_address, &msg.has_response_port,
              &msg.response_port);
  if (m.query_time.tv_sec != 0 || m.query_time.tv_nsec != 0) {
    msg.has_query_time_sec = msg.has_query_time_nsec = true;
    msg.query_time_sec = static_cast<uint64_t>(m.query_time.tv_sec);
    msg.query_time_nsec = static_cast<uint32_t>(m.query_time.tv_nsec);
  }
  if (m.response_time.tv_sec != 0 || m.response_time.tv_nsec != 0) {
    msg.has_response_time_sec = msg.has_response_time_nsec = true;
    msg.response_time_sec = static_cast<uint64_t>(m.response_time.tv_sec);
    msg.response_time_nsec = static_cast<uint32_t>(m.response_time.tv_nsec);
  }
  if (!m.query_message.empty()) {
    msg.has_query_message = true;
    msg.query_message = Bytes(m.query_message);
  }
  if (!m.response_message.empty()) {
    msg.has_response_message = true;
    msg.response_message = Bytes(m.response_message);
  }
  if (!m.query_zone.empty()) {
    msg.has_query_zone = true;
    msg.query_zone = Bytes(m.query_zone);
  }

  Dnstap__Dnstap d = DNSTAP__DNSTAP__INIT;
  d.type = DNSTAP__DNSTAP__TYPE__MESSAGE;
  d.message = &msg;
  if (!identity.empty()) {
    d.has_identity = true;
    d.identity = Bytes(identity);
  }
  if (!version.empty()) {
    d.has_version = true;
    d.version = Bytes(version);
  }
  if (!m.extra.empty()) {
    d.has_extra = true;
    d.extra.data = reinterpret_cast<uint8_t*>(const_cast<char*>(m.extra.data()));
    d.extra.len = m.extra.size();
  }
  const size_t n = dnstap__dnstap__get_packed_size(&d);
  EncodedPayload out(static_cast<uint8_t*>(std::malloc(n)));
  if (out == nullptr) return nullptr;
  *len = dnstap__dnstap__pack(&d, out.get());
  return out;
}

}  // namespace weir::dnstap
