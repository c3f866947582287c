#include "etcd_json.h"

#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace weir::mgmt::etcd {

namespace {

using Json = nlohmann::json;

// gRPC's highest status code (UNAUTHENTICATED).
constexpr int kGrpcMaxCode = 16;

// An int64 field: the gateway writes them as strings; a JSON integer is
// accepted too. Absent or null (proto3 JSON leaves out zero values): 0.
bool ReadInt(const Json& object, const char* name, int64_t& out) {
  out = 0;
  auto it = object.find(name);
  if (it == object.end() || it->is_null()) return true;
  if (it->is_number_unsigned()) {
    const uint64_t v = it->get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    out = static_cast<int64_t>(v);
    return true;
  }
  if (it->is_number_integer()) {
    out = it->get<int64_t>();
    return true;
  }
  if (it->is_string() && absl::SimpleAtoi(it->get_ref<const std::string&>(), &out)) return true;
  out = 0;
  return false;
}

bool ReadBytes(const Json& object, const char* name, std::string& out) {
  out.clear();
  auto it = object.find(name);
  if (it == object.end() || it->is_null()) return true;
  return it->is_string() && absl::Base64Unescape(it->get_ref<const std::string&>(), &out);
}

bool ReadBool(const Json& object, const char* name) {
  auto it = object.find(name);
  return it != object.end() && it->is_boolean() && it->get<bool>();
}

const Json& Member(const Json& object, const char* name) {
  static const Json kEmpty = Json::object();
  auto it = object.find(name);
  return it != object.end() && it->is_object() ? *it : kEmpty;
}

bool ReadKeyValue(const Json& j, KeyValue& kv) {
  return j.is_object() && ReadBytes(j, "key", kv.key) && ReadBytes(j, "value", kv.value) &&
         ReadInt(j, "create_revision", kv.create_revision) && ReadInt(j, "mod_revision", kv.mod_revision) &&
         ReadInt(j, "version", kv.version);
}

// A RangeResponse's kvs and count.
bool ReadRange(const Json& j, std::vector<KeyValue>& kvs, int64_t& count) {
  kvs.clear();
  if (!ReadInt(j, "count", count)) return false;
  auto it = j.find("kvs");
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_array()) return false;
  kvs.reserve(it->size());
  for (const Json& e : *it) {
    if (!ReadKeyValue(e, kvs.emplace_back())) return false;
  }
  return true;
}

bool ReadHeaderRevision(const Json& j, int64_t& revision) {
  return ReadInt(Member(j, "header"), "revision", revision);
}

ErrorBody ReadError(const Json& j) {
  ErrorBody e;
  const Json* body = &j;
  auto it = j.find("error");
  if (it != j.end() && it->is_object()) body = &*it;
  auto code = body->find(body == &j ? "code" : "grpc_code");
  if (code != body->end() && code->is_number_integer()) {
    const bool fits = code->is_number_unsigned()
                          ? code->get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int>::max())
                          : code->get<int64_t>() >= std::numeric_limits<int>::min() &&
                                code->get<int64_t>() <= std::numeric_limits<int>::max();
    if (fits) e.code = static_cast<int>(code->get<int64_t>());
  }
  for (const char* name : {"message", "error"}) {
    auto m = body->find(name);
    if (m != body->end() && m->is_string() && !m->get_ref<const std::string&>().empty()) {
      e.message = m->get<std::string>();
      break;
    }
  }
  return e;
}

absl::Status Unreadable(const char* what) {
  return absl::InternalError(absl::StrCat("unreadable ", what, " answer"));
}

// Parses `body` as a JSON object and reads it with `read`: what nlohmann
// throws (nothing it is asked here should, but a parser of outside input
// never lets an exception out) becomes the same error as a bad field.
template <typename Read>
auto ReadReply(std::string_view body, const char* what, Read read)
    -> decltype(read(std::declval<const Json&>())) {
  try {
    const Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object())
      return absl::InternalError(absl::StrCat("unreadable answer (", body.size(), " bytes)"));
    return read(j);
  } catch (const Json::exception& e) {
    return absl::InternalError(absl::StrCat("unreadable ", what, " answer: ", e.what()));
  }
}

// A watch object's "result".
void ReadWatchResult(const Json& result, WatchResponse& out) {
  out.created = ReadBool(result, "created");
  if (ReadBool(result, "canceled")) {
    int64_t compact = 0;
    ReadInt(result, "compact_revision", compact);
    if (compact > 0) {
      out.compact_revision = compact;
      return;
    }
    auto reason = result.find("cancel_reason");
    out.error = absl::CancelledError(
        absl::StrCat("watch canceled", reason != result.end() && reason->is_string()
                                           ? absl::StrCat(": ", reason->get_ref<const std::string&>())
                                           : std::string()));
    return;
  }
  auto events = result.find("events");
  if (events == result.end() || !events->is_array()) return;  // created, or a progress notification
  for (const Json& e : *events) {
    WatchEvent event;
    if (!e.is_object() || !ReadKeyValue(Member(e, "kv"), event.kv)) {
      // The revision is not delivered in part.
      if (!out.batches.empty()) out.batches.pop_back();
      out.error = absl::InternalError("unreadable watch event");
      return;
    }
    auto type = e.find("type");
    event.type = type != e.end() && type->is_string() && *type == "DELETE" ? WatchEvent::Type::kDelete
                                                                           : WatchEvent::Type::kPut;
    if (out.batches.empty() || out.batches.back().revision != event.kv.mod_revision)
      out.batches.push_back(WatchBatch{event.kv.mod_revision, {}});
    out.batches.back().events.push_back(std::move(event));
  }
}

bool HasNonBlank(std::string_view s, const char* blanks) {
  return s.find_first_not_of(blanks) != std::string_view::npos;
}

}  // namespace

absl::StatusCode ErrorBody::status_code() const {
  return code > 0 && code <= kGrpcMaxCode ? static_cast<absl::StatusCode>(code) : absl::StatusCode::kUnknown;
}

ErrorBody ParseErrorBody(std::string_view body) {
  try {
    const Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
    return j.is_object() ? ReadError(j) : ErrorBody{};
  } catch (const Json::exception&) {
    return ErrorBody{};
  }
}

absl::StatusOr<RangeResult> ParseRangeReply(std::string_view body) {
  return ReadReply(body, "range", [](const Json& j) -> absl::StatusOr<RangeResult> {
    RangeResult result;
    if (!ReadHeaderRevision(j, result.revision) || !ReadRange(j, result.kvs, result.count))
      return Unreadable("range");
    return result;
  });
}

absl::StatusOr<int64_t> ParsePutReply(std::string_view body) {
  return ReadReply(body, "put", [](const Json& j) -> absl::StatusOr<int64_t> {
    int64_t revision = 0;
    if (!ReadHeaderRevision(j, revision)) return Unreadable("put");
    return revision;
  });
}

absl::StatusOr<int64_t> ParseDeleteReply(std::string_view body) {
  return ReadReply(body, "delete", [](const Json& j) -> absl::StatusOr<int64_t> {
    int64_t deleted = 0;
    if (!ReadInt(j, "deleted", deleted)) return Unreadable("delete");
    return deleted;
  });
}

absl::StatusOr<TxnResult> ParseTxnReply(std::string_view body) {
  return ReadReply(body, "txn", [](const Json& j) -> absl::StatusOr<TxnResult> {
    TxnResult result;
    result.succeeded = ReadBool(j, "succeeded");
    if (!ReadHeaderRevision(j, result.revision)) return Unreadable("txn");
    auto it = j.find("responses");
    if (it == j.end() || it->is_null()) return result;
    if (!it->is_array()) return Unreadable("txn");
    for (const Json& r : *it) {
      if (!r.is_object()) return Unreadable("txn");
      OpResult& op = result.responses.emplace_back();
      bool ok = true;
      if (auto range = r.find("response_range"); range != r.end()) {
        ok = range->is_object() && ReadRange(*range, op.kvs, op.count);
      } else if (auto del = r.find("response_delete_range"); del != r.end()) {
        ok = del->is_object() && ReadInt(*del, "deleted", op.deleted);
      } else if (!r.contains("response_put")) {
        ok = false;  // a nested txn, which this client never sends
      }
      if (!ok) return Unreadable("txn");
    }
    return result;
  });
}

absl::Status ParseCompactReply(std::string_view body) {
  return ReadReply(body, "compaction", [](const Json&) { return absl::OkStatus(); });
}

WatchResponse ParseWatchObject(std::string_view object) {
  WatchResponse out;
  try {
    const Json j = Json::parse(object, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) {
      out.error = absl::InternalError(absl::StrCat("unreadable watch answer (", object.size(), " bytes)"));
      return out;
    }
    auto result = j.find("result");
    if (result == j.end() || !result->is_object()) {
      const ErrorBody e = ReadError(j);
      out.error = e.message.empty() ? absl::InternalError("watch answer without a result")
                                    : absl::Status(e.status_code(), e.message);
      return out;
    }
    ReadWatchResult(*result, out);
  } catch (const Json::exception& e) {
    out = WatchResponse{};
    out.error = absl::InternalError(absl::StrCat("unreadable watch answer: ", e.what()));
  }
  return out;
}

bool WatchStreamSplitter::Feed(std::string_view piece) {
  if (piece.size() > max_pending_ || pending_bytes() > max_pending_ - piece.size()) return false;
  if (start_ > 0) {
    buffer_.erase(0, start_);
    scanned_ -= start_;
    start_ = 0;
  }
  buffer_.append(piece.data(), piece.size());
  return true;
}

bool WatchStreamSplitter::Next(std::string& object) {
  for (;;) {
    const size_t nl = buffer_.find('\n', scanned_);
    if (nl == std::string::npos) {
      scanned_ = buffer_.size();
      return false;
    }
    const std::string_view line(buffer_.data() + start_, nl - start_);
    start_ = scanned_ = nl + 1;
    if (HasNonBlank(line, " \r\t")) {
      object.assign(line.data(), line.size());
      return true;
    }
  }
}

bool WatchStreamSplitter::Finish(std::string& object) {
  const std::string_view rest(buffer_.data() + start_, buffer_.size() - start_);
  const bool any = HasNonBlank(rest, " \r\n\t");
  if (any) object.assign(rest.data(), rest.size());
  Clear();
  return any;
}

void WatchStreamSplitter::Clear() {
  buffer_.clear();
  start_ = scanned_ = 0;
}

}  // namespace weir::mgmt::etcd
