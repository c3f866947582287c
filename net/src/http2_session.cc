// HTTP/2 for the DNS-over-HTTPS front: nghttp2's server session, fed from
// memory (nghttp2_session_mem_recv / mem_send), with weir's limits around it
// (http_session.h).
#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "weir/net/http_session.h"

namespace weir::net {
namespace {

using Clock = HttpSession::Clock;

// Upstream nghttp2 1.52.0 has neither of these; Debian backported the first
// in 1.52.0-1+deb12u1 (CVE-2023-44487) and the second in +deb12u2
// (CVE-2024-28182). Called unqualified with an nghttp2_option*, the call
// finds the library's function by argument-dependent lookup wherever its
// header declares one, and overload resolution prefers it to these
// do-nothing templates.
namespace fallback {
template <typename Option>
void nghttp2_option_set_stream_reset_rate_limit(Option* /*option*/, uint64_t /*burst*/, uint64_t /*rate*/) {}
template <typename Option>
void nghttp2_option_set_max_continuations(Option* /*option*/, size_t /*val*/) {}
}  // namespace fallback
using fallback::nghttp2_option_set_max_continuations;
using fallback::nghttp2_option_set_stream_reset_rate_limit;

constexpr size_t kFrameHeaderBytes = 9;
constexpr size_t kClientPrefaceBytes = 24;  // "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
constexpr uint8_t kFlagEndStream = 0x1;
constexpr uint8_t kFlagPadded = 0x8;

// Events on a window that slides with the injected clock: the count of the
// previous fixed window, weighted by the share of it still inside the
// sliding window, plus the current one's. O(1) memory whatever the rate; an
// approximation that never lets more than twice the limit through in any
// one window, and exactly the limit from a standing start.
class SlidingCount {
 public:
  SlidingCount(uint32_t limit, Clock::duration window)
      : limit_(limit), window_(std::max<Clock::duration>(window, Clock::duration(1))) {}

  // Counts one event at `now`; true when the events within the window
  // exceed the limit.
  bool Add(Clock::time_point now) {
    if (!started_) {
      started_ = true;
      start_ = now;
    }
    if (now - start_ >= window_) {
      const auto windows = (now - start_) / window_;
      previous_ = windows == 1 ? current_ : 0;
      current_ = 0;
      start_ += windows * window_;
    }
    ++current_;
    // A clock that went back counts as the start of the current window.
    const auto into = now > start_ ? now - start_ : Clock::duration::zero();
    const double still_inside =
        1.0 - static_cast<double>(into.count()) / static_cast<double>(window_.count());
    return static_cast<double>(previous_) * still_inside + static_cast<double>(current_) >
           static_cast<double>(limit_);
  }

 private:
  uint64_t limit_;
  Clock::duration window_;
  bool started_ = false;
  Clock::time_point start_{};
  uint64_t previous_ = 0;
  uint64_t current_ = 0;
};

// A response header field for nghttp2, which copies it (no NO_COPY flags).
nghttp2_nv Field(std::string_view name, std::string_view value) {
  return {const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(name.data())),
          const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(value.data())), name.size(), value.size(),
          NGHTTP2_NV_FLAG_NONE};
}

// Why the session ended the connection; each maps to one HttpCounters field.
enum class CloseReason : uint8_t { kRapidReset, kControlFlood, kProtocolError };

class Http2Session final : public HttpSession {
 public:
  Http2Session(const HttpLimits& limits, HttpCounters* counters, RequestHandler handler);
  ~Http2Session() override { nghttp2_session_del(session_); }
  Http2Session(const Http2Session&) = delete;
  Http2Session& operator=(const Http2Session&) = delete;

  bool Receive(std::span<const uint8_t> bytes, Clock::time_point now) override;
  void Respond(uint32_t id, const HttpResponse& response) override;
  void TakeOutput(std::vector<uint8_t>* out) override;
  size_t pending() const override { return pending_; }
  void Shutdown() override;
  bool Done() const override {
    return closing_ ||
           (nghttp2_session_want_read(session_) == 0 && nghttp2_session_want_write(session_) == 0);
  }
  bool WantsRead() const override { return !closing_ && nghttp2_session_want_read(session_) != 0; }

 private:
  struct Stream {
    enum class State : uint8_t { kReceiving, kPending, kResponding };
    State state = State::kReceiving;
    int reject = 0;  // 413/414/431: answered by the session, never handed over
    bool reject_sent = false;
    bool head = false;
    bool request_ended = false;   // END_STREAM received
    bool response_ended = false;  // END_STREAM sent
    size_t header_bytes = 0;
    HttpRequest request;
    std::vector<uint8_t> response;  // the body still to send from response_off
    size_t response_off = 0;
  };

  // nghttp2's callbacks (user_data: the session).
  static int OnBeginHeaders(nghttp2_session* session, const nghttp2_frame* frame, void* user_data);
  static int OnHeader(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t flags, void* user_data);
  static int OnDataChunk(nghttp2_session* session, uint8_t flags, int32_t stream_id, const uint8_t* data,
                         size_t len, void* user_data);
  static int OnFrameRecv(nghttp2_session* session, const nghttp2_frame* frame, void* user_data);
  static int OnFrameSend(nghttp2_session* session, const nghttp2_frame* frame, void* user_data);
  static int OnStreamClose(nghttp2_session* session, int32_t stream_id, uint32_t error_code, void* user_data);
  static ssize_t ReadBody(nghttp2_session* session, int32_t stream_id, uint8_t* buf, size_t length,
                          uint32_t* data_flags, nghttp2_data_source* source, void* user_data);

  void Header(Stream* s, nghttp2_headers_category cat, std::string_view name, std::string_view value);
  void RequestEnded(int32_t id);
  void Reject(int32_t id, Stream* s, int status);
  void CountReset(int32_t id);
  // Walks the frame headers of what the client sent (every frame, those
  // nghttp2 ignores unread too) and counts control frames. Returns how many
  // of `bytes` to feed nghttp2: all, or those before the frame that made a
  // flood (*flood then set).
  size_t ScanFrames(std::span<const uint8_t> bytes, Clock::time_point now, bool* flood);
  void CountControl(Clock::time_point now, bool* flood) {
    if (controls_.Add(now)) *flood = true;
  }
  // Ends the connection for `why`: counted once, GOAWAY with `error_code`.
  void Close(CloseReason why, uint32_t error_code);
  void CountClose(CloseReason why);
  // The connection ends: no request is owed an answer any more.
  void Ending();
  void Drain();

  HttpLimits limits_;
  HttpCounters own_counters_;
  HttpCounters* counters_;
  RequestHandler handler_;
  nghttp2_session* session_ = nullptr;
  absl::flat_hash_map<int32_t, Stream> streams_;
  size_t pending_ = 0;
  std::vector<uint8_t> out_;
  Clock::time_point now_{};
  bool in_recv_ = false;
  bool closing_ = false;  // the connection ends (counted once in close_counted_)
  bool close_counted_ = false;
  bool shutdown_ = false;
  uint8_t last_recv_type_ = 0xff;
  SlidingCount resets_;
  SlidingCount controls_;
  // ScanFrames' place in the client's byte stream.
  size_t preface_left_ = kClientPrefaceBytes;
  uint8_t head_[kFrameHeaderBytes] = {};
  size_t head_have_ = 0;
  size_t payload_left_ = 0;
  // A padded DATA frame whose pad length (its first payload byte) decides
  // whether it carries data.
  bool pad_byte_next_ = false;
  uint8_t padded_flags_ = 0;
  size_t padded_length_ = 0;
};

Http2Session::Http2Session(const HttpLimits& limits, HttpCounters* counters, RequestHandler handler)
    : limits_(limits),
      counters_(counters != nullptr ? counters : &own_counters_),
      handler_(std::move(handler)),
      resets_(limits.max_client_resets, limits.reset_window),
      controls_(limits.max_control_frames, limits.control_window) {
  limits_.max_concurrent_streams = std::max<uint32_t>(limits_.max_concurrent_streams, 1);

  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_option* option = nullptr;
  if (nghttp2_session_callbacks_new(&callbacks) == 0 && nghttp2_option_new(&option) == 0) {
    nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, OnBeginHeaders);
    nghttp2_session_callbacks_set_on_header_callback(callbacks, OnHeader);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, OnDataChunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, OnFrameRecv);
    nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, OnFrameSend);
    nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, OnStreamClose);

    // Window updates are ours: the connection's window reopens as its data
    // arrives, a stream's never (its initial window is the body cap + 1).
    nghttp2_option_set_no_auto_window_update(option, 1);
    // ACKs queued unsent: our control-frame limit ends a flood first.
    nghttp2_option_set_max_outbound_ack(option, std::min<size_t>(limits_.max_control_frames, 1000) + 16);
    nghttp2_option_set_max_settings(option, 32);
    // No closed or idle streams kept for RFC 7540 priorities.
    nghttp2_option_set_no_closed_streams(option, 1);
    // Header blocks of max_header_bytes fit in a HEADERS frame and a few
    // CONTINUATIONs of the default 16 KiB frame size.
    nghttp2_option_set_max_continuations(option, std::max<size_t>(8, limits_.max_header_bytes / 16384 + 2));
    // A backstop on the real clock: every RST_STREAM counts (ours counts
    // those before the response, on the injected one), never tighter than
    // nghttp2's default (burst 1000, 33 per second).
    const uint64_t window_ms = std::max<int64_t>(limits_.reset_window.count(), 1);
    nghttp2_option_set_stream_reset_rate_limit(
        option, std::max<uint64_t>(1000, uint64_t{limits_.max_client_resets} * 4),
        std::max<uint64_t>(33, uint64_t{limits_.max_client_resets} * 1000 / window_ms));
    if (nghttp2_session_server_new2(&session_, callbacks, this, option) != 0) session_ = nullptr;
  }
  nghttp2_option_del(option);
  nghttp2_session_callbacks_del(callbacks);

  const uint32_t window =
      static_cast<uint32_t>(std::min<size_t>(limits_.max_body_bytes + 1, NGHTTP2_MAX_WINDOW_SIZE));
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, limits_.max_concurrent_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, window},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE,
       static_cast<uint32_t>(std::min<size_t>(limits_.max_header_bytes, UINT32_MAX))},
      {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
  };
  if (session_ == nullptr ||
      nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings)) != 0) {
    // Out of memory: a session that ends at once (Receive() false, Done()).
    closing_ = true;
  }
}

// ---------------------------------------------------------------- input

bool Http2Session::Receive(std::span<const uint8_t> bytes, Clock::time_point now) {
  if (closing_ || session_ == nullptr) return false;
  now_ = now;
  bool flood = false;
  const size_t feed = ScanFrames(bytes, now, &flood);
  in_recv_ = true;
  const ssize_t rv = feed > 0 ? nghttp2_session_mem_recv(session_, bytes.data(), feed) : 0;
  in_recv_ = false;
  if (rv < 0) {
    // Fatal to the session: a preface that is not HTTP/2's, nghttp2's ACK
    // queue bound, memory. It still serialises a last GOAWAY.
    if (rv == NGHTTP2_ERR_FLOODED) {
      Close(CloseReason::kControlFlood, NGHTTP2_ENHANCE_YOUR_CALM);
    } else {
      Close(CloseReason::kProtocolError, NGHTTP2_PROTOCOL_ERROR);
    }
  } else if (flood) {
    Close(CloseReason::kControlFlood, NGHTTP2_ENHANCE_YOUR_CALM);
  }
  Drain();
  return !closing_;
}

size_t Http2Session::ScanFrames(std::span<const uint8_t> bytes, Clock::time_point now, bool* flood) {
  size_t i = 0;
  while (i < bytes.size()) {
    if (preface_left_ > 0) {
      const size_t n = std::min(preface_left_, bytes.size() - i);
      preface_left_ -= n;
      i += n;
      continue;
    }
    if (payload_left_ > 0) {
      if (pad_byte_next_) {
        pad_byte_next_ = false;
        const size_t pad = bytes[i];
        const size_t data_len = padded_length_ > pad ? padded_length_ - 1 - pad : 0;
        if (data_len == 0 && (padded_flags_ & kFlagEndStream) == 0) {
          CountControl(now, flood);
          // This frame's header went to nghttp2 already: stop before its
          // payload (nghttp2 then has read a frame head, nothing more).
          if (*flood) return i;
        }
      }
      const size_t n = std::min(payload_left_, bytes.size() - i);
      payload_left_ -= n;
      i += n;
      continue;
    }
    const size_t had = head_have_;
    const size_t n = std::min(kFrameHeaderBytes - head_have_, bytes.size() - i);
    std::memcpy(head_ + head_have_, bytes.data() + i, n);
    head_have_ += n;
    // The frame starts here, or in an earlier chunk (already fed).
    const size_t frame_start = had > 0 ? 0 : i;
    i += n;
    if (head_have_ < kFrameHeaderBytes) break;
    head_have_ = 0;
    const size_t length = (size_t{head_[0]} << 16) | (size_t{head_[1]} << 8) | head_[2];
    const uint8_t type = head_[3];
    const uint8_t flags = head_[4];
    const uint32_t stream_id =
        ((uint32_t{head_[5]} << 24) | (uint32_t{head_[6]} << 16) | (uint32_t{head_[7]} << 8) | head_[8]) &
        0x7fffffffu;
    payload_left_ = length;
    switch (type) {
      case NGHTTP2_DATA:
        if ((flags & kFlagPadded) != 0 && length > 0) {
          pad_byte_next_ = true;
          padded_flags_ = flags;
          padded_length_ = length;
        } else if (length == 0 && (flags & kFlagEndStream) == 0) {
          CountControl(now, flood);
        }
        break;
      case NGHTTP2_HEADERS:
      case NGHTTP2_CONTINUATION:  // bounded per header block by max_continuations
      case NGHTTP2_RST_STREAM:    // OnFrameRecv counts it, knowing the stream
        break;
      case NGHTTP2_WINDOW_UPDATE:
        if (stream_id == 0) CountControl(now, flood);
        break;
      default:  // SETTINGS, PING, PRIORITY, GOAWAY, PUSH_PROMISE, extensions
        CountControl(now, flood);
        break;
    }
    if (*flood) return frame_start;
  }
  return bytes.size();
}

int Http2Session::OnBeginHeaders(nghttp2_session* /*session*/, const nghttp2_frame* frame, void* user_data) {
  auto* self = static_cast<Http2Session*>(user_data);
  if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
    self->streams_.try_emplace(frame->hd.stream_id);
  }
  return 0;
}

int Http2Session::OnHeader(nghttp2_session* /*session*/, const nghttp2_frame* frame, const uint8_t* name,
                           size_t namelen, const uint8_t* value, size_t valuelen, uint8_t /*flags*/,
                           void* user_data) {
  auto* self = static_cast<Http2Session*>(user_data);
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  auto it = self->streams_.find(frame->hd.stream_id);
  if (it == self->streams_.end()) return 0;
  self->Header(&it->second, frame->headers.cat,
               std::string_view(reinterpret_cast<const char*>(name), namelen),
               std::string_view(reinterpret_cast<const char*>(value), valuelen));
  return 0;
}

void Http2Session::Header(Stream* s, nghttp2_headers_category cat, std::string_view name,
                          std::string_view value) {
  s->header_bytes += name.size() + value.size();
  if (s->reject != 0) return;
  if (s->header_bytes > limits_.max_header_bytes) {
    s->reject = 431;
    s->request = HttpRequest{};
    return;
  }
  if (cat != NGHTTP2_HCAT_REQUEST) return;  // trailers: counted, not kept
  HttpRequest& r = s->request;
  if (name == ":method") {
    r.method = value;
  } else if (name == ":path") {
    if (value.size() > limits_.max_target_bytes) {
      s->reject = 414;
      s->request = HttpRequest{};
      return;
    }
    r.target = value;
  } else if (name == "content-type") {
    if (r.content_type.empty()) r.content_type = value;
  } else if (name == "accept") {
    if (r.accept.empty()) r.accept = value;
  } else if (name == "content-length") {
    // nghttp2 checked it is a number; above the cap, 413 before the body.
    uint64_t length = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), length);
    if (ec == std::errc::result_out_of_range || (ec == std::errc() && length > limits_.max_body_bytes)) {
      s->reject = 413;
      s->request = HttpRequest{};
    }
  }
}

int Http2Session::OnDataChunk(nghttp2_session* session, uint8_t /*flags*/, int32_t stream_id,
                              const uint8_t* data, size_t len, void* user_data) {
  auto* self = static_cast<Http2Session*>(user_data);
  // The connection's window reopens for whatever arrives; the stream's
  // never does.
  nghttp2_session_consume_connection(session, len);
  auto it = self->streams_.find(stream_id);
  if (it == self->streams_.end()) return 0;
  Stream& s = it->second;
  if (s.reject != 0) return 0;
  std::vector<uint8_t>& body = s.request.body;
  if (len > self->limits_.max_body_bytes - body.size()) {
    self->Reject(stream_id, &s, 413);
    return 0;
  }
  body.insert(body.end(), data, data + len);
  return 0;
}

int Http2Session::OnFrameRecv(nghttp2_session* /*session*/, const nghttp2_frame* frame, void* user_data) {
  auto* self = static_cast<Http2Session*>(user_data);
  self->last_recv_type_ = frame->hd.type;
  const int32_t id = frame->hd.stream_id;
  switch (frame->hd.type) {
    case NGHTTP2_HEADERS: {
      auto it = self->streams_.find(id);
      if (it == self->streams_.end()) return 0;
      if (it->second.reject != 0) self->Reject(id, &it->second, it->second.reject);
      if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) self->RequestEnded(id);
      return 0;
    }
    case NGHTTP2_DATA:
      if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) self->RequestEnded(id);
      return 0;
    case NGHTTP2_RST_STREAM:
      self->CountReset(id);
      return 0;
    default:
      return 0;
  }
}

void Http2Session::CountReset(int32_t id) {
  auto it = streams_.find(id);
  if (it != streams_.end() && !it->second.response_ended) {
    ++counters_->streams_reset_by_client;
    if (resets_.Add(now_)) Close(CloseReason::kRapidReset, NGHTTP2_ENHANCE_YOUR_CALM);
  } else if (controls_.Add(now_)) {
    // A reset of a stream answered or gone costs as a control frame does.
    Close(CloseReason::kControlFlood, NGHTTP2_ENHANCE_YOUR_CALM);
  }
}

void Http2Session::RequestEnded(int32_t id) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  Stream& s = it->second;
  s.request_ended = true;
  if (s.reject != 0 || s.state != Stream::State::kReceiving || closing_) return;
  s.state = Stream::State::kPending;
  s.head = s.request.method == "HEAD";
  ++pending_;
  ++counters_->requests;
  HttpRequest request = std::move(s.request);
  request.id = static_cast<uint32_t>(id);
  // `s` may not outlive this call: the handler may Respond() or Shutdown().
  handler_(std::move(request));
}

void Http2Session::Reject(int32_t id, Stream* s, int status) {
  s->reject = status;
  s->request = HttpRequest{};
  if (s->reject_sent) return;
  s->reject_sent = true;
  s->state = Stream::State::kResponding;
  counters_->CountResponse(status);
  const std::string code = std::to_string(status);
  const nghttp2_nv nva[] = {Field(":status", code), Field("content-length", "0")};
  // On END_STREAM sent, OnFrameSend resets the stream if the client is
  // still sending.
  nghttp2_submit_response(session_, id, nva, std::size(nva), nullptr);
}

// ---------------------------------------------------------------- output

void Http2Session::Respond(uint32_t id, const HttpResponse& response) {
  if (closing_ || id == 0 || id > static_cast<uint32_t>(std::numeric_limits<int32_t>::max())) return;
  const auto stream_id = static_cast<int32_t>(id);
  auto it = streams_.find(stream_id);
  if (it == streams_.end() || it->second.state != Stream::State::kPending) return;
  Stream& s = it->second;
  s.state = Stream::State::kResponding;
  --pending_;
  const int status = response.status >= 200 && response.status <= 599 ? response.status : 500;
  counters_->CountResponse(status);

  const std::string code = std::to_string(status);
  const std::string length = std::to_string(response.body.size());
  nghttp2_nv nva[5];
  size_t n = 0;
  auto add = [&nva, &n](std::string_view name, std::string_view value) { nva[n++] = Field(name, value); };
  add(":status", code);
  if (!response.content_type.empty() && IsValidFieldValue(response.content_type)) {
    add("content-type", response.content_type);
  }
  if (!response.cache_control.empty() && IsValidFieldValue(response.cache_control)) {
    add("cache-control", response.cache_control);
  }
  if (!response.retry_after.empty() && IsValidFieldValue(response.retry_after)) {
    add("retry-after", response.retry_after);
  }
  add("content-length", length);
  nghttp2_data_provider body{};
  body.read_callback = ReadBody;
  const bool with_body = !response.body.empty() && !s.head;
  if (with_body) s.response.assign(response.body.begin(), response.body.end());
  // nghttp2 copies the fields; the body is read from the stream by ReadBody.
  nghttp2_submit_response(session_, stream_id, nva, n, with_body ? &body : nullptr);
}

ssize_t Http2Session::ReadBody(nghttp2_session* /*session*/, int32_t stream_id, uint8_t* buf, size_t length,
                               uint32_t* data_flags, nghttp2_data_source* /*source*/, void* user_data) {
  auto* self = static_cast<Http2Session*>(user_data);
  auto it = self->streams_.find(stream_id);
  if (it == self->streams_.end()) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  Stream& s = it->second;
  const size_t n = std::min(length, s.response.size() - s.response_off);
  if (n > 0) std::memcpy(buf, s.response.data() + s.response_off, n);
  s.response_off += n;
  if (s.response_off == s.response.size()) {
    *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    s.response = std::vector<uint8_t>();
    s.response_off = 0;
  }
  return static_cast<ssize_t>(n);
}

int Http2Session::OnFrameSend(nghttp2_session* session, const nghttp2_frame* frame, void* user_data) {
  auto* self = static_cast<Http2Session*>(user_data);
  if (frame->hd.type == NGHTTP2_GOAWAY && frame->goaway.error_code != NGHTTP2_NO_ERROR) {
    // nghttp2 ends the connection on its own: a connection error, or its
    // stream-reset rate limit (INTERNAL_ERROR right after an RST_STREAM).
    const bool reset_limit =
        frame->goaway.error_code == NGHTTP2_INTERNAL_ERROR && self->last_recv_type_ == NGHTTP2_RST_STREAM;
    self->CountClose(reset_limit ? CloseReason::kRapidReset : CloseReason::kProtocolError);
    self->Ending();
    return 0;
  }
  if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
      (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
    auto it = self->streams_.find(frame->hd.stream_id);
    if (it == self->streams_.end()) return 0;
    it->second.response_ended = true;
    // Answered before the request ended (413, 414, 431): the client may
    // stop sending (RFC 9113 8.1).
    if (!it->second.request_ended) {
      nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_NO_ERROR);
    }
  }
  return 0;
}

int Http2Session::OnStreamClose(nghttp2_session* /*session*/, int32_t stream_id, uint32_t /*error_code*/,
                                void* user_data) {
  auto* self = static_cast<Http2Session*>(user_data);
  auto it = self->streams_.find(stream_id);
  if (it == self->streams_.end()) return 0;
  if (it->second.state == Stream::State::kPending) --self->pending_;
  self->streams_.erase(it);
  return 0;
}

void Http2Session::TakeOutput(std::vector<uint8_t>* out) {
  // Inside the handler, nghttp2 is mid-read: Receive() serialises when done.
  if (!in_recv_) Drain();
  out->insert(out->end(), out_.begin(), out_.end());
  out_.clear();
}

void Http2Session::Drain() {
  if (session_ == nullptr) return;
  for (;;) {
    const uint8_t* data = nullptr;
    const ssize_t n = nghttp2_session_mem_send(session_, &data);
    if (n < 0) {
      CountClose(CloseReason::kProtocolError);
      Ending();
      return;
    }
    if (n == 0) return;
    out_.insert(out_.end(), data, data + n);
  }
}

void Http2Session::Shutdown() {
  if (shutdown_ || closing_) return;
  shutdown_ = true;
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(session_),
                        NGHTTP2_NO_ERROR, nullptr, 0);
  // Serialised now, so that streams the client opens from here on are
  // refused rather than handed over.
  if (!in_recv_) Drain();
}

void Http2Session::Close(CloseReason why, uint32_t error_code) {
  if (closing_) return;
  CountClose(why);
  Ending();
  // Queues the GOAWAY and has nghttp2 ignore the rest of its input.
  if (session_ != nullptr) nghttp2_session_terminate_session(session_, error_code);
}

void Http2Session::Ending() {
  closing_ = true;
  // Nothing is owed any more: later answers are dropped.
  for (auto& entry : streams_) {
    if (entry.second.state == Stream::State::kPending) entry.second.state = Stream::State::kResponding;
  }
  pending_ = 0;
}

void Http2Session::CountClose(CloseReason why) {
  if (close_counted_) return;
  close_counted_ = true;
  switch (why) {
    case CloseReason::kRapidReset:
      ++counters_->closed_rapid_reset;
      break;
    case CloseReason::kControlFlood:
      ++counters_->closed_control_flood;
      break;
    case CloseReason::kProtocolError:
      ++counters_->closed_protocol_error;
      break;
  }
}

}  // namespace

std::unique_ptr<HttpSession> MakeHttp2Session(const HttpLimits& limits, HttpCounters* counters,
                                              HttpSession::RequestHandler handler) {
  return std::make_unique<Http2Session>(limits, counters, std::move(handler));
}

}  // namespace weir::net
