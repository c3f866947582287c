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

// Assembles a DNS packet byte by byte. Nothing is validated: the point is to
// write exactly the broken bytes a case needs.
class PacketBuilder {
 public:
  PacketBuilder& Header(uint16_t id, uint16_t flags, uint16_t qd, uint16_t an, uint16_t ns, uint16_t ar) {
    return U16(id).U16(flags).U16(qd).U16(an).U16(ns).U16(ar);
  }
  PacketBuilder& U8(uint8_t v) {
    b_.push_back(v);
    return *this;
  }
  PacketBuilder& U16(uint16_t v) { return U8(static_cast<uint8_t>(v >> 8)).U8(static_cast<uint8_t>(v)); }
  PacketBuilder& U32(uint32_t v) { return U16(static_cast<uint16_t>(v >> 16)).U16(static_cast<uint16_t>(v)); }
  PacketBuilder& Raw(const std::vector<uint8_t>& bytes) {
    b_.insert(b_.end(), bytes.begin(), bytes.end());
    return *this;
  }
  // One length-prefixed label, no terminating root byte.
  PacketBuilder& Label(std::string_view label) {
    U8(static_cast<uint8_t>(label.size()));
    b_.insert(b_.end(), label.begin(), label.end());
    return *this;
  }
  // An uncompressed name ("www.example.com"), root byte included.
  PacketBuilder& Name(std::string_view dotted) {
    while (!dotted.empty()) {
      const size_t dot = dotted.find('.');
      Label(dotted.substr(0, dot));
      dotted = dot == std::string_view::npos ? std::string_view() : dotted.substr(dot + 1);
    }
    return U8(0);
  }
  // A compression pointer (RFC 1035 4.1.4).
  PacketBuilder& Pointer(uint16_t offset) { return U16(static_cast<uint16_t>(0xC000 | offset)); }
  PacketBuilder& Question(std::string_view name, uint16_t qtype = type::kA) {
    return Name(name).U16(qtype).U16(klass::kIn);
  }
  // Type, class, TTL, RDLENGTH and RDATA of a record whose owner is already written.
  PacketBuilder& RrBody(uint16_t rrtype, uint16_t rrclass, uint32_t ttl, const std::vector<uint8_t>& rdata) {
    return U16(rrtype).U16(rrclass).U32(ttl).U16(static_cast<uint16_t>(rdata.size())).Raw(rdata);
  }
  // An A record owned by the question's name (pointer to offset 12).
  PacketBuilder& AToQname(uint8_t last_octet) {
    return Pointer(kHeaderSize).RrBody(type::kA, klass::kIn, 300, {192, 0, 2, last_octet});
  }
  // The OPT pseudo-RR (RFC 6891 6.1.2) with a root owner; `options` is its
  // RDATA; the TTL field holds the extended RCODE, the version and DO.
  PacketBuilder& Opt(uint16_t udp_size, const std::vector<uint8_t>& options, uint8_t version = 0,
                     uint8_t ext_rcode = 0, bool do_bit = false) {
    return U8(0).RrBody(type::kOpt, udp_size,
                        uint32_t{ext_rcode} << 24 | uint32_t{version} << 16 | (do_bit ? 0x8000u : 0u),
                        options);
  }
  size_t size() const { return b_.size(); }
  std::vector<uint8_t> Build() const { return b_; }

 private:
  std::vector<uint8_t> b_;
};

}  // namespace weir::dns::testing
