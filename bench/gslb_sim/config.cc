#include "config.h"

#include <arpa/inet.h>

#include <toml++/toml.h>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <limits>
#include <optional>
#include <sstream>

#include "absl/status/status.h"
#include "segments.h"
#include "weir/common/config_file.h"
#include "weir/common/text.h"
#include "weir/common/toml_checker.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"

namespace weir::gslb_sim {
namespace {

namespace type = weir::dns::type;
using common::Cat;
using common::TomlChecker;

// The loader reports through common::TomlChecker, as the daemons' configs
// do: every error at its position ("file:line:column: reason"), in file
// order. An element ([[zone.record]], [[zone.name]], ...) with an error is
// left out, and a zone with one skips the rules across its elements, so a
// mistake is not reported a second time as a missing record.

constexpr uint32_t kMaxTtl = 0x7FFFFFFF;

absl::Status Invalid(std::string reason) { return absl::InvalidArgumentError(reason); }

// The value parsed from the text at `at`, or nullopt with the reason
// recorded at `at`.
template <typename T>
std::optional<T> Checked(TomlChecker& c, const toml::node& at, absl::StatusOr<T> v) {
  if (v.ok()) return *std::move(v);
  c.Fail(at.source(), common::ToStd(v.status().message()));
  return std::nullopt;
}

// A string key the table must have: its node, or null with the error recorded.
const toml::node* Required(TomlChecker& c, const toml::table& t, std::string_view key, std::string* out) {
  const toml::node* n = t.get(key);
  if (n == nullptr) {
    c.Fail(t.source(), Cat("missing key '", key, "'"));
    return nullptr;
  }
  return c.String(t, key, out) ? n : nullptr;
}

std::optional<bool> OptBool(TomlChecker& c, const toml::table& t, std::string_view key) {
  bool v = false;
  if (!t.contains(key) || !c.Bool(t, key, &v)) return std::nullopt;
  return v;
}

// A probability from 0 to 1, written as an integer or a float.
std::optional<double> Probability(TomlChecker& c, const toml::table& t, std::string_view key) {
  const toml::node* n = t.get(key);
  double v = 0;
  if (n == nullptr || !c.Double(t, key, &v, 0, 1)) return std::nullopt;
  if (std::isnan(v)) {  // nan compares false with both bounds
    c.Fail(n->source(), Cat("'", key, "' must be between ", 0.0, " and ", 1.0));
    return std::nullopt;
  }
  return v;
}

// Calls f on each table of the array of tables at `key` ([[path]]).
template <typename F>
void ForEachTable(TomlChecker& c, const toml::table& t, std::string_view key, std::string_view path, F&& f) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return;
  if (!n->is_array_of_tables()) {
    return c.Fail(n->source(), Cat("'", key, "' must be an array of tables ([[", path, "]])"));
  }
  for (const toml::node& e : *n->as_array()) f(*e.as_table());
}

Faults ReadFaults(TomlChecker& c, const toml::table& t) {
  Faults f;
  uint32_t latency_ms = 0;
  if (t.contains("latency_ms") && c.Int(t, "latency_ms", &latency_ms, 0, 600000)) f.latency_ms = latency_ms;
  f.loss = Probability(c, t, "loss");
  if (const toml::node* n = t.get("servfail")) {
    // `servfail = true` means always; a number is a probability.
    if (n->is_boolean()) {
      f.servfail = *n->value<bool>() ? 1.0 : 0.0;
    } else if (n->is_number()) {
      f.servfail = Probability(c, t, "servfail");
    } else {
      c.Fail(n->source(), "'servfail' must be true, false or a probability from 0 to 1");
    }
  }
  f.truncate = OptBool(c, t, "truncate");
  return f;
}

// Zone-file style names: "@" is the origin, a trailing dot makes the name
// absolute, anything else is relative to the origin.
absl::StatusOr<NameBytes> ResolveName(const std::string& text, const NameBytes& origin) {
  std::string full;
  if (text == "@") {
    return origin;
  } else if (!text.empty() && text.back() == '.') {
    full = text;
  } else {
    full = text + "." + NameText(origin);
  }
  dns::NameKey key;
  if (!dns::NameKeyFromText(full, &key)) return Invalid("invalid domain name '" + text + "'");
  return NameBytes(reinterpret_cast<const char*>(key.bytes.data()), key.len);
}

// The name at string key `key` of `t`, resolved against `origin`.
std::optional<NameBytes> NameAt(TomlChecker& c, const toml::table& t, std::string_view key,
                                const NameBytes& origin) {
  std::string text;
  const toml::node* n = Required(c, t, key, &text);
  if (n == nullptr) return std::nullopt;
  return Checked(c, *n, ResolveName(text, origin));
}

struct IpAddress {
  uint16_t family = 0;  // 1 = IPv4, 2 = IPv6
  std::array<uint8_t, 16> bytes{};
  std::string Rdata() const {
    return std::string(reinterpret_cast<const char*>(bytes.data()), family == 1 ? 4 : 16);
  }
};

absl::StatusOr<IpAddress> ParseIp(const std::string& text) {
  IpAddress a;
  if (!ParseAddress(text, &a.family, &a.bytes)) return Invalid("invalid IP address '" + text + "'");
  return a;
}

absl::StatusOr<std::string> AddressRdata(const std::string& text, uint16_t want_type) {
  absl::StatusOr<IpAddress> a = ParseIp(text);
  if (!a.ok()) return a.status();
  if (want_type == type::kA && a->family != 1)
    return Invalid("A record needs an IPv4 address, got '" + text + "'");
  if (want_type == type::kAaaa && a->family != 2)
    return Invalid("AAAA record needs an IPv6 address, got '" + text + "'");
  return a->Rdata();
}

void Put16(std::string* s, uint16_t v) {
  s->push_back(static_cast<char>(v >> 8));
  s->push_back(static_cast<char>(v));
}
void Put32(std::string* s, uint32_t v) {
  Put16(s, static_cast<uint16_t>(v >> 16));
  Put16(s, static_cast<uint16_t>(v));
}

std::vector<std::string> Words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> w;
  std::string x;
  while (in >> x) w.push_back(x);
  return w;
}

absl::StatusOr<uint32_t> ParseU32(const std::string& s, std::string_view what) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0 || v > 0xFFFFFFFFull) {
    return Invalid(Cat("invalid ", what, " '", s, "'"));
  }
  return static_cast<uint32_t>(v);
}

absl::StatusOr<Soa> SoaFromText(const std::string& text, const NameBytes& origin) {
  const std::vector<std::string> w = Words(text);
  if (w.size() != 7) return Invalid("SOA data must be 'mname rname serial refresh retry expire minimum'");
  Soa s;
  for (auto [word, name] : {std::pair{&w[0], &s.mname}, std::pair{&w[1], &s.rname}}) {
    absl::StatusOr<NameBytes> n = ResolveName(*word, origin);
    if (!n.ok()) return n.status();
    *name = *std::move(n);
  }
  const std::pair<std::string_view, uint32_t*> numbers[] = {{"SOA serial", &s.serial},
                                                            {"SOA refresh", &s.refresh},
                                                            {"SOA retry", &s.retry},
                                                            {"SOA expire", &s.expire},
                                                            {"SOA minimum", &s.minimum}};
  for (size_t i = 0; i < std::size(numbers); ++i) {
    absl::StatusOr<uint32_t> v = ParseU32(w[2 + i], numbers[i].first);
    if (!v.ok()) return v.status();
    *numbers[i].second = *v;
  }
  return s;
}

std::optional<Soa> SoaFromTable(TomlChecker& c, const toml::table& t, const NameBytes& origin) {
  c.OnlyKeys(t, "zone.soa", {"mname", "rname", "serial", "refresh", "retry", "expire", "minimum", "ttl"});
  const size_t errors = c.error_count();
  Soa s;
  if (auto n = NameAt(c, t, "mname", origin)) s.mname = *n;
  if (auto n = NameAt(c, t, "rname", origin)) s.rname = *n;
  c.Int(t, "serial", &s.serial, 0, 0xFFFFFFFF);
  c.Int(t, "refresh", &s.refresh, 0, kMaxTtl);
  c.Int(t, "retry", &s.retry, 0, kMaxTtl);
  c.Int(t, "expire", &s.expire, 0, kMaxTtl);
  c.Int(t, "minimum", &s.minimum, 0, kMaxTtl);
  c.Int(t, "ttl", &s.ttl, 0, kMaxTtl);
  if (c.error_count() != errors) return std::nullopt;
  return s;
}

// "20300101000000" (YYYYMMDDHHmmSS, UTC) or a number of seconds since 1970
// (RFC 4034 3.2).
absl::StatusOr<uint32_t> SigTime(const std::string& s) {
  if (s.size() != 14) return ParseU32(s, "RRSIG time");
  std::tm tm{};
  for (char c : s) {
    if (c < '0' || c > '9') return Invalid("invalid RRSIG time '" + s + "'");
  }
  tm.tm_year = std::stoi(s.substr(0, 4)) - 1900;
  tm.tm_mon = std::stoi(s.substr(4, 2)) - 1;
  tm.tm_mday = std::stoi(s.substr(6, 2));
  tm.tm_hour = std::stoi(s.substr(8, 2));
  tm.tm_min = std::stoi(s.substr(10, 2));
  tm.tm_sec = std::stoi(s.substr(12, 2));
  return static_cast<uint32_t>(timegm(&tm));
}

absl::StatusOr<std::string> Base64Decode(const std::string& text) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  bool padding = false;
  for (char c : text) {
    int v;
    if (c >= 'A' && c <= 'Z') {
      v = c - 'A';
    } else if (c >= 'a' && c <= 'z') {
      v = c - 'a' + 26;
    } else if (c >= '0' && c <= '9') {
      v = c - '0' + 52;
    } else if (c == '+') {
      v = 62;
    } else if (c == '/') {
      v = 63;
    } else if (c == '=') {
      padding = true;
      continue;
    } else {
      return Invalid("invalid base64 in RRSIG signature");
    }
    if (padding) return Invalid("invalid base64 in RRSIG signature");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if (out.empty()) return Invalid("empty RRSIG signature");
  return out;
}

absl::StatusOr<uint16_t> TypeFromText(const std::string& s) {
  // The types a zone file here may hold (their RDATA is written below).
  static constexpr uint16_t kSupported[] = {type::kA,   type::kAaaa, type::kCname, kTypeDname, type::kNs,
                                            type::kTxt, type::kMx,   type::kSoa,   kTypeRrsig};
  const uint16_t t = dns::TypeFromText(s);
  if (t != 0 && s == dns::TypeToText(t) &&
      std::find(std::begin(kSupported), std::end(kSupported), t) != std::end(kSupported))
    return t;
  return Invalid("unsupported record type '" + s + "' (A, AAAA, CNAME, DNAME, NS, TXT, MX, SOA, RRSIG)");
}

// "A 13 3 300 20300101000000 20200101000000 12345 signer. BASE64" (RFC 4034 3.2).
absl::StatusOr<std::string> RrsigRdata(const std::string& text, const NameBytes& origin) {
  const std::vector<std::string> w = Words(text);
  if (w.size() < 9) {
    return Invalid(
        "RRSIG data must be 'type algorithm labels original-ttl expiration inception key-tag signer "
        "signature'");
  }
  const absl::StatusOr<uint16_t> covered = TypeFromText(w[0]);
  if (!covered.ok()) return covered.status();
  const absl::StatusOr<uint32_t> alg = ParseU32(w[1], "RRSIG algorithm");
  if (!alg.ok()) return alg.status();
  const absl::StatusOr<uint32_t> labels = ParseU32(w[2], "RRSIG labels");
  if (!labels.ok()) return labels.status();
  if (*alg > 255 || *labels > 127) return Invalid("RRSIG algorithm must be 0..255 and labels 0..127");
  const absl::StatusOr<uint32_t> original_ttl = ParseU32(w[3], "RRSIG original TTL");
  if (!original_ttl.ok()) return original_ttl.status();
  const absl::StatusOr<uint32_t> expiration = SigTime(w[4]);
  if (!expiration.ok()) return expiration.status();
  const absl::StatusOr<uint32_t> inception = SigTime(w[5]);
  if (!inception.ok()) return inception.status();
  const absl::StatusOr<uint32_t> tag = ParseU32(w[6], "RRSIG key tag");
  if (!tag.ok()) return tag.status();
  if (*tag > 65535) return Invalid("RRSIG key tag must be 0..65535");
  const absl::StatusOr<NameBytes> signer = ResolveName(w[7], origin);
  if (!signer.ok()) return signer.status();
  std::string sig;
  for (size_t i = 8; i < w.size(); ++i) sig += w[i];  // the signature may be split by spaces
  const absl::StatusOr<std::string> signature = Base64Decode(sig);
  if (!signature.ok()) return signature.status();

  std::string rd;
  Put16(&rd, *covered);
  rd.push_back(static_cast<char>(*alg));
  rd.push_back(static_cast<char>(*labels));
  Put32(&rd, *original_ttl);
  Put32(&rd, *expiration);
  Put32(&rd, *inception);
  Put16(&rd, static_cast<uint16_t>(*tag));
  return rd + *signer + *signature;
}

absl::StatusOr<std::string> MxRdata(const std::string& text, const NameBytes& origin) {
  const std::vector<std::string> w = Words(text);
  if (w.size() != 2) return Invalid("MX data must be 'preference exchange'");
  const absl::StatusOr<uint32_t> pref = ParseU32(w[0], "MX preference");
  if (!pref.ok()) return pref.status();
  if (*pref > 65535) return Invalid("MX preference must be 0..65535");
  const absl::StatusOr<NameBytes> exchange = ResolveName(w[1], origin);
  if (!exchange.ok()) return exchange.status();
  std::string rd;
  Put16(&rd, static_cast<uint16_t>(*pref));
  return rd + *exchange;
}

std::optional<std::string> TxtRdata(TomlChecker& c, const toml::node& data) {
  constexpr std::string_view kShape = "TXT data must be a string or an array of strings";
  std::vector<std::string> parts;
  if (data.is_string()) {
    parts.emplace_back(data.as_string()->get());
  } else if (const toml::array* a = data.as_array()) {
    for (const toml::node& e : *a) {
      if (!e.is_string()) {
        c.Fail(e.source(), kShape);
        return std::nullopt;
      }
      parts.emplace_back(e.as_string()->get());
    }
  } else {
    c.Fail(data.source(), kShape);
    return std::nullopt;
  }
  std::string rd;
  for (const std::string& p : parts) {
    // Long strings are split into 255-octet character-strings (RFC 1035 3.3.14).
    size_t i = 0;
    do {
      const size_t n = std::min<size_t>(255, p.size() - i);
      rd.push_back(static_cast<char>(n));
      rd.append(p, i, n);
      i += n;
    } while (i < p.size());
  }
  if (rd.size() > 65535) {
    c.Fail(data.source(), "TXT data too long");
    return std::nullopt;
  }
  return rd;
}

void AddRecord(TomlChecker& c, Zone* z, const NameBytes& owner, uint16_t rtype, uint32_t ttl,
               std::string rdata, const toml::node& at) {
  Node& node = z->nodes[owner];
  RRset* set = node.Find(rtype);
  if (set == nullptr) {
    node.rrsets.push_back(RRset{rtype, ttl, {}});
    set = &node.rrsets.back();
  } else if (set->ttl != ttl) {
    return c.Fail(at.source(), "all records of one RRset need the same ttl (RFC 2181 5.2)");
  }
  if (rtype == type::kCname && !set->rdata.empty())
    return c.Fail(at.source(), "a name can have only one CNAME");
  if (rtype == kTypeDname && !set->rdata.empty())
    return c.Fail(at.source(), "a name can have only one DNAME (RFC 6672 2.4)");
  set->rdata.push_back(std::move(rdata));
}

void ReadRecord(TomlChecker& c, Zone* z, const toml::table& t) {
  c.OnlyKeys(t, "zone.record", {"name", "type", "ttl", "data"});
  const size_t errors = c.error_count();
  const std::optional<NameBytes> owner = NameAt(c, t, "name", z->origin);
  if (owner && !IsSubdomain(*owner, z->origin)) {
    c.Fail(t.source(), Cat("record '", NameText(*owner), "' is outside the zone"));
  }
  std::optional<uint16_t> rtype;
  std::string type_text;
  if (const toml::node* n = Required(c, t, "type", &type_text))
    rtype = Checked(c, *n, TypeFromText(type_text));
  uint32_t ttl = 300;
  c.Int(t, "ttl", &ttl, 0, kMaxTtl);
  const toml::node* data = t.get("data");
  if (data == nullptr) c.Fail(t.source(), "missing key 'data'");
  if (c.error_count() != errors) return;

  if (*rtype == type::kTxt) {
    if (auto rd = TxtRdata(c, *data)) AddRecord(c, z, *owner, *rtype, ttl, *std::move(rd), *data);
    return;
  }
  std::string text;
  if (!c.String(t, "data", &text)) return;
  absl::StatusOr<std::string> rd;
  switch (*rtype) {
    case type::kA:
    case type::kAaaa:
      rd = AddressRdata(text, *rtype);
      break;
    case type::kCname:
    case kTypeDname:
    case type::kNs:
      rd = ResolveName(text, z->origin);
      break;
    case kTypeRrsig:
      rd = RrsigRdata(text, z->origin);
      break;
    case type::kMx:
      rd = MxRdata(text, z->origin);
      break;
    case type::kSoa: {
      if (*owner != z->origin) return c.Fail(t.source(), "an SOA record belongs at the zone apex");
      if (!z->soa.mname.empty()) return c.Fail(t.source(), "the zone already has an SOA");
      if (auto soa = Checked(c, *data, SoaFromText(text, z->origin))) {
        z->soa = *std::move(soa);
        z->soa.ttl = ttl;
      }
      return;
    }
  }
  if (auto r = Checked(c, *data, std::move(rd))) AddRecord(c, z, *owner, *rtype, ttl, *std::move(r), *data);
}

std::optional<View> ReadView(TomlChecker& c, const toml::table& t, bool is_default, uint32_t name_ttl,
                             bool* has_weights) {
  if (is_default) {
    c.OnlyKeys(t, "zone.name.default", {"scope", "ttl", "addresses", "weights"});
  } else {
    c.OnlyKeys(t, "zone.name.view", {"cidr", "scope", "ttl", "addresses", "weights"});
  }
  const size_t errors = c.error_count();
  View v;
  v.ttl = name_ttl;
  uint8_t max_scope = 128;
  std::string cidr;
  if (!is_default) {
    if (const toml::node* n = Required(c, t, "cidr", &cidr)) {
      Prefix p;
      std::string why;
      if (ParsePrefix(cidr, &p, &why)) {
        v.cidr = p;
        v.scope = p.length;
        max_scope = p.family == 1 ? 32 : 128;
      } else {
        c.Fail(n->source(), why);
      }
    }
  }
  c.Int(t, "scope", &v.scope, 0, max_scope);
  c.Int(t, "ttl", &v.ttl, 0, kMaxTtl);
  if (t.get("addresses") == nullptr) {
    c.Fail(t.source(), "missing key 'addresses'");
  } else {
    c.List(t, "addresses", &v.addresses, [](const std::string& text) -> absl::StatusOr<WeightedAddress> {
      absl::StatusOr<IpAddress> a = ParseIp(text);
      if (!a.ok()) return a.status();
      WeightedAddress wa;
      wa.family = a->family;
      wa.bytes = a->bytes;
      return wa;
    });
  }
  if (const toml::node* w = t.get("weights")) {
    *has_weights = true;
    const toml::array* arr = w->as_array();
    if (arr == nullptr) {
      c.Fail(w->source(), "'weights' must be an array of integers, one per address");
    } else if (c.error_count() == errors && arr->size() != v.addresses.size()) {
      c.Fail(w->source(),
             Cat("'weights' has ", arr->size(), " entries for ", v.addresses.size(), " addresses"));
    } else {
      for (size_t i = 0; i < arr->size() && i < v.addresses.size(); ++i) {
        const std::optional<int64_t> weight = (*arr)[i].value<int64_t>();
        if (!(*arr)[i].is_integer() || !weight || *weight < 0 || *weight > 65535) {
          c.Fail((*arr)[i].source(), "'weights' entries must be integers between 0 and 65535");
          continue;
        }
        v.addresses[i].weight = static_cast<uint16_t>(*weight);
      }
    }
  }
  if (c.error_count() != errors) return std::nullopt;
  return v;
}

void ReadName(TomlChecker& c, Zone* z, const toml::table& t) {
  c.OnlyKeys(t, "zone.name",
             {"name", "ttl", "weights", "empty_weight_option", "view", "default", "latency_ms", "loss",
              "servfail", "truncate"});
  const size_t errors = c.error_count();
  const std::optional<NameBytes> owner = NameAt(c, t, "name", z->origin);
  if (owner && !IsSubdomain(*owner, z->origin)) {
    c.Fail(t.source(), Cat("name '", NameText(*owner), "' is outside the zone"));
  } else if (owner) {
    const auto it = z->nodes.find(*owner);
    if (it != z->nodes.end() && it->second.settings) {
      c.Fail(t.source(), Cat("name '", NameText(*owner), "' appears twice in [[zone.name]]"));
    }
  }
  NameSettings s;
  uint32_t ttl = 60;
  c.Int(t, "ttl", &ttl, 0, kMaxTtl);
  bool has_weights = false;
  ForEachTable(c, t, "view", "zone.name.view", [&](const toml::table& vt) {
    std::optional<View> view = ReadView(c, vt, false, ttl, &has_weights);
    if (!view) return;
    for (const View& other : s.views) {
      if (other.cidr->family == view->cidr->family && other.cidr->length == view->cidr->length &&
          other.cidr->address == view->cidr->address) {
        return c.Fail(vt.source(), "duplicate view " + view->cidr->ToText());
      }
    }
    s.views.push_back(*std::move(view));
  });
  if (const toml::table* d = common::SubTable(c, t, "default")) {
    s.default_view = ReadView(c, *d, true, ttl, &has_weights);
  }
  s.weights = has_weights;
  c.Bool(t, "weights", &s.weights);
  s.empty_weight_option = OptBool(c, t, "empty_weight_option");
  s.faults = ReadFaults(c, t);
  if (c.error_count() == errors) z->nodes[*owner].settings = std::move(s);
}

void ReadDelegation(TomlChecker& c, Zone* z, const toml::table& t) {
  c.OnlyKeys(t, "zone.delegation", {"name", "ttl", "ns", "glue"});
  const size_t errors = c.error_count();
  const std::optional<NameBytes> cut = NameAt(c, t, "name", z->origin);
  if (cut && (*cut == z->origin || !IsSubdomain(*cut, z->origin))) {
    c.Fail(t.source(), Cat("delegation '", NameText(*cut), "' must be strictly below the zone origin"));
  } else if (cut && cut->size() >= 2 && (*cut)[0] == 1 && (*cut)[1] == '*') {
    c.Fail(t.source(), Cat("delegation '", NameText(*cut), "' cannot be a wildcard name"));
  } else if (cut && z->cuts.count(*cut)) {
    c.Fail(t.source(), Cat("delegation '", NameText(*cut), "' appears twice"));
  }
  Delegation d;
  c.Int(t, "ttl", &d.ttl, 0, kMaxTtl);
  const toml::node* ns = t.get("ns");
  if (ns == nullptr || (ns->is_array() && ns->as_array()->empty())) {
    c.Fail(ns ? ns->source() : t.source(), "'ns' must be a non-empty array of server names");
  } else {
    c.List(t, "ns", &d.ns, [&](const std::string& s) { return ResolveName(s, z->origin); });
  }
  ForEachTable(c, t, "glue", "zone.delegation.glue", [&](const toml::table& g) {
    c.OnlyKeys(g, "zone.delegation.glue", {"name", "addresses"});
    const std::optional<NameBytes> host = NameAt(c, g, "name", z->origin);
    std::vector<IpAddress> addresses;
    if (g.get("addresses") == nullptr) {
      c.Fail(g.source(), "glue needs 'addresses', an array of IP addresses");
    } else {
      c.List(g, "addresses", &addresses, ParseIp);
    }
    if (!host) return;
    for (const IpAddress& a : addresses) {
      d.glue.push_back({*host, a.family == 1 ? type::kA : type::kAaaa, a.Rdata()});
    }
  });
  if (c.error_count() == errors) z->cuts.emplace(*cut, std::move(d));
}

// Cross-record rules that need the whole zone, reported at its [[zone]].
void CheckZone(TomlChecker& c, const Zone& z, const toml::table& t) {
  auto fail = [&](std::string reason) { c.Fail(t.source(), reason); };
  if (z.soa.mname.empty()) fail("zone '" + NameText(z.origin) + "' needs [zone.soa] or an SOA record");
  for (const auto& [name, node] : z.nodes) {
    const bool cname = node.Find(type::kCname) != nullptr;
    const bool signed_name = node.Find(kTypeRrsig) != nullptr;
    if (cname && node.rrsets.size() > (signed_name ? 2u : 1u))
      fail("'" + NameText(name) + "': CNAME and other data (RFC 1034 3.6.2)");
    if (cname && node.settings && node.settings->HasViews()) {
      fail("'" + NameText(name) + "': CNAME and views on the same name");
    }
    if (name == z.origin && cname) fail("CNAME at the zone apex");
    if (cname && node.Find(kTypeDname) != nullptr) {
      fail("'" + NameText(name) + "': CNAME and DNAME on the same name (RFC 6672 2.4)");
    }
    if (node.Find(kTypeDname) != nullptr) {
      // RFC 6672 2.4: the names below a DNAME owner are never answered from
      // the zone, so data there would be unreachable.
      for (const auto& [other, unused] : z.nodes) {
        if (other != name && IsSubdomain(other, name)) {
          fail("'" + NameText(other) + "' is below the DNAME at '" + NameText(name) + "'");
        }
      }
      for (const auto& [cut, d] : z.cuts) {
        if (IsSubdomain(cut, name)) {
          fail("delegation '" + NameText(cut) + "' is at or below the DNAME at '" + NameText(name) + "'");
        }
      }
    }
    for (const auto& [cut, d] : z.cuts) {
      if (IsSubdomain(name, cut)) {
        fail("'" + NameText(name) + "' is at or below delegation '" + NameText(cut) +
             "' (put glue in the delegation)");
      }
    }
  }
}

std::optional<Zone> ReadZone(TomlChecker& c, const toml::table& t) {
  c.OnlyKeys(t, "zone", {"origin", "lame", "soa", "record", "name", "delegation"});
  const size_t errors = c.error_count();
  Zone z;
  std::string origin;
  // Every name of the zone is relative to its origin: nothing is read without it.
  const toml::node* origin_node = Required(c, t, "origin", &origin);
  if (origin_node == nullptr) return std::nullopt;
  if (origin.empty() || origin.back() != '.') {
    c.Fail(origin_node->source(), "origin must be absolute (end with '.')");
    return std::nullopt;
  }
  std::optional<NameBytes> apex = Checked(c, *origin_node, ResolveName(origin, ""));
  if (!apex) return std::nullopt;
  z.origin = *std::move(apex);
  std::string lame;
  if (const toml::node* n = t.get("lame"); n != nullptr && c.String(t, "lame", &lame)) {
    if (lame == "refused") {
      z.lame = Lame::kRefused;
    } else if (lame == "no-aa") {
      z.lame = Lame::kNoAa;
    } else {
      c.Fail(n->source(), "'lame' must be \"refused\" or \"no-aa\", got '" + lame + "'");
    }
  }
  if (const toml::table* s = common::SubTable(c, t, "soa")) {
    if (auto soa = SoaFromTable(c, *s, z.origin)) z.soa = *std::move(soa);
  }
  ForEachTable(c, t, "record", "zone.record", [&](const toml::table& r) { ReadRecord(c, &z, r); });
  ForEachTable(c, t, "name", "zone.name", [&](const toml::table& n) { ReadName(c, &z, n); });
  ForEachTable(c, t, "delegation", "zone.delegation",
               [&](const toml::table& d) { ReadDelegation(c, &z, d); });
  if (c.error_count() != errors) return std::nullopt;
  CheckZone(c, z, t);
  if (c.error_count() != errors) return std::nullopt;
  z.soa_rdata = z.soa.Rdata();
  auto mark = [&](NameBytes n) {
    for (;;) {
      z.existing.insert(n);
      if (n == z.origin || n.size() <= 1) break;
      n = n.substr(1 + static_cast<uint8_t>(n[0]));
    }
  };
  mark(z.origin);
  for (const auto& [name, node] : z.nodes) mark(name);
  for (const auto& [cut, d] : z.cuts) mark(cut);
  return z;
}

// `key = [lo, hi]`: two integers from `min` to `max`, lo <= hi. False with
// the error recorded when the key is there but wrong.
bool IntRange(TomlChecker& c, const toml::table& t, std::string_view key, uint32_t* lo, uint32_t* hi,
              int64_t min, int64_t max) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return true;
  const toml::array* a = n->as_array();
  const std::string shape = Cat("'", key, "' must be [low, high], two integers from ", min, " to ", max);
  if (a == nullptr || a->size() != 2 || !(*a)[0].is_integer() || !(*a)[1].is_integer()) {
    c.Fail(n->source(), shape);
    return false;
  }
  const int64_t l = *(*a)[0].value<int64_t>(), h = *(*a)[1].value<int64_t>();
  if (l < min || h > max || l > h) {
    c.Fail(n->source(), shape + Cat(", low <= high, not [", l, ", ", h, "]"));
    return false;
  }
  *lo = static_cast<uint32_t>(l);
  *hi = static_cast<uint32_t>(h);
  return true;
}

// An IPv4 prefix at string key `key` (required).
std::optional<Prefix> V4PrefixAt(TomlChecker& c, const toml::table& t, std::string_view key) {
  std::string text;
  const toml::node* n = Required(c, t, key, &text);
  if (n == nullptr) return std::nullopt;
  Prefix p;
  std::string why;
  if (!ParsePrefix(text, &p, &why)) {
    c.Fail(n->source(), why);
    return std::nullopt;
  }
  if (p.family != 1) {
    c.Fail(n->source(), Cat("'", key, "' must be an IPv4 prefix, got '", text, "'"));
    return std::nullopt;
  }
  return p;
}

// Segments and their runs take 4 bytes per (name group, segment).
constexpr uint64_t kMaxGroupSegments = uint64_t{1} << 24;

// [segments] (docs/gslb-sim.md "[segments]"), read after the zones: the
// suffix must be in one of them.
void ReadSegments(TomlChecker& c, const toml::table& t, ZoneSet* zs) {
  const size_t errors = c.error_count();
  c.OnlyKeys(
      t, "segments",
      {"seed", "cities", "segments_per_city", "prefix", "segment_lengths", "nodes_per_city", "node_prefix",
       "addresses_per_answer", "weights", "weight_range", "ttl", "suffix", "name_groups",
       "city_level_fraction", "segments_per_answer", "change_every_s", "change_fraction", "scope"});
  SegmentConfig s;
  std::string scope = "segment";
  if (c.String(t, "scope", &scope)) {
    if (scope == "run") {
      s.run_scope = true;
    } else if (scope != "segment") {
      c.Fail(t.get("scope")->source(), Cat("'scope' must be \"segment\" or \"run\", not \"", scope, "\""));
    }
  }
  c.Int(t, "seed", &s.seed, 0, std::numeric_limits<int64_t>::max());
  c.Int(t, "cities", &s.cities, 1, 65535);
  c.Int(t, "segments_per_city", &s.segments_per_city, 1, 1 << 20);
  c.Int(t, "nodes_per_city", &s.nodes_per_city, 1, 65535);
  c.Int(t, "ttl", &s.ttl, 0, kMaxTtl);
  c.Int(t, "name_groups", &s.name_groups, 1, 1024);
  c.Int(t, "change_every_s", &s.change_every_s, 0, kMaxTtl);
  c.Bool(t, "weights", &s.weights);
  if (auto f = Probability(c, t, "city_level_fraction")) s.city_level_fraction = *f;
  if (auto f = Probability(c, t, "change_fraction")) s.change_fraction = *f;
  uint32_t lo = s.min_length, hi = s.max_length;
  const bool lengths_ok = IntRange(c, t, "segment_lengths", &lo, &hi, 1, 24);
  s.min_length = static_cast<uint8_t>(lo);
  s.max_length = static_cast<uint8_t>(hi);
  lo = s.weight_min;
  hi = s.weight_max;
  IntRange(c, t, "weight_range", &lo, &hi, 0, 65535);
  s.weight_min = static_cast<uint16_t>(lo);
  s.weight_max = static_cast<uint16_t>(hi);
  IntRange(c, t, "segments_per_answer", &s.run_min, &s.run_max, 1, 1 << 20);
  if (c.Int(t, "addresses_per_answer", &s.addresses_per_answer, 1, 65535) &&
      s.addresses_per_answer > s.nodes_per_city) {
    c.Fail(t.get("addresses_per_answer")->source(),
           Cat("'addresses_per_answer' (", s.addresses_per_answer, ") must not exceed 'nodes_per_city' (",
               s.nodes_per_city, ")"));
  }
  if (std::optional<Prefix> p = V4PrefixAt(c, t, "prefix")) {
    s.prefix = *p;
    if (lengths_ok && s.min_length < p->length) {
      const toml::node* n = t.get("segment_lengths");
      c.Fail(n ? n->source() : t.source(), Cat("segments of /", int{s.min_length}, " do not fit in 'prefix' ",
                                               p->ToText(), ": lengths must be at least /", int{p->length}));
    }
  }
  if (std::optional<Prefix> p = V4PrefixAt(c, t, "node_prefix")) s.node_prefix = *p;
  std::string suffix;
  if (const toml::node* n = Required(c, t, "suffix", &suffix)) {
    if (suffix.empty() || suffix.back() != '.') {
      c.Fail(n->source(), "'suffix' must be absolute (end with '.')");
    } else if (std::optional<NameBytes> key = Checked(c, *n, ResolveName(suffix, ""))) {
      s.suffix = *key;
      const Zone* z = zs->FindZone(s.suffix);
      if (z == nullptr) {
        c.Fail(n->source(), Cat("'suffix' ", NameText(s.suffix), " is in no [[zone]]"));
      } else {
        s.zone_origin = z->origin;
      }
    }
  }
  const uint64_t groups_x_segments = uint64_t{s.name_groups} * s.cities * s.segments_per_city;
  if (c.error_count() == errors && groups_x_segments > kMaxGroupSegments) {
    c.Fail(t.source(), Cat("name_groups x cities x segments_per_city is ", groups_x_segments, ", more than ",
                           kMaxGroupSegments));
  }
  if (c.error_count() != errors) return;
  absl::StatusOr<SegmentModel> m = SegmentModel::Build(s);
  if (!m.ok()) return c.Fail(t.source(), common::ToStd(m.status().message()));
  zs->segments = std::make_shared<SegmentModel>(*std::move(m));
}

ZoneSet Build(TomlChecker& c, const toml::table& root) {
  c.OnlyKeys(root, "top level", {"defaults", "faults", "zone", "segments"});
  ZoneSet zs;
  if (const toml::table* t = common::SubTable(c, root, "defaults")) {
    c.OnlyKeys(*t, "defaults", {"empty_weight_option"});
    c.Bool(*t, "empty_weight_option", &zs.empty_weight_option);
  }
  if (const toml::table* t = common::SubTable(c, root, "faults")) {
    c.OnlyKeys(*t, "faults", {"latency_ms", "loss", "servfail", "truncate"});
    zs.global_faults = ReadFaults(c, *t);
  }
  ForEachTable(c, root, "zone", "zone", [&](const toml::table& t) {
    std::optional<Zone> z = ReadZone(c, t);
    if (!z) return;
    for (const Zone& other : zs.zones) {
      if (other.origin == z->origin)
        return c.Fail(t.source(), "zone '" + NameText(z->origin) + "' defined twice");
    }
    zs.zones.push_back(*std::move(z));
  });
  if (root.get("zone") == nullptr) c.FailWhole("no [[zone]] defined");
  if (const toml::table* t = common::SubTable(c, root, "segments")) ReadSegments(c, *t, &zs);
  return zs;
}

absl::StatusOr<ZoneSet> Load(std::string_view text, const std::string& path) {
  absl::StatusOr<toml::table> root = common::ParseToml(text, path);
  if (!root.ok()) return root.status();
  TomlChecker c(path);
  ZoneSet zs = Build(c, *root);
  if (!c.ok()) return absl::InvalidArgumentError(c.error());
  zs.source_path = path;
  return zs;
}

}  // namespace

bool Prefix::Contains(uint16_t addr_family, const uint8_t* addr) const {
  if (addr_family != family) return false;
  const size_t full = length / 8;
  if (std::memcmp(address.data(), addr, full) != 0) return false;
  if (length % 8 == 0) return true;
  const uint8_t mask = static_cast<uint8_t>(0xFF00 >> (length % 8));
  return (addr[full] & mask) == address[full];
}

std::string Prefix::ToText() const {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(family == 1 ? AF_INET : AF_INET6, address.data(), buf, sizeof(buf));
  return std::string(buf) + "/" + std::to_string(length);
}

EffectiveFaults ResolveFaults(const Faults& name, const Faults& global) {
  EffectiveFaults f;
  f.latency_ms = name.latency_ms.value_or(global.latency_ms.value_or(0));
  f.loss = name.loss.value_or(global.loss.value_or(0));
  f.servfail = name.servfail.value_or(global.servfail.value_or(0));
  f.truncate = name.truncate.value_or(global.truncate.value_or(false));
  return f;
}

const View* NameSettings::Select(uint16_t family, const uint8_t* addr) const {
  const View* best = nullptr;
  for (const View& v : views) {
    if (v.cidr->Contains(family, addr) && (best == nullptr || v.cidr->length > best->cidr->length)) best = &v;
  }
  if (best == nullptr && default_view) best = &*default_view;
  return best;
}

void Node::Signatures(uint16_t covered, std::vector<const std::string*>* out, uint32_t* ttl) const {
  const RRset* sigs = Find(kTypeRrsig);
  if (sigs == nullptr) return;
  for (const std::string& rd : sigs->rdata) {
    if (rd.size() >= 2 && dns::Load16(reinterpret_cast<const uint8_t*>(rd.data())) == covered) {
      out->push_back(&rd);
      *ttl = sigs->ttl;
    }
  }
}

const RRset* Node::Find(uint16_t t) const {
  for (const RRset& s : rrsets) {
    if (s.type == t) return &s;
  }
  return nullptr;
}
RRset* Node::Find(uint16_t t) {
  for (RRset& s : rrsets) {
    if (s.type == t) return &s;
  }
  return nullptr;
}

std::string Soa::Rdata() const {
  std::string rd = mname + rname;
  Put32(&rd, serial);
  Put32(&rd, refresh);
  Put32(&rd, retry);
  Put32(&rd, expire);
  Put32(&rd, minimum);
  return rd;
}

const Zone* ZoneSet::FindZone(std::string_view name) const {
  const Zone* best = nullptr;
  for (const Zone& z : zones) {
    if (IsSubdomain(name, z.origin) && (best == nullptr || z.origin.size() > best->origin.size())) best = &z;
  }
  return best;
}
Zone* ZoneSet::FindZone(std::string_view name) {
  return const_cast<Zone*>(static_cast<const ZoneSet*>(this)->FindZone(name));
}

bool IsSubdomain(std::string_view name, std::string_view suffix) {
  if (suffix.size() > name.size()) return false;
  size_t i = 0;
  const size_t want = name.size() - suffix.size();
  // Walk label boundaries so "xexample.com" does not match "example.com".
  while (i < want) i += 1 + static_cast<uint8_t>(name[i]);
  return i == want && name.substr(i) == suffix;
}

std::string NameText(std::string_view key) {
  return dns::NameKeyToText({reinterpret_cast<const uint8_t*>(key.data()), key.size()});
}

bool ParseAddress(std::string_view text, uint16_t* family, std::array<uint8_t, 16>* bytes) {
  const std::string s(text);
  bytes->fill(0);
  if (inet_pton(AF_INET, s.c_str(), bytes->data()) == 1) {
    *family = 1;
    return true;
  }
  if (inet_pton(AF_INET6, s.c_str(), bytes->data()) == 1) {
    *family = 2;
    return true;
  }
  return false;
}

bool ParsePrefix(std::string_view text, Prefix* out, std::string* why) {
  const size_t slash = text.find('/');
  if (slash == std::string_view::npos) {
    *why = "cidr '" + std::string(text) + "' needs a /length";
    return false;
  }
  if (!ParseAddress(text.substr(0, slash), &out->family, &out->address)) {
    *why = "invalid address in cidr '" + std::string(text) + "'";
    return false;
  }
  const std::string len(text.substr(slash + 1));
  char* end = nullptr;
  const long n = std::strtol(len.c_str(), &end, 10);
  const long max = out->family == 1 ? 32 : 128;
  if (len.empty() || *end != '\0' || n < 0 || n > max) {
    *why = "invalid prefix length in cidr '" + std::string(text) + "'";
    return false;
  }
  out->length = static_cast<uint8_t>(n);
  Prefix masked = *out;
  masked.address.fill(0);
  std::memcpy(masked.address.data(), out->address.data(), n / 8);
  if (n % 8) masked.address[n / 8] = out->address[n / 8] & static_cast<uint8_t>(0xFF00 >> (n % 8));
  if (masked.address != out->address) {
    *why = "cidr '" + std::string(text) + "' has bits set past /" + len;
    return false;
  }
  return true;
}

absl::StatusOr<ZoneSet> LoadConfig(const std::string& path) {
  absl::StatusOr<std::string> text = common::ReadConfigFile(path);
  if (!text.ok()) return text.status();
  return Load(*text, path);
}

absl::StatusOr<ZoneSet> LoadConfigFromString(std::string_view text, const std::string& display_path) {
  return Load(text, display_path);
}

}  // namespace weir::gslb_sim
