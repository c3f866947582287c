// Fuzzes the HTTP/1.1 side of the DNS-over-HTTPS front
// (net::MakeHttp1Session) as the server runs it: what the client sends, in
// arbitrary pieces (pipelined requests, chunked bodies, 100-continue, split
// anywhere); every request answered at once (from inside the handler, while
// http-parser reads), later in any order, or only at the end; answers to ids
// unknown or already answered; now and then a Shutdown(); the output drained
// after every piece; reading paused while WantsRead() is false, as the
// server does. Small limits (chosen by the input) so the caps and the
// back-pressure are reached.
//
// The output is parsed back as responses (http-parser, HTTP_RESPONSE):
// well-formed, the final ones in request order, each with the status and
// body it was answered with; a response of the session's own (400, 413,
// 414, 431) only last, with "Connection: close", and nothing after a
// "Connection: close". Also: ids handed over in increasing order, within the
// caps; pending() exact and within max_concurrent_streams; once Receive() is
// false it stays false and Done() holds.
//
// Input: byte 0 seeds the piece sizes and the answers; byte 1 picks the
// limits; the rest is what the client sends.
#include <http_parser.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "weir/net/http_session.h"

namespace {

weir::net::HttpLimits LimitsFrom(uint8_t b) {
  weir::net::HttpLimits l;
  l.max_concurrent_streams = (b & 7) == 0 ? 100 : b & 7;
  if ((b & 8) != 0) l.max_header_bytes = 256;
  if ((b & 16) != 0) l.max_body_bytes = 64;
  if ((b & 32) != 0) l.max_target_bytes = 32;
  return l;
}

// What the session wrote, parsed as a client would, against what was
// handed over and answered.
class ResponseCheck {
 public:
  struct Owed {
    uint32_t id;
    bool head;
  };
  struct Answer {
    int status;
    std::string body;
  };

  ResponseCheck() {
    http_parser_init(&parser_, HTTP_RESPONSE);
    parser_.data = this;
    http_parser_settings_init(&settings_);
    settings_.on_message_begin = [](http_parser* p) {
      auto* self = static_cast<ResponseCheck*>(p->data);
      FUZZ_CHECK(!self->closed_);  // nothing after "Connection: close"
      self->body_.clear();
      self->field_.clear();
      self->close_ = false;
      return 0;
    };
    settings_.on_header_field = [](http_parser* p, const char* at, size_t len) {
      static_cast<ResponseCheck*>(p->data)->field_.assign(at, len);
      return 0;
    };
    settings_.on_header_value = [](http_parser* p, const char* at, size_t len) {
      auto* self = static_cast<ResponseCheck*>(p->data);
      if (self->field_ == "Connection" && std::string(at, len) == "close") self->close_ = true;
      return 0;
    };
    settings_.on_headers_complete = [](http_parser* p) {
      auto* self = static_cast<ResponseCheck*>(p->data);
      // A response to HEAD has a Content-Length but no body.
      return p->status_code != 100 && !self->owed_.empty() && self->owed_.front().head ? 1 : 0;
    };
    settings_.on_body = [](http_parser* p, const char* at, size_t len) {
      static_cast<ResponseCheck*>(p->data)->body_.append(at, len);
      return 0;
    };
    settings_.on_message_complete = [](http_parser* p) {
      static_cast<ResponseCheck*>(p->data)->Complete(p->status_code);
      return 0;
    };
  }

  void Handed(uint32_t id, bool head) { owed_.push_back({id, head}); }
  void Answered(uint32_t id, int status, std::string body) { answers_[id] = {status, std::move(body)}; }

  void Feed(const std::vector<uint8_t>& out, size_t from) {
    if (from == out.size()) return;
    const size_t n = http_parser_execute(&parser_, &settings_,
                                         reinterpret_cast<const char*>(out.data() + from), out.size() - from);
    FUZZ_CHECK(HTTP_PARSER_ERRNO(&parser_) == HPE_OK);
    FUZZ_CHECK(n == out.size() - from);
  }

 private:
  void Complete(int status) {
    if (status == 100) return;  // interim: "100 Continue"
    if (!owed_.empty()) {
      // The next response is the oldest request's, as it was answered.
      const Owed o = owed_.front();
      owed_.pop_front();
      auto it = answers_.find(o.id);
      FUZZ_CHECK(it != answers_.end());
      const int want = it->second.status >= 200 && it->second.status <= 599 ? it->second.status : 500;
      FUZZ_CHECK(status == want);
      FUZZ_CHECK(body_ == (o.head ? "" : it->second.body));
      answers_.erase(it);
    } else {
      // The session's own answer to a request it refused: the last one.
      FUZZ_CHECK(status == 400 || status == 413 || status == 414 || status == 431);
      FUZZ_CHECK(close_);
    }
    if (close_) closed_ = true;
  }

  http_parser parser_{};
  http_parser_settings settings_{};
  std::deque<Owed> owed_;
  std::map<uint32_t, Answer> answers_;
  std::string body_;
  std::string field_;
  bool close_ = false;
  bool closed_ = false;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using weir::net::HttpRequest;
  using weir::net::HttpResponse;
  using weir::net::HttpSession;
  if (size < 2 || size > 200000) return 0;
  uint32_t rng = data[0] * 2246822519u + 7;
  auto next = [&rng] {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
  };
  const weir::net::HttpLimits limits = LimitsFrom(data[1]);
  const std::span<const uint8_t> stream(data + 2, size - 2);

  weir::net::HttpCounters counters;
  ResponseCheck check;
  std::unique_ptr<HttpSession> s;
  uint32_t last_id = 0;
  size_t owed = 0;  // handed over, not answered
  bool shut_down = false;
  std::vector<uint32_t> later;
  std::vector<uint32_t> last;

  auto answer = [&](uint32_t id, bool known) {
    static const int kStatus[] = {200, 200, 200, 400, 404, 500, 99};
    // The id first, then up to the request's size in filler: output stays
    // proportional to the input.
    std::string body = {static_cast<char>(id >> 24), static_cast<char>(id >> 16), static_cast<char>(id >> 8),
                        static_cast<char>(id)};
    body.resize(4 + next() % 4, 'x');
    const int status = kStatus[next() % 7];
    if (known) {
      check.Answered(id, status, body);
      --owed;
    }
    HttpResponse r;
    r.status = status;
    r.content_type = next() % 2 == 0 ? "application/dns-message" : "";
    r.cache_control = next() % 3 == 0 ? "max-age=300" : "";
    r.body = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(body.data()), body.size());
    s->Respond(id, r);
  };

  s = weir::net::MakeHttp1Session(limits, &counters, [&](HttpRequest&& r) {
    FUZZ_CHECK(!shut_down);
    FUZZ_CHECK(r.id > last_id);
    last_id = r.id;
    FUZZ_CHECK(!r.method.empty());
    FUZZ_CHECK(r.target.size() <= limits.max_target_bytes);
    FUZZ_CHECK(r.body.size() <= limits.max_body_bytes);
    FUZZ_CHECK(r.content_type.size() + r.accept.size() <= limits.max_header_bytes);
    check.Handed(r.id, r.method == "HEAD");
    ++owed;
    FUZZ_CHECK(s->pending() == owed);
    FUZZ_CHECK(s->pending() <= limits.max_concurrent_streams);
    switch (next() % 4) {
      case 0:
        answer(r.id, true);  // from inside the handler, while http-parser reads
        break;
      case 1:
      case 2:
        later.push_back(r.id);
        break;
      default:
        last.push_back(r.id);
        break;
    }
  });

  const auto now = HttpSession::Clock::time_point{};
  std::vector<uint8_t> out;
  size_t fed = 0;
  bool open = true;
  auto drain = [&] {
    const size_t from = out.size();
    s->TakeOutput(&out);
    check.Feed(out, from);
    FUZZ_CHECK(out.size() <= 4096 + 64 * fed);
  };
  for (size_t pos = 0; pos < stream.size() && open;) {
    size_t n = next() % 8 == 0 ? 1 : next() % 700 + 1;
    if (n > stream.size() - pos) n = stream.size() - pos;
    // The server reads only while the session wants it (and once more
    // after, as a read in flight would), else it answers first.
    if (!s->WantsRead() && next() % 4 != 0) {
      if (!later.empty()) {
        answer(later.front(), true);
        later.erase(later.begin());
      } else if (!last.empty()) {
        answer(last.front(), true);
        last.erase(last.begin());
      }
      open = s->Receive({}, now);
    } else {
      open = s->Receive(stream.subspan(pos, n), now);
      pos += n;
      fed += n;
    }
    FUZZ_CHECK(!open || s->pending() == owed);
    while (!later.empty() && next() % 3 != 0) {
      const size_t i = next() % later.size();
      answer(later[i], true);
      later[i] = later.back();
      later.pop_back();
    }
    if (next() % 16 == 0) answer(next() % 64 + last_id + 1, false);
    if (next() % 64 == 0) {
      s->Shutdown();
      shut_down = true;
    }
    drain();
  }
  if (!open) {
    FUZZ_CHECK(s->Done());
    FUZZ_CHECK(!s->WantsRead());
    FUZZ_CHECK(s->pending() == 0);
    FUZZ_CHECK(!s->Receive(stream, now));
    drain();
    return 0;
  }
  for (uint32_t id : later) answer(id, true);
  for (uint32_t id : last) answer(id, true);
  FUZZ_CHECK(s->pending() == 0);
  FUZZ_CHECK(owed == 0);
  drain();
  // Every answer is out in order (ResponseCheck), or held behind a request
  // still being received.
  s->Shutdown();
  drain();
  FUZZ_CHECK(s->Done());
  return 0;
}
