// The JSON form of DNS answers (application/dns-json), written with
// nlohmann-json. Every string put in the document is ASCII (names and
// character-strings are escaped as in zone files), and the dump replaces
// invalid UTF-8 anyway, so no answer can make it throw.
#include <arpa/inet.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <initializer_list>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/string_view.h"
#include "weir/common/ip.h"
#include "weir/common/text.h"
#include "weir/dns/doh.h"
#include "weir/dns/error.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"

namespace weir::dns::doh {
namespace {

// ordered_json: the members in the order the public APIs write them.
using Json = nlohmann::ordered_json;

// Types written out here that wire.h does not name.
constexpr uint16_t kTypeSrv = 33;
constexpr uint16_t kTypeDname = 39;
constexpr uint16_t kTypeSpf = 99;
constexpr uint16_t kTypeCaa = 257;

void AppendDecimalEscape(uint8_t c, std::string* out) {
  char buf[5];
  std::snprintf(buf, sizeof buf, "\\%03u", static_cast<unsigned>(c));
  out->append(buf);
}

// One octet of a label in presentation form (RFC 1035 5.1, RFC 4343).
void AppendLabelOctet(uint8_t c, std::string* out) {
  if (c < 0x21 || c > 0x7e) {
    AppendDecimalEscape(c, out);
    return;
  }
  switch (c) {
    case '.':
    case '\\':
    case '"':
    case '(':
    case ')':
    case ';':
    case '@':
    case '$':
      out->push_back('\\');
      break;
    default:
      break;
  }
  out->push_back(static_cast<char>(c));
}

// The name at `offset` of `msg` in presentation form with its trailing
// dot; *end is the offset after its own octets. The name's octets (before
// any pointer) must lie in `msg`, so callers pass the message cut at the
// end of the RDATA a name belongs to.
bool AppendName(std::span<const uint8_t> msg, size_t offset, std::string* out, size_t* end) {
  // ReadName checks every bound and pointer (backwards only, so no loop);
  // the walk below then only follows what it accepted.
  if (ReadName(msg, offset, end, nullptr) != ParseError::kOk) return false;
  const size_t start = out->size();
  size_t pos = offset;
  while (pos < msg.size() && msg[pos] != 0) {
    const uint8_t len = msg[pos];
    if ((len & 0xC0) == 0xC0) {
      if (pos + 1 >= msg.size()) return false;
      pos = (static_cast<size_t>(len & 0x3F) << 8) | msg[pos + 1];
      continue;
    }
    if (msg.size() - pos - 1 < len) return false;
    for (size_t i = 1; i <= len; ++i) AppendLabelOctet(msg[pos + i], out);
    out->push_back('.');
    pos += 1 + len;
  }
  if (out->size() == start) out->push_back('.');
  return true;
}

// One <character-string> (RFC 1035 3.3) quoted, as zone files write it.
void AppendQuoted(std::span<const uint8_t> s, std::string* out) {
  out->push_back('"');
  for (const uint8_t c : s) {
    if (c < 0x20 || c > 0x7e) {
      AppendDecimalEscape(c, out);
      continue;
    }
    if (c == '"' || c == '\\') out->push_back('\\');
    out->push_back(static_cast<char>(c));
  }
  out->push_back('"');
}

// A cursor over one record's RDATA. Each read fails, rather than reads past
// the RDATA, when the RDATA is too short for it.
class RdataReader {
 public:
  RdataReader(std::span<const uint8_t> msg, const RrView& rr)
      : msg_(msg.first(size_t{rr.rdata_offset} + rr.rdlength)), pos_(rr.rdata_offset) {}

  bool done() const { return pos_ == msg_.size(); }
  size_t left() const { return msg_.size() - pos_; }

  bool Name(std::string* out) { return AppendName(msg_, pos_, out, &pos_); }
  bool U8(uint32_t* v) { return Fixed(1, v); }
  bool U16(uint32_t* v) { return Fixed(2, v); }
  bool U32(uint32_t* v) { return Fixed(4, v); }
  bool Bytes(size_t n, std::span<const uint8_t>* out) {
    if (left() < n) return false;
    *out = msg_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  bool CharacterString(std::span<const uint8_t>* out) {
    uint32_t len = 0;
    return U8(&len) && Bytes(len, out);
  }

 private:
  bool Fixed(size_t n, uint32_t* v) {
    if (left() < n) return false;
    uint32_t x = 0;
    for (size_t i = 0; i < n; ++i) x = x << 8 | msg_[pos_ + i];
    *v = x;
    pos_ += n;
    return true;
  }

  std::span<const uint8_t> msg_;
  size_t pos_;
};

// Character-strings filling the RDATA: at least `min` of them, at most `max`.
bool CharacterStrings(RdataReader& r, size_t min, size_t max, std::string* out) {
  size_t n = 0;
  while (!r.done()) {
    std::span<const uint8_t> s;
    if (n == max || !r.CharacterString(&s)) return false;
    if (n++ > 0) out->push_back(' ');
    AppendQuoted(s, out);
  }
  return n >= min;
}

void AppendNumbers(std::string* out, std::initializer_list<uint32_t> numbers) {
  for (const uint32_t v : numbers) {
    if (!out->empty()) out->push_back(' ');
    out->append(std::to_string(v));
  }
}

// The "data" of the well-formed RDATA of a type written out; false for any
// other type, or RDATA that is not what its type says.
bool KnownRdata(std::span<const uint8_t> msg, const RrView& rr, std::string* out) {
  RdataReader r(msg, rr);
  std::span<const uint8_t> bytes;
  uint32_t a = 0, b = 0, c = 0, d = 0, e = 0;
  switch (rr.type) {
    case type::kA:
    case type::kAaaa: {
      const size_t n = rr.type == type::kA ? 4 : 16;
      if (rr.rdlength != n || !r.Bytes(n, &bytes)) return false;
      char text[INET6_ADDRSTRLEN];
      if (inet_ntop(n == 4 ? AF_INET : AF_INET6, bytes.data(), text, sizeof text) == nullptr) return false;
      out->append(text);
      return true;
    }
    case type::kNs:
    case type::kCname:
    case type::kPtr:
    case kTypeDname:
      return r.Name(out) && r.done();
    case type::kMx:
      if (!r.U16(&a)) return false;
      AppendNumbers(out, {a});
      out->push_back(' ');
      return r.Name(out) && r.done();
    case type::kTxt:
    case kTypeSpf:
      return CharacterStrings(r, 1, SIZE_MAX, out);
    case type::kHinfo:
      return CharacterStrings(r, 2, 2, out);
    case type::kSoa: {
      if (!r.Name(out)) return false;
      out->push_back(' ');
      if (!r.Name(out) || !r.U32(&a) || !r.U32(&b) || !r.U32(&c) || !r.U32(&d) || !r.U32(&e) || !r.done()) {
        return false;
      }
      std::string numbers;
      AppendNumbers(&numbers, {a, b, c, d, e});
      out->push_back(' ');
      out->append(numbers);
      return true;
    }
    case kTypeSrv:
      if (!r.U16(&a) || !r.U16(&b) || !r.U16(&c)) return false;
      AppendNumbers(out, {a, b, c});
      out->push_back(' ');
      return r.Name(out) && r.done();
    case kTypeCaa: {  // RFC 8659 4.1: flags, tag length, tag, value
      std::span<const uint8_t> tag;
      if (!r.U8(&a) || !r.CharacterString(&tag) || tag.empty()) return false;
      for (const uint8_t t : tag) {
        if (!absl::ascii_isalnum(t)) return false;
      }
      if (!r.Bytes(r.left(), &bytes)) return false;
      AppendNumbers(out, {a});
      out->push_back(' ');
      out->append(tag.begin(), tag.end());
      out->push_back(' ');
      AppendQuoted(bytes, out);
      return true;
    }
    default:
      return false;
  }
}

std::string RdataText(std::span<const uint8_t> msg, const RrView& rr) {
  std::string out;
  if (KnownRdata(msg, rr, &out)) return out;
  // RFC 3597 5: the generic form.
  const auto* p = reinterpret_cast<const char*>(msg.data() + rr.rdata_offset);
  out = common::Cat("\\# ", rr.rdlength);
  if (rr.rdlength != 0) {
    out.push_back(' ');
    out.append(absl::BytesToHexString(absl::string_view(p, rr.rdlength)));
  }
  return out;
}

void SetFlags(uint16_t flags, uint16_t rcode, Json* j) {
  (*j)["Status"] = rcode;
  (*j)["TC"] = (flags & flag::kTc) != 0;
  (*j)["RD"] = (flags & flag::kRd) != 0;
  (*j)["RA"] = (flags & flag::kRa) != 0;
  (*j)["AD"] = (flags & flag::kAd) != 0;
  (*j)["CD"] = (flags & flag::kCd) != 0;
}

std::string Dump(const Json& j) { return j.dump(-1, ' ', true, Json::error_handler_t::replace); }

std::string Render(std::span<const uint8_t> answer) {
  Message m;
  const ParseError e = m.Parse(answer, ParseOptions{});
  Json j = Json::object();
  if (e != ParseError::kOk) {
    // A header alone (WriteHeaderOnly: FORMERR, NOTIMP to a question that
    // could not be read) is an answer, only one without a question.
    if (answer.size() == kHeaderSize && Load16(answer.data() + kOffQdcount) == 0 &&
        Load16(answer.data() + kOffAncount) == 0 && Load16(answer.data() + kOffNscount) == 0 &&
        Load16(answer.data() + kOffArcount) == 0) {
      const uint16_t flags = Load16(answer.data() + kOffFlags);
      SetFlags(flags, static_cast<uint16_t>(flags & flag::kRcodeMask), &j);
      j["Question"] = Json::array();
      return Dump(j);
    }
    j["Status"] = static_cast<uint16_t>(Rcode::kServFail);
    j["Comment"] = common::Cat("the answer is not a valid DNS message: ", ParseErrorName(e));
    return Dump(j);
  }

  const std::span<const uint8_t> msg = m.bytes();
  SetFlags(m.flags(), m.rcode(), &j);
  std::string qname;
  size_t end = 0;
  AppendName(msg, kHeaderSize, &qname, &end);
  j["Question"] = Json::array({Json{{"name", qname}, {"type", m.qtype()}}});

  constexpr std::pair<Section, const char*> kSections[] = {
      {Section::kAnswer, "Answer"}, {Section::kAuthority, "Authority"}, {Section::kAdditional, "Additional"}};
  for (const auto& [section, key] : kSections) {
    Json records = Json::array();
    RrView rr;
    for (auto it = m.Records(section); it.Next(&rr);) {
      if (rr.type == type::kOpt) continue;
      std::string owner;
      if (!AppendName(msg, rr.name_offset, &owner, &end)) continue;  // Parse checked it: cannot happen
      records.push_back(
          Json{{"name", owner}, {"type", rr.type}, {"TTL", rr.ttl}, {"data", RdataText(msg, rr)}});
    }
    if (!records.empty()) j[key] = std::move(records);
  }

  if (m.edns().has_ecs) {
    // Google's form: the address, then the SCOPE prefix length.
    const ClientSubnet& s = m.edns().ecs;
    common::IpAddress ip;
    ip.family = s.family == kEcsFamilyIpv4 ? 4 : 6;
    ip.bytes = s.address;
    j["edns_client_subnet"] = common::Cat(common::IpToString(ip), "/", unsigned{s.scope_prefix});
  }
  return Dump(j);
}

}  // namespace

std::string ToJson(std::span<const uint8_t> answer) {
  try {
    return Render(answer);
  } catch (const std::exception&) {
    // Only allocation can fail here; the caller still gets a document.
    return R"({"Status":2,"Comment":"the answer could not be written as JSON"})";
  }
}

}  // namespace weir::dns::doh
