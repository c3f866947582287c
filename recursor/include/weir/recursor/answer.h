// A resolved answer as the recursor caches it and sends it to the front:
// the records (CNAME chain first, then the final RRset; the SOA of negative
// answers in authority), the weights of the final address records, and the
// ECS scope it is valid for.
//
// Records are stored decoded (owner and embedded names uncompressed), so an
// answer assembled from several authoritative replies is written out with
// one ResponseWriter and no pointer fix-ups.
//
// Threading: plain values, owned by the recursor's loop thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "weir/dns/message.h"

namespace weir::recursor {

struct CachedRecord {
  std::vector<uint8_t> owner;  // canonical key (lower case, uncompressed)
  uint16_t type = 0;
  uint16_t klass = 0;
  uint32_t ttl = 0;
  std::vector<uint8_t> rdata;  // names uncompressed (dns::CopyRdataUncompressed)
  friend bool operator==(const CachedRecord&, const CachedRecord&) = default;
};

// Reads one record of a parsed message into a CachedRecord.
bool ReadCachedRecord(const dns::Message& m, const dns::RrView& rr, CachedRecord* out);

struct Answer {
  uint16_t rcode = 0;
  std::vector<CachedRecord> answer;
  std::vector<CachedRecord> authority;
  // The weight option for the front: `weights` has one entry per A/AAAA
  // record of `answer` when `weighted`; otherwise the front that asks gets
  // the length-0 option (docs/behaviour.md#the-weight-option).
  bool weighted = false;
  std::vector<uint8_t> weights;
  uint8_t scope = 0;  // ECS scope the answer is valid for (RFC 7871 7.3)
  bool ad = false;
  uint32_t ttl = 0;          // seconds the answer is fresh
  uint32_t fresh_until = 0;  // clock seconds
};

// Number of A/AAAA records in `records`.
size_t CountAddresses(std::span<const CachedRecord> records);

// What the response to one front query needs besides the answer.
struct ReplyContext {
  std::span<const uint8_t> query_pkt;  // the front's query, as received
  const dns::Query* query = nullptr;   // its parse
  bool tcp = false;
  uint16_t weight_option_code = dns::kDefaultWeightOptionCode;
  // The COOKIE option data of the response (empty: none), whatever the RCODE.
  std::span<const uint8_t> cookie;
};

// Writes the response to the front: the front's ID and question, RD/CD
// copied, RA set; the records with TTLs reduced by `age` (or set to
// `fixed_ttl` when it is not negative: stale answers); when the query had
// EDNS, an OPT with the ECS echoed at the answer's scope (never longer than
// the front's source prefix), the weight option if the front asked, and
// the context's cookie.
// The largest UDP answer: the EDNS buffer size weir-recursor advertises.
inline constexpr size_t kMaxUdpAnswer = 1232;

// Names are compressed. Returns the length (TC set and records dropped when
// over the UDP limit: min(the client's EDNS size or 512, kMaxUdpAnswer)),
// 0 when `cap` is too small even for that.
size_t WriteAnswer(const ReplyContext& ctx, const Answer& a, uint32_t age, int64_t fixed_ttl, uint8_t* out,
                   size_t cap);

// A response without records (SERVFAIL, REFUSED, NOTIMP, FORMERR, and
// BADCOOKIE, whose upper bits go in the OPT) to a parsed query.
size_t WriteError(const ReplyContext& ctx, dns::Rcode rcode, uint8_t* out, size_t cap);

}  // namespace weir::recursor
