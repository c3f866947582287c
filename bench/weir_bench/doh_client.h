// The HTTP side of weir-bench's DNS over HTTPS (RFC 8484) and of its JSON
// form (application/dns-json, Google's schema).
//
// Http2Client is one HTTP/2 client session on nghttp2 (RFC 9113): requests
// go in, the bytes to send come out, the bytes received go in, and complete
// responses come out. It owns no socket: the stream engine carries the
// bytes over TLS, and the unit tests connect it to an nghttp2 server in
// memory. Concurrent requests are concurrent streams; nghttp2 holds back
// requests beyond the server's SETTINGS_MAX_CONCURRENT_STREAMS until a
// stream closes.
//
// The free functions build the request targets (GET's ?dns=<base64url>, the
// JSON form's ?name=&type=) and read a JSON answer.
//
// Threading: an Http2Client is used on one thread. The free functions are
// pure.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "weir/common/ip.h"
#include "weir/dns/message.h"

typedef struct nghttp2_session nghttp2_session;

namespace weir::bench {

inline constexpr std::string_view kDnsMessageType = "application/dns-message";
inline constexpr std::string_view kDnsJsonType = "application/dns-json";

class Http2Client {
 public:
  // A response body larger than this resets its stream (a DNS message is at
  // most 65,535 bytes; its JSON form a few times that).
  static constexpr size_t kMaxBody = 256 * 1024;

  struct Response {
    int32_t stream_id = 0;
    int status = 0;  // :status; 0 when the stream closed before one came
    std::string content_type;
    std::vector<uint8_t> body;
    // The stream's close: 0 when it completed, else the HTTP/2 error code of
    // its reset (RST_STREAM, or REFUSED_STREAM for streams a GOAWAY dropped).
    uint32_t error_code = 0;
    bool too_large = false;  // the body passed kMaxBody: the stream was reset
  };

  // `authority`: the :authority of every request (the TLS name, or the
  // server's address). Queues the connection preface and SETTINGS.
  static absl::StatusOr<std::unique_ptr<Http2Client>> Create(std::string authority);
  ~Http2Client();
  Http2Client(const Http2Client&) = delete;
  Http2Client& operator=(const Http2Client&) = delete;

  // Queues a request; returns its stream ID, or a negative nghttp2 error.
  // `target` is the path with its query; `accept` the media type asked.
  int32_t Get(std::string_view target, std::string_view accept);
  // POSTs `body` (copied) as `content_type`, accepting the same type.
  int32_t Post(std::string_view path, std::string_view content_type, std::span<const uint8_t> body);
  // Resets a stream whose answer is no longer awaited (CANCEL).
  void Cancel(int32_t stream_id);
  // Sends GOAWAY: no new streams; the open ones may complete.
  void Shutdown();

  // Takes bytes received. False once the session ended on an HTTP/2
  // protocol error (error() says which): the connection is to be closed.
  // nghttp2 answers a connection error with GOAWAY: the session ends when
  // Send() has taken it, so Send() may be the one to return false.
  bool Receive(std::span<const uint8_t> data);
  // Appends the bytes ready to send to `out`. False on an error.
  bool Send(std::vector<uint8_t>* out);
  // The responses completed since the caller last cleared the vector.
  std::vector<Response>& responses() { return responses_; }

  // The server's SETTINGS_MAX_CONCURRENT_STREAMS (100 until its SETTINGS).
  uint32_t remote_max_streams() const;
  // The server sent GOAWAY.
  bool goaway() const { return goaway_; }
  // Neither side has anything more to say (after GOAWAY, or an error).
  bool finished() const;
  const std::string& error() const { return error_; }

 private:
  struct Stream;
  Http2Client() = default;
  int32_t Submit(const std::string& method, std::string_view target, std::string_view accept,
                 std::string_view content_type, std::span<const uint8_t> body);

  nghttp2_session* session_ = nullptr;
  std::string authority_;
  // Open streams' state; nghttp2's stream user data points into it.
  absl::flat_hash_map<int32_t, std::unique_ptr<Stream>> streams_;
  std::vector<Response> responses_;
  // The session ended with neither side's GOAWAY of no error: a protocol
  // error. Sets error() when it is so.
  bool Ended();

  bool goaway_ = false;    // received
  bool shutdown_ = false;  // our own GOAWAY
  std::string error_;

  friend struct Http2Callbacks;
};

// "<path>?dns=<the query in base64url, no padding>" (RFC 8484 4.1).
std::string DohGetTarget(std::string_view path, std::span<const uint8_t> query);

// "<path>?name=<name>&type=<number>", with "&edns_client_subnet=<prefix>"
// when `ecs` is given (the JSON form has no other EDNS option). The name is
// percent-encoded.
std::string DohJsonTarget(std::string_view path, const dns::NameKey& qname, uint16_t qtype,
                          const dns::ClientSubnet* ecs);

// A JSON answer (Google's schema: "Status", "TC", "Question", "Answer").
struct JsonAnswer {
  uint16_t rcode = 0;  // "Status"
  bool tc = false;     // "TC"
  bool has_question = false;
  dns::NameKey qname;  // "Question"[0]
  uint16_t qtype = 0;
  // The data of the "Answer" records of type A (1) and AAAA (28), in order.
  std::vector<common::IpAddress> addresses;
};

// Reads a JSON answer. An error (not JSON, no numeric "Status", a
// malformed question or address) says what is wrong; it never throws.
absl::StatusOr<JsonAnswer> ParseDnsJson(std::string_view body);

}  // namespace weir::bench
