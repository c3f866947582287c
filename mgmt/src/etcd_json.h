// What etcd's JSON gateway answers, read apart from libcurl: the replies to
// the KV calls, etcd's error bodies, and the watch stream (newline-separated
// JSON objects that arrive in arbitrary pieces). etcd_client.cc reads
// every answer through these functions; tests/fuzz/etcd_response_fuzz.cc and
// etcd_watch_stream_fuzz.cc feed them arbitrary bytes.
//
// Every function takes any bytes: what it cannot read is an error Status
// (or an empty ErrorBody), never an exception. The gateway writes int64
// fields as decimal strings (a JSON integer is accepted too; one that does
// not fit an int64 is unreadable), bytes as base64, and leaves out fields
// whose value is zero, empty or false (proto3's JSON mapping).
//
// Pure functions, and a splitter owned by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "weir/mgmt/etcd_client.h"

namespace weir::mgmt::etcd {

// No answer of etcd's is near this; a member (or something posing as one)
// that streams more is cut off rather than allowed to fill the memory.
inline constexpr size_t kMaxAnswerBytes = size_t{256} << 20;

// etcd's refusal: the gateway's {"error": "...", "message": "...", "code": N}
// or the watch stream's {"error": {"grpc_code": N, "message": "..."}}.
struct ErrorBody {
  int code = 0;         // gRPC's status code; 0 when absent (or not an int)
  std::string message;  // "" when the body says nothing readable
  // The code as absl's (the same numbers); Unknown for 0 and codes gRPC
  // does not have.
  absl::StatusCode status_code() const;
};
ErrorBody ParseErrorBody(std::string_view body);

// The body of a 200 answer to each call. Errors are Internal:
// "unreadable answer (N bytes)" when the body is no JSON object,
// "unreadable <call> answer" when a field is not what etcd writes.
absl::StatusOr<RangeResult> ParseRangeReply(std::string_view body);
absl::StatusOr<int64_t> ParsePutReply(std::string_view body);     // the write's revision
absl::StatusOr<int64_t> ParseDeleteReply(std::string_view body);  // how many keys were deleted
absl::StatusOr<TxnResult> ParseTxnReply(std::string_view body);
absl::Status ParseCompactReply(std::string_view body);

// One revision's events, as a watch delivers them together.
struct WatchBatch {
  int64_t revision = 0;
  std::vector<WatchEvent> events;
  friend bool operator==(const WatchBatch&, const WatchBatch&) = default;
};

// One object of the watch stream: {"result": WatchResponse} or {"error": ...}.
struct WatchResponse {
  bool created = false;
  // > 0: the watch was canceled because the revision it was to start from
  // was compacted up to here; the stream ends.
  int64_t compact_revision = 0;
  // The events in stream order, consecutive events of one revision
  // together (a watch catching up sends several revisions in one object).
  std::vector<WatchBatch> batches;
  // Not OK: the stream must end (an error object, a cancellation other than
  // compaction, an unreadable object or event). `batches` then holds the
  // revisions read before the unreadable event, never a revision in part.
  absl::Status error;
  friend bool operator==(const WatchResponse&, const WatchResponse&) = default;
};
WatchResponse ParseWatchObject(std::string_view object);

// Splits the watch stream into its objects, whatever pieces the bytes come
// in: Feed() each piece, then take the complete objects with Next(); at the
// end of the stream Finish() gives what is left (the gateway ends a stream
// it closes with an error object that has no newline after it). Lines of
// only blanks (" \r\t") are skipped.
class WatchStreamSplitter {
 public:
  explicit WatchStreamSplitter(size_t max_pending_bytes = kMaxAnswerBytes)
      : max_pending_(max_pending_bytes) {}

  // False (and nothing kept of `piece`) when the bytes not yet taken by
  // Next() would exceed max_pending_bytes: the stream must be cut off.
  bool Feed(std::string_view piece);
  // The next complete object into `object`; false when none is complete.
  bool Next(std::string& object);
  // The bytes after the last newline when they hold more than blanks
  // (" \r\n\t") into `object`, and forgets them; false otherwise.
  bool Finish(std::string& object);
  // Forgets everything (a new stream).
  void Clear();

  size_t pending_bytes() const { return buffer_.size() - start_; }

 private:
  size_t max_pending_;
  std::string buffer_;
  size_t start_ = 0;    // where the next object starts
  size_t scanned_ = 0;  // buffer_[start_, scanned_) holds no newline
};

}  // namespace weir::mgmt::etcd
