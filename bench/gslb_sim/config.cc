#include "config.h"

#include <arpa/inet.h>

#include <toml++/toml.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <functional>
#include <initializer_list>
#include <sstream>

#include "absl/status/status.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"

namespace weir::gslb_sim {
namespace {

namespace type = weir::dns::type;

// Raised inside the loader and turned into "file:line: reason" at the
// boundary (LoadConfig), so the walk below reads straight through.
struct BadConfig {
  uint32_t line;
  std::string reason;
};

[[noreturn]] void Fail(const toml::node& at, std::string reason) {
  throw BadConfig{at.source().begin.line, std::move(reason)};
}

void CheckKeys(const toml::table& t, std::string_view where,
               std::initializer_list<std::string_view> allowed) {
  for (auto&& [key, value] : t) {
    bool ok = false;
    for (std::string_view a : allowed) ok = ok || key.str() == a;
    if (!ok) {
      throw BadConfig{key.source().begin.line ? key.source().begin.line : value.source().begin.line,
                      "unknown key '" + std::string(key.str()) + "' in " + std::string(where)};
    }
  }
}

const toml::table& AsTable(const toml::node& n, std::string_view what) {
  if (!n.is_table()) Fail(n, std::string(what) + " must be a table");
  return *n.as_table();
}

// Iterates an array of tables ([[x]]); a missing key yields nothing.
template <typename F>
void ForEachTable(const toml::table& t, std::string_view key, F&& f) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return;
  if (!n->is_array_of_tables()) Fail(*n, "'" + std::string(key) + "' must be an array of tables ([[...]])");
  for (const toml::node& e : *n->as_array()) f(*e.as_table());
}

std::string GetString(const toml::table& t, std::string_view key, const toml::node& ctx) {
  const toml::node* n = t.get(key);
  if (n == nullptr) Fail(ctx, "missing key '" + std::string(key) + "'");
  if (!n->is_string()) Fail(*n, "'" + std::string(key) + "' must be a string");
  return std::string(n->as_string()->get());
}

int64_t GetIntIn(const toml::node& n, std::string_view key, int64_t lo, int64_t hi) {
  if (!n.is_integer()) Fail(n, "'" + std::string(key) + "' must be an integer");
  const int64_t v = n.as_integer()->get();
  if (v < lo || v > hi) {
    Fail(n, "'" + std::string(key) + "' must be in " + std::to_string(lo) + ".." + std::to_string(hi));
  }
  return v;
}

std::optional<int64_t> OptInt(const toml::table& t, std::string_view key, int64_t lo, int64_t hi) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return std::nullopt;
  return GetIntIn(*n, key, lo, hi);
}

std::optional<bool> OptBool(const toml::table& t, std::string_view key) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return std::nullopt;
  if (!n->is_boolean()) Fail(*n, "'" + std::string(key) + "' must be true or false");
  return n->as_boolean()->get();
}

double Probability(const toml::node& n, std::string_view key) {
  double v;
  if (n.is_floating_point()) {
    v = n.as_floating_point()->get();
  } else if (n.is_integer()) {
    v = static_cast<double>(n.as_integer()->get());
  } else {
    Fail(n, "'" + std::string(key) + "' must be a probability 0..1");
  }
  if (!(v >= 0 && v <= 1)) Fail(n, "'" + std::string(key) + "' must be a probability 0..1");
  return v;
}

constexpr uint32_t kMaxTtl = 0x7FFFFFFF;

Faults ReadFaults(const toml::table& t) {
  Faults f;
  if (auto v = OptInt(t, "latency_ms", 0, 600000)) f.latency_ms = static_cast<uint32_t>(*v);
  if (const toml::node* n = t.get("loss")) f.loss = Probability(*n, "loss");
  if (const toml::node* n = t.get("servfail")) {
    // `servfail = true` means always; a number is a probability.
    f.servfail = n->is_boolean() ? (n->as_boolean()->get() ? 1.0 : 0.0) : Probability(*n, "servfail");
  }
  f.truncate = OptBool(t, "truncate");
  return f;
}

// Zone-file style names: "@" is the origin, a trailing dot makes the name
// absolute, anything else is relative to the origin.
NameBytes ResolveName(const std::string& text, const NameBytes& origin, const toml::node& at) {
  std::string full;
  if (text == "@") {
    return origin;
  } else if (!text.empty() && text.back() == '.') {
    full = text;
  } else {
    full = text + "." + NameText(origin);
  }
  dns::NameKey key;
  if (!dns::NameKeyFromText(full, &key)) Fail(at, "invalid domain name '" + text + "'");
  return NameBytes(reinterpret_cast<const char*>(key.bytes.data()), key.len);
}

std::string AddressRdata(const std::string& text, uint16_t want_type, const toml::node& at) {
  uint16_t family;
  std::array<uint8_t, 16> b;
  if (!ParseAddress(text, &family, &b)) Fail(at, "invalid IP address '" + text + "'");
  if (want_type == type::kA && family != 1) Fail(at, "A record needs an IPv4 address, got '" + text + "'");
  if (want_type == type::kAaaa && family != 2)
    Fail(at, "AAAA record needs an IPv6 address, got '" + text + "'");
  return std::string(reinterpret_cast<const char*>(b.data()), family == 1 ? 4 : 16);
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

uint32_t ParseU32(const std::string& s, const toml::node& at, std::string_view what) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0 || v > 0xFFFFFFFFull) {
    Fail(at, "invalid " + std::string(what) + " '" + s + "'");
  }
  return static_cast<uint32_t>(v);
}

Soa SoaFromText(const std::string& text, const NameBytes& origin, const toml::node& at) {
  const std::vector<std::string> w = Words(text);
  if (w.size() != 7) Fail(at, "SOA data must be 'mname rname serial refresh retry expire minimum'");
  Soa s;
  s.mname = ResolveName(w[0], origin, at);
  s.rname = ResolveName(w[1], origin, at);
  s.serial = ParseU32(w[2], at, "SOA serial");
  s.refresh = ParseU32(w[3], at, "SOA refresh");
  s.retry = ParseU32(w[4], at, "SOA retry");
  s.expire = ParseU32(w[5], at, "SOA expire");
  s.minimum = ParseU32(w[6], at, "SOA minimum");
  return s;
}

Soa SoaFromTable(const toml::table& t, const NameBytes& origin) {
  CheckKeys(t, "[zone.soa]", {"mname", "rname", "serial", "refresh", "retry", "expire", "minimum", "ttl"});
  Soa s;
  s.mname = ResolveName(GetString(t, "mname", t), origin, *t.get("mname"));
  s.rname = ResolveName(GetString(t, "rname", t), origin, *t.get("rname"));
  if (auto v = OptInt(t, "serial", 0, 0xFFFFFFFF)) s.serial = static_cast<uint32_t>(*v);
  if (auto v = OptInt(t, "refresh", 0, kMaxTtl)) s.refresh = static_cast<uint32_t>(*v);
  if (auto v = OptInt(t, "retry", 0, kMaxTtl)) s.retry = static_cast<uint32_t>(*v);
  if (auto v = OptInt(t, "expire", 0, kMaxTtl)) s.expire = static_cast<uint32_t>(*v);
  if (auto v = OptInt(t, "minimum", 0, kMaxTtl)) s.minimum = static_cast<uint32_t>(*v);
  if (auto v = OptInt(t, "ttl", 0, kMaxTtl)) s.ttl = static_cast<uint32_t>(*v);
  return s;
}

// "20300101000000" (YYYYMMDDHHmmSS, UTC) or a number of seconds since 1970
// (RFC 4034 3.2).
uint32_t SigTime(const std::string& s, const toml::node& at) {
  if (s.size() != 14) return ParseU32(s, at, "RRSIG time");
  std::tm tm{};
  for (char c : s) {
    if (c < '0' || c > '9') Fail(at, "invalid RRSIG time '" + s + "'");
  }
  tm.tm_year = std::stoi(s.substr(0, 4)) - 1900;
  tm.tm_mon = std::stoi(s.substr(4, 2)) - 1;
  tm.tm_mday = std::stoi(s.substr(6, 2));
  tm.tm_hour = std::stoi(s.substr(8, 2));
  tm.tm_min = std::stoi(s.substr(10, 2));
  tm.tm_sec = std::stoi(s.substr(12, 2));
  return static_cast<uint32_t>(timegm(&tm));
}

std::string Base64Decode(const std::string& text, const toml::node& at) {
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
      Fail(at, "invalid base64 in RRSIG signature");
    }
    if (padding) Fail(at, "invalid base64 in RRSIG signature");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if (out.empty()) Fail(at, "empty RRSIG signature");
  return out;
}

uint16_t TypeFromText(const std::string& s, const toml::node& at);

// "A 13 3 300 20300101000000 20200101000000 12345 signer. BASE64" (RFC 4034 3.2).
std::string RrsigRdata(const std::string& text, const NameBytes& origin, const toml::node& at) {
  const std::vector<std::string> w = Words(text);
  if (w.size() < 9) {
    Fail(at,
         "RRSIG data must be 'type algorithm labels original-ttl expiration inception key-tag signer "
         "signature'");
  }
  std::string rd;
  Put16(&rd, TypeFromText(w[0], at));
  const uint32_t alg = ParseU32(w[1], at, "RRSIG algorithm");
  const uint32_t labels = ParseU32(w[2], at, "RRSIG labels");
  if (alg > 255 || labels > 127) Fail(at, "RRSIG algorithm must be 0..255 and labels 0..127");
  rd.push_back(static_cast<char>(alg));
  rd.push_back(static_cast<char>(labels));
  Put32(&rd, ParseU32(w[3], at, "RRSIG original TTL"));
  Put32(&rd, SigTime(w[4], at));
  Put32(&rd, SigTime(w[5], at));
  const uint32_t tag = ParseU32(w[6], at, "RRSIG key tag");
  if (tag > 65535) Fail(at, "RRSIG key tag must be 0..65535");
  Put16(&rd, static_cast<uint16_t>(tag));
  rd += ResolveName(w[7], origin, at);
  std::string sig;
  for (size_t i = 8; i < w.size(); ++i) sig += w[i];  // the signature may be split by spaces
  rd += Base64Decode(sig, at);
  return rd;
}

uint16_t TypeFromText(const std::string& s, const toml::node& at) {
  // The types a zone file here may hold (their RDATA is written below).
  static constexpr uint16_t kSupported[] = {type::kA,   type::kAaaa, type::kCname, kTypeDname, type::kNs,
                                            type::kTxt, type::kMx,   type::kSoa,   kTypeRrsig};
  const uint16_t t = dns::TypeFromText(s);
  if (t != 0 && s == dns::TypeToText(t) &&
      std::find(std::begin(kSupported), std::end(kSupported), t) != std::end(kSupported))
    return t;
  Fail(at, "unsupported record type '" + s + "' (A, AAAA, CNAME, DNAME, NS, TXT, MX, SOA, RRSIG)");
}

std::string TxtRdata(const toml::node& data) {
  std::vector<std::string> parts;
  if (data.is_string()) {
    parts.emplace_back(data.as_string()->get());
  } else if (data.is_array()) {
    for (const toml::node& e : *data.as_array()) {
      if (!e.is_string()) Fail(e, "TXT data must be a string or an array of strings");
      parts.emplace_back(e.as_string()->get());
    }
  } else {
    Fail(data, "TXT data must be a string or an array of strings");
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
  if (rd.size() > 65535) Fail(data, "TXT data too long");
  return rd;
}

void AddRecord(Zone* z, const NameBytes& owner, uint16_t rtype, uint32_t ttl, std::string rdata,
               const toml::node& at) {
  Node& node = z->nodes[owner];
  RRset* set = node.Find(rtype);
  if (set == nullptr) {
    node.rrsets.push_back(RRset{rtype, ttl, {}});
    set = &node.rrsets.back();
  } else if (set->ttl != ttl) {
    Fail(at, "all records of one RRset need the same ttl (RFC 2181 5.2)");
  }
  if (rtype == type::kCname && !set->rdata.empty()) Fail(at, "a name can have only one CNAME");
  if (rtype == kTypeDname && !set->rdata.empty()) Fail(at, "a name can have only one DNAME (RFC 6672 2.4)");
  set->rdata.push_back(std::move(rdata));
}

void ReadRecord(Zone* z, const toml::table& t) {
  CheckKeys(t, "[[zone.record]]", {"name", "type", "ttl", "data"});
  const NameBytes owner = ResolveName(GetString(t, "name", t), z->origin, *t.get("name"));
  if (!IsSubdomain(owner, z->origin)) Fail(t, "record '" + NameText(owner) + "' is outside the zone");
  const std::string tname = GetString(t, "type", t);
  const uint16_t rtype = TypeFromText(tname, *t.get("type"));
  const uint32_t ttl = static_cast<uint32_t>(OptInt(t, "ttl", 0, kMaxTtl).value_or(300));
  const toml::node* data = t.get("data");
  if (data == nullptr) Fail(t, "missing key 'data'");
  if (rtype == type::kTxt) {
    AddRecord(z, owner, rtype, ttl, TxtRdata(*data), *data);
    return;
  }
  if (!data->is_string()) Fail(*data, "'data' must be a string");
  const std::string text(data->as_string()->get());
  switch (rtype) {
    case type::kA:
    case type::kAaaa:
      AddRecord(z, owner, rtype, ttl, AddressRdata(text, rtype, *data), *data);
      break;
    case type::kCname:
    case kTypeDname:
    case type::kNs:
      AddRecord(z, owner, rtype, ttl, ResolveName(text, z->origin, *data), *data);
      break;
    case kTypeRrsig:
      AddRecord(z, owner, rtype, ttl, RrsigRdata(text, z->origin, *data), *data);
      break;
    case type::kMx: {
      const std::vector<std::string> w = Words(text);
      if (w.size() != 2) Fail(*data, "MX data must be 'preference exchange'");
      const uint32_t pref = ParseU32(w[0], *data, "MX preference");
      if (pref > 65535) Fail(*data, "MX preference must be 0..65535");
      std::string rd;
      Put16(&rd, static_cast<uint16_t>(pref));
      rd += ResolveName(w[1], z->origin, *data);
      AddRecord(z, owner, rtype, ttl, rd, *data);
      break;
    }
    case type::kSoa: {
      if (owner != z->origin) Fail(t, "an SOA record belongs at the zone apex");
      if (!z->soa.mname.empty()) Fail(t, "the zone already has an SOA");
      z->soa = SoaFromText(text, z->origin, *data);
      z->soa.ttl = ttl;
      break;
    }
  }
}

View ReadView(const toml::table& t, bool is_default, uint32_t name_ttl, bool* has_weights) {
  CheckKeys(t, is_default ? "[zone.name.default]" : "[[zone.name.view]]",
            is_default
                ? std::initializer_list<std::string_view>{"scope", "ttl", "addresses", "weights"}
                : std::initializer_list<std::string_view>{"cidr", "scope", "ttl", "addresses", "weights"});
  View v;
  uint8_t max_scope = 128;
  if (!is_default) {
    const std::string cidr = GetString(t, "cidr", t);
    Prefix p;
    std::string why;
    if (!ParsePrefix(cidr, &p, &why)) Fail(*t.get("cidr"), why);
    v.cidr = p;
    v.scope = p.length;
    max_scope = p.family == 1 ? 32 : 128;
  }
  if (auto s = OptInt(t, "scope", 0, max_scope)) v.scope = static_cast<uint8_t>(*s);
  v.ttl = static_cast<uint32_t>(OptInt(t, "ttl", 0, kMaxTtl).value_or(name_ttl));
  const toml::node* addrs = t.get("addresses");
  if (addrs == nullptr) Fail(t, "missing key 'addresses'");
  if (!addrs->is_array()) Fail(*addrs, "'addresses' must be an array of IP address strings");
  for (const toml::node& a : *addrs->as_array()) {
    if (!a.is_string()) Fail(a, "'addresses' must be an array of IP address strings");
    WeightedAddress wa;
    if (!ParseAddress(a.as_string()->get(), &wa.family, &wa.bytes)) {
      Fail(a, "invalid IP address '" + std::string(a.as_string()->get()) + "'");
    }
    v.addresses.push_back(wa);
  }
  if (const toml::node* w = t.get("weights")) {
    if (!w->is_array()) Fail(*w, "'weights' must be an array of integers, one per address");
    const toml::array& arr = *w->as_array();
    if (arr.size() != v.addresses.size()) {
      Fail(*w, "'weights' has " + std::to_string(arr.size()) + " entries for " +
                   std::to_string(v.addresses.size()) + " addresses");
    }
    for (size_t i = 0; i < arr.size(); ++i) {
      v.addresses[i].weight = static_cast<uint16_t>(GetIntIn(arr[i], "weights", 0, 65535));
    }
    *has_weights = true;
  }
  return v;
}

void ReadName(Zone* z, const toml::table& t) {
  CheckKeys(t, "[[zone.name]]",
            {"name", "ttl", "weights", "empty_weight_option", "view", "default", "latency_ms", "loss",
             "servfail", "truncate"});
  const NameBytes owner = ResolveName(GetString(t, "name", t), z->origin, *t.get("name"));
  if (!IsSubdomain(owner, z->origin)) Fail(t, "name '" + NameText(owner) + "' is outside the zone");
  Node& node = z->nodes[owner];
  if (node.settings) Fail(t, "name '" + NameText(owner) + "' appears twice in [[zone.name]]");
  NameSettings s;
  const uint32_t ttl = static_cast<uint32_t>(OptInt(t, "ttl", 0, kMaxTtl).value_or(60));
  bool has_weights = false;
  ForEachTable(t, "view", [&](const toml::table& v) {
    View view = ReadView(v, false, ttl, &has_weights);
    for (const View& other : s.views) {
      if (other.cidr->family == view.cidr->family && other.cidr->length == view.cidr->length &&
          other.cidr->address == view.cidr->address) {
        Fail(v, "duplicate view " + view.cidr->ToText());
      }
    }
    s.views.push_back(std::move(view));
  });
  if (const toml::node* d = t.get("default"))
    s.default_view = ReadView(AsTable(*d, "'default'"), true, ttl, &has_weights);
  s.weights = OptBool(t, "weights").value_or(has_weights);
  s.empty_weight_option = OptBool(t, "empty_weight_option");
  s.faults = ReadFaults(t);
  node.settings = std::move(s);
}

void ReadDelegation(Zone* z, const toml::table& t) {
  CheckKeys(t, "[[zone.delegation]]", {"name", "ttl", "ns", "glue"});
  const NameBytes cut = ResolveName(GetString(t, "name", t), z->origin, *t.get("name"));
  if (cut == z->origin || !IsSubdomain(cut, z->origin)) {
    Fail(t, "delegation '" + NameText(cut) + "' must be strictly below the zone origin");
  }
  if (cut.size() >= 2 && cut[0] == 1 && cut[1] == '*') {
    Fail(t, "delegation '" + NameText(cut) + "' cannot be a wildcard name");
  }
  if (z->cuts.count(cut)) Fail(t, "delegation '" + NameText(cut) + "' appears twice");
  Delegation d;
  d.ttl = static_cast<uint32_t>(OptInt(t, "ttl", 0, kMaxTtl).value_or(3600));
  const toml::node* ns = t.get("ns");
  if (ns == nullptr || !ns->is_array() || ns->as_array()->empty()) {
    Fail(ns ? *ns : static_cast<const toml::node&>(t), "'ns' must be a non-empty array of server names");
  }
  for (const toml::node& n : *ns->as_array()) {
    if (!n.is_string()) Fail(n, "'ns' must be an array of server names");
    d.ns.push_back(ResolveName(std::string(n.as_string()->get()), z->origin, n));
  }
  ForEachTable(t, "glue", [&](const toml::table& g) {
    CheckKeys(g, "glue", {"name", "addresses"});
    const NameBytes host = ResolveName(GetString(g, "name", g), z->origin, *g.get("name"));
    const toml::node* addrs = g.get("addresses");
    if (addrs == nullptr || !addrs->is_array()) Fail(g, "glue needs 'addresses', an array of IP addresses");
    for (const toml::node& a : *addrs->as_array()) {
      if (!a.is_string()) Fail(a, "glue addresses must be strings");
      uint16_t family;
      std::array<uint8_t, 16> b;
      if (!ParseAddress(a.as_string()->get(), &family, &b)) {
        Fail(a, "invalid IP address '" + std::string(a.as_string()->get()) + "'");
      }
      d.glue.push_back({host, family == 1 ? type::kA : type::kAaaa,
                        std::string(reinterpret_cast<const char*>(b.data()), family == 1 ? 4 : 16)});
    }
  });
  z->cuts.emplace(cut, std::move(d));
}

// Cross-record rules that need the whole zone.
void CheckZone(const Zone& z, const toml::table& t) {
  if (z.soa.mname.empty()) Fail(t, "zone '" + NameText(z.origin) + "' needs [zone.soa] or an SOA record");
  for (const auto& [name, node] : z.nodes) {
    const bool cname = node.Find(type::kCname) != nullptr;
    const bool signed_name = node.Find(kTypeRrsig) != nullptr;
    if (cname && node.rrsets.size() > (signed_name ? 2u : 1u))
      Fail(t, "'" + NameText(name) + "': CNAME and other data (RFC 1034 3.6.2)");
    if (cname && node.settings && node.settings->HasViews()) {
      Fail(t, "'" + NameText(name) + "': CNAME and views on the same name");
    }
    if (name == z.origin && cname) Fail(t, "CNAME at the zone apex");
    if (cname && node.Find(kTypeDname) != nullptr) {
      Fail(t, "'" + NameText(name) + "': CNAME and DNAME on the same name (RFC 6672 2.4)");
    }
    if (node.Find(kTypeDname) != nullptr) {
      // RFC 6672 2.4: the names below a DNAME owner are never answered from
      // the zone, so data there would be unreachable.
      for (const auto& [other, unused] : z.nodes) {
        if (other != name && IsSubdomain(other, name)) {
          Fail(t, "'" + NameText(other) + "' is below the DNAME at '" + NameText(name) + "'");
        }
      }
      for (const auto& [cut, d] : z.cuts) {
        if (IsSubdomain(cut, name)) {
          Fail(t, "delegation '" + NameText(cut) + "' is at or below the DNAME at '" + NameText(name) + "'");
        }
      }
    }
    for (const auto& [cut, d] : z.cuts) {
      if (IsSubdomain(name, cut)) {
        Fail(t, "'" + NameText(name) + "' is at or below delegation '" + NameText(cut) +
                    "' (put glue in the delegation)");
      }
    }
  }
}

Zone ReadZone(const toml::table& t) {
  CheckKeys(t, "[[zone]]", {"origin", "lame", "soa", "record", "name", "delegation"});
  Zone z;
  const std::string origin = GetString(t, "origin", t);
  if (origin.empty() || origin.back() != '.')
    Fail(*t.get("origin"), "origin must be absolute (end with '.')");
  z.origin = ResolveName(origin, "", *t.get("origin"));
  if (t.get("lame") != nullptr) {
    const std::string lame = GetString(t, "lame", t);
    if (lame == "refused") {
      z.lame = Lame::kRefused;
    } else if (lame == "no-aa") {
      z.lame = Lame::kNoAa;
    } else {
      Fail(*t.get("lame"), "'lame' must be \"refused\" or \"no-aa\", got '" + lame + "'");
    }
  }
  if (const toml::node* s = t.get("soa")) z.soa = SoaFromTable(AsTable(*s, "'soa'"), z.origin);
  ForEachTable(t, "record", [&](const toml::table& r) { ReadRecord(&z, r); });
  ForEachTable(t, "name", [&](const toml::table& n) { ReadName(&z, n); });
  ForEachTable(t, "delegation", [&](const toml::table& d) { ReadDelegation(&z, d); });
  CheckZone(z, t);
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

ZoneSet Build(const toml::table& root) {
  CheckKeys(root, "the top level", {"defaults", "faults", "zone"});
  ZoneSet zs;
  if (const toml::node* d = root.get("defaults")) {
    const toml::table& t = AsTable(*d, "[defaults]");
    CheckKeys(t, "[defaults]", {"empty_weight_option"});
    zs.empty_weight_option = OptBool(t, "empty_weight_option").value_or(false);
  }
  if (const toml::node* f = root.get("faults")) {
    const toml::table& t = AsTable(*f, "[faults]");
    CheckKeys(t, "[faults]", {"latency_ms", "loss", "servfail", "truncate"});
    zs.global_faults = ReadFaults(t);
  }
  ForEachTable(root, "zone", [&](const toml::table& t) {
    Zone z = ReadZone(t);
    for (const Zone& other : zs.zones) {
      if (other.origin == z.origin) Fail(t, "zone '" + NameText(z.origin) + "' defined twice");
    }
    zs.zones.push_back(std::move(z));
  });
  if (zs.zones.empty()) throw BadConfig{1, "no [[zone]] defined"};
  return zs;
}

absl::StatusOr<ZoneSet> Load(const std::function<toml::table()>& parse, const std::string& path) {
  try {
    ZoneSet zs = Build(parse());
    zs.source_path = path;
    return zs;
  } catch (const toml::parse_error& e) {
    // An unreadable file has no line; every syntax error has one.
    const uint32_t line = e.source().begin.line;
    return absl::InvalidArgumentError(path + ":" + (line ? std::to_string(line) + ": " : std::string(" ")) +
                                      std::string(e.description()));
  } catch (const BadConfig& e) {
    return absl::InvalidArgumentError(path + ":" + std::to_string(e.line) + ": " + e.reason);
  }
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
  return Load([&] { return toml::parse_file(path); }, path);
}

absl::StatusOr<ZoneSet> LoadConfigFromString(std::string_view text, const std::string& display_path) {
  return Load([&] { return toml::parse(text, display_path); }, display_path);
}

}  // namespace weir::gslb_sim
