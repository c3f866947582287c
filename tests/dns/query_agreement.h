// Whether two parses of one packet agree: dns::ParseQuery (the fast path
// and its fallback) against dns::ParseQueryFull, the reference. Shared by
// tests/dns/query_fast_path_test.cc and the query_fast_path fuzz target, so
// both hold the parsers to the same fields.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "weir/dns/error.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"

namespace weir::dns::testing {

// What a Query holds before a parse in these checks: one octet everywhere,
// so that a field the reference parse wrote can be told from one it left
// alone (a question_end of 0xA5A5 is past any question).
inline constexpr uint8_t kScribble = 0xA5;
inline void Scribble(Query* q) { std::memset(static_cast<void*>(q), kScribble, sizeof *q); }
inline bool QuestionParsed(const Query& q) { return q.question_end != uint16_t{kScribble * 0x101}; }

// The first field where `candidate` differs from `reference`, among those
// ParseQueryFull defines when it returns `verdict` for `reference` (parsed
// into a scribbled Query); empty when they agree. Defined: nothing for
// kTruncatedHeader; else the ID, the flags and every EDNS field (the parser
// clears Edns first); the name's key for kCompressedQuestion, the key and
// its label starts for kTruncatedQuestion; the whole question once the
// parser got past it. Octets of the key past its length and label starts
// past their count are never part of a parse.
inline std::string QueryDifference(ParseError verdict, const Query& reference, const Query& candidate) {
  const Query& a = reference;
  const Query& b = candidate;
  if (verdict == ParseError::kTruncatedHeader) return "";
  if (a.id != b.id) return "id";
  if (a.flags != b.flags) return "flags";
  const Edns& x = a.edns;
  const Edns& y = b.edns;
  if (x.present != y.present) return "edns.present";
  if (x.udp_size != y.udp_size) return "edns.udp_size";
  if (x.ext_rcode != y.ext_rcode) return "edns.ext_rcode";
  if (x.version != y.version) return "edns.version";
  if (x.do_bit != y.do_bit) return "edns.do_bit";
  if (x.opt_offset != y.opt_offset) return "edns.opt_offset";
  if (x.rdata_offset != y.rdata_offset) return "edns.rdata_offset";
  if (x.rdata_len != y.rdata_len) return "edns.rdata_len";
  if (x.option_count != y.option_count) return "edns.option_count";
  if (x.has_ecs != y.has_ecs) return "edns.has_ecs";
  if (x.ecs.family != y.ecs.family) return "edns.ecs.family";
  if (x.ecs.source_prefix != y.ecs.source_prefix) return "edns.ecs.source_prefix";
  if (x.ecs.scope_prefix != y.ecs.scope_prefix) return "edns.ecs.scope_prefix";
  if (x.ecs.address != y.ecs.address) return "edns.ecs.address";
  if (x.has_weight != y.has_weight) return "edns.has_weight";
  if (x.weight_offset != y.weight_offset) return "edns.weight_offset";
  if (x.weight_len != y.weight_len) return "edns.weight_len";
  if (x.has_nsid != y.has_nsid) return "edns.has_nsid";
  if (x.has_padding != y.has_padding) return "edns.has_padding";
  if (x.has_cookie != y.has_cookie) return "edns.has_cookie";
  if (x.cookie_offset != y.cookie_offset) return "edns.cookie_offset";
  if (x.cookie_len != y.cookie_len) return "edns.cookie_len";

  const bool question = QuestionParsed(a);
  if (question || verdict == ParseError::kCompressedQuestion || verdict == ParseError::kTruncatedQuestion) {
    if (a.qname.len != b.qname.len) return "qname.len";
    if (std::memcmp(a.qname.bytes.data(), b.qname.bytes.data(), a.qname.len) != 0) return "qname.bytes";
  }
  if (question || verdict == ParseError::kTruncatedQuestion) {
    if (a.qname_labels.count != b.qname_labels.count) return "qname_labels.count";
    if (std::memcmp(a.qname_labels.offsets.data(), b.qname_labels.offsets.data(), a.qname_labels.count) !=
        0) {
      return "qname_labels.offsets";
    }
  }
  if (question) {
    if (a.qtype != b.qtype) return "qtype";
    if (a.qclass != b.qclass) return "qclass";
    if (a.question_end != b.question_end) return "question_end";
  }
  return "";
}

}  // namespace weir::dns::testing
