// HTTPDNS (docs/httpdns.md): requests, accounts, signatures, the DNS
// queries a request takes and the JSON it is answered with.
#include "weir/dns/httpdns.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "weir/common/ip.h"
#include "weir/common/text.h"
#include "weir/dns/error.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"
#include "weir/dns/writer.h"

#include "query_string.h"

namespace weir::dns::httpdns {
namespace {

absl::string_view Absl(std::string_view s) { return {s.data(), s.size()}; }

bool IsDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// ---------------------------------------------------------------- accounts

constexpr size_t kMaxAccountName = 64;
constexpr size_t kMinSecret = 16;
constexpr size_t kMaxSecret = 128;
constexpr size_t kMaxSecrets = 2;

bool IsAccountNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == '-';
}

// Printable ASCII without space: what a secret is made of.
bool IsSecretChar(char c) { return c > 0x20 && c < 0x7f; }

bool ParseOnOff(std::string_view value, bool* out) {
  if (value == "on") {
    *out = true;
    return true;
  }
  if (value == "off") {
    *out = false;
    return true;
  }
  return false;
}

// The fields of one line, split at runs of spaces and tabs.
std::vector<std::string_view> Fields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

// One account line (trimmed, not a comment). Errors never quote a field
// other than a known key: a secret typed in the wrong place (bare, under a
// misspelt key, as the name) must not reach a log.
absl::Status ParseAccountLine(std::string_view line, Account* out) {
  const std::vector<std::string_view> fields = Fields(line);
  if (!IsValidAccountName(fields[0])) {
    return absl::InvalidArgumentError("the account name is not 1..64 of [A-Za-z0-9_.-]");
  }
  out->name = std::string(fields[0]);
  bool seen_unsigned = false, seen_legacy = false, seen_rps = false;
  for (size_t i = 1; i < fields.size(); ++i) {
    const std::string_view field = fields[i];
    const size_t eq = field.find('=');
    if (eq == std::string_view::npos) {
      return absl::InvalidArgumentError(common::Cat("field ", i + 1, " is not key=value"));
    }
    const std::string_view key = field.substr(0, eq);
    const std::string_view value = field.substr(eq + 1);
    if (key == "secret") {
      if (out->secrets.size() == kMaxSecrets) {
        return absl::InvalidArgumentError("more than two secrets (a rotation keeps the newest two)");
      }
      if (value.size() < kMinSecret || value.size() > kMaxSecret) {
        return absl::InvalidArgumentError(
            common::Cat("secret ", out->secrets.size() + 1, " is ", value.size(), " octets, not 16..128"));
      }
      // Fields() split at spaces, so only the other non-printables remain.
      if (!std::all_of(value.begin(), value.end(), IsSecretChar)) {
        return absl::InvalidArgumentError(
            common::Cat("secret ", out->secrets.size() + 1, " is not printable ASCII"));
      }
      out->secrets.emplace_back(value);
      continue;
    }
    bool* seen = nullptr;
    if (key == "unsigned") {
      seen = &seen_unsigned;
      if (!ParseOnOff(value, &out->allow_unsigned))
        return absl::InvalidArgumentError("unsigned= is not on or off");
    } else if (key == "legacy_md5") {
      seen = &seen_legacy;
      if (!ParseOnOff(value, &out->allow_legacy_md5)) {
        return absl::InvalidArgumentError("legacy_md5= is not on or off");
      }
    } else if (key == "rps") {
      seen = &seen_rps;
      if (!IsDigits(value) || !absl::SimpleAtoi(Absl(value), &out->rps)) {
        return absl::InvalidArgumentError("rps= is not a number 0..4294967295");
      }
    } else {
      return absl::InvalidArgumentError(
          common::Cat("field ", i + 1, ": unknown key (known: unsigned, legacy_md5, rps, secret)"));
    }
    if (*seen) return absl::InvalidArgumentError(common::Cat(key, "= given twice"));
    *seen = true;
  }
  if (out->secrets.empty()) return absl::InvalidArgumentError("no secret=");
  return absl::OkStatus();
}

// ---------------------------------------------------------------- requests

// The EDNS buffer size of the queries: the DNS flag day 2020 value, as the
// DoH JSON API's queries have it.
constexpr uint16_t kQueryUdpSize = 1232;
constexpr size_t kMaxHostText = 253;  // without the trailing dot: 255 octets in wire form

// What a path names: /[ACCOUNT/](d|resolve|sign_d|sign_resolve).
struct ApiPath {
  std::string_view account;
  Api api = Api::kSingle;
  bool sign = false;
};

bool ParsePath(std::string_view path, ApiPath* out) {
  if (path.empty() || path.front() != '/') return false;
  std::string_view rest = path.substr(1);
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    out->account = rest.substr(0, slash);
    if (out->account.empty() || !std::all_of(out->account.begin(), out->account.end(), IsAccountNameChar)) {
      return false;
    }
    rest = rest.substr(slash + 1);
  }
  if (rest == "d" || rest == "sign_d") {
    out->api = Api::kSingle;
  } else if (rest == "resolve" || rest == "sign_resolve") {
    out->api = Api::kBatch;
  } else {
    return false;
  }
  out->sign = rest.starts_with("sign_");
  return true;
}

void SplitTarget(std::string_view target, std::string_view* path, std::string_view* query) {
  const size_t qmark = target.find('?');
  *path = target.substr(0, qmark);
  *query = qmark == std::string_view::npos ? std::string_view() : target.substr(qmark + 1);
}

bool IsHostChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

// A host as the API takes it, without its trailing dot: LDH labels (and
// '_', which SRV-style and some CDN names use) of 1..63 octets, 253 in all.
// Stricter than a DNS name: no escapes, nothing a zone file would quote.
bool IsHostName(std::string_view name) {
  if (name.empty() || name.size() > kMaxHostText) return false;
  size_t label = 0;
  for (const char c : name) {
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
      continue;
    }
    if (!IsHostChar(c) || ++label > kMaxLabel) return false;
  }
  return label != 0;
}

// `host` as asked, without one trailing dot ("." stays: it is no host).
std::string_view WithoutTrailingDot(std::string_view host) {
  if (host.size() > 1 && host.back() == '.') host.remove_suffix(1);
  return host;
}

// Unix seconds: decimal digits only, no sign, no space.
bool ParseSeconds(std::string_view text, uint64_t* out) {
  return IsDigits(text) && text.size() <= 20 && absl::SimpleAtoi(Absl(text), out);
}

Request Refuse(ErrorCode code, std::string message) {
  Request r;
  r.error = code;
  r.message = std::move(message);
  return r;
}

// ---------------------------------------------------------------- signatures

std::string Hex(const unsigned char* bytes, size_t len) {
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(bytes), len));
}

AuthResult Deny(ErrorCode code, SignatureForm form, std::string message) {
  AuthResult r;
  r.error = code;
  r.form = form;
  r.message = std::move(message);
  return r;
}

// exp or t against the clock: not past, not more than a day ahead (a
// signature that lives longer is a credential, not a request).
AuthResult CheckExpiry(uint64_t expiry, uint64_t now, SignatureForm form, std::string_view name) {
  if (expiry <= now) {
    return Deny(ErrorCode::kSignatureExpired, form,
                common::Cat(name, " has passed (", expiry, " <= ", now, ")"));
  }
  if (expiry - now > kMaxExpiryAhead) {
    return Deny(ErrorCode::kInvalidSignature, form,
                common::Cat(name, " is more than ", kMaxExpiryAhead, " s ahead (", expiry, " > ", now, " + ",
                            kMaxExpiryAhead, ")"));
  }
  AuthResult ok;
  ok.form = form;
  return ok;
}

// Whether `sent` (hex, any case) is the signature one of the secrets
// gives. Every secret is tried and compared in constant time: neither how
// far a guess matched nor which secret it was for shows in the timing.
template <typename Expected>
bool MatchesAnySecret(std::string_view sent, const Account& account, Expected expected) {
  const std::string lower = absl::AsciiStrToLower(Absl(sent));
  bool match = false;
  for (const std::string& secret : account.secrets) {
    const std::string want = expected(secret);
    const bool same = !want.empty() && want.size() == lower.size() &&
                      CRYPTO_memcmp(want.data(), lower.data(), want.size()) == 0;
    match = match | same;
  }
  return match;
}

// ---------------------------------------------------------------- answers

// "" (addresses) beats no_ip beats nxdomain beats the errors.
int Rank(std::string_view code) {
  if (code.empty()) return 6;
  if (code == "no_ip") return 5;
  if (code == "nxdomain") return 4;
  if (code == "servfail") return 3;
  if (code == "refused") return 2;
  if (code == "error") return 1;
  return 0;  // invalid_host
}
constexpr int kRankWithTtl = 4;  // nxdomain and better: an answer with a TTL

// RFC 2181 8: a TTL with the top bit set is read as 0.
uint32_t SaneTtl(uint32_t ttl) { return ttl > 0x7FFFFFFFu ? 0 : ttl; }

// What one family's answer says.
struct FamilyAnswer {
  std::string code;
  std::vector<std::string> ips;
  std::vector<uint16_t> weights;
  bool has_ttl = false;  // addresses, or a negative answer
  uint32_t ttl = 0;
};

FamilyAnswer Family(std::string code) {
  FamilyAnswer f;
  f.code = std::move(code);
  return f;
}

std::string_view KeyText(const NameKey& key) {
  return {reinterpret_cast<const char*>(key.bytes.data()), key.len};
}

// RFC 2308 5: the TTL of a negative answer is the smallest min(SOA TTL,
// MINIMUM) of the SOA records in its authority section; 0 without one.
uint32_t NegativeTtl(const Message& m) {
  bool any = false;
  uint32_t ttl = UINT32_MAX;
  RrView rr;
  for (auto it = m.Records(Section::kAuthority); it.Next(&rr);) {
    uint32_t minimum = 0;
    if (rr.type != type::kSoa || !SoaMinimum(m.bytes().subspan(rr.rdata_offset, rr.rdlength), &minimum)) {
      continue;
    }
    ttl = std::min({ttl, SaneTtl(rr.ttl), SaneTtl(minimum)});
    any = true;
  }
  return any ? ttl : 0;
}

FamilyAnswer ReadFamily(std::span<const uint8_t> answer, uint16_t qtype, uint16_t weight_code,
                        bool want_weights) {
  if (answer.empty()) return Family("refused");  // dropped: nothing to say
  ParseOptions opts;
  opts.weight_option_code = weight_code;
  Message m;
  if (m.Parse(answer, opts) != ParseError::kOk) return Family("error");
  switch (static_cast<Rcode>(m.rcode())) {
    case Rcode::kNoError:
      break;
    case Rcode::kNxDomain: {
      FamilyAnswer f = Family("nxdomain");
      f.has_ttl = true;
      f.ttl = NegativeTtl(m);
      return f;
    }
    case Rcode::kServFail:
      return Family("servfail");
    case Rcode::kRefused:
      return Family("refused");
    default:
      return Family("error");
  }
  const size_t addr_len = qtype == type::kA ? 4 : qtype == type::kAaaa ? 16 : 0;
  if (addr_len == 0) return Family("error");

  // The answer records of class IN with their owners' keys, read once,
  // and each owner's first CNAME (a name has one, RFC 2181 10.1): the chain
  // is then one lookup a hop, however long the answer.
  const std::span<const uint8_t> msg = m.bytes();
  struct Record {
    RrView rr;
    size_t owner_at;  // in `owners`
    uint8_t owner_len;
  };
  std::vector<Record> records;
  std::string owners;
  RrView rr;
  for (auto it = m.Records(Section::kAnswer); it.Next(&rr);) {
    NameKey owner;
    size_t end = 0;
    if (rr.klass != klass::kIn || ReadName(msg, rr.name_offset, &end, &owner) != ParseError::kOk) continue;
    records.push_back({rr, owners.size(), owner.len});
    owners.append(KeyText(owner));
  }
  auto owner_of = [&owners](const Record& r) {
    return std::string_view(owners).substr(r.owner_at, r.owner_len);
  };
  absl::flat_hash_map<std::string_view, size_t> cname_of;
  for (size_t i = 0; i < records.size(); ++i) {
    if (records[i].rr.type == type::kCname) cname_of.try_emplace(owner_of(records[i]), i);
  }
  // A chain visits each owner once at most: a hop more is a loop.
  NameKey name = m.qname();
  uint32_t chain_ttl = UINT32_MAX;  // the CNAMEs followed: the answer is no fresher than they are
  for (size_t hops = 0;; ++hops) {
    const auto hop = cname_of.find(KeyText(name));
    if (hop == cname_of.end()) break;
    if (hops == cname_of.size()) return Family("error");
    const RrView& cname = records[hop->second].rr;
    chain_ttl = std::min(chain_ttl, SaneTtl(cname.ttl));
    size_t end = 0;
    // The target's own octets lie within the RDATA.
    if (ReadName(msg.first(size_t{cname.rdata_offset} + cname.rdlength), cname.rdata_offset, &end, &name) !=
        ParseError::kOk) {
      return Family("error");
    }
  }

  FamilyAnswer f;
  f.has_ttl = true;
  f.ttl = chain_ttl;
  for (const Record& r : records) {
    if (r.rr.type != qtype || r.rr.rdlength != addr_len || owner_of(r) != KeyText(name)) continue;
    common::IpAddress ip;
    ip.family = addr_len == 4 ? 4 : 6;
    std::copy_n(msg.begin() + r.rr.rdata_offset, addr_len, ip.bytes.begin());
    f.ips.push_back(common::IpToString(ip));
    f.ttl = std::min(f.ttl, SaneTtl(r.rr.ttl));
  }
  if (f.ips.empty()) {
    f.code = "no_ip";
    f.ttl = NegativeTtl(m);
    return f;
  }
  const Edns& edns = m.edns();
  if (want_weights && edns.has_weight) {
    const WeightSet w = DecodeWeights(msg.subspan(edns.weight_offset, edns.weight_len), f.ips.size());
    if (w.valid()) f.weights.assign(w.weights.begin(), w.weights.begin() + w.count);
  }
  return f;
}

// ---------------------------------------------------------------- JSON

// ordered_json: the members in the order the API documents them.
using Json = nlohmann::ordered_json;

std::string ClientIpText(const common::IpAddress& ip) { return ip.family == 0 ? "" : common::IpToString(ip); }

// A host's members; with `client_ip` (the single API) that comes right
// after the host.
void AddHost(const HostAnswer& a, bool v6, const common::IpAddress* client_ip, Json* j) {
  (*j)["host"] = a.host;
  if (client_ip != nullptr) (*j)["client_ip"] = ClientIpText(*client_ip);
  (*j)["ips"] = a.ips;
  if (v6) (*j)["ipsv6"] = a.ipsv6;
  (*j)["ttl"] = a.ttl;
  (*j)["origin_ttl"] = a.origin_ttl;
  if (a.stale) (*j)["stale"] = true;
  if (!a.weights.empty()) (*j)["weights"] = a.weights;
  if (v6 && !a.weightsv6.empty()) (*j)["weightsv6"] = a.weightsv6;
  if (!a.code.empty()) (*j)["code"] = a.code;
}

// Hosts of a batch are as sent, so not always UTF-8: replaced, never thrown.
std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

template <typename Build>
std::string RenderOrFallback(uint64_t server_time, Build build) {
  try {
    Json j = Json::object();
    build(&j);
    j["server_time"] = server_time;
    return Dump(j);
  } catch (const std::exception&) {
    // Only allocation can fail here; the client still gets a document.
    return common::Cat(R"({"code":"error","server_time":)", server_time, "}");
  }
}

}  // namespace

std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kNone:
    case ErrorCode::kCount:
      return "";
    case ErrorCode::kMissingArgument:
      return "MissingArgument";
    case ErrorCode::kInvalidHost:
      return "InvalidHost";
    case ErrorCode::kInvalidIp:
      return "InvalidIp";
    case ErrorCode::kInvalidArgument:
      return "InvalidArgument";
    case ErrorCode::kTooManyHosts:
      return "TooManyHosts";
    case ErrorCode::kInvalidAccount:
      return "InvalidAccount";
    case ErrorCode::kInvalidSignature:
      return "InvalidSignature";
    case ErrorCode::kSignatureExpired:
      return "SignatureExpired";
    case ErrorCode::kUnsignedInterfaceDisabled:
      return "UnsignedInterfaceDisabled";
    case ErrorCode::kQuotaExceeded:
      return "QuotaExceeded";
    case ErrorCode::kMethodNotAllowed:
      return "MethodNotAllowed";
    case ErrorCode::kNotFound:
      return "NotFound";
  }
  return "";
}

int ErrorStatus(ErrorCode code) {
  switch (code) {
    case ErrorCode::kNone:
    case ErrorCode::kCount:
      return 200;
    case ErrorCode::kMissingArgument:
    case ErrorCode::kInvalidHost:
    case ErrorCode::kInvalidIp:
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kTooManyHosts:
      return 400;
    case ErrorCode::kInvalidAccount:
    case ErrorCode::kInvalidSignature:
    case ErrorCode::kSignatureExpired:
    case ErrorCode::kUnsignedInterfaceDisabled:
      return 403;
    case ErrorCode::kQuotaExceeded:
      return 429;
    case ErrorCode::kMethodNotAllowed:
      return 405;
    case ErrorCode::kNotFound:
      return 404;
  }
  return 200;
}

std::string_view ApiName(Api api) { return api == Api::kBatch ? "resolve" : "d"; }

bool IsHttpDnsTarget(std::string_view target, std::string_view doh_json_path) {
  std::string_view path, query;
  SplitTarget(target, &path, &query);
  ApiPath api;
  if (!ParsePath(path, &api)) return false;
  // Shared with the DoH JSON API (by default "/resolve"): DoH names the
  // name `name`, HTTPDNS `host`.
  if (path == doh_json_path) {
    std::string unused;
    return internal::FindParam(query, "host", &unused) != internal::Param::kAbsent ||
           internal::FindParam(query, "dn", &unused) != internal::Param::kAbsent;
  }
  return true;
}

Request ParseRequest(std::string_view method, std::string_view target, size_t max_batch) {
  std::string_view path, query;
  SplitTarget(target, &path, &query);
  ApiPath api;
  if (!ParsePath(path, &api)) {
    return Refuse(ErrorCode::kNotFound,
                  "not found: the API is /d, /resolve, /sign_d, /sign_resolve (/ACCOUNT/...)");
  }
  if (method != "GET" && method != "HEAD") {
    return Refuse(ErrorCode::kMethodNotAllowed, "method not allowed: use GET");
  }
  max_batch = std::clamp<size_t>(max_batch, 1, kMaxBatch);

  // Every parameter decoded, in the order sent: the first of a name counts,
  // all of them are signed.
  std::vector<std::pair<std::string, std::string>> params;
  std::string_view raw_name, raw_value;
  for (size_t n = 1; internal::NextParam(&query, &raw_name, &raw_value); ++n) {
    std::pair<std::string, std::string> p;
    if (!internal::PercentDecode(raw_name, &p.first) || !internal::PercentDecode(raw_value, &p.second)) {
      return Refuse(ErrorCode::kInvalidArgument, common::Cat("parameter ", n, ": invalid percent-encoding"));
    }
    params.push_back(std::move(p));
  }
  auto first = [&params](std::string_view name) -> const std::string* {
    for (const auto& [k, v] : params) {
      if (k == name) return &v;
    }
    return nullptr;
  };
  // A parameter the API reads, given twice (or host and dn both), would be
  // read in the order sent but signed in sorted order: a signed request
  // could be reordered to mean another thing. Refused.
  for (const std::string_view name : {"host", "dn", "query", "ip", "weights", "account", "s", "exp", "t"}) {
    const size_t n = static_cast<size_t>(std::count_if(params.begin(), params.end(), [&](const auto& p) {
      return p.first == name || (name == "host" && p.first == "dn");
    }));
    if (n > 1) {
      return Refuse(
          ErrorCode::kInvalidArgument,
          common::Cat("parameter ", name == "host" ? "host (or dn)" : name, " given more than once"));
    }
  }

  Request r;
  r.api = api.api;
  r.sign_path = api.sign;
  const std::string* host = first("host");
  if (host == nullptr) host = first("dn");  // vivo's and Tencent's SDKs
  if (host == nullptr) return Refuse(ErrorCode::kMissingArgument, "missing host parameter");
  r.host_param = *host;
  if (api.api == Api::kSingle) {
    if (host->empty()) return Refuse(ErrorCode::kMissingArgument, "empty host parameter");
    r.hosts.emplace_back(WithoutTrailingDot(*host));
    if (!IsHostName(r.hosts.back())) {
      return Refuse(ErrorCode::kInvalidHost,
                    "host parameter: not a DNS name of letters, digits, '-' and '_'");
    }
    r.host_valid.push_back(true);
  } else {
    std::string_view list = *host;
    while (!list.empty()) {
      const size_t comma = list.find(',');
      const std::string_view item = list.substr(0, comma);
      list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
      if (item.empty()) continue;
      if (r.hosts.size() == max_batch) {
        return Refuse(ErrorCode::kTooManyHosts, common::Cat("more than ", max_batch, " hosts"));
      }
      r.hosts.emplace_back(WithoutTrailingDot(item));
      r.host_valid.push_back(IsHostName(r.hosts.back()));
    }
    if (r.hosts.empty()) return Refuse(ErrorCode::kMissingArgument, "empty host parameter");
  }

  if (const std::string* q = first("query")) {
    if (*q == "4") {
      r.v4 = true, r.v6 = false;
    } else if (*q == "6") {
      r.v4 = false, r.v6 = true;
    } else if (*q == "4,6" || *q == "6,4") {
      r.v4 = true, r.v6 = true;
    } else {
      return Refuse(ErrorCode::kInvalidArgument, "query parameter: not 4, 6 or 4,6");
    }
  }
  if (const std::string* ip = first("ip")) {
    common::IpAddress addr;
    if (!common::ParseIp(*ip, &addr)) {
      return Refuse(ErrorCode::kInvalidIp, "ip parameter: not an IPv4 or IPv6 address");
    }
    r.ip = addr;
  }
  if (const std::string* w = first("weights"); w != nullptr && !internal::ParseFlag(*w, &r.weights)) {
    return Refuse(ErrorCode::kInvalidArgument, "weights parameter: not 0, 1, false or true");
  }
  if (const std::string* account = first("account"); account != nullptr && api.account.empty()) {
    r.account = *account;
  } else {
    r.account = std::string(api.account);
  }
  if (const std::string* s = first("s")) {
    if (s->empty()) return Refuse(ErrorCode::kInvalidArgument, "s parameter: empty");
    r.signature = *s;
  }
  for (const std::string_view name : {"exp", "t"}) {
    const std::string* v = first(name);
    if (v == nullptr) continue;
    uint64_t seconds = 0;
    if (!ParseSeconds(*v, &seconds)) {
      return Refuse(ErrorCode::kInvalidArgument, common::Cat(name, " parameter: not unix seconds"));
    }
    (name == "exp" ? r.exp : r.t) = seconds;
  }

  // PATH "?" every parameter but s, decoded, sorted by name then value
  // (bytewise: std::string compares as unsigned char), joined by '&'; a
  // '%', '&' or '=' inside a name or value written %25, %26, %3D, so that
  // "host=a%26ip%3D1.2.3.4" does not sign as "host=a&ip=1.2.3.4".
  std::erase_if(params, [](const auto& p) { return p.first == "s"; });
  std::sort(params.begin(), params.end());
  auto append = [&r](std::string_view text) {
    for (const char ch : text) {
      switch (ch) {
        case '%':
          r.string_to_sign += "%25";
          break;
        case '&':
          r.string_to_sign += "%26";
          break;
        case '=':
          r.string_to_sign += "%3D";
          break;
        default:
          r.string_to_sign.push_back(ch);
      }
    }
  };
  r.string_to_sign.assign(path);
  r.string_to_sign.push_back('?');
  for (size_t i = 0; i < params.size(); ++i) {
    if (i > 0) r.string_to_sign.push_back('&');
    append(params[i].first);
    r.string_to_sign.push_back('=');
    append(params[i].second);
  }
  return r;
}

namespace {

// HMAC-SHA256 set up once for the process (OpenSSL 3 fetches algorithms by
// name: HMAC() per call looks both up again); each signature copies it.
// Null when the library has no HMAC or SHA-256 (then nothing matches).
const EVP_MAC_CTX* HmacSha256Template() {
  static const EVP_MAC_CTX* const kTemplate = []() -> const EVP_MAC_CTX* {
    EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    if (mac == nullptr) return nullptr;
    EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(mac);
    EVP_MAC_free(mac);  // the context holds its own reference
    if (ctx == nullptr) return nullptr;
    char digest[] = "SHA256";
    const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0),
                                 OSSL_PARAM_construct_end()};
    if (EVP_MAC_CTX_set_params(ctx, params) != 1) {
      EVP_MAC_CTX_free(ctx);
      return nullptr;
    }
    return ctx;
  }();
  return kTemplate;
}

}  // namespace

std::string HmacSignature(std::string_view secret, std::string_view string_to_sign) {
  static constexpr unsigned char kNone[1] = {0};  // a key of length 0 still needs a pointer
  const EVP_MAC_CTX* tmpl = HmacSha256Template();
  if (tmpl == nullptr) return "";
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_dup(tmpl);
  if (ctx == nullptr) return "";
  unsigned char md[EVP_MAX_MD_SIZE];
  size_t len = 0;
  const auto* key = secret.empty() ? kNone : reinterpret_cast<const unsigned char*>(secret.data());
  const bool ok = EVP_MAC_init(ctx, key, secret.size(), nullptr) == 1 &&
                  EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(string_to_sign.data()),
                                 string_to_sign.size()) == 1 &&
                  EVP_MAC_final(ctx, md, &len, sizeof(md)) == 1;
  EVP_MAC_CTX_free(ctx);
  if (!ok) return "";
  return Hex(md, len);
}

std::string LegacySignature(std::string_view host, std::string_view secret, uint64_t t) {
  const std::string input = common::Cat(host, "-", secret, "-", t);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // Fails where MD5 is not allowed (a FIPS provider): then nothing matches.
  static EVP_MD* const kMd5 = EVP_MD_fetch(nullptr, "MD5", nullptr);  // fetched once for the process
  if (kMd5 == nullptr || EVP_Digest(input.data(), input.size(), md, &len, kMd5, nullptr) != 1) return "";
  return Hex(md, len);
}

AuthResult Authenticate(const Request& request, const Account* account, uint64_t now) {
  if (request.error != ErrorCode::kNone) {
    return Deny(request.error, SignatureForm::kUnsigned, request.message);
  }
  if (account == nullptr)
    return Deny(ErrorCode::kInvalidAccount, SignatureForm::kUnsigned, "no such account");
  if (request.signature.empty()) {
    if (request.sign_path) {
      return Deny(ErrorCode::kUnsignedInterfaceDisabled, SignatureForm::kUnsigned,
                  "a sign_ path needs a signature (s and exp)");
    }
    if (!account->allow_unsigned) {
      return Deny(ErrorCode::kUnsignedInterfaceDisabled, SignatureForm::kUnsigned,
                  "the account takes signed requests only (s and exp)");
    }
    return AuthResult{};
  }
  if (request.exp.has_value()) {
    AuthResult r = CheckExpiry(*request.exp, now, SignatureForm::kHmac, "exp");
    if (r.error != ErrorCode::kNone) return r;
    const bool ok = MatchesAnySecret(request.signature, *account, [&request](const std::string& secret) {
      return HmacSignature(secret, request.string_to_sign);
    });
    if (!ok) {
      return Deny(ErrorCode::kInvalidSignature, SignatureForm::kHmac,
                  "s is not the HMAC-SHA256 of the request under the account's secret");
    }
    return r;
  }
  if (request.t.has_value()) {
    if (!account->allow_legacy_md5) {
      return Deny(ErrorCode::kInvalidSignature, SignatureForm::kLegacyMd5,
                  "the legacy md5 signature (t) is off for the account: sign with exp");
    }
    AuthResult r = CheckExpiry(*request.t, now, SignatureForm::kLegacyMd5, "t");
    if (r.error != ErrorCode::kNone) return r;
    const bool ok = MatchesAnySecret(request.signature, *account, [&request](const std::string& secret) {
      return LegacySignature(request.host_param, secret, *request.t);
    });
    if (!ok) {
      return Deny(ErrorCode::kInvalidSignature, SignatureForm::kLegacyMd5,
                  "s is not md5(host-secret-t) under the account's secret");
    }
    return r;
  }
  return Deny(ErrorCode::kInvalidArgument, SignatureForm::kUnsigned, "s parameter without exp");
}

std::vector<uint8_t> BuildQuery(std::string_view host, uint16_t qtype, bool weights, uint16_t weight_code) {
  const std::string_view name = WithoutTrailingDot(host);
  if (!IsHostName(name)) return {};
  std::vector<uint8_t> qname;
  qname.reserve(name.size() + 2);
  for (const std::string_view label : common::Split(name, '.')) {
    qname.push_back(static_cast<uint8_t>(label.size()));
    qname.insert(qname.end(), label.begin(), label.end());
  }
  qname.push_back(0);
  // Header, question, OPT, an empty weight option.
  std::array<uint8_t, kHeaderSize + kMaxNameWire + 4 + 11 + 4> buf;
  ResponseWriter w(buf.data(), buf.size());
  if (w.Begin(0, flag::kRd, qname, qtype, klass::kIn) != ParseError::kOk ||
      w.BeginOpt(kQueryUdpSize, false) != ParseError::kOk ||
      (weights && w.AddWeights(weight_code, {}) != ParseError::kOk)) {
    return {};  // cannot happen: the buffer is sized for it
  }
  const size_t len = w.Finish(buf.size());
  return std::vector<uint8_t>(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(len));
}

void AddAnswer(std::span<const uint8_t> answer, uint16_t qtype, uint16_t weight_code, bool want_weights,
               uint32_t origin_ttl, bool stale, HostAnswer* out) {
  FamilyAnswer f = ReadFamily(answer, qtype, weight_code, want_weights);
  // A TTL so far only if a family gave one (the code is the best so far).
  const bool had_ttl = out->has_answer && Rank(out->code) >= kRankWithTtl;
  if (f.has_ttl) {
    const uint32_t origin = origin_ttl != 0 ? origin_ttl : f.ttl;
    out->ttl = had_ttl ? std::min(out->ttl, f.ttl) : f.ttl;
    out->origin_ttl = had_ttl ? std::min(out->origin_ttl, origin) : origin;
  }
  if (!out->has_answer || Rank(f.code) > Rank(out->code)) out->code = f.code;
  out->has_answer = true;
  out->stale = out->stale || stale;
  if (f.ips.empty()) return;
  std::vector<std::string>& ips = qtype == type::kA ? out->ips : out->ipsv6;
  std::vector<uint16_t>& weights = qtype == type::kA ? out->weights : out->weightsv6;
  // Weights describe one RRset: a second answer for the family has none.
  if (ips.empty()) {
    weights = std::move(f.weights);
  } else {
    weights.clear();
  }
  ips.insert(ips.end(), std::make_move_iterator(f.ips.begin()), std::make_move_iterator(f.ips.end()));
}

std::string RenderSingle(const HostAnswer& answer, bool v6, const common::IpAddress& client_ip,
                         bool ip_ignored, uint64_t server_time) {
  return RenderOrFallback(server_time, [&](Json* j) {
    AddHost(answer, v6, &client_ip, j);
    if (ip_ignored) (*j)["ip_ignored"] = true;
  });
}

std::string RenderBatch(std::span<const HostAnswer> answers, bool v6, const common::IpAddress& client_ip,
                        bool ip_ignored, uint64_t server_time) {
  return RenderOrFallback(server_time, [&](Json* j) {
    Json dns = Json::array();
    for (const HostAnswer& a : answers) {
      Json item = Json::object();
      AddHost(a, v6, nullptr, &item);
      dns.push_back(std::move(item));
    }
    (*j)["dns"] = std::move(dns);
    (*j)["client_ip"] = ClientIpText(client_ip);
    if (ip_ignored) (*j)["ip_ignored"] = true;
  });
}

std::string RenderError(ErrorCode code, std::string_view message, uint64_t server_time) {
  return RenderOrFallback(server_time, [&](Json* j) {
    (*j)["code"] = ErrorCodeName(code);
    (*j)["message"] = message;
  });
}

bool IsValidAccountName(std::string_view name) {
  // "-" names anonymous requests in metrics and dnstap; "." and ".." are
  // not path segments an account can be reached by.
  if (name == "-" || name == "." || name == "..") return false;
  return !name.empty() && name.size() <= kMaxAccountName &&
         std::all_of(name.begin(), name.end(), IsAccountNameChar);
}

absl::StatusOr<std::vector<Account>> ParseAccounts(std::string_view text) {
  std::vector<Account> accounts;
  absl::flat_hash_map<std::string, int> first_line;
  int line_no = 0;
  // Not common::ForEachLine: '#' starts a comment only at the start of a
  // line, since a secret may hold one.
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = common::Trim(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (line.empty() || line.front() == '#') continue;
    Account a;
    if (absl::Status s = ParseAccountLine(line, &a); !s.ok()) {
      return absl::InvalidArgumentError(common::Cat("line ", line_no, ": ", common::ToStd(s.message())));
    }
    const auto [it, inserted] = first_line.try_emplace(a.name, line_no);
    if (!inserted) {
      return absl::InvalidArgumentError(
          common::Cat("line ", line_no, ": account ", a.name, " is already on line ", it->second));
    }
    accounts.push_back(std::move(a));
  }
  return accounts;
}

std::string FormatAccounts(std::span<const Account> accounts) {
  std::string out;
  for (const Account& a : accounts) {
    common::CatTo(out, a.name, " unsigned=", a.allow_unsigned ? "on" : "off",
                  " legacy_md5=", a.allow_legacy_md5 ? "on" : "off", " rps=", a.rps);
    for (const std::string& s : a.secrets) common::CatTo(out, " secret=", s);
    out.push_back('\n');
  }
  return out;
}

}  // namespace weir::dns::httpdns
