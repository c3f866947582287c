// Fuzzes the HTTP/2 side of the DNS-over-HTTPS front (net::MakeHttp2Session)
// as the server runs it: what the client sends, in arbitrary pieces, the
// clock moving on between them; every request answered at once (from inside
// the handler, while nghttp2 is reading), later, or only at the end; answers
// to ids that are unknown or already answered; now and then a Shutdown(); the
// output drained after every piece. Small limits (chosen by the input) so the
// caps, the concurrent-stream bound and the flood limits are reached.
//
// Checks: every request handed over once, on an odd stream id, within the
// target and body caps; pending() within max_concurrent_streams and within
// what is owed; once Receive() is false it stays false and Done() holds;
// what the session writes is bounded by what it read; with everything
// answered, nothing is pending.
//
// Input: byte 0 seeds the piece sizes, the clock and the answers; byte 1
// picks the limits; the rest is what the client sends.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <span>
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
  if ((b & 64) != 0) l.max_client_resets = 3;
  if ((b & 128) != 0) l.max_control_frames = 5;
  return l;
}

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
  std::unique_ptr<HttpSession> s;
  std::set<uint32_t> handed;
  std::vector<uint32_t> later;  // answered after some pieces
  std::vector<uint32_t> last;   // answered only at the end
  std::set<uint32_t> answered;  // of those handed over

  auto answer = [&](uint32_t id) {
    // A body as long as the request's at most (an id otherwise), so the
    // output stays proportional to the input.
    static const int kStatus[] = {200, 200, 200, 400, 415, 500, 99};
    const uint8_t body[4] = {static_cast<uint8_t>(id >> 24), static_cast<uint8_t>(id >> 16),
                             static_cast<uint8_t>(id >> 8), static_cast<uint8_t>(id)};
    HttpResponse r;
    r.status = kStatus[next() % 7];
    r.content_type = next() % 2 == 0 ? "application/dns-message" : "";
    r.cache_control = next() % 3 == 0 ? "max-age=300" : "";
    r.body = std::span<const uint8_t>(body, next() % 5);
    s->Respond(id, r);
    if (handed.count(id) != 0) answered.insert(id);
  };

  s = weir::net::MakeHttp2Session(limits, &counters, [&](HttpRequest&& r) {
    FUZZ_CHECK(r.id % 2 == 1);
    FUZZ_CHECK(handed.insert(r.id).second);
    FUZZ_CHECK(!r.method.empty());
    FUZZ_CHECK(r.target.size() <= limits.max_target_bytes);
    FUZZ_CHECK(r.body.size() <= limits.max_body_bytes);
    FUZZ_CHECK(r.content_type.size() + r.accept.size() <= limits.max_header_bytes);
    FUZZ_CHECK(s->pending() <= limits.max_concurrent_streams);
    switch (next() % 4) {
      case 0:
        answer(r.id);  // from inside the handler, while nghttp2 reads
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

  auto now = HttpSession::Clock::time_point{} + std::chrono::hours(1);
  std::vector<uint8_t> out;
  size_t fed = 0;
  bool open = true;
  for (size_t pos = 0; pos < stream.size() && open;) {
    size_t n = next() % 8 == 0 ? 1 : next() % 700 + 1;
    if (n > stream.size() - pos) n = stream.size() - pos;
    now += std::chrono::milliseconds(next() % 256);
    open = s->Receive(stream.subspan(pos, n), now);
    pos += n;
    fed += n;
    FUZZ_CHECK(s->pending() <= limits.max_concurrent_streams);
    FUZZ_CHECK(s->pending() <= handed.size() - answered.size());
    // Answer some of those owed, and an id nobody asked for.
    while (!later.empty() && next() % 3 != 0) {
      const size_t i = next() % later.size();
      answer(later[i]);
      later[i] = later.back();
      later.pop_back();
    }
    if (next() % 16 == 0) answer(next() % 64);
    if (next() % 64 == 0) s->Shutdown();
    s->TakeOutput(&out);
    FUZZ_CHECK(out.size() <= 4096 + 64 * fed);
  }
  if (!open) {
    FUZZ_CHECK(s->Done());
    FUZZ_CHECK(!s->WantsRead());
    FUZZ_CHECK(s->pending() == 0);
    FUZZ_CHECK(!s->Receive(stream, now));
  }
  for (uint32_t id : later) answer(id);
  for (uint32_t id : last) answer(id);
  for (uint32_t id : handed) answer(id);  // twice: ignored
  s->TakeOutput(&out);
  FUZZ_CHECK(s->pending() == 0);
  FUZZ_CHECK(out.size() <= 4096 + 64 * fed);
  FUZZ_CHECK(counters.requests == handed.size());
  s->Shutdown();
  s->TakeOutput(&out);
  return 0;
}
