#include "weir/dns/error.h"

namespace weir::dns {

std::string_view ParseErrorName(ParseError e) {
  switch (e) {
    case ParseError::kOk:
      return "ok";
    case ParseError::kTruncatedHeader:
      return "truncated_header";
    case ParseError::kNoQuestion:
      return "no_question";
    case ParseError::kMultipleQuestions:
      return "multiple_questions";
    case ParseError::kTruncatedQuestion:
      return "truncated_question";
    case ParseError::kNotAQuery:
      return "not_a_query";
    case ParseError::kNotAResponse:
      return "not_a_response";
    case ParseError::kTruncatedName:
      return "truncated_name";
    case ParseError::kLabelTooLong:
      return "label_too_long";
    case ParseError::kNameTooLong:
      return "name_too_long";
    case ParseError::kBadLabelType:
      return "bad_label_type";
    case ParseError::kPointerLoop:
      return "pointer_loop";
    case ParseError::kForwardPointer:
      return "forward_pointer";
    case ParseError::kCompressedQuestion:
      return "compressed_question";
    case ParseError::kTruncatedRr:
      return "truncated_rr";
    case ParseError::kRdataOverrun:
      return "rdata_overrun";
    case ParseError::kTooManyRecords:
      return "too_many_records";
    case ParseError::kTrailingBytes:
      return "trailing_bytes";
    case ParseError::kDuplicateOpt:
      return "duplicate_opt";
    case ParseError::kOptNotInAdditional:
      return "opt_not_in_additional";
    case ParseError::kOptOwnerNotRoot:
      return "opt_owner_not_root";
    case ParseError::kBadEdnsVersion:
      return "bad_edns_version";
    case ParseError::kTruncatedOption:
      return "truncated_option";
    case ParseError::kDuplicateEcs:
      return "duplicate_ecs";
    case ParseError::kEcsTruncated:
      return "ecs_truncated";
    case ParseError::kEcsBadFamily:
      return "ecs_bad_family";
    case ParseError::kEcsSourceTooLong:
      return "ecs_source_too_long";
    case ParseError::kEcsScopeTooLong:
      return "ecs_scope_too_long";
    case ParseError::kEcsScopeInQuery:
      return "ecs_scope_in_query";
    case ParseError::kEcsAddressLength:
      return "ecs_address_length";
    case ParseError::kEcsTrailingBits:
      return "ecs_trailing_bits";
    case ParseError::kBufferTooSmall:
      return "buffer_too_small";
    case ParseError::kCount:
      break;
  }
  return "unknown";
}

}  // namespace weir::dns
