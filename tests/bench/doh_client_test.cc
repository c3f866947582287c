// weir-bench's DoH client pieces: the HTTP/2 client against an nghttp2
// server session in memory (the bytes carried by the test instead of TLS),
// the request targets, and the JSON answers.
#include "doh_client.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "weir/dns/doh.h"

namespace weir::bench {
namespace {

using ::testing::HasSubstr;

// An HTTP/2 server in memory: what each request asked, and responses the
// test submits in any order.
class FakeServer {
 public:
  struct Request {
    std::map<std::string, std::string> headers;
    std::vector<uint8_t> body;
    bool complete = false;
  };

  explicit FakeServer(uint32_t max_streams = 100) {
    nghttp2_session_callbacks* cbs = nullptr;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_header_callback(
        cbs, [](nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
                const uint8_t* value, size_t valuelen, uint8_t, void* user) {
          auto* self = static_cast<FakeServer*>(user);
          self->requests_[frame->hd.stream_id]
              .headers[std::string(reinterpret_cast<const char*>(name), namelen)] =
              std::string(reinterpret_cast<const char*>(value), valuelen);
          return 0;
        });
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
        cbs, [](nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data, size_t len, void* user) {
          auto& body = static_cast<FakeServer*>(user)->requests_[stream_id].body;
          body.insert(body.end(), data, data + len);
          return 0;
        });
    nghttp2_session_callbacks_set_on_frame_recv_callback(
        cbs, [](nghttp2_session*, const nghttp2_frame* frame, void* user) {
          if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
              (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
            static_cast<FakeServer*>(user)->requests_[frame->hd.stream_id].complete = true;
          }
          return 0;
        });
    nghttp2_session_server_new(&session_, cbs, this);
    nghttp2_session_callbacks_del(cbs);
    const nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, max_streams}};
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, 1);
  }
  ~FakeServer() { nghttp2_session_del(session_); }

  std::map<int32_t, Request>& requests() { return requests_; }

  void Respond(int32_t stream_id, const std::string& status, const std::string& content_type,
               std::vector<uint8_t> body) {
    bodies_[stream_id] = {std::move(body), 0};
    const nghttp2_nv headers[] = {Nv(":status", status), Nv("content-type", content_type)};
    nghttp2_data_provider provider{};
    provider.source.ptr = &bodies_[stream_id];
    provider.read_callback = [](nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t* flags,
                                nghttp2_data_source* source, void*) -> ssize_t {
      auto* b = static_cast<std::pair<std::vector<uint8_t>, size_t>*>(source->ptr);
      const size_t n = std::min(length, b->first.size() - b->second);
      std::copy_n(b->first.data() + b->second, n, buf);
      b->second += n;
      if (b->second == b->first.size()) *flags |= NGHTTP2_DATA_FLAG_EOF;
      return static_cast<ssize_t>(n);
    };
    ASSERT_EQ(nghttp2_submit_response(session_, stream_id, headers, 2, &provider), 0);
  }
  void Reset(int32_t stream_id) {
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_REFUSED_STREAM);
  }

  // Moves bytes both ways until neither side has anything to send.
  void Pump(Http2Client& client) {
    for (int round = 0; round < 20; ++round) {
      std::vector<uint8_t> to_server;
      ASSERT_TRUE(client.Send(&to_server));
      if (!to_server.empty()) {
        ASSERT_EQ(nghttp2_session_mem_recv(session_, to_server.data(), to_server.size()),
                  static_cast<ssize_t>(to_server.size()));
      }
      std::vector<uint8_t> to_client;
      for (;;) {
        const uint8_t* data = nullptr;
        const ssize_t n = nghttp2_session_mem_send(session_, &data);
        ASSERT_GE(n, 0);
        if (n == 0) break;
        to_client.insert(to_client.end(), data, data + n);
      }
      if (!to_client.empty()) {
        ASSERT_TRUE(client.Receive(to_client)) << client.error();
      }
      if (to_server.empty() && to_client.empty()) return;
    }
  }

 private:
  static nghttp2_nv Nv(const char* name, const std::string& value) {
    return {reinterpret_cast<uint8_t*>(const_cast<char*>(name)),
            reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), std::strlen(name), value.size(),
            NGHTTP2_NV_FLAG_NONE};
  }

  nghttp2_session* session_ = nullptr;
  std::map<int32_t, Request> requests_;
  std::map<int32_t, std::pair<std::vector<uint8_t>, size_t>> bodies_;
};

const std::vector<uint8_t> kQuery = {0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 'a', 0, 0, 1, 0, 1};

TEST(Http2ClientTest, GetAndPostCarryTheQueryAndAnswersComeBackOutOfOrder) {
  auto client = Http2Client::Create("localhost");
  ASSERT_TRUE(client.ok()) << client.status();
  FakeServer server;
  const int32_t get = (*client)->Get(DohGetTarget("/dns-query", kQuery), kDnsMessageType);
  const int32_t post = (*client)->Post("/q", kDnsMessageType, kQuery);
  ASSERT_GT(get, 0);
  ASSERT_GT(post, get);
  server.Pump(**client);

  const FakeServer::Request& g = server.requests().at(get);
  EXPECT_TRUE(g.complete);
  EXPECT_EQ(g.headers.at(":method"), "GET");
  EXPECT_EQ(g.headers.at(":scheme"), "https");
  EXPECT_EQ(g.headers.at(":authority"), "localhost");
  EXPECT_EQ(g.headers.at(":path"), "/dns-query?dns=AAABAAABAAAAAAAAAWEAAAEAAQ");
  EXPECT_EQ(g.headers.at("accept"), "application/dns-message");
  EXPECT_TRUE(g.body.empty());
  const FakeServer::Request& p = server.requests().at(post);
  EXPECT_TRUE(p.complete);
  EXPECT_EQ(p.headers.at(":method"), "POST");
  EXPECT_EQ(p.headers.at(":path"), "/q");
  EXPECT_EQ(p.headers.at("content-type"), "application/dns-message");
  EXPECT_EQ(p.headers.at("content-length"), "19");
  EXPECT_EQ(p.body, kQuery);

  server.Respond(post, "200", "application/dns-message", {1, 2, 3});
  server.Pump(**client);
  ASSERT_EQ((*client)->responses().size(), 1u);
  EXPECT_EQ((*client)->responses()[0].stream_id, post);
  (*client)->responses().clear();
  server.Respond(get, "415", "text/plain", {'n', 'o'});
  server.Pump(**client);
  ASSERT_EQ((*client)->responses().size(), 1u);
  const Http2Client::Response& r = (*client)->responses()[0];
  EXPECT_EQ(r.stream_id, get);
  EXPECT_EQ(r.status, 415);
  EXPECT_EQ(r.content_type, "text/plain");
  EXPECT_EQ(r.body, (std::vector<uint8_t>{'n', 'o'}));
  EXPECT_EQ(r.error_code, 0u);
}

TEST(Http2ClientTest, AResetStreamIsAResponseWithItsErrorCode) {
  auto client = Http2Client::Create("x");
  ASSERT_TRUE(client.ok());
  FakeServer server;
  const int32_t id = (*client)->Post("/dns-query", kDnsMessageType, kQuery);
  server.Pump(**client);
  server.Reset(id);
  server.Pump(**client);
  ASSERT_EQ((*client)->responses().size(), 1u);
  EXPECT_EQ((*client)->responses()[0].status, 0);
  EXPECT_EQ((*client)->responses()[0].error_code, static_cast<uint32_t>(NGHTTP2_REFUSED_STREAM));
}

TEST(Http2ClientTest, TheServersStreamLimitHoldsRequestsBack) {
  auto client = Http2Client::Create("x");
  ASSERT_TRUE(client.ok());
  FakeServer server(/*max_streams=*/2);
  server.Pump(**client);  // the SETTINGS exchange
  EXPECT_EQ((*client)->remote_max_streams(), 2u);
  std::vector<int32_t> ids;
  for (int i = 0; i < 3; ++i) ids.push_back((*client)->Post("/dns-query", kDnsMessageType, kQuery));
  server.Pump(**client);
  EXPECT_EQ(server.requests().size(), 2u) << "the third waits for a stream to close";
  server.Respond(ids[0], "200", "application/dns-message", {1});
  server.Pump(**client);
  EXPECT_EQ(server.requests().size(), 3u);
}

TEST(Http2ClientTest, GarbageFromTheServerIsAProtocolError) {
  auto client = Http2Client::Create("x");
  ASSERT_TRUE(client.ok());
  std::vector<uint8_t> out;
  ASSERT_TRUE((*client)->Send(&out));
  const std::string garbage = "HTTP/1.1 400 Bad Request\r\n\r\n";
  // The connection error is known at once; the session ends once its GOAWAY is out.
  const bool received =
      (*client)->Receive({reinterpret_cast<const uint8_t*>(garbage.data()), garbage.size()});
  out.clear();
  const bool sent = (*client)->Send(&out);
  EXPECT_FALSE(received && sent);
  EXPECT_THAT((*client)->error(), HasSubstr("SETTINGS"));
}

TEST(Http2ClientTest, ABodyPastTheLimitResetsTheStream) {
  auto client = Http2Client::Create("x");
  ASSERT_TRUE(client.ok());
  FakeServer server;
  const int32_t id = (*client)->Get("/resolve?name=a.&type=1", kDnsJsonType);
  server.Pump(**client);
  server.Respond(id, "200", "application/dns-json", std::vector<uint8_t>(Http2Client::kMaxBody + 1, ' '));
  server.Pump(**client);
  ASSERT_EQ((*client)->responses().size(), 1u);
  EXPECT_TRUE((*client)->responses()[0].too_large);
}

// ------------------------------------------------------------ targets

TEST(DohTargetTest, GetIsBase64UrlWithoutPadding) {
  // 0xfb 0xff: "+/8" in standard base64, "-_8" in base64url.
  EXPECT_EQ(DohGetTarget("/p", std::vector<uint8_t>{0xfb, 0xff}), "/p?dns=-_8");
  EXPECT_EQ(DohGetTarget("/p", std::vector<uint8_t>{0}), "/p?dns=AA");
}

TEST(DohTargetTest, JsonNamesArePercentEncodedAndEcsIsAPrefix) {
  dns::NameKey name;
  ASSERT_TRUE(dns::NameKeyFromText("n0.bench.test.", &name));
  EXPECT_EQ(DohJsonTarget("/resolve", name, 28, nullptr), "/resolve?name=n0.bench.test.&type=28");
  dns::NameKey odd;
  ASSERT_TRUE(dns::NameKeyFromText("a b&c.test", &odd));
  EXPECT_EQ(DohJsonTarget("/r", odd, 1, nullptr), "/r?name=a%20b%26c.test.&type=1");
  dns::ClientSubnet ecs;
  ecs.family = dns::kEcsFamilyIpv4;
  ecs.source_prefix = 24;
  ecs.address = {198, 51, 100, 0};
  EXPECT_EQ(DohJsonTarget("/resolve", name, 1, &ecs),
            "/resolve?name=n0.bench.test.&type=1&edns_client_subnet=198.51.100.0%2F24");
}

// ------------------------------------------------------------ JSON answers

TEST(DnsJsonTest, ReadsStatusQuestionAndTheAddressesInOrder) {
  auto a = ParseDnsJson(R"({"Status":0,"TC":true,"RD":true,
      "Question":[{"name":"WWW.Example.com.","type":1}],
      "Answer":[{"name":"www.example.com.","type":5,"TTL":60,"data":"cdn.example.net."},
                {"name":"cdn.example.net.","type":1,"TTL":60,"data":"192.0.2.7"},
                {"name":"cdn.example.net.","type":28,"TTL":60,"data":"2001:db8::7"}]})");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->rcode, 0);
  EXPECT_TRUE(a->tc);
  ASSERT_TRUE(a->has_question);
  dns::NameKey want;
  ASSERT_TRUE(dns::NameKeyFromText("www.example.com", &want));
  EXPECT_TRUE(a->qname == want) << "names compare case-insensitively";
  EXPECT_EQ(a->qtype, 1);
  ASSERT_EQ(a->addresses.size(), 2u);
  EXPECT_EQ(common::IpToString(a->addresses[0]), "192.0.2.7");
  EXPECT_EQ(common::IpToString(a->addresses[1]), "2001:db8::7");
}

TEST(DnsJsonTest, ANegativeAnswerHasNoAddresses) {
  auto a = ParseDnsJson(R"({"Status":3,"Question":[{"name":"x.test.","type":1}],
      "Authority":[{"name":"test.","type":6,"TTL":60,"data":"a. b. 1 2 3 4 5"}]})");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->rcode, 3);
  EXPECT_FALSE(a->tc);
  EXPECT_TRUE(a->addresses.empty());
}

TEST(DnsJsonTest, WhatIsNotAJsonAnswerIsAnErrorNotAnException) {
  for (const char* body :
       {"", "not json", "[1,2]", "{\"Status\":\"0\"}", "{\"Status\":-1}", "{\"Status\":5000}",
        R"({"Status":0,"Question":{}})", R"({"Status":0,"Question":[{"name":1,"type":1}]})",
        R"({"Status":0,"Question":[{"name":"a..b","type":1}]})",
        R"({"Status":0,"Answer":[{"type":1,"data":"2001:db8::1"}]})",
        R"({"Status":0,"Answer":[{"type":28,"data":"nonsense"}]})", R"({"Status":0,"Answer":[7]})"}) {
    EXPECT_FALSE(ParseDnsJson(body).ok()) << body;
  }
}

// What weir's own DoH front writes (dns::doh::ToJson), weir-bench reads.
TEST(DnsJsonTest, ReadsWhatWeirWrites) {
  // a.test. A: 192.0.2.1, 192.0.2.2; ID 0, QR RD RA, NOERROR.
  const std::vector<uint8_t> answer = {0, 0,   0x81, 0x80, 0,   1,  0, 2,  0,   0, 0,    0,  1,    'a',
                                       4, 't', 'e',  's',  't', 0,  0, 1,  0,   1, 0xc0, 12, 0,    1,
                                       0, 1,   0,    0,    0,   60, 0, 4,  192, 0, 2,    1,  0xc0, 12,
                                       0, 1,   0,    1,    0,   0,  0, 60, 0,   4, 192,  0,  2,    2};
  const std::string json = dns::doh::ToJson(answer);
  auto a = ParseDnsJson(json);
  ASSERT_TRUE(a.ok()) << a.status() << "\n" << json;
  EXPECT_EQ(a->rcode, 0);
  dns::NameKey want;
  ASSERT_TRUE(dns::NameKeyFromText("a.test.", &want));
  EXPECT_TRUE(a->has_question && a->qname == want && a->qtype == 1) << json;
  ASSERT_EQ(a->addresses.size(), 2u) << json;
  EXPECT_EQ(common::IpToString(a->addresses[0]), "192.0.2.1");
  EXPECT_EQ(common::IpToString(a->addresses[1]), "192.0.2.2");
}

}  // namespace
}  // namespace weir::bench
