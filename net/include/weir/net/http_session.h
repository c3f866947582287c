// The HTTP layer of weir's DNS-over-HTTPS front (RFC 8484): one client
// connection's requests and responses, over HTTP/2 (RFC 9113, nghttp2's
// server session) or HTTP/1.1 (RFC 9112, http-parser), without sockets,
// TLS or a clock of its own.
//
// The server owns the connection: it decrypts what the client sent and hands
// it to Receive(), which calls the RequestHandler for every whole request;
// the handler (at once, or any time later) calls Respond(); the server writes
// what TakeOutput() gives, encrypted. Time is passed in (`now`), so the flood
// limits below run on the server's steady clock or a test's.
//
// Limits (HttpLimits), so that one connection's memory stays within
// max_concurrent_streams x (max_header_bytes + max_body_bytes + a response)
// plus what TakeOutput() has not handed out yet:
//  * Requests open at once: HTTP/2 advertises SETTINGS_MAX_CONCURRENT_STREAMS
//    (nghttp2 refuses streams beyond it); HTTP/1.1 parses no further
//    pipelined request while that many responses are owed (WantsRead()
//    false: back-pressure), holding the rest of the last read.
//  * One request: its header fields (names + values) above max_header_bytes
//    are answered 431, its target above max_target_bytes 414, its body
//    above max_body_bytes 413 (a Content-Length above it at once); the
//    handler never sees it. HTTP/2 ends that stream (RST_STREAM NO_ERROR
//    once the response is out, when the client is still sending), and each
//    stream's flow-control window is max_body_bytes + 1 and never reopened,
//    so a body cannot outgrow the cap in flight. HTTP/1.1 closes the
//    connection after that response, as after a malformed request (400).
//  * HTTP/2 floods, on a window that slides with `now` (the previous
//    window's count weighted by its share still inside, plus the current
//    one's): more than max_client_resets streams reset by the client
//    (RST_STREAM) before their response was complete (CVE-2023-44487,
//    "rapid reset"), or more than max_control_frames control frames from the
//    client (SETTINGS, PING, PRIORITY, WINDOW_UPDATE on stream 0, DATA
//    without payload or END_STREAM, RST_STREAM of a stream already answered
//    or gone, GOAWAY, unknown frame types) within their window: GOAWAY
//    ENHANCE_YOUR_CALM, and Receive() returns false. nghttp2's own guards
//    stay on as a backstop: its stream-reset rate limit (in Debian's
//    1.52.0-1+deb12u1 and later), the outbound SETTINGS/PING ACK queue
//    bound, the SETTINGS entries and CONTINUATION frame bounds.
//
// Threading: a session is used on one thread (the connection's worker); the
// handler runs on it too, inside Receive(). The handler may call Respond(),
// Shutdown(), pending() and TakeOutput() (which then gives only what is
// already serialised: Receive() serialises the rest before it returns), but
// not Receive() nor destroy the session. HttpCounters are plain fields
// written on that thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace weir::net {

struct HttpLimits {
  // HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS; HTTP/1.1: the pipelined requests
  // owed a response before parsing pauses. 0 is taken as 1.
  uint32_t max_concurrent_streams = 100;
  // One request's header block / header section (names + values; HTTP/2
  // also advertises it as SETTINGS_MAX_HEADER_LIST_SIZE) -> 431.
  size_t max_header_bytes = 8192;
  // One request body (a DNS message); larger -> 413 and the stream
  // (HTTP/2) or the connection (HTTP/1.1) ended.
  size_t max_body_bytes = 65535;
  // The request target (:path, query string included) -> 414.
  size_t max_target_bytes = 4096;
  // HTTP/2 rapid reset (CVE-2023-44487): more than this many streams the
  // client resets (RST_STREAM) before their response is complete, within
  // reset_window -> GOAWAY ENHANCE_YOUR_CALM and the connection ends.
  uint32_t max_client_resets = 100;
  std::chrono::milliseconds reset_window{1000};
  // Control frames from the client (see the header comment) within
  // control_window above this -> GOAWAY ENHANCE_YOUR_CALM.
  uint32_t max_control_frames = 100;
  std::chrono::milliseconds control_window{1000};
};

struct HttpRequest {
  uint32_t id = 0;           // the HTTP/2 stream id, or the HTTP/1.1 request's sequence number (from 1)
  std::string method;        // "GET", "POST", ...
  std::string target;        // :path / request-target, query string included ("/dns-query?dns=...")
  std::string content_type;  // "" when absent (the first such field when repeated)
  std::string accept;        // "" when absent (the first such field when repeated)
  std::vector<uint8_t> body;
};

struct HttpResponse {
  // 200..599; anything else is sent as 500. 204 and 304 need an empty body
  // (RFC 9110 6.4.1); DNS answers never use them.
  int status = 200;
  // Field values: one holding CR, LF or NUL is left out (IsValidFieldValue).
  std::string_view content_type;   // "" -> no content-type header
  std::string_view cache_control;  // "" -> none; e.g. "max-age=300"
  std::string_view retry_after;    // "" -> none; e.g. "1" (a 429 or 503)
  // Copied by Respond. Content-Length is always sent; a response to HEAD
  // carries it without the body.
  std::span<const uint8_t> body;
};

struct HttpCounters {  // plain fields, owner thread; the server sums them for metrics
  // Requests handed to the handler; responses of every kind (the session's
  // own 400/413/414/431 included) by status class.
  uint64_t requests = 0, responses_2xx = 0, responses_4xx = 0, responses_5xx = 0;
  uint64_t streams_reset_by_client = 0;  // HTTP/2: RST_STREAM before the response was complete
  // Why the session ended the connection (at most one per session):
  // rapid reset, control-frame flood (nghttp2's ACK-queue bound included),
  // a protocol error (malformed HTTP/1.1, an HTTP/2 connection error or a
  // preface that is not HTTP/2's), or an HTTP/1.1 request over a limit
  // (413/414/431) or held input beyond kMaxHeldBytes.
  uint64_t closed_rapid_reset = 0, closed_control_flood = 0, closed_protocol_error = 0, closed_limit = 0;

  // Counts one response under its status class.
  void CountResponse(int status) {
    if (status >= 500) {
      ++responses_5xx;
    } else if (status >= 400) {
      ++responses_4xx;
    } else if (status >= 200 && status < 300) {
      ++responses_2xx;
    }
  }
};

class HttpSession {
 public:
  using Clock = std::chrono::steady_clock;
  // Called from inside Receive() for each whole request. The handler may call
  // Respond() at once (from inside the callback) or any time later.
  using RequestHandler = std::function<void(HttpRequest&& request)>;
  // HTTP/1.1: the most bytes held unparsed while parsing is paused
  // (WantsRead() false); a caller that keeps reading past it has the
  // connection ended (closed_limit).
  static constexpr size_t kMaxHeldBytes = 256 * 1024;

  virtual ~HttpSession() = default;

  // Bytes read from the client. False: the connection must end: the caller
  // writes what TakeOutput() still gives (a GOAWAY, a 400 with "Connection:
  // close") and closes; every later call returns false too.
  // HTTP/1.1: when WantsRead() turns true again after back-pressure, call
  // Receive() (with an empty span when nothing new was read) so that the
  // requests already held are parsed. A malformed or over-limit request
  // behind pipelined requests still owed a response does not make it return
  // false: reading stops, its 4xx follows their responses, then Done().
  virtual bool Receive(std::span<const uint8_t> bytes, Clock::time_point now) = 0;
  // Answers request `id` (any order; HTTP/1.1 writes responses in request
  // order, holding those answered early). Unknown ids (the client reset the
  // stream, the session ended, or already answered) are ignored.
  virtual void Respond(uint32_t id, const HttpResponse& response) = 0;
  // Appends the bytes to send now to `out`.
  virtual void TakeOutput(std::vector<uint8_t>* out) = 0;
  // Requests handed to the handler and not yet answered (a stream the client
  // reset is no longer counted; none once the session has ended).
  virtual size_t pending() const = 0;
  // The server closes: HTTP/2 GOAWAY (NO_ERROR, last stream id = the last one
  // accepted; those keep being answered), HTTP/1.1 "Connection: close" on the
  // last response owed (a request still being received is dropped). After
  // it, Done() once every pending response is out.
  virtual void Shutdown() = 0;
  // Nothing more will be read or written: close once TakeOutput() is empty
  // (peer sent GOAWAY / Connection: close / HTTP/1.0 without keep-alive, and
  // every response owed is written; or after Shutdown(); or Receive()
  // returned false).
  virtual bool Done() const = 0;
  // Whether more input is welcome now (HTTP/1.1: false while
  // max_concurrent_streams responses are owed, so the caller stops reading:
  // back-pressure; and once the connection is closing). HTTP/2:
  // nghttp2_session_want_read, false once the session ends.
  virtual bool WantsRead() const = 0;
};

// `counters` (may be null) outlives the session; `handler` is required.
std::unique_ptr<HttpSession> MakeHttp2Session(const HttpLimits& limits, HttpCounters* counters,
                                              HttpSession::RequestHandler handler);
std::unique_ptr<HttpSession> MakeHttp1Session(const HttpLimits& limits, HttpCounters* counters,
                                              HttpSession::RequestHandler handler);

// The first bytes of an HTTP/2 connection (the client preface "PRI *
// HTTP/2.0\r\n\r\nSM\r\n\r\n"), for a TLS connection that negotiated no ALPN:
// true when `first` is a prefix of it (an empty span too: undecided) or
// starts with it.
bool LooksLikeHttp2Preface(std::span<const uint8_t> first);

// A header field value Respond() sends: no CR, LF or NUL.
bool IsValidFieldValue(std::string_view value);

}  // namespace weir::net
