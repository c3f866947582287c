// Helpers shared by the unit tests of every folder that builds DNS names:
// include as "dns/test_util.h" (tests/ is on the unit tests' include path).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "weir/dns/error.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"
#include "weir/dns/writer.h"

namespace weir::dns::testing {

// The canonical key of a name given as text ("www.example.com"); a name the
// codec rejects fails the calling test.
inline NameKey Key(std::string_view text) {
  NameKey k;
  EXPECT_TRUE(NameKeyFromText(text, &k)) << text;
  return k;
}

// The same key as bytes (lower case, uncompressed wire form).
inline std::vector<uint8_t> KeyBytes(std::string_view text) {
  const NameKey k = Key(text);
  return std::vector<uint8_t>(k.bytes.begin(), k.bytes.begin() + k.len);
}

// Uncompressed wire form keeping the spelling's case ("WwW.Example.com").
inline std::vector<uint8_t> WireName(std::string_view dotted) {
  std::vector<uint8_t> out;
  while (!dotted.empty()) {
    const size_t dot = dotted.find('.');
    const std::string_view label = dotted.substr(0, dot);
    out.push_back(static_cast<uint8_t>(label.size()));
    out.insert(out.end(), label.begin(), label.end());
    dotted = dot == std::string_view::npos ? std::string_view() : dotted.substr(dot + 1);
  }
  out.push_back(0);
  return out;
}

// A query as a client sends it, written with ResponseWriter::Begin (QR
// clear); options in the order nsid, ecs, cookie, weight.
struct QuerySpec {
  uint16_t id = 0xBEEF;
  std::string qname = "www.example.com";
  uint16_t qtype = type::kA;
  uint16_t flags = flag::kRd;
  bool edns = true;
  uint16_t udp_size = 1232;
  bool do_bit = false;
  std::vector<uint8_t> cookie = {};  // empty: no COOKIE option
  bool nsid = false;
  bool ecs = false;
  ClientSubnet subnet = {};  // with `ecs`
  bool weight = false;
};
inline std::vector<uint8_t> MakeQuery(const QuerySpec& s) {
  uint8_t buf[512];
  ResponseWriter w(buf, sizeof buf);
  EXPECT_EQ(w.Begin(s.id, s.flags, WireName(s.qname), s.qtype, klass::kIn), ParseError::kOk);
  if (s.edns) {
    EXPECT_EQ(w.BeginOpt(s.udp_size, s.do_bit), ParseError::kOk);
    if (s.nsid) {
      EXPECT_EQ(w.AddOption(option::kNsid, {}), ParseError::kOk);
    }
    if (s.ecs) {
      EXPECT_EQ(w.AddEcs(s.subnet), ParseError::kOk);
    }
    if (!s.cookie.empty()) {
      EXPECT_EQ(w.AddOption(option::kCookie, s.cookie), ParseError::kOk);
    }
    if (s.weight) {
      EXPECT_EQ(w.AddWeights(kDefaultWeightOptionCode, {}), ParseError::kOk);
    }
  }
  const size_t len = w.Finish(sizeof buf);
  return std::vector<uint8_t>(buf, buf + len);
}

// One EDNS option as bytes: code, length, data.
inline std::vector<uint8_t> Option(uint16_t code, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> o = {static_cast<uint8_t>(code >> 8), static_cast<uint8_t>(code),
                            static_cast<uint8_t>(data.size() >> 8), static_cast<uint8_t>(data.size())};
  o.insert(o.end(), data.begin(), data.end());
  return o;
}

// An ECS option (RFC 7871 6): family, source and scope prefix, address octets.
inline std::vector<uint8_t> EcsOption(uint16_t family, uint8_t source, uint8_t scope,
                                      const std::vector<uint8_t>& address) {
  std::vector<uint8_t> data = {static_cast<uint8_t>(family >> 8), static_cast<uint8_t>(family), source,
                               scope};
  data.insert(data.end(), address.begin(), address.end());
  return Option(option::kEcs, data);
}

// The parts one after the other.
inline std::vector<uint8_t> Cat(std::initializer_list<std::vector<uint8_t>> parts) {
  std::vector<uint8_t> out;
  for (const std::vector<uint8_t>& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// dig's client cookie option: 8 bytes, no server cookie.
inline std::vector<uint8_t> DigCookie() {
  return Option(option::kCookie, {0x2f, 0x9e, 0xb6, 0x69, 0x89, 0xa6, 0xb2, 0x3c});
}

}  // namespace weir::dns::testing
