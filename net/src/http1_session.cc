// HTTP/1.1 for the DNS-over-HTTPS front: requests parsed by http-parser
// (HTTP_REQUEST), responses written in request order (http_session.h).
#include <http_parser.h>

#include <algorithm>
#include <deque>
#include <string>
#include <string_view>
#include <utility>

#include "weir/net/http_session.h"

namespace weir::net {
namespace {

constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

// Field names and these values are case-insensitive (RFC 9110 5.1).
bool EqualsIgnoreCase(std::string_view a, std::string_view lower) {
  return a.size() == lower.size() && std::equal(a.begin(), a.end(), lower.begin(), [](char x, char y) {
           return (x >= 'A' && x <= 'Z' ? static_cast<char>(x - 'A' + 'a') : x) == y;
         });
}

std::string_view TrimTrailingSpace(std::string_view v) {
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

class Http1Session final : public HttpSession {
 public:
  Http1Session(const HttpLimits& limits, HttpCounters* counters, RequestHandler handler);
  Http1Session(const Http1Session&) = delete;
  Http1Session& operator=(const Http1Session&) = delete;

  bool Receive(std::span<const uint8_t> bytes, Clock::time_point now) override;
  void Respond(uint32_t id, const HttpResponse& response) override;
  void TakeOutput(std::vector<uint8_t>* out) override {
    out->insert(out->end(), out_.begin(), out_.end());
    out_.clear();
  }
  size_t pending() const override { return pending_; }
  void Shutdown() override;
  bool Done() const override { return closing_ && slots_.empty(); }
  bool WantsRead() const override { return !closing_ && !OwedFull(); }

 private:
  // A request's place in the response order, from the end of its header
  // section (or its failure) until its response is written.
  struct Slot {
    enum class State : uint8_t { kReceiving, kPending, kAnswered };
    uint32_t id = 0;
    State state = State::kReceiving;
    bool head = false;
    bool keep_alive_1_0 = false;  // an HTTP/1.0 keep-alive request: the response says so
    bool send_continue = false;   // "100 Continue" owed before the body arrives
    int status = 0;
    std::string content_type;
    std::string cache_control;
    std::string retry_after;
    std::vector<uint8_t> body;
  };
  enum class CloseReason : uint8_t { kProtocolError, kLimit };

  // http-parser's callbacks (parser->data: the session).
  static int OnMessageBegin(http_parser* p);
  static int OnUrl(http_parser* p, const char* at, size_t len);
  static int OnHeaderField(http_parser* p, const char* at, size_t len);
  static int OnHeaderValue(http_parser* p, const char* at, size_t len);
  static int OnHeadersComplete(http_parser* p);
  static int OnBody(http_parser* p, const char* at, size_t len);
  static int OnMessageComplete(http_parser* p);
  static Http1Session* Self(http_parser* p) { return static_cast<Http1Session*>(p->data); }
  static http_parser_settings MakeSettings();
  static const http_parser_settings kSettings;

  // Parses `data` (not empty); returns how much was used (the rest is
  // held: parsing paused for back-pressure).
  size_t Parse(std::span<const uint8_t> data);
  bool Paused() const { return HTTP_PARSER_ERRNO(&parser_) == HPE_PAUSED; }
  bool OwedFull() const { return slots_.size() >= limits_.max_concurrent_streams; }
  bool AddHeaderBytes(size_t n);
  void CommitHeader();
  // Answers the request being read with `status` and closes after it.
  void Fail(int status, CloseReason why);
  // Ends the connection at once, nothing more written.
  void Abort(CloseReason why);
  void CountClose(CloseReason why);
  // Writes the answered responses at the front of the order.
  void Flush();
  void Write(const Slot& slot, bool last);

  HttpLimits limits_;
  HttpCounters own_counters_;
  HttpCounters* counters_;
  RequestHandler handler_;
  http_parser parser_{};
  std::deque<Slot> slots_;
  uint32_t next_id_ = 1;
  size_t pending_ = 0;
  std::vector<uint8_t> held_;
  std::vector<uint8_t> out_;
  bool closing_ = false;  // no further request is read; the last slot's response closes
  bool ended_ = false;    // Receive() returned false
  bool close_counted_ = false;
  // The message being parsed.
  HttpRequest request_;
  std::string field_;
  std::string value_;
  bool in_value_ = false;
  bool headers_done_ = false;  // what follows are trailers: counted, not kept
  bool expect_continue_ = false;
  size_t header_bytes_ = 0;
  int reject_ = 0;  // the status a callback failed the parse with
};

http_parser_settings Http1Session::MakeSettings() {
  http_parser_settings s;
  http_parser_settings_init(&s);
  s.on_message_begin = OnMessageBegin;
  s.on_url = OnUrl;
  s.on_header_field = OnHeaderField;
  s.on_header_value = OnHeaderValue;
  s.on_headers_complete = OnHeadersComplete;
  s.on_body = OnBody;
  s.on_message_complete = OnMessageComplete;
  return s;
}

const http_parser_settings Http1Session::kSettings = MakeSettings();

Http1Session::Http1Session(const HttpLimits& limits, HttpCounters* counters, RequestHandler handler)
    : limits_(limits),
      counters_(counters != nullptr ? counters : &own_counters_),
      handler_(std::move(handler)) {
  limits_.max_concurrent_streams = std::max<uint32_t>(limits_.max_concurrent_streams, 1);
  http_parser_init(&parser_, HTTP_REQUEST);
  parser_.data = this;
}

// ---------------------------------------------------------------- input

bool Http1Session::Receive(std::span<const uint8_t> bytes, Clock::time_point /*now*/) {
  if (ended_) return false;
  // The last request is read (or the server shuts down): nothing further is.
  if (closing_) return true;
  if (Paused() && !OwedFull()) http_parser_pause(&parser_, 0);
  if (Paused()) {
    // The caller read on while WantsRead() was false.
    if (held_.size() + bytes.size() > kMaxHeldBytes) {
      Abort(CloseReason::kLimit);
      return false;
    }
    held_.insert(held_.end(), bytes.begin(), bytes.end());
    return true;
  }
  std::vector<uint8_t> input;
  std::span<const uint8_t> data = bytes;
  if (!held_.empty()) {
    input = std::move(held_);
    held_.clear();
    input.insert(input.end(), bytes.begin(), bytes.end());
    data = input;
  }
  const size_t used = data.empty() ? 0 : Parse(data);
  if (!closing_ && used < data.size()) {
    if (data.size() - used > kMaxHeldBytes) {
      Abort(CloseReason::kLimit);
      return false;
    }
    held_.assign(data.begin() + static_cast<ptrdiff_t>(used), data.end());
  }
  return !ended_;
}

size_t Http1Session::Parse(std::span<const uint8_t> data) {
  const size_t n =
      http_parser_execute(&parser_, &kSettings, reinterpret_cast<const char*>(data.data()), data.size());
  const http_errno err = HTTP_PARSER_ERRNO(&parser_);
  if (err == HPE_PAUSED) return closing_ ? data.size() : n;
  if (err != HPE_OK) {
    if (reject_ != 0) {
      Fail(reject_, CloseReason::kLimit);
    } else if (err == HPE_HEADER_OVERFLOW) {
      Fail(431, CloseReason::kLimit);  // http-parser's own bound on the header section
    } else {
      Fail(400, CloseReason::kProtocolError);
    }
    return data.size();
  }
  // After an upgrade request (CONNECT, "Upgrade:") http-parser stops:
  // OnMessageComplete made it the last one (parser_.upgrade is set from the
  // end of its header section on, while its body may still be coming).
  return closing_ ? data.size() : n;
}

int Http1Session::OnMessageBegin(http_parser* p) {
  Http1Session* self = Self(p);
  self->request_ = HttpRequest{};
  self->field_.clear();
  self->value_.clear();
  self->in_value_ = false;
  self->headers_done_ = false;
  self->expect_continue_ = false;
  self->header_bytes_ = 0;
  self->reject_ = 0;
  return 0;
}

int Http1Session::OnUrl(http_parser* p, const char* at, size_t len) {
  Http1Session* self = Self(p);
  std::string& target = self->request_.target;
  if (len > self->limits_.max_target_bytes - target.size()) {
    self->reject_ = 414;
    return 1;
  }
  target.append(at, len);
  return 0;
}

bool Http1Session::AddHeaderBytes(size_t n) {
  header_bytes_ += n;
  if (header_bytes_ <= limits_.max_header_bytes) return true;
  reject_ = 431;
  return false;
}

int Http1Session::OnHeaderField(http_parser* p, const char* at, size_t len) {
  Http1Session* self = Self(p);
  if (self->in_value_) self->CommitHeader();
  if (!self->AddHeaderBytes(len)) return 1;
  self->field_.append(at, len);
  return 0;
}

int Http1Session::OnHeaderValue(http_parser* p, const char* at, size_t len) {
  Http1Session* self = Self(p);
  self->in_value_ = true;
  if (!self->AddHeaderBytes(len)) return 1;
  self->value_.append(at, len);
  return 0;
}

void Http1Session::CommitHeader() {
  in_value_ = false;
  if (!headers_done_) {
    const std::string_view value = TrimTrailingSpace(value_);
    if (EqualsIgnoreCase(field_, "content-type")) {
      if (request_.content_type.empty()) request_.content_type = value;
    } else if (EqualsIgnoreCase(field_, "accept")) {
      if (request_.accept.empty()) request_.accept = value;
    } else if (EqualsIgnoreCase(field_, "expect")) {
      expect_continue_ = EqualsIgnoreCase(value, "100-continue");
    }
  }
  field_.clear();
  value_.clear();
}

int Http1Session::OnHeadersComplete(http_parser* p) {
  Http1Session* self = Self(p);
  if (self->in_value_) self->CommitHeader();
  self->headers_done_ = true;
  const bool chunked = (p->flags & F_CHUNKED) != 0;
  const bool has_length = (p->flags & F_CONTENTLENGTH) != 0;
  if (has_length && p->content_length > self->limits_.max_body_bytes) {
    self->reject_ = 413;
    return -1;
  }
  Slot slot;
  slot.id = self->next_id_++;
  slot.head = p->method == HTTP_HEAD;
  // Asked to confirm before the body is sent (RFC 9110 10.1.1): in order,
  // once every earlier response is written.
  slot.send_continue = self->expect_continue_ && p->http_major == 1 && p->http_minor >= 1 &&
                       (chunked || (has_length && p->content_length > 0));
  self->slots_.push_back(std::move(slot));
  if (self->slots_.back().send_continue) self->Flush();
  return 0;
}

int Http1Session::OnBody(http_parser* p, const char* at, size_t len) {
  Http1Session* self = Self(p);
  std::vector<uint8_t>& body = self->request_.body;
  if (len > self->limits_.max_body_bytes - body.size()) {
    self->reject_ = 413;
    return 1;
  }
  body.insert(body.end(), at, at + len);
  return 0;
}

int Http1Session::OnMessageComplete(http_parser* p) {
  Http1Session* self = Self(p);
  if (self->in_value_) self->CommitHeader();  // a trailer
  if (self->slots_.empty() || self->slots_.back().state != Slot::State::kReceiving) return -1;
  Slot& slot = self->slots_.back();
  const bool keep_alive = http_should_keep_alive(p) != 0 && p->upgrade == 0;
  if (!keep_alive) self->closing_ = true;
  slot.keep_alive_1_0 = keep_alive && p->http_major == 1 && p->http_minor == 0;
  slot.state = Slot::State::kPending;
  slot.send_continue = false;  // the body is here: no need
  ++self->pending_;
  ++self->counters_->requests;
  HttpRequest request = std::move(self->request_);
  request.id = slot.id;
  request.method = http_method_str(static_cast<http_method>(p->method));
  // `slot` may not outlive this call: the handler may Respond().
  self->handler_(std::move(request));
  // Back-pressure, or the last request read: parse no further for now.
  if (self->closing_ || self->OwedFull()) http_parser_pause(p, 1);
  return 0;
}

void Http1Session::Fail(int status, CloseReason why) {
  CountClose(why);
  counters_->CountResponse(status);
  if (slots_.empty() || slots_.back().state != Slot::State::kReceiving) {
    Slot slot;
    slot.id = next_id_++;
    slots_.push_back(std::move(slot));
  }
  Slot& slot = slots_.back();
  slot.state = Slot::State::kAnswered;
  slot.status = status;
  slot.send_continue = false;
  closing_ = true;
  held_.clear();
  Flush();
  // Nothing owed ahead of it: it is written, the connection ends now.
  if (slots_.empty()) ended_ = true;
}

void Http1Session::Abort(CloseReason why) {
  CountClose(why);
  closing_ = true;
  ended_ = true;
  slots_.clear();
  pending_ = 0;
  held_.clear();
}

void Http1Session::CountClose(CloseReason why) {
  if (close_counted_) return;
  close_counted_ = true;
  if (why == CloseReason::kLimit) {
    ++counters_->closed_limit;
  } else {
    ++counters_->closed_protocol_error;
  }
}

// ---------------------------------------------------------------- output

void Http1Session::Respond(uint32_t id, const HttpResponse& response) {
  if (ended_ || slots_.empty() || id < slots_.front().id) return;
  const size_t at = id - slots_.front().id;
  if (at >= slots_.size()) return;
  Slot& slot = slots_[at];
  if (slot.id != id || slot.state != Slot::State::kPending) return;
  slot.state = Slot::State::kAnswered;
  slot.status = response.status >= 200 && response.status <= 599 ? response.status : 500;
  if (IsValidFieldValue(response.content_type)) slot.content_type = response.content_type;
  if (IsValidFieldValue(response.cache_control)) slot.cache_control = response.cache_control;
  if (IsValidFieldValue(response.retry_after)) slot.retry_after = response.retry_after;
  slot.body.assign(response.body.begin(), response.body.end());
  --pending_;
  counters_->CountResponse(slot.status);
  Flush();
}

void Http1Session::Flush() {
  while (!slots_.empty()) {
    Slot& front = slots_.front();
    if (front.send_continue) {
      out_.insert(out_.end(), kContinue.begin(), kContinue.end());
      front.send_continue = false;
    }
    if (front.state != Slot::State::kAnswered) return;
    Write(front, closing_ && slots_.size() == 1);
    slots_.pop_front();
  }
}

void Http1Session::Write(const Slot& slot, bool last) {
  const char* reason = http_status_str(static_cast<http_status>(slot.status));
  std::string head = "HTTP/1.1 " + std::to_string(slot.status) + " ";
  if (reason[0] != '<') head += reason;  // "<unknown>": no reason phrase
  head += "\r\n";
  if (!slot.content_type.empty()) head += "Content-Type: " + slot.content_type + "\r\n";
  if (!slot.cache_control.empty()) head += "Cache-Control: " + slot.cache_control + "\r\n";
  if (!slot.retry_after.empty()) head += "Retry-After: " + slot.retry_after + "\r\n";
  head += "Content-Length: " + std::to_string(slot.body.size()) + "\r\n";
  if (last) {
    head += "Connection: close\r\n";
  } else if (slot.keep_alive_1_0) {
    head += "Connection: keep-alive\r\n";
  }
  head += "\r\n";
  out_.insert(out_.end(), head.begin(), head.end());
  if (!slot.head) out_.insert(out_.end(), slot.body.begin(), slot.body.end());
}

void Http1Session::Shutdown() {
  if (closing_) return;
  closing_ = true;
  held_.clear();
  // A request still being received is dropped: the client sees the close.
  if (!slots_.empty() && slots_.back().state == Slot::State::kReceiving) slots_.pop_back();
  Flush();
}

}  // namespace

std::unique_ptr<HttpSession> MakeHttp1Session(const HttpLimits& limits, HttpCounters* counters,
                                              HttpSession::RequestHandler handler) {
  return std::make_unique<Http1Session>(limits, counters, std::move(handler));
}

}  // namespace weir::net
