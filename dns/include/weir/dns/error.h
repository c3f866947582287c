// Every reason the codec rejects input. The data plane maps them to an action
// (FORMERR, BADVERS, drop) and counts each one by name; nothing throws.
#pragma once

#include <cstdint>
#include <string_view>

namespace weir::dns {

enum class ParseError : uint8_t {
  kOk = 0,
  // Header and question.
  kTruncatedHeader,
  kNoQuestion,         // QDCOUNT = 0
  kMultipleQuestions,  // QDCOUNT > 1
  kTruncatedQuestion,
  kNotAQuery,     // QR set where a query was expected
  kNotAResponse,  // QR clear where a response was expected
  // Names (RFC 1035 3.1, 4.1.4).
  kTruncatedName,
  kLabelTooLong,        // a label longer than 63 octets
  kNameTooLong,         // more than 255 octets in wire form
  kBadLabelType,        // 0x40 / 0x80 label types (RFC 6891 obsoleted them)
  kPointerLoop,         // a pointer back into the name being read
  kForwardPointer,      // a pointer at or after itself
  kCompressedQuestion,  // a query's qname must be uncompressed
  // Resource records.
  kTruncatedRr,
  kRdataOverrun,
  kTooManyRecords,  // counts that cannot fit in the packet
  kTrailingBytes,   // a query with bytes after its last counted record
  // EDNS (RFC 6891).
  kDuplicateOpt,
  kOptNotInAdditional,
  kOptOwnerNotRoot,
  kBadEdnsVersion,  // version > 0: answer BADVERS
  kTruncatedOption,
  kDuplicateEcs,
  // ECS (RFC 7871 6).
  kEcsTruncated,
  kEcsBadFamily,
  kEcsSourceTooLong,
  kEcsScopeTooLong,
  kEcsScopeInQuery,   // SCOPE PREFIX-LENGTH must be 0 in queries
  kEcsAddressLength,  // address octets != ceil(source / 8)
  kEcsTrailingBits,   // bits beyond the source prefix are not zero
  // Writer.
  kBufferTooSmall,
  kCount,
};

// Stable snake_case name for logs and metric labels, e.g. "ecs_trailing_bits".
std::string_view ParseErrorName(ParseError e);

}  // namespace weir::dns
