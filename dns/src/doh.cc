// DNS over HTTPS: the HTTP request mapped to a DNS query (RFC 8484 and the
// JSON API's GET form), and the HTTP freshness of an answer. The JSON form of
// answers is in doh_json.cc.
#include "weir/dns/doh.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "weir/common/ip.h"
#include "weir/common/text.h"
#include "weir/dns/message.h"
#include "weir/dns/ttl.h"
#include "weir/dns/wire.h"
#include "weir/dns/writer.h"

#include "query_string.h"

namespace weir::dns::doh {
namespace {

using internal::FindParam;
using internal::Param;
using internal::ParseFlag;

// The EDNS buffer size of the JSON form's queries: the DNS flag day 2020
// value every public resolver uses.
constexpr uint16_t kJsonQueryUdpSize = 1232;

// Base64 of the largest message, without padding: a longer `dns` parameter
// cannot decode to a message, so it is 413 before anything is decoded.
constexpr size_t kMaxBase64 = (kMaxMessage * 4 + 2) / 3;

absl::string_view Absl(std::string_view s) { return {s.data(), s.size()}; }

Request Error(int status, std::string error) {
  Request r;
  r.status = status;
  r.error = std::move(error);
  return r;
}

// The checks that make a message a DNS query worth resolving; everything
// else about it is the resolver's to judge (FORMERR, NOTIMP, BADVERS).
Request FromMessage(std::vector<uint8_t> msg) {
  if (msg.size() > kMaxMessage) return Error(413, "DNS message longer than 65535 bytes");
  if (msg.size() < kHeaderSize) return Error(400, "not a DNS query: shorter than a DNS header");
  if (Load16(msg.data() + kOffFlags) & flag::kQr) return Error(400, "not a DNS query: QR is set");
  const uint16_t qdcount = Load16(msg.data() + kOffQdcount);
  if (qdcount != 1) return Error(400, common::Cat("not a DNS query: QDCOUNT is ", qdcount, ", not 1"));
  Request r;
  r.query = std::move(msg);
  return r;
}

// "application/dns-message", in any case, with or without parameters.
bool IsDnsMessageType(std::string_view content_type) {
  const std::string_view media = content_type.substr(0, content_type.find(';'));
  return absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(Absl(media)), Absl(kDnsMessageType));
}

Request FromGet(std::string_view query) {
  std::string encoded;
  switch (FindParam(query, "dns", &encoded)) {
    case Param::kAbsent:
      return Error(400, "missing dns parameter");
    case Param::kBadEncoding:
      return Error(400, "dns parameter: invalid percent-encoding");
    case Param::kFound:
      break;
  }
  // Lenient about the alphabet and the padding RFC 8484 4.1 leaves out.
  while (!encoded.empty() && encoded.back() == '=') encoded.pop_back();
  if (encoded.empty()) return Error(400, "empty dns parameter");
  if (encoded.size() > kMaxBase64) return Error(413, "DNS message longer than 65535 bytes");
  std::replace(encoded.begin(), encoded.end(), '+', '-');
  std::replace(encoded.begin(), encoded.end(), '/', '_');
  std::string decoded;
  if (!absl::WebSafeBase64Unescape(encoded, &decoded)) return Error(400, "dns parameter: invalid base64url");
  return FromMessage(std::vector<uint8_t>(decoded.begin(), decoded.end()));
}

// A presentation name (RFC 1035 5.1, RFC 4343 escapes) in uncompressed wire
// form, its case kept. False for an empty label, a label over 63 octets, a
// name over 255 octets in wire form (253 in text without escapes and the
// trailing dot), a bad escape, or a byte outside printable ASCII.
bool NameToWire(std::string_view text, std::vector<uint8_t>* wire) {
  wire->clear();
  if (text.empty()) return false;
  if (text == ".") {
    wire->push_back(0);
    return true;
  }
  size_t label_at = 0;  // the current label's length octet
  wire->push_back(0);
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<uint8_t>(text[i]);
    if (c == '.') {
      if (wire->size() - label_at == 1) return false;  // ".a", "a..b"
      (*wire)[label_at] = static_cast<uint8_t>(wire->size() - label_at - 1);
      label_at = wire->size();
      wire->push_back(0);
      continue;
    }
    uint8_t octet = c;
    if (c == '\\') {
      if (i + 1 >= text.size()) return false;
      if (absl::ascii_isdigit(static_cast<unsigned char>(text[i + 1]))) {
        if (text.size() - i < 4) return false;
        unsigned v = 0;
        for (size_t k = 1; k <= 3; ++k) {
          if (!absl::ascii_isdigit(static_cast<unsigned char>(text[i + k]))) return false;
          v = v * 10 + static_cast<unsigned>(text[i + k] - '0');
        }
        if (v > 255) return false;
        octet = static_cast<uint8_t>(v);
        i += 3;
      } else {
        octet = static_cast<uint8_t>(text[i + 1]);
        if (octet < 0x20 || octet > 0x7e) return false;
        i += 1;
      }
    } else if (c < 0x21 || c > 0x7e) {
      return false;
    }
    if (wire->size() - label_at - 1 >= kMaxLabel) return false;
    wire->push_back(octet);
    if (wire->size() + 1 > kMaxNameWire) return false;  // the root octet must still fit
  }
  // After a trailing dot the last "label" is the empty one: it becomes the
  // root octet already in place.
  if (wire->size() - label_at > 1) {
    (*wire)[label_at] = static_cast<uint8_t>(wire->size() - label_at - 1);
    wire->push_back(0);
  }
  return wire->size() <= kMaxNameWire;
}

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// "A", "aaaa", "TYPE65" or "65"; 0 when none of those.
uint16_t ParseType(std::string_view text) {
  if (AllDigits(text)) {
    uint32_t v = 0;
    if (text.size() > 5 || !absl::SimpleAtoi(Absl(text), &v) || v > 65535) return 0;
    return static_cast<uint16_t>(v);
  }
  return TypeFromText(text);
}

// "192.0.2.0/24", "2001:db8::/56", or an address alone (its full length).
bool ParseSubnet(std::string_view text, ClientSubnet* out) {
  const size_t slash = text.find('/');
  common::IpAddress ip;
  if (!common::ParseIp(text.substr(0, slash), &ip)) return false;
  const unsigned max_bits = ip.family == 4 ? 32 : 128;
  uint32_t prefix = max_bits;
  if (slash != std::string_view::npos) {
    const std::string_view p = text.substr(slash + 1);
    if (!AllDigits(p) || p.size() > 3 || !absl::SimpleAtoi(Absl(p), &prefix) || prefix > max_bits)
      return false;
  }
  return MakeClientSubnet({ip.bytes.data(), ip.family == 4 ? 4u : 16u}, static_cast<uint8_t>(prefix), out);
}

Request FromJsonGet(std::string_view query) {
  std::string value;
  std::vector<uint8_t> qname;
  switch (FindParam(query, "name", &value)) {
    case Param::kAbsent:
      return Error(400, "missing name parameter");
    case Param::kBadEncoding:
      return Error(400, "name parameter: invalid percent-encoding");
    case Param::kFound:
      if (!NameToWire(value, &qname)) return Error(400, "name parameter: not a valid domain name");
      break;
  }
  uint16_t qtype = type::kA;
  Param p = FindParam(query, "type", &value);
  if (p == Param::kBadEncoding) return Error(400, "type parameter: invalid percent-encoding");
  if (p == Param::kFound && !value.empty()) {
    qtype = ParseType(value);
    if (qtype == 0) return Error(400, "type parameter: not a DNS type");
  }
  bool do_bit = false;
  p = FindParam(query, "do", &value);
  if (p == Param::kBadEncoding || (p == Param::kFound && !ParseFlag(value, &do_bit))) {
    return Error(400, "do parameter: not 0, 1, false or true");
  }
  bool cd = false;
  p = FindParam(query, "cd", &value);
  if (p == Param::kBadEncoding || (p == Param::kFound && !ParseFlag(value, &cd))) {
    return Error(400, "cd parameter: not 0, 1, false or true");
  }
  ClientSubnet subnet;
  bool ecs = false;
  p = FindParam(query, "edns_client_subnet", &value);
  if (p == Param::kBadEncoding) return Error(400, "edns_client_subnet parameter: invalid percent-encoding");
  if (p == Param::kFound && !value.empty()) {
    if (!ParseSubnet(value, &subnet))
      return Error(400, "edns_client_subnet parameter: not an address/prefix");
    ecs = true;
  }

  // Header, the question, the OPT record and an ECS option for a 16-byte
  // address: the largest query written here.
  std::array<uint8_t, kHeaderSize + kMaxNameWire + 4 + 11 + 8 + 16> buf;
  ResponseWriter w(buf.data(), buf.size());
  const auto flags = static_cast<uint16_t>(flag::kRd | (cd ? flag::kCd : 0));
  if (w.Begin(0, flags, qname, qtype, klass::kIn) != ParseError::kOk ||
      w.BeginOpt(kJsonQueryUdpSize, do_bit) != ParseError::kOk ||
      (ecs && w.AddEcs(subnet) != ParseError::kOk)) {
    return Error(500, "the query does not fit its buffer");  // cannot happen: the buffer is sized for it
  }
  const size_t len = w.Finish(buf.size());
  Request r;
  r.query.assign(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(len));
  r.json = true;
  return r;
}

}  // namespace

Request FromHttp(std::string_view method, std::string_view target, std::string_view content_type,
                 std::span<const uint8_t> body, const Paths& paths) {
  const size_t qmark = target.find('?');
  const std::string_view path = target.substr(0, qmark);
  const std::string_view query =
      qmark == std::string_view::npos ? std::string_view() : target.substr(qmark + 1);
  const bool get = method == "GET" || method == "HEAD";
  bool wire = path == paths.dns_query;
  if (wire && path == paths.json) {
    // One path for both forms: RFC 8484's requests are POSTs or carry `dns`.
    std::string unused;
    wire = !get || FindParam(query, "dns", &unused) != Param::kAbsent;
  }
  if (wire) {
    if (get) return FromGet(query);
    if (method != "POST") return Error(405, "method not allowed: use GET or POST");
    if (!IsDnsMessageType(content_type)) return Error(415, "content type must be application/dns-message");
    if (body.size() > kMaxMessage) return Error(413, "DNS message longer than 65535 bytes");
    return FromMessage(std::vector<uint8_t>(body.begin(), body.end()));
  }
  if (path == paths.json) {
    if (method != "GET") return Error(405, "method not allowed: use GET");
    return FromJsonGet(query);
  }
  return Error(404, "not found");
}

uint32_t MaxAge(std::span<const uint8_t> answer) {
  Message m;
  if (m.Parse(answer, ParseOptions{}) != ParseError::kOk) return 0;
  const uint16_t rcode = m.rcode();
  // Another RCODE (SERVFAIL, REFUSED, ...) says nothing that lasts.
  if (rcode != static_cast<uint16_t>(Rcode::kNoError) && rcode != static_cast<uint16_t>(Rcode::kNxDomain)) {
    return 0;
  }
  bool negative = rcode == static_cast<uint16_t>(Rcode::kNxDomain);
  RrView rr;
  if (!negative) {
    negative = true;
    for (auto it = m.Records(Section::kAnswer); it.Next(&rr);) {
      if (rr.type == m.qtype() || m.qtype() == type::kAny) negative = false;
    }
  }
  bool any = false;
  uint32_t age = UINT32_MAX;
  for (const Section s : {Section::kAnswer, Section::kAuthority}) {
    for (auto it = m.Records(s); it.Next(&rr);) {
      if (rr.type == type::kOpt) continue;
      // RFC 2181 8: a TTL with the top bit set is read as 0.
      uint32_t ttl = rr.ttl > 0x7FFFFFFFu ? 0 : rr.ttl;
      uint32_t minimum = 0;
      if (negative && s == Section::kAuthority && rr.type == type::kSoa &&
          SoaMinimum(answer.subspan(rr.rdata_offset, rr.rdlength), &minimum)) {
        ttl = std::min(ttl, minimum > 0x7FFFFFFFu ? 0 : minimum);
      }
      age = std::min(age, ttl);
      any = true;
    }
  }
  return any ? age : 0;
}

}  // namespace weir::dns::doh
