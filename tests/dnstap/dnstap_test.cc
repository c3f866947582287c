#include "weir/dnstap/dnstap.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dnstap.pb-c.h"

namespace weir::dnstap {
namespace {

std::vector<uint8_t> Vec(const ProtobufCBinaryData& d) { return {d.data, d.data + d.len}; }

struct Unpacked {
  Dnstap__Dnstap* d = nullptr;
  ~Unpacked() {
    if (d != nullptr) dnstap__dnstap__free_unpacked(d, nullptr);
  }
};

TEST(EncodeTest, ClientResponseRoundTrips) {
  const std::vector<uint8_t> query = {0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
  const std::vector<uint8_t> response = {0x12, 0x34, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 1, 0xaa};
  Message m;
  m.type = MessageType::kClientResponse;
  m.protocol = Protocol::kTcp;
  m.query_address = {4, {192, 0, 2, 7}, 53000};
  m.response_address = {4, {198, 51, 100, 1}, 53};
  m.query_time = {1700000000, 123456789};
  m.response_time = {1700000001, 5};
  m.query_message = query;
  m.response_message = response;

  size_t len = 0;
  EncodedPayload p = Encode(m, "node-7", "weir 1.2.3", &len);
  ASSERT_NE(p, nullptr);
  Unpacked u;
  u.d = dnstap__dnstap__unpack(nullptr, len, p.get());
  ASSERT_NE(u.d, nullptr);
  EXPECT_EQ(u.d->type, DNSTAP__DNSTAP__TYPE__MESSAGE);
  ASSERT_TRUE(u.d->has_identity);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(u.d->identity.data), u.d->identity.len), "node-7");
  ASSERT_TRUE(u.d->has_version);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(u.d->version.data), u.d->version.len), "weir 1.2.3");
  EXPECT_FALSE(u.d->has_extra);
  const Dnstap__Message* msg = u.d->message;
  ASSERT_NE(msg, nullptr);
  EXPECT_EQ(msg->type, DNSTAP__MESSAGE__TYPE__CLIENT_RESPONSE);
  EXPECT_TRUE(msg->has_socket_family);
  EXPECT_EQ(msg->socket_family, DNSTAP__SOCKET_FAMILY__INET);
  EXPECT_EQ(msg->socket_protocol, DNSTAP__SOCKET_PROTOCOL__TCP);
  EXPECT_EQ(Vec(msg->query_address), (std::vector<uint8_t>{192, 0, 2, 7}));
  EXPECT_EQ(Vec(msg->response_address), (std::vector<uint8_t>{198, 51, 100, 1}));
  EXPECT_EQ(msg->query_port, 53000u);
  EXPECT_EQ(msg->response_port, 53u);
  EXPECT_EQ(msg->query_time_sec, 1700000000u);
  EXPECT_EQ(msg->query_time_nsec, 123456789u);
  EXPECT_EQ(msg->response_time_sec, 1700000001u);
  EXPECT_EQ(msg->response_time_nsec, 5u);
  EXPECT_EQ(Vec(msg->query_message), query);
  EXPECT_EQ(Vec(msg->response_message), response);
  EXPECT_FALSE(msg->has_query_zone);
}

TEST(EncodeTest, ResolverQueryOverIpv6LeavesOutWhatIsUnknown) {
  const std::vector<uint8_t> query = {0xab, 0xcd, 0x00, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
  const std::vector<uint8_t> zone = {7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 0};
  Message m;
  m.type = MessageType::kResolverQuery;
  m.response_address.family = 6;
  m.response_address.bytes = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x35};
  m.response_address.port = 5353;
  m.query_time = {42, 0};
  m.query_message = query;
  m.query_zone = zone;

  size_t len = 0;
  EncodedPayload p = Encode(m, "", "", &len);
  ASSERT_NE(p, nullptr);
  Unpacked u;
  u.d = dnstap__dnstap__unpack(nullptr, len, p.get());
  ASSERT_NE(u.d, nullptr);
  EXPECT_FALSE(u.d->has_identity);
  EXPECT_FALSE(u.d->has_version);
  const Dnstap__Message* msg = u.d->message;
  ASSERT_NE(msg, nullptr);
  EXPECT_EQ(msg->type, DNSTAP__MESSAGE__TYPE__RESOLVER_QUERY);
  EXPECT_EQ(msg->socket_family, DNSTAP__SOCKET_FAMILY__INET6);
  EXPECT_EQ(msg->socket_protocol, DNSTAP__SOCKET_PROTOCOL__UDP);
  EXPECT_FALSE(msg->has_query_address);
  EXPECT_FALSE(msg->has_query_port);
  ASSERT_TRUE(msg->has_response_address);
  EXPECT_EQ(msg->response_address.len, 16u);
  EXPECT_EQ(msg->response_address.data[15], 0x35);
  EXPECT_EQ(msg->response_port, 5353u);
  EXPECT_TRUE(msg->has_query_time_sec);
  EXPECT_EQ(msg->query_time_sec, 42u);
  EXPECT_FALSE(msg->has_response_time_sec);
  EXPECT_FALSE(msg->has_response_message);
  EXPECT_EQ(Vec(msg->query_zone), zone);
}

// The Message.Type values are the schema's, which readers rely on.
TEST(EncodeTest, TypesAreTheSchemas) {
  EXPECT_EQ(static_cast<int>(MessageType::kResolverQuery), DNSTAP__MESSAGE__TYPE__RESOLVER_QUERY);
  EXPECT_EQ(static_cast<int>(MessageType::kResolverResponse), DNSTAP__MESSAGE__TYPE__RESOLVER_RESPONSE);
  EXPECT_EQ(static_cast<int>(MessageType::kClientQuery), DNSTAP__MESSAGE__TYPE__CLIENT_QUERY);
  EXPECT_EQ(static_cast<int>(MessageType::kClientResponse), DNSTAP__MESSAGE__TYPE__CLIENT_RESPONSE);
  EXPECT_EQ(static_cast<int>(MessageType::kForwarderQuery), DNSTAP__MESSAGE__TYPE__FORWARDER_QUERY);
  EXPECT_EQ(static_cast<int>(MessageType::kForwarderResponse), DNSTAP__MESSAGE__TYPE__FORWARDER_RESPONSE);
}

std::string TempPath(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string(name) + "-" + std::to_string(getpid())))
      .string();
}

TEST(WriterTest, SamplesOneQueryInN) {
  Options o;
  o.file_path = TempPath("weir-dnstap-sample");
  o.sample = 3;
  auto w = Writer::Open(o, 1);
  ASSERT_TRUE(w.ok()) << w.status();
  Producer& p = (*w)->producer(0);
  std::vector<bool> tapped;
  for (int i = 0; i < 7; ++i) tapped.push_back(p.Sample());
  EXPECT_EQ(tapped, (std::vector<bool>{true, false, false, true, false, false, true}));
  EXPECT_EQ(p.sampled_out(), 4u);
  w->reset();
  std::remove(o.file_path.c_str());
}

TEST(WriterTest, FileHoldsTheFramesAfterClose) {
  Options o;
  o.file_path = TempPath("weir-dnstap-file");
  o.identity = "unit";
  auto w = Writer::Open(o, 2);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->version().rfind("weir ", 0), 0u);
  const std::vector<uint8_t> query = {1, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0};
  Message m;
  m.query_address = {4, {127, 0, 0, 9}, 4242};
  m.query_time = Now();
  m.query_message = query;
  for (size_t i = 0; i < 2; ++i) (*w)->producer(i).Send(m);
  const Writer::Totals t = (*w)->totals();
  EXPECT_EQ(t.sent, 2u);
  EXPECT_EQ(t.dropped, 0u);
  w->reset();  // flushes and closes
  std::ifstream in(o.file_path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(bytes.find("protobuf:dnstap.Dnstap"), std::string::npos);
  // Both payloads, each with the identity.
  size_t found = 0;
  for (size_t at = bytes.find("unit"); at != std::string::npos; at = bytes.find("unit", at + 1)) ++found;
  EXPECT_EQ(found, 2u);
  std::remove(o.file_path.c_str());
}

TEST(WriterTest, FullQueueDropsAndCounts) {
  // A unix socket nobody listens on: the I/O thread discards what it takes,
  // but until it runs a producer can overrun a two-entry queue. Whatever
  // the interleaving, every message is either sent or dropped.
  Options o;
  o.socket_path = TempPath("weir-dnstap-nobody");
  o.queue_size = 2;
  auto w = Writer::Open(o, 1);
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<uint8_t> query = {1, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0};
  Message m;
  m.query_message = query;
  for (int i = 0; i < 1000; ++i) (*w)->producer(0).Send(m);
  const Writer::Totals t = (*w)->totals();
  EXPECT_EQ(t.sent + t.dropped, 1000u);
}

TEST(WriterTest, OpenFailsClearly) {
  Options o;
  o.file_path = "/nonexistent-weir-dir/tap.fstrm";
  auto w = Writer::Open(o, 1);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("/nonexistent-weir-dir/tap.fstrm"), std::string::npos);
  Options q;
  q.file_path = TempPath("weir-dnstap-q");
  q.queue_size = 1000;
  EXPECT_FALSE(Writer::Open(q, 1).ok());
  Options both;
  EXPECT_FALSE(Writer::Open(both, 1).ok());
  Options longsock;
  longsock.socket_path = "/tmp/" + std::string(200, 'x');
  EXPECT_FALSE(Writer::Open(longsock, 1).ok());
}

absl::StatusOr<Options> Parse(const std::string& text) {
  auto t = toml::parse(text);
  common::TomlChecker c("t.toml");
  Options o;
  ParseConfig(c, t, &o);
  if (!c.ok()) return absl::InvalidArgumentError(c.error());
  return o;
}

TEST(ConfigTest, ReadsTheTable) {
  auto o = Parse(
      "[dnstap]\nfile = \"/var/log/tap\"\nsample = 4\nqueue_size = 256\nidentity = \"a\"\nversion = \"b\"\n"
      "client = false\n");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->file_path, "/var/log/tap");
  EXPECT_EQ(o->sample, 4u);
  EXPECT_EQ(o->queue_size, 256u);
  EXPECT_EQ(o->identity, "a");
  EXPECT_EQ(o->version, "b");
  EXPECT_FALSE(o->client);
  EXPECT_TRUE(o->upstream);
  EXPECT_TRUE(o->enabled());
  auto none = Parse("");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->enabled());
}

TEST(ConfigTest, RejectsWhatCannotWork) {
  auto msg = [](const std::string& text) {
    auto o = Parse(text);
    return o.ok() ? std::string("ok") : std::string(o.status().message());
  };
  EXPECT_NE(msg("[dnstap]\nsample = 2\n").find("exactly one of 'socket'"), std::string::npos);
  EXPECT_NE(msg("[dnstap]\nfile = \"a\"\nsocket = \"b\"\n").find("exactly one"), std::string::npos);
  EXPECT_NE(msg("[dnstap]\nfile = \"a\"\nqueue_size = 100\n").find("t.toml:3:"), std::string::npos);
  EXPECT_NE(msg("[dnstap]\nfile = \"a\"\nqueue_size = 100\n").find("power of two"), std::string::npos);
  EXPECT_NE(msg("[dnstap]\nfile = \"a\"\nsample = 0\n").find("'sample'"), std::string::npos);
  EXPECT_NE(msg("[dnstap]\nfile = \"a\"\nsampel = 2\n").find("unknown key 'sampel'"), std::string::npos);
  EXPECT_NE(msg("[dnstap]\nfile = \"a\"\nclient = false\nupstream = false\n").find("taps nothing"),
            std::string::npos);
}

TEST(WriterTest, StuckReaderHoldsNeitherTheStopNorTheProducers) {
  // A listener that never accepts or answers: the handshake times out, the
  // producers drop (and count) while no reader takes the stream, and the
  // writer stops within about one timeout.
  const std::string path = TempPath("weir-dnstap-stuck");
  std::remove(path.c_str());
  const int listener = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
  ASSERT_EQ(bind(listener, reinterpret_cast<const sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  Options o;
  o.socket_path = path;
  o.io_timeout = std::chrono::milliseconds(200);
  auto w = Writer::Open(o, 1);
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<uint8_t> query = {1, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0};
  Message m;
  m.query_message = query;
  for (int i = 0; i < 100; ++i) (*w)->producer(0).Send(m);
  EXPECT_FALSE((*w)->output_ready());
  EXPECT_EQ((*w)->totals().sent, 0u);
  EXPECT_EQ((*w)->totals().dropped, 100u);
  const auto start = std::chrono::steady_clock::now();
  w->reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(600));
  close(listener);
  std::remove(path.c_str());
}

TEST(WriterTest, LiveSettingsReachTheProducers) {
  Options o;
  o.file_path = TempPath("weir-dnstap-live");
  auto w = Writer::Open(o, 1);
  ASSERT_TRUE(w.ok()) << w.status();
  Producer& p = (*w)->producer(0);
  EXPECT_TRUE(p.Sample());
  (*w)->SetLive(false, 1);
  EXPECT_FALSE(p.Sample());
  EXPECT_EQ(p.sampled_out(), 0u);  // off is not sampling
  (*w)->SetLive(true, 2);
  std::vector<bool> tapped;
  for (int i = 0; i < 4; ++i) tapped.push_back(p.Sample());
  EXPECT_EQ(tapped, (std::vector<bool>{true, false, true, false}));
  w->reset();
  std::remove(o.file_path.c_str());
}

TEST(ReloadTest, EnabledAndSampleApplyTheRestNeedsARestart) {
  Options running;
  running.socket_path = "/run/a.sock";
  Options next = running;
  next.sample = 10;
  next.tapping = false;
  auto live = PlanReload(&running, &next);
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_FALSE(live->tapping);
  EXPECT_EQ(live->sample, 10u);
  EXPECT_EQ(live->described, (std::vector<std::string>{"dnstap off", "dnstap sample 10"}));
  auto same = PlanReload(&running, &running);
  ASSERT_TRUE(same.ok());
  EXPECT_TRUE(same->described.empty());

  next = running;
  next.socket_path = "/run/b.sock";
  next.sample = 5;
  auto moved = PlanReload(&running, &next);
  ASSERT_FALSE(moved.ok());
  EXPECT_EQ(moved.status().message(), "[dnstap] socket changed: needs a restart (kept /run/a.sock)");
  next = running;
  next.queue_size = 64;
  next.client = false;
  auto two = PlanReload(&running, &next);
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("queue_size changed"), std::string::npos);
  EXPECT_NE(two.status().message().find("client changed"), std::string::npos);

  EXPECT_FALSE(PlanReload(nullptr, &running).ok());  // added: a restart
  auto removed = PlanReload(&running, nullptr);
  ASSERT_TRUE(removed.ok());
  EXPECT_FALSE(removed->tapping);
  EXPECT_TRUE(PlanReload(nullptr, nullptr).ok());
}

TEST(ConfigTest, EnabledKey) {
  auto o = Parse("[dnstap]\nfile = \"a\"\nenabled = false\n");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->tapping);
  EXPECT_TRUE(o->enabled());
}

}  // namespace
}  // namespace weir::dnstap
