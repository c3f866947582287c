#include "weir/net/http_session.h"

#include <gtest/gtest.h>
#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace weir::net {
namespace {

using Clock = HttpSession::Clock;
using std::chrono::milliseconds;
const Clock::time_point kT0 = Clock::time_point{} + std::chrono::hours(1);

std::vector<uint8_t> Bytes(std::string_view s) { return std::vector<uint8_t>(s.begin(), s.end()); }
std::string Text(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

// A session and what its handler was given. `answer_now`, when set, is
// called from inside the handler (so it may Respond() there).
struct Server {
  explicit Server(bool http2, HttpLimits l = {}) : limits(l) {
    auto handler = [this](HttpRequest&& r) {
      requests.push_back(r);
      if (answer_now) answer_now(requests.back());
    };
    session =
        http2 ? MakeHttp2Session(limits, &counters, handler) : MakeHttp1Session(limits, &counters, handler);
  }
  void Respond(uint32_t id, int status, std::string_view body,
               std::string_view type = "application/dns-message", std::string_view cache = "max-age=300") {
    const std::vector<uint8_t> b = Bytes(body);
    HttpResponse r;
    r.status = status;
    r.content_type = type;
    r.cache_control = cache;
    r.body = b;
    session->Respond(id, r);
  }
  std::string Output() {
    std::vector<uint8_t> out;
    session->TakeOutput(&out);
    return Text(out);
  }
  const HttpRequest* Find(uint32_t id) const {
    for (const HttpRequest& r : requests) {
      if (r.id == id) return &r;
    }
    return nullptr;
  }

  HttpLimits limits;
  HttpCounters counters;
  std::vector<HttpRequest> requests;
  std::function<void(const HttpRequest&)> answer_now;
  std::unique_ptr<HttpSession> session;
};

// ---------------------------------------------------------------- an nghttp2 client

// A real HTTP/2 client (nghttp2's client session) talking to the server
// session through memory.
class H2Client {
 public:
  struct Response {
    int status = 0;
    std::map<std::string, std::string> headers;
    std::string body;
    bool closed = false;
    uint32_t close_error = 0;
  };

  H2Client() {
    nghttp2_session_callbacks* cb = nullptr;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_header_callback(cb, OnHeader);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, OnData);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, OnClose);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, OnFrame);
    nghttp2_session_client_new(&session_, cb, this);
    nghttp2_session_callbacks_del(cb);
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, nullptr, 0);
  }
  ~H2Client() { nghttp2_session_del(session_); }
  H2Client(const H2Client&) = delete;
  H2Client& operator=(const H2Client&) = delete;

  // Submits a request; `body` goes in DATA frames (none when empty, unless
  // `hold_body`: then the stream stays open, its body never sent).
  int32_t Request(std::string_view method, std::string_view path,
                  const std::vector<std::pair<std::string, std::string>>& extra = {}, std::string body = "",
                  bool hold_body = false) {
    std::vector<std::pair<std::string, std::string>> fields = {{":method", std::string(method)},
                                                               {":scheme", "https"},
                                                               {":authority", "dns.example"},
                                                               {":path", std::string(path)}};
    fields.insert(fields.end(), extra.begin(), extra.end());
    std::vector<nghttp2_nv> nva;
    for (auto& [n, v] : fields) {
      nva.push_back({reinterpret_cast<uint8_t*>(n.data()), reinterpret_cast<uint8_t*>(v.data()), n.size(),
                     v.size(), NGHTTP2_NV_FLAG_NONE});
    }
    nghttp2_data_provider provider{};
    const bool with_body = !body.empty() || hold_body;
    if (with_body) {
      bodies_.push_back({std::move(body), 0, hold_body});
      provider.source.ptr = &bodies_.back();
      provider.read_callback = ReadBody;
    }
    return nghttp2_submit_request(session_, nullptr, nva.data(), nva.size(), with_body ? &provider : nullptr,
                                  nullptr);
  }
  void Reset(int32_t id) { nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL); }
  void Ping() { nghttp2_submit_ping(session_, NGHTTP2_FLAG_NONE, nullptr); }
  void Settings() {
    const nghttp2_settings_entry e{NGHTTP2_SETTINGS_ENABLE_PUSH, 0};
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, &e, 1);
  }

  // The bytes the client would write now.
  std::vector<uint8_t> Send() {
    std::vector<uint8_t> out;
    for (;;) {
      const uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(session_, &data);
      if (n <= 0) break;
      out.insert(out.end(), data, data + n);
    }
    return out;
  }
  void Deliver(const std::vector<uint8_t>& bytes) {
    if (bytes.empty()) return;
    ASSERT_EQ(nghttp2_session_mem_recv(session_, bytes.data(), bytes.size()),
              static_cast<ssize_t>(bytes.size()));
  }

  // Moves bytes both ways until neither side has any; the server's last
  // Receive() result in server_open (once false, the server is fed no more).
  void Pump(Server* server, Clock::time_point now) {
    for (int round = 0; round < 10000; ++round) {
      const std::vector<uint8_t> up = Send();
      if (!up.empty() && server_open) server_open = server->session->Receive(up, now);
      std::vector<uint8_t> down;
      server->session->TakeOutput(&down);
      Deliver(down);
      if (up.empty() && down.empty()) return;
    }
    ADD_FAILURE() << "the exchange never settled";
  }

  std::map<int32_t, Response> responses;
  bool goaway = false;
  uint32_t goaway_error = 0;
  int32_t goaway_last_stream = -1;
  bool server_open = true;

 private:
  struct Body {
    std::string data;
    size_t off = 0;
    bool hold = false;
  };
  static ssize_t ReadBody(nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t* flags,
                          nghttp2_data_source* source, void*) {
    auto* b = static_cast<Body*>(source->ptr);
    if (b->hold) return NGHTTP2_ERR_DEFERRED;
    const size_t n = std::min(length, b->data.size() - b->off);
    std::copy_n(b->data.begin() + static_cast<ptrdiff_t>(b->off), n, buf);
    b->off += n;
    if (b->off == b->data.size()) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return static_cast<ssize_t>(n);
  }
  static int OnHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
                      const uint8_t* value, size_t valuelen, uint8_t, void* user) {
    auto* self = static_cast<H2Client*>(user);
    const std::string n(reinterpret_cast<const char*>(name), namelen);
    const std::string v(reinterpret_cast<const char*>(value), valuelen);
    Response& r = self->responses[frame->hd.stream_id];
    if (n == ":status") {
      r.status = std::stoi(v);
    } else {
      r.headers[n] = v;
    }
    return 0;
  }
  static int OnData(nghttp2_session*, uint8_t, int32_t id, const uint8_t* data, size_t len, void* user) {
    static_cast<H2Client*>(user)->responses[id].body.append(reinterpret_cast<const char*>(data), len);
    return 0;
  }
  static int OnClose(nghttp2_session*, int32_t id, uint32_t error, void* user) {
    Response& r = static_cast<H2Client*>(user)->responses[id];
    r.closed = true;
    r.close_error = error;
    return 0;
  }
  static int OnFrame(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    auto* self = static_cast<H2Client*>(user);
    if (frame->hd.type == NGHTTP2_GOAWAY) {
      self->goaway = true;
      self->goaway_error = frame->goaway.error_code;
      self->goaway_last_stream = frame->goaway.last_stream_id;
    }
    return 0;
  }

  nghttp2_session* session_ = nullptr;
  std::list<Body> bodies_;  // stable addresses for the data providers
};

// A raw frame header (RFC 9113 4.1) and payload, for frames nghttp2's client
// would not send the way a flood does.
std::vector<uint8_t> Frame(uint8_t type, uint8_t flags, uint32_t stream,
                           const std::vector<uint8_t>& payload) {
  const size_t n = payload.size();
  std::vector<uint8_t> f = {static_cast<uint8_t>(n >> 16),
                            static_cast<uint8_t>(n >> 8),
                            static_cast<uint8_t>(n),
                            type,
                            flags,
                            static_cast<uint8_t>(stream >> 24),
                            static_cast<uint8_t>(stream >> 16),
                            static_cast<uint8_t>(stream >> 8),
                            static_cast<uint8_t>(stream)};
  f.insert(f.end(), payload.begin(), payload.end());
  return f;
}

// ---------------------------------------------------------------- HTTP/2

TEST(Http2Session, GetAndPostThroughARealClient) {
  Server server(true);
  // The POST is answered from inside the handler (during mem_recv), the
  // GET later.
  server.answer_now = [&server](const HttpRequest& r) {
    if (r.method == "POST") server.Respond(r.id, 200, "answer-to-post");
  };
  H2Client client;
  const int32_t get = client.Request("GET", "/dns-query?dns=AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB",
                                     {{"accept", "application/dns-message"}});
  const int32_t post = client.Request(
      "POST", "/dns-query",
      {{"content-type", "application/dns-message"}, {"accept", "application/dns-message"}}, "\x12\x34query");
  client.Pump(&server, kT0);

  ASSERT_EQ(server.requests.size(), 2u);
  const HttpRequest* g = server.Find(static_cast<uint32_t>(get));
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->method, "GET");
  EXPECT_EQ(g->target, "/dns-query?dns=AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB");
  EXPECT_EQ(g->accept, "application/dns-message");
  EXPECT_EQ(g->content_type, "");
  EXPECT_TRUE(g->body.empty());
  const HttpRequest* p = server.Find(static_cast<uint32_t>(post));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->method, "POST");
  EXPECT_EQ(p->target, "/dns-query");
  EXPECT_EQ(p->content_type, "application/dns-message");
  EXPECT_EQ(Text(p->body), "\x12\x34query");

  // The POST's answer is out already; the GET's is owed.
  EXPECT_EQ(client.responses[post].status, 200);
  EXPECT_EQ(client.responses[post].body, "answer-to-post");
  EXPECT_EQ(client.responses[get].status, 0);
  EXPECT_EQ(server.session->pending(), 1u);

  server.Respond(static_cast<uint32_t>(get), 200, "answer-to-get");
  client.Pump(&server, kT0);
  const H2Client::Response& r = client.responses[get];
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "answer-to-get");
  EXPECT_EQ(r.headers.at("content-type"), "application/dns-message");
  EXPECT_EQ(r.headers.at("cache-control"), "max-age=300");
  EXPECT_EQ(r.headers.at("content-length"), "13");
  EXPECT_TRUE(r.closed);
  EXPECT_EQ(r.close_error, NGHTTP2_NO_ERROR);
  EXPECT_EQ(server.session->pending(), 0u);
  EXPECT_EQ(server.counters.requests, 2u);
  EXPECT_EQ(server.counters.responses_2xx, 2u);
  EXPECT_TRUE(client.server_open);
  EXPECT_FALSE(server.session->Done());
  EXPECT_TRUE(server.session->WantsRead());
}

TEST(Http2Session, ResponseWithoutBodyOrOptionalHeaders) {
  Server server(true);
  H2Client client;
  const int32_t id = client.Request("GET", "/dns-query?dns=AA");
  client.Pump(&server, kT0);
  server.Respond(static_cast<uint32_t>(id), 400, "", "", "");
  client.Pump(&server, kT0);
  const H2Client::Response& r = client.responses[id];
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body, "");
  EXPECT_EQ(r.headers.count("content-type"), 0u);
  EXPECT_EQ(r.headers.count("cache-control"), 0u);
  EXPECT_EQ(r.headers.at("content-length"), "0");
  EXPECT_EQ(server.counters.responses_4xx, 1u);
}

TEST(Http2Session, ManyConcurrentStreamsAnsweredOutOfOrder) {
  Server server(true);
  H2Client client;
  std::vector<int32_t> ids;
  for (int i = 0; i < 60; ++i) {
    ids.push_back(client.Request("POST", "/dns-query?n=" + std::to_string(i),
                                 {{"content-type", "application/dns-message"}}, "body-" + std::to_string(i)));
  }
  client.Pump(&server, kT0);
  ASSERT_EQ(server.requests.size(), 60u);
  EXPECT_EQ(server.session->pending(), 60u);
  // Answer in reverse, then every other one twice (the second is ignored).
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    const HttpRequest* r = server.Find(static_cast<uint32_t>(*it));
    ASSERT_NE(r, nullptr);
    server.Respond(r->id, 200, "for " + r->target + " " + Text(r->body));
    if (*it % 4 == 1) server.Respond(r->id, 500, "again");
  }
  client.Pump(&server, kT0);
  for (int i = 0; i < 60; ++i) {
    const H2Client::Response& r = client.responses[ids[i]];
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "for /dns-query?n=" + std::to_string(i) + " body-" + std::to_string(i));
  }
  EXPECT_EQ(server.session->pending(), 0u);
  EXPECT_EQ(server.counters.responses_2xx, 60u);
  EXPECT_EQ(server.counters.responses_5xx, 0u);
}

TEST(Http2Session, StreamsBeyondTheLimitAreRefused) {
  HttpLimits limits;
  limits.max_concurrent_streams = 2;
  Server server(true, limits);
  H2Client client;
  // Sent before the client has seen the server's SETTINGS.
  const int32_t a = client.Request("GET", "/dns-query?dns=a");
  const int32_t b = client.Request("GET", "/dns-query?dns=b");
  const int32_t c = client.Request("GET", "/dns-query?dns=c");
  client.Pump(&server, kT0);
  EXPECT_EQ(server.requests.size(), 2u);
  EXPECT_EQ(server.session->pending(), 2u);
  EXPECT_TRUE(client.responses[c].closed);
  EXPECT_EQ(client.responses[c].close_error, NGHTTP2_REFUSED_STREAM);
  server.Respond(static_cast<uint32_t>(a), 200, "a");
  server.Respond(static_cast<uint32_t>(b), 200, "b");
  client.Pump(&server, kT0);
  EXPECT_EQ(client.responses[a].body, "a");
  EXPECT_EQ(client.responses[b].body, "b");
}

TEST(Http2Session, ResponseAfterTheClientResetTheStreamIsIgnored) {
  Server server(true);
  H2Client client;
  const int32_t id = client.Request("GET", "/dns-query?dns=AA");
  client.Pump(&server, kT0);
  ASSERT_EQ(server.requests.size(), 1u);
  EXPECT_EQ(server.session->pending(), 1u);
  client.Reset(id);
  client.Pump(&server, kT0);
  EXPECT_EQ(server.session->pending(), 0u);
  EXPECT_EQ(server.counters.streams_reset_by_client, 1u);

  server.Respond(static_cast<uint32_t>(id), 200, "late");
  EXPECT_EQ(server.Output(), "");
  EXPECT_EQ(client.responses[id].status, 0);

  // The connection carries on.
  const int32_t next = client.Request("GET", "/dns-query?dns=BB");
  client.Pump(&server, kT0);
  server.Respond(static_cast<uint32_t>(next), 200, "fine");
  client.Pump(&server, kT0);
  EXPECT_EQ(client.responses[next].body, "fine");
  EXPECT_TRUE(client.server_open);
}

TEST(Http2Session, RapidResetClosesTheSession) {
  Server server(true);  // max_client_resets 100 per second
  H2Client client;
  for (int i = 0; i < 101 && client.server_open; ++i) {
    const int32_t id = client.Request("GET", "/dns-query?dns=AA");
    client.Pump(&server, kT0 + milliseconds(i));
    client.Reset(id);
    client.Pump(&server, kT0 + milliseconds(i));
  }
  EXPECT_FALSE(client.server_open);
  EXPECT_TRUE(client.goaway);
  EXPECT_EQ(client.goaway_error, NGHTTP2_ENHANCE_YOUR_CALM);
  EXPECT_EQ(server.counters.streams_reset_by_client, 101u);
  EXPECT_EQ(server.counters.closed_rapid_reset, 1u);
  EXPECT_EQ(server.session->pending(), 0u);
  EXPECT_TRUE(server.session->Done());
  EXPECT_FALSE(server.session->WantsRead());
  const std::vector<uint8_t> more = client.Send();
  EXPECT_FALSE(server.session->Receive(Bytes("anything"), kT0 + milliseconds(200)));
}

TEST(Http2Session, ResetsSpreadOverTimeAreFine) {
  Server server(true);
  H2Client client;
  // 300 resets at 40 a second: under 100 in any window.
  for (int i = 0; i < 300; ++i) {
    const auto now = kT0 + milliseconds(25 * i);
    const int32_t id = client.Request("GET", "/dns-query?dns=AA");
    client.Pump(&server, now);
    client.Reset(id);
    client.Pump(&server, now);
  }
  EXPECT_TRUE(client.server_open);
  EXPECT_FALSE(client.goaway);
  EXPECT_EQ(server.counters.streams_reset_by_client, 300u);
  EXPECT_EQ(server.counters.closed_rapid_reset, 0u);
}

TEST(Http2Session, ResetOfARequestStillBeingSentCounts) {
  Server server(true);
  H2Client client;
  const int32_t id = client.Request("POST", "/dns-query", {}, "", /*hold_body=*/true);
  client.Pump(&server, kT0);
  EXPECT_TRUE(server.requests.empty());
  client.Reset(id);
  client.Pump(&server, kT0);
  EXPECT_EQ(server.counters.streams_reset_by_client, 1u);
  EXPECT_EQ(server.session->pending(), 0u);
  EXPECT_TRUE(client.server_open);
}

TEST(Http2Session, ResetsOfAnsweredStreamsCountAsControlFrames) {
  Server server(true);
  server.answer_now = [&server](const HttpRequest& r) { server.Respond(r.id, 200, "x"); };
  H2Client client;
  std::vector<int32_t> ids;
  for (int i = 0; i < 60; ++i) ids.push_back(client.Request("GET", "/dns-query?dns=AA"));
  client.Pump(&server, kT0);
  ASSERT_EQ(server.counters.responses_2xx, 60u);
  // RST_STREAM of streams answered and closed (nghttp2's client would not
  // send them): no rapid reset, yet not free.
  std::vector<uint8_t> resets;
  for (int32_t id : ids) {
    const std::vector<uint8_t> f = Frame(NGHTTP2_RST_STREAM, 0, static_cast<uint32_t>(id), {0, 0, 0, 8});
    resets.insert(resets.end(), f.begin(), f.end());
  }
  EXPECT_TRUE(server.session->Receive(resets, kT0 + std::chrono::seconds(5)));
  EXPECT_EQ(server.counters.streams_reset_by_client, 0u);
  EXPECT_FALSE(server.session->Receive(resets, kT0 + std::chrono::seconds(5)));
  EXPECT_EQ(server.counters.closed_rapid_reset, 0u);
  EXPECT_EQ(server.counters.closed_control_flood, 1u);
}

TEST(Http2Session, PingFloodClosesTheSession) {
  Server server(true);
  H2Client client;
  client.Pump(&server, kT0);
  for (int i = 0; i < 101; ++i) client.Ping();
  client.Pump(&server, kT0 + milliseconds(10));
  EXPECT_FALSE(client.server_open);
  EXPECT_TRUE(client.goaway);
  EXPECT_EQ(client.goaway_error, NGHTTP2_ENHANCE_YOUR_CALM);
  EXPECT_EQ(server.counters.closed_control_flood, 1u);
  EXPECT_TRUE(server.session->Done());
}

TEST(Http2Session, SettingsFloodClosesTheSession) {
  Server server(true);
  H2Client client;
  client.Pump(&server, kT0);
  for (int i = 0; i < 101; ++i) client.Settings();
  client.Pump(&server, kT0 + milliseconds(10));
  EXPECT_FALSE(client.server_open);
  EXPECT_EQ(client.goaway_error, NGHTTP2_ENHANCE_YOUR_CALM);
  EXPECT_EQ(server.counters.closed_control_flood, 1u);
}

TEST(Http2Session, PingsAtAModestRateAreFine) {
  Server server(true);
  H2Client client;
  // 50 a second, for 5 seconds.
  for (int half = 0; half < 10; ++half) {
    for (int i = 0; i < 25; ++i) client.Ping();
    client.Pump(&server, kT0 + milliseconds(500 * half));
  }
  EXPECT_TRUE(client.server_open);
  EXPECT_FALSE(client.goaway);
  EXPECT_EQ(server.counters.closed_control_flood, 0u);
}

TEST(Http2Session, EmptyDataAndWindowUpdateFloodsCloseTheSession) {
  for (const bool data : {true, false}) {
    Server server(true);
    H2Client client;
    // A request whose body never comes: its stream stays open.
    const int32_t id = client.Request("POST", "/dns-query", {}, "", /*hold_body=*/true);
    client.Pump(&server, kT0);
    ASSERT_TRUE(client.server_open);
    std::vector<uint8_t> flood;
    for (int i = 0; i < 101; ++i) {
      const std::vector<uint8_t> f = data ? Frame(NGHTTP2_DATA, 0, static_cast<uint32_t>(id), {})
                                          : Frame(NGHTTP2_WINDOW_UPDATE, 0, 0, {0, 0, 0, 1});
      flood.insert(flood.end(), f.begin(), f.end());
    }
    EXPECT_FALSE(server.session->Receive(flood, kT0 + milliseconds(1))) << (data ? "DATA" : "WINDOW_UPDATE");
    EXPECT_EQ(server.counters.closed_control_flood, 1u);
    client.Deliver(Bytes(server.Output()));
    EXPECT_EQ(client.goaway_error, NGHTTP2_ENHANCE_YOUR_CALM);
  }
}

TEST(Http2Session, HeaderCapAnswers431) {
  Server server(true);
  H2Client client;
  const int32_t id = client.Request("GET", "/dns-query?dns=AA", {{"x-pad", std::string(9000, 'p')}});
  client.Pump(&server, kT0);
  EXPECT_TRUE(server.requests.empty());
  EXPECT_EQ(client.responses[id].status, 431);
  EXPECT_TRUE(client.responses[id].closed);
  EXPECT_EQ(server.counters.responses_4xx, 1u);
  // Within the cap, the same connection serves.
  const int32_t ok = client.Request("GET", "/dns-query?dns=AA", {{"x-pad", std::string(7000, 'p')}});
  client.Pump(&server, kT0);
  ASSERT_EQ(server.requests.size(), 1u);
  EXPECT_EQ(server.requests[0].id, static_cast<uint32_t>(ok));
  EXPECT_TRUE(client.server_open);
}

TEST(Http2Session, TargetCapAnswers414) {
  Server server(true);
  H2Client client;
  const int32_t id = client.Request("GET", "/dns-query?dns=" + std::string(4100, 'A'));
  client.Pump(&server, kT0);
  EXPECT_TRUE(server.requests.empty());
  EXPECT_EQ(client.responses[id].status, 414);
  EXPECT_TRUE(client.server_open);
}

TEST(Http2Session, BodyCapAnswers413AndEndsTheStream) {
  Server server(true);
  H2Client client;
  // No content-length: the cap is found in the DATA; the stream's window
  // (cap + 1) stops the client right after it.
  const int32_t id = client.Request("POST", "/dns-query", {}, std::string(70000, 'b'));
  client.Pump(&server, kT0);
  EXPECT_TRUE(server.requests.empty());
  EXPECT_EQ(client.responses[id].status, 413);
  EXPECT_TRUE(client.responses[id].closed);
  // A content-length above the cap: 413 before the body.
  const int32_t declared =
      client.Request("POST", "/dns-query", {{"content-length", "70000"}}, std::string(70000, 'b'));
  client.Pump(&server, kT0);
  EXPECT_EQ(client.responses[declared].status, 413);
  EXPECT_TRUE(client.responses[declared].closed);
  // At the cap exactly: handed over.
  const int32_t at_cap = client.Request("POST", "/dns-query", {}, std::string(65535, 'c'));
  client.Pump(&server, kT0);
  ASSERT_EQ(server.requests.size(), 1u);
  EXPECT_EQ(server.requests[0].id, static_cast<uint32_t>(at_cap));
  EXPECT_EQ(server.requests[0].body.size(), 65535u);
  EXPECT_EQ(server.counters.responses_4xx, 2u);
  EXPECT_TRUE(client.server_open);
}

TEST(Http2Session, ShutdownSendsGoawayAndAnswersWhatWasAccepted) {
  Server server(true);
  H2Client client;
  const int32_t a = client.Request("GET", "/dns-query?dns=a");
  const int32_t b = client.Request("GET", "/dns-query?dns=b");
  client.Pump(&server, kT0);
  ASSERT_EQ(server.requests.size(), 2u);
  // A request on its way while the server shuts down.
  const int32_t late = client.Request("GET", "/dns-query?dns=late");
  const std::vector<uint8_t> in_flight = client.Send();

  server.session->Shutdown();
  const std::vector<uint8_t> goaway = Bytes(server.Output());
  EXPECT_TRUE(server.session->Receive(in_flight, kT0));
  EXPECT_EQ(server.requests.size(), 2u);  // the late one is not handed over
  client.Deliver(goaway);
  EXPECT_TRUE(client.goaway);
  EXPECT_EQ(client.goaway_error, NGHTTP2_NO_ERROR);
  EXPECT_EQ(client.goaway_last_stream, b);
  EXPECT_FALSE(server.session->Done());

  server.Respond(static_cast<uint32_t>(b), 200, "b");
  client.Pump(&server, kT0);
  EXPECT_FALSE(server.session->Done());
  server.Respond(static_cast<uint32_t>(a), 200, "a");
  client.Pump(&server, kT0);
  EXPECT_EQ(client.responses[a].body, "a");
  EXPECT_EQ(client.responses[b].body, "b");
  EXPECT_EQ(client.responses[late].status, 0);
  EXPECT_TRUE(server.session->Done());
  EXPECT_FALSE(server.session->WantsRead());
}

TEST(Http2Session, ClientGoawayEndsTheSessionOnceAnswered) {
  Server server(true);
  H2Client client;
  const int32_t id = client.Request("GET", "/dns-query?dns=a");
  client.Pump(&server, kT0);
  std::vector<uint8_t> goaway = Frame(NGHTTP2_GOAWAY, 0, 0, {0, 0, 0, 0, 0, 0, 0, 0});
  EXPECT_TRUE(server.session->Receive(goaway, kT0));
  EXPECT_FALSE(server.session->Done());
  server.Respond(static_cast<uint32_t>(id), 200, "a");
  server.Output();
  EXPECT_TRUE(server.session->Done());
}

TEST(Http2Session, NotHttp2EndsTheSession) {
  Server server(true);
  EXPECT_FALSE(server.session->Receive(Bytes("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), kT0));
  EXPECT_EQ(server.counters.closed_protocol_error, 1u);
  EXPECT_TRUE(server.session->Done());
  EXPECT_FALSE(server.session->Receive(Bytes("more"), kT0));
}

TEST(Http2Session, ByteAtATime) {
  Server server(true);
  H2Client client;
  const int32_t id =
      client.Request("POST", "/dns-query", {{"content-type", "application/dns-message"}}, "abc");
  const std::vector<uint8_t> up = client.Send();
  for (size_t i = 0; i < up.size(); ++i) {
    ASSERT_TRUE(server.session->Receive(std::span<const uint8_t>(&up[i], 1), kT0));
  }
  ASSERT_EQ(server.requests.size(), 1u);
  EXPECT_EQ(server.requests[0].id, static_cast<uint32_t>(id));
  EXPECT_EQ(Text(server.requests[0].body), "abc");
}

// ---------------------------------------------------------------- HTTP/1.1

TEST(Http1Session, GetKeepAlive) {
  Server server(false);
  ASSERT_TRUE(server.session->Receive(Bytes("GET /dns-query?dns=AAAB HTTP/1.1\r\nHost: dns.example\r\n"
                                            "Accept: application/dns-message\r\n\r\n"),
                                      kT0));
  ASSERT_EQ(server.requests.size(), 1u);
  const HttpRequest& r = server.requests[0];
  EXPECT_EQ(r.id, 1u);
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.target, "/dns-query?dns=AAAB");
  EXPECT_EQ(r.accept, "application/dns-message");
  EXPECT_EQ(server.session->pending(), 1u);
  server.Respond(1, 200, "abc");
  EXPECT_EQ(server.Output(),
            "HTTP/1.1 200 OK\r\nContent-Type: application/dns-message\r\nCache-Control: max-age=300\r\n"
            "Content-Length: 3\r\n\r\nabc");
  EXPECT_FALSE(server.session->Done());
  EXPECT_TRUE(server.session->WantsRead());
  EXPECT_EQ(server.counters.requests, 1u);
  EXPECT_EQ(server.counters.responses_2xx, 1u);
}

TEST(Http1Session, PipelinedRequestsAreAnsweredInOrder) {
  Server server(false);
  ASSERT_TRUE(
      server.session->Receive(Bytes("GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
                                    "POST /b HTTP/1.1\r\nHost: x\r\nContent-Type: application/dns-message\r\n"
                                    "Content-Length: 2\r\n\r\nhi"
                                    "GET /c HTTP/1.1\r\nHost: x\r\n\r\n"),
                              kT0));
  ASSERT_EQ(server.requests.size(), 3u);
  EXPECT_EQ(server.requests[1].id, 2u);
  EXPECT_EQ(server.requests[1].target, "/b");
  EXPECT_EQ(server.requests[1].content_type, "application/dns-message");
  EXPECT_EQ(Text(server.requests[1].body), "hi");
  server.Respond(3, 200, "three", "", "");
  EXPECT_EQ(server.Output(), "");  // held until 1 and 2 are out
  server.Respond(1, 200, "one", "", "");
  EXPECT_EQ(server.Output(), "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none");
  server.Respond(2, 404, "", "", "");
  EXPECT_EQ(server.Output(),
            "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nthree");
  server.Respond(2, 200, "again", "", "");  // answered already: ignored
  EXPECT_EQ(server.Output(), "");
  EXPECT_EQ(server.session->pending(), 0u);
}

TEST(Http1Session, ChunkedBodySplitAnywhere) {
  Server server(false);
  const std::string req =
      "POST /dns-query HTTP/1.1\r\nHost: x\r\nContent-Type: application/dns-message\r\n"
      "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
  for (char c : req) ASSERT_TRUE(server.session->Receive(Bytes(std::string_view(&c, 1)), kT0));
  ASSERT_EQ(server.requests.size(), 1u);
  EXPECT_EQ(Text(server.requests[0].body), "abcde");
}

TEST(Http1Session, ExpectContinue) {
  Server server(false);
  ASSERT_TRUE(server.session->Receive(Bytes("POST /dns-query HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
                                            "Expect: 100-continue\r\n\r\n"),
                                      kT0));
  EXPECT_EQ(server.Output(), "HTTP/1.1 100 Continue\r\n\r\n");
  EXPECT_TRUE(server.requests.empty());
  ASSERT_TRUE(server.session->Receive(Bytes("body"), kT0));
  ASSERT_EQ(server.requests.size(), 1u);
  server.Respond(1, 200, "ok", "", "");
  EXPECT_EQ(server.Output(), "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
}

TEST(Http1Session, ExpectContinueWaitsForEarlierResponses) {
  Server server(false);
  ASSERT_TRUE(server.session->Receive(Bytes("GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
                                            "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n"
                                            "Expect: 100-continue\r\n\r\n"),
                                      kT0));
  EXPECT_EQ(server.Output(), "");
  server.Respond(1, 200, "a", "", "");
  EXPECT_EQ(server.Output(), "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\naHTTP/1.1 100 Continue\r\n\r\n");
}

TEST(Http1Session, BodyOverTheCapAnswers413AndCloses) {
  for (const std::string& req : std::vector<std::string>{
           "POST /dns-query HTTP/1.1\r\nHost: x\r\nContent-Length: 70000\r\n\r\n",
           "POST /dns-query HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10000\r\n" +
               std::string(65536, 'b')}) {
    Server server(false);
    EXPECT_FALSE(server.session->Receive(Bytes(req), kT0));
    EXPECT_EQ(server.Output(),
              "HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    EXPECT_TRUE(server.session->Done());
    EXPECT_TRUE(server.requests.empty());
    EXPECT_EQ(server.counters.closed_limit, 1u);
    EXPECT_EQ(server.counters.responses_4xx, 1u);
    EXPECT_FALSE(server.session->Receive(Bytes("GET / HTTP/1.1\r\n\r\n"), kT0));
  }
}

TEST(Http1Session, TargetOverTheCapAnswers414) {
  Server server(false);
  EXPECT_FALSE(
      server.session->Receive(Bytes("GET /dns-query?dns=" + std::string(5000, 'A') + " HTTP/1.1\r\n"), kT0));
  EXPECT_EQ(server.Output(), "HTTP/1.1 414 URI Too Long\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(server.session->Done());
  EXPECT_EQ(server.counters.closed_limit, 1u);
}

TEST(Http1Session, HeadersOverTheCapAnswer431) {
  Server server(false);
  EXPECT_FALSE(
      server.session->Receive(Bytes("GET / HTTP/1.1\r\nX-Pad: " + std::string(9000, 'p') + "\r\n\r\n"), kT0));
  EXPECT_EQ(server.Output(),
            "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(server.session->Done());
}

TEST(Http1Session, MalformedRequestAnswers400) {
  Server server(false);
  EXPECT_FALSE(server.session->Receive(Bytes("\x01\x02 garbage\r\n\r\n"), kT0));
  EXPECT_EQ(server.Output(), "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(server.session->Done());
  EXPECT_EQ(server.counters.closed_protocol_error, 1u);
}

TEST(Http1Session, MalformedRequestBehindOwedResponsesWaitsForThem) {
  Server server(false);
  // The 400 must not be taken for request 1's answer: it follows it.
  EXPECT_TRUE(
      server.session->Receive(Bytes("GET /a HTTP/1.1\r\nHost: x\r\n\r\nBAD\x01 request\r\n\r\n"), kT0));
  EXPECT_EQ(server.Output(), "");
  EXPECT_FALSE(server.session->WantsRead());
  EXPECT_FALSE(server.session->Done());
  server.Respond(1, 200, "a", "", "");
  EXPECT_EQ(server.Output(),
            "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na"
            "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(server.session->Done());
}

TEST(Http1Session, ConnectionCloseFromTheClient) {
  Server server(false);
  ASSERT_TRUE(server.session->Receive(Bytes("GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                                            "GET /ignored HTTP/1.1\r\nHost: x\r\n\r\n"),
                                      kT0));
  ASSERT_EQ(server.requests.size(), 1u);
  EXPECT_FALSE(server.session->WantsRead());
  EXPECT_FALSE(server.session->Done());
  server.Respond(1, 200, "a", "", "");
  EXPECT_EQ(server.Output(), "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\na");
  EXPECT_TRUE(server.session->Done());
  EXPECT_EQ(server.requests.size(), 1u);
}

TEST(Http1Session, Http10) {
  {
    Server server(false);
    ASSERT_TRUE(server.session->Receive(Bytes("GET /a HTTP/1.0\r\n\r\n"), kT0));
    ASSERT_EQ(server.requests.size(), 1u);
    server.Respond(1, 200, "a", "", "");
    EXPECT_EQ(server.Output(), "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\na");
    EXPECT_TRUE(server.session->Done());
  }
  {
    Server server(false);
    ASSERT_TRUE(server.session->Receive(Bytes("GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"), kT0));
    server.Respond(1, 200, "a", "", "");
    EXPECT_EQ(server.Output(), "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: keep-alive\r\n\r\na");
    EXPECT_FALSE(server.session->Done());
  }
}

TEST(Http1Session, UpgradeRequestIsTheLastOneEvenWithABodyStillComing) {
  Server server(false);
  ASSERT_TRUE(server.session->Receive(Bytes("POST /dns-query HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
                                            "Upgrade: h2c\r\nContent-Length: 4\r\n\r\nab"),
                                      kT0));
  EXPECT_TRUE(server.requests.empty());
  EXPECT_TRUE(server.session->WantsRead());
  ASSERT_TRUE(server.session->Receive(Bytes("cdPRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), kT0));
  ASSERT_EQ(server.requests.size(), 1u);
  EXPECT_EQ(Text(server.requests[0].body), "abcd");
  EXPECT_FALSE(server.session->WantsRead());
  server.Respond(1, 200, "a", "", "");
  EXPECT_EQ(server.Output(), "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\na");
  EXPECT_TRUE(server.session->Done());
}

TEST(Http1Session, HeadGetsNoBody) {
  Server server(false);
  ASSERT_TRUE(server.session->Receive(Bytes("HEAD /a HTTP/1.1\r\nHost: x\r\n\r\n"), kT0));
  server.Respond(1, 200, "abc", "", "");
  EXPECT_EQ(server.Output(), "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n");
}

TEST(Http1Session, BackPressureHoldsFurtherRequests) {
  HttpLimits limits;
  limits.max_concurrent_streams = 2;
  Server server(false, limits);
  ASSERT_TRUE(server.session->Receive(Bytes("GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n"
                                            "GET /3 HTTP/1.1\r\n\r\nGET /4 HTTP/1.1\r\n\r\n"),
                                      kT0));
  EXPECT_EQ(server.requests.size(), 2u);
  EXPECT_FALSE(server.session->WantsRead());
  // A caller that reads on anyway: held, not parsed.
  ASSERT_TRUE(server.session->Receive(Bytes("GET /5 HTTP/1.1\r\n\r\n"), kT0));
  EXPECT_EQ(server.requests.size(), 2u);
  server.Respond(2, 200, "2", "", "");
  EXPECT_FALSE(server.session->WantsRead());  // 1 still owed, 2 held behind it
  server.Respond(1, 200, "1", "", "");
  EXPECT_TRUE(server.session->WantsRead());
  ASSERT_TRUE(server.session->Receive({}, kT0));  // parse what is held
  ASSERT_EQ(server.requests.size(), 4u);
  EXPECT_EQ(server.requests[3].target, "/4");
  server.Respond(3, 200, "3", "", "");
  ASSERT_TRUE(server.session->Receive({}, kT0));
  ASSERT_EQ(server.requests.size(), 5u);
  EXPECT_EQ(server.requests[4].target, "/5");
}

TEST(Http1Session, ShutdownClosesAfterTheLastOwedResponse) {
  Server server(false);
  ASSERT_TRUE(server.session->Receive(Bytes("GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n"
                                            "POST /3 HTTP/1.1\r\nContent-Length: 10\r\n\r\npart"),
                                      kT0));
  ASSERT_EQ(server.requests.size(), 2u);
  server.session->Shutdown();
  EXPECT_FALSE(server.session->WantsRead());
  EXPECT_FALSE(server.session->Done());
  server.Respond(1, 200, "1", "", "");
  server.Respond(2, 200, "2", "", "");
  EXPECT_EQ(server.Output(),
            "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1"
            "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\n2");
  EXPECT_TRUE(server.session->Done());
}

TEST(Http1Session, ShutdownWithNothingOwedIsDoneAtOnce) {
  Server server(false);
  server.session->Shutdown();
  EXPECT_TRUE(server.session->Done());
  EXPECT_EQ(server.Output(), "");
}

TEST(Http1Session, AnsweredFromInsideTheHandler) {
  Server server(false);
  server.answer_now = [&server](const HttpRequest& r) { server.Respond(r.id, 200, r.target, "", ""); };
  ASSERT_TRUE(server.session->Receive(Bytes("GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n"), kT0));
  EXPECT_EQ(server.Output(),
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n/a"
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n/b");
  EXPECT_EQ(server.session->pending(), 0u);
}

// ---------------------------------------------------------------- ALPN-less detection

TEST(LooksLikeHttp2Preface, PrefixOrWholePreface) {
  EXPECT_TRUE(LooksLikeHttp2Preface(Bytes("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")));
  EXPECT_TRUE(LooksLikeHttp2Preface(Bytes("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12\x04")));
  EXPECT_TRUE(LooksLikeHttp2Preface(Bytes("PRI *")));
  EXPECT_TRUE(LooksLikeHttp2Preface({}));
  EXPECT_FALSE(LooksLikeHttp2Preface(Bytes("POST /dns-query HTTP/1.1\r\n")));
  EXPECT_FALSE(LooksLikeHttp2Preface(Bytes("PRI * HTTP/1.1")));
}

}  // namespace
}  // namespace weir::net
