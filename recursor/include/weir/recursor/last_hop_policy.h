// The rules of the recursor's last hop for tagged names, as pure functions
// over parsed messages so they are testable without sockets:
//
//  * which ECS option (if any) goes to the authoritative (RFC 7871 7.1, 11.1);
//  * what an authoritative's ECS option means for caching, or that it is
//    forged (RFC 7871 7.3);
//  * what to do on REFUSED/FORMERR to a query with ECS (RFC 7871 7.1.3);
//  * which records of an authoritative answer are taken: only those at or
//    below the zone cut that was queried (bailiwick), the CNAME chain from
//    the query name, the final RRset, and the weights that belong to it.
//
// Threading: stateless, reentrant.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "weir/dns/message.h"
#include "weir/recursor/answer.h"

namespace weir::recursor {

struct EcsSettings {
  uint8_t source_v4 = 24;  // the longest source prefix weir sends (RFC 7871 11.1 defaults)
  uint8_t source_v6 = 56;
  bool from_client_address = false;
};

// The ECS decision for one front query.
struct EcsChoice {
  bool send = false;         // an ECS option goes to the authoritative servers
  dns::ClientSubnet subnet;  // what is sent (scope 0); valid when `send`
  // The front sent SOURCE PREFIX-LENGTH 0 ("do not use my address", RFC
  // 7871 7.1.2), or no ECS at all for a name that wants it: nothing is sent
  // and the answer serves such queries only, never the subnets that do ask.
  bool zero_source = false;
};

// `name_wants_ecs`: the name's tag has ecs=on (or the front marked it by
// sending ECS). `front_ecs`: the front's option, nullptr without one.
// `client`: the query's source address (4 or 16 bytes), used only with
// from_client_address when the front sent no ECS. The address sent is cut to
// min(front source, configured maximum) bits, trailing bits zero, in
// ceil(source/8) bytes.
EcsChoice ChooseEcs(bool name_wants_ecs, const dns::ClientSubnet* front_ecs, std::span<const uint8_t> client,
                    const EcsSettings& settings);

enum class EcsReply : uint8_t {
  kGlobal,       // no ECS in the reply: valid for every client (scope 0)
  kScoped,       // the echo matches what was sent: valid for the scope
  kForged,       // family, source or address differ from what was sent: re-query without ECS
  kUnsolicited,  // ECS in a reply to a query without it: ignored, global
};
struct EcsReplyCheck {
  EcsReply verdict = EcsReply::kGlobal;
  uint8_t scope = 0;  // clamped to the source prefix sent (RFC 7871 7.3.1)
};
EcsReplyCheck CheckEcsReply(bool sent, const dns::ClientSubnet& sent_subnet, const dns::Edns& reply);

enum class RcodeAction : uint8_t {
  kAccept,      // NOERROR, NXDOMAIN
  kWithoutEcs,  // REFUSED or FORMERR to a query with ECS: retry once without (RFC 7871 7.1.3)
  kNextServer,  // SERVFAIL, REFUSED, NOTIMP...: try another server
};
RcodeAction OnRcode(uint16_t rcode, bool ecs_sent, bool retried_without_ecs);

// True when `name` equals `zone` or is below it (canonical keys).
bool IsAtOrBelow(std::span<const uint8_t> name, std::span<const uint8_t> zone);

// What one authoritative reply contributes to a tagged resolution.
struct StepResult {
  enum class Kind : uint8_t {
    kAnswer,    // the final RRset (possibly after CNAMEs): done
    kNegative,  // NXDOMAIN or NODATA for the end of the chain: done
    kFollow,    // the chain leaves the zone cut: resolve `next` with a new cut
    kReferral,  // the server referred us below the cut: find the deeper cut for `next`
    kBogus,     // nothing usable (no answer at all, a lame reply)
    kLoop,      // the CNAME chain comes back to a name it already went through
    kTooLong,   // the CNAME chain is longer than the budget
  };
  Kind kind = Kind::kBogus;
  std::vector<CachedRecord> chain;      // CNAMEs taken from this reply, in order (each after its DNAME)
  std::vector<CachedRecord> rrset;      // kAnswer: the final records, in the reply's order
  std::vector<CachedRecord> authority;  // kNegative: the zone's SOA
  dns::NameKey next;                    // kFollow / kReferral
  uint16_t rcode = 0;
  size_t out_of_bailiwick = 0;  // records dropped because they are outside the cut
  // Weight option of this reply, mapped onto `rrset`.
  bool weight_option = false;  // the reply carried the option (any length)
  bool weighted = false;       // valid weights, one per address record of `rrset`
  std::vector<uint8_t> weights;
  dns::WeightVerdict weight_verdict = dns::WeightVerdict::kEmpty;
};

// Reads a NOERROR/NXDOMAIN reply to a query for `qname`/`qtype` sent to the
// servers of zone `cut`. At most `cname_budget` CNAMEs are taken.
//
// A CNAME whose target the reply does not answer is followed from the
// target's own zone cut (kFollow, or kReferral when the reply carries NS
// records for a zone below the cut that holds the target, as BIND-style
// servers add even with AA=1); only an SOA that covers the target, or
// NXDOMAIN, makes the end of the chain negative. An SOA is taken from the
// authority section when it is the target's zone or one above it, even
// above `cut` (a forward tag names a suffix, not its zone apex): it only
// dates the negative answer.
StepResult ReadStep(const dns::Message& reply, const dns::NameKey& qname, uint16_t qtype,
                    std::span<const uint8_t> cut, int cname_budget);

// RFC 2308 5: the negative TTL is min(SOA TTL, SOA MINIMUM).
uint32_t NegativeTtl(std::span<const CachedRecord> authority, uint32_t fallback);

}  // namespace weir::recursor
