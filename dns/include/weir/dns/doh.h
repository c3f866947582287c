// DNS over HTTPS (RFC 8484) as the resolver sees it: what an HTTP request
// asks (a DNS query in wire form, or an HTTP error), how long an answer may
// be cached by HTTP caches, and the JSON form of an answer
// (application/dns-json, the schema Google Public DNS and Cloudflare serve).
//
// The HTTP server (TLS, HTTP/1.1 and HTTP/2 framing, headers) lives in the
// net library; this is the part that knows DNS. FromHttp only maps a request
// to a query: the query is resolved on the one query path every transport
// shares, and the answer comes back as the wire message, or through ToJson.
//
// Pure functions of their arguments: reentrant, callable from any thread.
// They allocate (control-plane speed: one HTTP request costs far more).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace weir::dns::doh {

// The media types of the two forms (RFC 8484 6; the JSON API's own).
inline constexpr std::string_view kDnsMessageType = "application/dns-message";
inline constexpr std::string_view kDnsJsonType = "application/dns-json";

// The largest DNS message (the 16-bit length of DNS over TCP): a larger POST
// body or decoded `dns` parameter is 413.
inline constexpr size_t kMaxMessage = 65535;

// Where the two forms are served. The paths are compared exactly with the
// request target's path (the part before '?', not percent-decoded). They may
// be the same path: a request there with a `dns` parameter, or a POST, is
// RFC 8484's; a GET without `dns` is the JSON form's.
struct Paths {
  std::string dns_query = "/dns-query";
  std::string json = "/resolve";
};

// What an HTTP request asks the resolver: a DNS query in wire form, or an
// HTTP error.
struct Request {
  int status = 200;   // not 200: answer with this status, `error` as text/plain body, nothing is resolved
  std::string error;  // one line, for the body and the log (empty with status 200)
  std::vector<uint8_t> query;  // the wire-format DNS query to resolve (status 200)
  bool json = false;           // the answer goes back as application/dns-json (ToJson)
};

// Maps one HTTP request to a query. `method` is as sent (methods are case
// sensitive), `target` the request target in origin form ("/dns-query?dns=..."),
// `content_type` the Content-Type header's value ("" when absent), `body` the
// request body.
//
// RFC 8484 (paths.dns_query):
//  * GET (and HEAD, answered like GET) with `dns` = the query in base64url.
//    Padding is optional, '+' and '/' of standard base64 are taken too, and
//    the parameter is percent-decoded first (RFC 3986). Missing, empty or
//    undecodable: 400. The first `dns` parameter counts; others are ignored.
//  * POST with Content-Type application/dns-message (parameters such as
//    "; charset=..." ignored, case-insensitive) and the query as the body;
//    another or no content type: 415.
//  * Any other method: 405. A message over 65535 bytes: 413.
//  * The message must be a DNS query: at least a header, QR clear, QDCOUNT 1,
//    else 400. Beyond that it is passed through untouched (ID 0 stays 0, an
//    opcode other than QUERY or a malformed question is the resolver's to
//    answer, NOTIMP or FORMERR, as over UDP and TCP).
// JSON (paths.json), GET only (else 405):
//  * `name` (required): a presentation name, RFC 4343 backslash escapes
//    (\DDD, \X) allowed, at most 253 octets after unescaping without the
//    optional trailing dot, labels of 1..63 octets; "." is the root. Bytes
//    outside printable ASCII must be escaped. Invalid: 400.
//  * `type`: a mnemonic (dns::TypeFromText, "TYPE65" too) or a number 1..65535;
//    default A. Unknown: 400.
//  * `do`, `cd`: 0, 1, false or true (any case; empty is false): the DO bit,
//    the CD bit. Else 400.
//  * `edns_client_subnet`: "192.0.2.0/24", "2001:db8::/56", or an address
//    alone (the full length): an ECS option with that source prefix, the
//    address bits past it zeroed; "" means none. Invalid: 400.
//  * `ct`, `random_padding` and unknown parameters are ignored; of a
//    repeated parameter the first counts (as Google's API does).
//  The query: ID 0, RD set, CD as asked, class IN, and always an OPT record
//  (UDP size 1232, DO as asked, the ECS option when asked), so the answer can
//  carry an extended RCODE and is not cut to 512 bytes.
// Any other path: 404.
Request FromHttp(std::string_view method, std::string_view target, std::string_view content_type,
                 std::span<const uint8_t> body, const Paths& paths);

// Cache-Control max-age for an answer (RFC 8484 5.1): the smallest TTL of
// the answer and authority records (OPT excluded, TTLs above 2^31 - 1 read as
// 0, RFC 2181 8). In a negative answer (NXDOMAIN, or NOERROR without a record
// of the question's type: NODATA) an SOA in the authority section counts as
// min(its TTL, its MINIMUM) (RFC 2308 5). No such record, or a message that
// does not parse: 0.
uint32_t MaxAge(std::span<const uint8_t> answer);

// The JSON form of a wire answer, as Google's and Cloudflare's APIs write it:
//   {"Status": <RCODE, extended by EDNS>, "TC", "RD", "RA", "AD", "CD": <bool>,
//    "Question": [{"name": "example.com.", "type": 1}],
//    "Answer": [{"name", "type", "TTL", "data"}], "Authority": [...],
//    "Additional": [...] (the OPT record excluded; an empty section is left out),
//    "edns_client_subnet": "192.0.2.0/24" (an ECS option in the answer: its
//    address, '/', its SCOPE prefix length, as Google writes it)}.
// Names are in presentation form with the trailing dot, in the case sent,
// with '.', '\\', '"', '(', ')', ';', '@', '$' backslash-escaped and bytes
// outside printable ASCII as \DDD. "data" by type: A, AAAA the address; NS,
// CNAME, PTR, DNAME the name; MX "pref name"; TXT, SPF, HINFO each string
// quoted and escaped, space-separated; SOA "mname rname serial refresh retry
// expire minimum"; SRV "prio weight port target"; CAA `flags tag "value"`;
// any other type, or RDATA that is not well-formed for its type, the RFC 3597
// form "\# <len> <hex>". A header-only message (QDCOUNT 0, no records: a
// FORMERR or NOTIMP answer) gives its RCODE and flags with an empty Question.
// Never throws; any other message that does not parse gives {"Status": 2
// (SERVFAIL), "Comment": why}. The output is always valid JSON in ASCII.
std::string ToJson(std::span<const uint8_t> answer);

}  // namespace weir::dns::doh
