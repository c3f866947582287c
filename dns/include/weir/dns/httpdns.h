// HTTPDNS (docs/httpdns.md): the HTTP API app SDKs use to ask for a host's
// addresses, as the resolver sees it. What a request asks (which API, which
// account, which hosts and families, whose address), whether its signature
// holds, the DNS queries it takes, and the JSON it is answered with.
//
// The HTTP server (TLS, HTTP/1.1 and HTTP/2, limits) lives in the net
// library and the queries are resolved on the one query path every
// transport shares; this is the part that knows the API.
//
// Pure functions of their arguments (the time is passed in): reentrant,
// callable from any thread. They allocate (one HTTP request costs far more).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "weir/common/ip.h"

namespace weir::dns::httpdns {

inline constexpr std::string_view kJsonType = "application/json";

// The most hosts one batch request may ask (the configured limit is at most this).
inline constexpr size_t kMaxBatch = 32;
// How far ahead a signature's expiry (`exp`, legacy `t`) may lie, seconds.
inline constexpr uint64_t kMaxExpiryAhead = 86400;

// Why a request is refused, as the JSON "code" says it (Aliyun's names
// where its API has one), and the HTTP status each takes.
enum class ErrorCode : uint8_t {
  kNone,
  kMissingArgument,            // 400: no host
  kInvalidHost,                // 400: a host that is not a DNS name (single API)
  kInvalidIp,                  // 400: ip= that is not an address
  kInvalidArgument,            // 400: query=, weights=, exp=, t= malformed; bad percent-encoding
  kTooManyHosts,               // 400: more hosts than the batch limit
  kInvalidAccount,             // 403: an account that does not exist
  kInvalidSignature,           // 403: no live secret gives the signature; expiry too far ahead; form off
  kSignatureExpired,           // 403: the expiry has passed
  kUnsignedInterfaceDisabled,  // 403: no signature, and the account (or anonymous access) needs one
  kQuotaExceeded,              // 429: the account's or the source's requests per second
  kMethodNotAllowed,           // 405: not GET (or HEAD)
  kNotFound,                   // 404
  kCount,
};
std::string_view ErrorCodeName(ErrorCode code);  // "InvalidSignature", ...; "" for kNone
int ErrorStatus(ErrorCode code);                 // 400, 403, 429, 405, 404; 200 for kNone

enum class Api : uint8_t {
  kSingle,  // /d, /sign_d: one host
  kBatch,   // /resolve, /sign_resolve: up to the batch limit, comma-separated
};
std::string_view ApiName(Api api);  // "d", "resolve"

// Whether a request target is the HTTPDNS API's (else the caller serves it
// as DoH or 404). The paths, compared exactly (not percent-decoded), before
// the '?':
//   /d  /resolve  /sign_d  /sign_resolve
//   /ACCOUNT/d  /ACCOUNT/resolve  /ACCOUNT/sign_d  /ACCOUNT/sign_resolve
// ACCOUNT being one path segment of [A-Za-z0-9_.-]. "/resolve" is also the
// DoH JSON API's default path: when `doh_json_path` is "/resolve", a
// request there is HTTPDNS only when it has a `host` parameter (DoH's JSON
// API names the name `name`).
bool IsHttpDnsTarget(std::string_view target, std::string_view doh_json_path);

// What a request asks. `error` kNone: the rest is filled; else `message`
// says why in one line (for the JSON body and the log).
struct Request {
  ErrorCode error = ErrorCode::kNone;
  std::string message;
  Api api = Api::kSingle;
  std::string account;             // from the path (or the `account` parameter); "" anonymous
  bool sign_path = false;          // /sign_d, /sign_resolve: a signature is required
  std::vector<std::string> hosts;  // as sent, trailing dot removed; in the batch's order
  // Per host: the name is a valid DNS name (a batch answers the others and
  // gives this one the code "invalid_host"; the single API refuses it).
  std::vector<bool> host_valid;
  bool v4 = true;  // query=4 (the default), 6, or "4,6"
  bool v6 = false;
  std::optional<common::IpAddress> ip;  // ip=: the client the app speaks for
  bool weights = false;                 // weights=1: every address with its GSLB weight
  // Signature material: `s` as sent (hex, any case); `exp` for the HMAC
  // form, `t` for the legacy MD5 form (a request with both is the HMAC form).
  std::string signature;
  std::optional<uint64_t> exp;
  std::optional<uint64_t> t;
  std::string host_param;      // the `host` parameter, decoded (the legacy form signs it)
  std::string string_to_sign;  // the HMAC form's input (see Authenticate)
};

// Parses a request. `method` as sent; `target` in origin form
// ("/acct/d?host=a.example&query=4,6"); `max_batch` the configured batch
// limit (1..kMaxBatch). Parameters ('&'-separated, name and value
// percent-decoded; '+' stays '+'; of a repeated parameter the first counts;
// unknown ones are ignored but signed):
//   host     required; one name, or for the batch API a comma-separated list
//            (empty items skipped; more than max_batch: kTooManyHosts). Also
//            accepted as `dn` (vivo and Tencent SDKs). A name: LDH labels
//            (letters, digits, '-', '_') of 1..63 octets, at most 253 octets
//            without the optional trailing dot.
//   query    4 | 6 | 4,6 | 6,4 (default 4)
//   ip       an IPv4 or IPv6 address
//   weights  0 | 1 | true | false (default 0)
//   account  the account, when the path does not name one
//   s, exp, t  the signature, its expiry (unix seconds), the legacy expiry
// Methods: GET and HEAD; others kMethodNotAllowed. A path that is not
// IsHttpDnsTarget's: kNotFound.
Request ParseRequest(std::string_view method, std::string_view target, size_t max_batch);

// An account (weirctl account ...), as weir-mgmt pushes it to the nodes.
struct Account {
  std::string name;  // [A-Za-z0-9_.-], 1..64 octets
  // The live secrets, newest first (one, or two during a rotation): a
  // signature made with either is accepted.
  std::vector<std::string> secrets;
  bool allow_unsigned = false;    // requests without a signature are served
  bool allow_legacy_md5 = false;  // the legacy md5(host-secret-t) form is accepted
  uint32_t rps = 0;               // requests per second for the account on each node (0: no limit)
  friend bool operator==(const Account&, const Account&) = default;
};

// The accounts' text form, one line per account, in the snapshot weir-mgmt
// pushes (and in the node's persisted copy):
//   NAME [unsigned=on|off] [legacy_md5=on|off] [rps=N] secret=S [secret=S]
// Secrets are 16..128 printable ASCII octets without space, '=' allowed;
// at most two. '#' starts a comment line; blank lines are skipped. Errors
// name the line ("line 3: ..."); a duplicate name is an error. An error
// never shows a secret.
absl::StatusOr<std::vector<Account>> ParseAccounts(std::string_view text);
std::string FormatAccounts(std::span<const Account> accounts);
// Where a name is valid as an account name.
bool IsValidAccountName(std::string_view name);

// How a request was authenticated.
enum class SignatureForm : uint8_t { kUnsigned, kHmac, kLegacyMd5 };
struct AuthResult {
  ErrorCode error = ErrorCode::kNone;
  std::string message;  // never holds a secret
  SignatureForm form = SignatureForm::kUnsigned;
};

// Checks `request` against `account` at `now` (unix seconds). `account` is
// the one request.account names (null: kInvalidAccount); the caller decides
// anonymous requests (empty account) itself.
//  * No `s`: kUnsigned, allowed when account->allow_unsigned and not a sign path,
//    else kUnsignedInterfaceDisabled.
//  * `s` with `exp` (HMAC): exp <= now kSignatureExpired; exp > now +
//    kMaxExpiryAhead kInvalidSignature; s must equal the lowercase hex
//    HMAC-SHA256 under one of the account's secrets of string_to_sign:
//      PATH "?" PARAMS
//    PATH the request path as sent; PARAMS every parameter but `s`, each
//    "name=value" with name and value percent-decoded, sorted by name (then
//    value), joined by '&'; a '%', '&' or '=' inside a decoded name or
//    value is written "%25", "%26", "%3D". In a shell:
//      printf '%s' '/acme/d?exp=1767225600&host=www.example.com' |
//        openssl dgst -sha256 -hmac "$SECRET"
//  * `s` with `t` only (legacy): allowed when account->allow_legacy_md5 (else
//    kInvalidSignature); t <= now kSignatureExpired; t > now +
//    kMaxExpiryAhead kInvalidSignature; s must equal
//    hex(md5(host_param "-" secret "-" t)). It does not cover `ip`.
//  * `s` without either: kInvalidArgument.
// Comparisons are constant-time.
AuthResult Authenticate(const Request& request, const Account* account, uint64_t now);

// The signature Authenticate expects (lowercase hex), for tools and tests.
std::string HmacSignature(std::string_view secret, std::string_view string_to_sign);
std::string LegacySignature(std::string_view host, std::string_view secret, uint64_t t);

// A DNS query for one host: ID 0, RD, class IN, `qtype`, an OPT record
// (UDP size 1232), with the weight option (`weight_code`, length 0) when
// `weights`. Empty when the host is not a valid name.
std::vector<uint8_t> BuildQuery(std::string_view host, uint16_t qtype, bool weights, uint16_t weight_code);

// One host's answer, built from the DNS answers to its queries.
struct HostAnswer {
  std::string host;  // as asked
  // "" when the host has addresses; else "nxdomain", "no_ip" (no address of
  // the families asked), "servfail", "refused", "invalid_host", "error".
  std::string code;
  std::vector<std::string> ips, ipsv6;       // in the answer's order (the SWRR pick first)
  std::vector<uint16_t> weights, weightsv6;  // with weights=1 and a weighted answer; else empty
  uint32_t ttl = 0;                          // the smallest remaining TTL of what was answered
  uint32_t origin_ttl = 0;                   // the TTL the record came with (as cached)
  bool stale = false;                        // served past its TTL while being refreshed (RFC 8767)
  bool has_answer = false;                   // at least one family's answer was added
};

// Adds the wire `answer` to the query for `qtype` (A or AAAA) to `out`:
// its address records (A for A, AAAA for AAAA, following a CNAME chain's
// owners), the weight option `weight_code`'s weights when `want_weights`
// and valid, the TTL (the smallest of its address records and of the CNAMEs followed to them; for a negative
// answer the RFC 2308 TTL), `origin_ttl` (0: taken as the TTL), `stale`.
// An empty `answer` (dropped) counts as "refused". The code is the best of
// the families: addresses beat no_ip beats nxdomain beats the errors.
void AddAnswer(std::span<const uint8_t> answer, uint16_t qtype, uint16_t weight_code, bool want_weights,
               uint32_t origin_ttl, bool stale, HostAnswer* out);

// The JSON answers (application/json). The single API:
//   {"host", "client_ip", "ips": [...], "ipsv6": [...] (with v6), "ttl",
//    "origin_ttl", "stale" (when true), "weights"/"weightsv6" (when not
//    empty: weights=1 and a weighted answer), "code" (when not ""),
//    "ip_ignored" (when true), "server_time"}
// The batch API:
//   {"dns": [{"host", "ips", "ipsv6" (with v6), "ttl", "origin_ttl", ...},
//    ...], "client_ip", "ip_ignored" (when true), "server_time"}
// `client_ip` is the address the answers were picked for.
std::string RenderSingle(const HostAnswer& answer, bool v6, const common::IpAddress& client_ip,
                         bool ip_ignored, uint64_t server_time);
std::string RenderBatch(std::span<const HostAnswer> answers, bool v6, const common::IpAddress& client_ip,
                        bool ip_ignored, uint64_t server_time);
// {"code": "InvalidSignature", "message": "...", "server_time": N}
std::string RenderError(ErrorCode code, std::string_view message, uint64_t server_time);

}  // namespace weir::dns::httpdns
