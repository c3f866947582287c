// ForwarderRelay: libunbound's side over real loopback sockets, the
// forwarder's side through a fake LastHopTransport.
#include "forwarder_relay.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <vector>

#include "weir/dns/message.h"
#include "weir/dns/writer.h"

namespace weir::recursor {
namespace {

using std::chrono::milliseconds;

class FakeTransport : public LastHopTransport {
 public:
  struct Sent {
    uint64_t token = 0;
    LastHopQuery q;
    std::vector<uint8_t> message;
  };
  SendResult Send(uint64_t token, const LastHopQuery& q) override {
    Sent s{token, q, {q.message.begin(), q.message.end()}};
    s.q.message = {};
    sent.push_back(std::move(s));
    return SendResult::kSent;
  }
  void Cancel(uint64_t token) override { cancelled.push_back(token); }
  std::vector<Sent> sent;
  std::vector<uint64_t> cancelled;
};

// libunbound's side: a UDP socket that asks the relay.
struct Asker {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ~Asker() { close(fd); }
  void Ask(const common::SocketAddress& relay, uint16_t id, const char* name_wire, size_t name_len,
           bool response = false) {
    uint8_t buf[512];
    dns::ResponseWriter w(buf, sizeof(buf));
    const uint16_t flags = response ? dns::flag::kQr : dns::flag::kRd;
    ASSERT_EQ(w.Begin(id, flags, {reinterpret_cast<const uint8_t*>(name_wire), name_len}, dns::type::kA,
                      dns::klass::kIn),
              dns::ParseError::kOk);
    w.BeginOpt(1232, true);
    const size_t n = w.Finish(sizeof(buf));
    ASSERT_EQ(sendto(fd, buf, n, 0, relay.sa(), relay.len), static_cast<ssize_t>(n));
  }
  // The next datagram, within `wait`; empty when none came.
  std::vector<uint8_t> Read(milliseconds wait = milliseconds(1000)) {
    timeval tv{0, static_cast<suseconds_t>(wait.count() * 1000)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    std::vector<uint8_t> buf(65536);
    const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    buf.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return buf;
  }
};

class ForwarderRelayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_.forwarders = {*common::SocketAddress::Parse("192.0.2.53", 53)};
    cfg_.timeout_ms = 100;
    cfg_.answer_deadline_ms = 1000;
    ASSERT_TRUE(loop_.Init().ok());
    relay_ = std::make_unique<ForwarderRelay>(cfg_, loop_, transport_);
    ASSERT_TRUE(relay_->Bind().ok());
    ASSERT_EQ(relay_->addresses().size(), 1u);
    relay_->Attach();
  }
  void Turn() {
    for (int i = 0; i < 5; ++i) loop_.RunOnce(milliseconds(20));
  }
  // The forwarder's answer to the query sent, in the case it was asked.
  void Answer(const FakeTransport::Sent& s, const char* address) {
    dns::Query q;
    ASSERT_EQ(dns::ParseQuery(s.message, {}, &q), dns::ParseError::kOk);
    uint8_t buf[512];
    dns::ResponseWriter w(buf, sizeof(buf));
    // The transport sends its own ID and case: the answer echoes those.
    const uint8_t upper[] = {3, 'W', 'W', 'W', 7, 'E', 'X', 'A', 'M', 'P', 'L', 'E', 0};
    ASSERT_EQ(w.Begin(0xBEEF, dns::flag::kQr | dns::flag::kRa | dns::flag::kRd, upper, dns::type::kA,
                      dns::klass::kIn),
              dns::ParseError::kOk);
    const uint8_t rdata[] = {192, 0, 2, static_cast<uint8_t>(address[0])};
    w.AppendRecord(dns::Section::kAnswer, upper, dns::type::kA, dns::klass::kIn, 300, rdata);
    dns::Message m;
    ASSERT_EQ(m.Parse({buf, w.Finish(sizeof(buf))}, {}), dns::ParseError::kOk);
    relay_->OnReply(s.token, m);
  }

  static constexpr char kName[] = "\3wWw\7eXaMpLe";  // libunbound's own 0x20
  RecursorConfig cfg_;
  net::EventLoop loop_;
  FakeTransport transport_;
  std::unique_ptr<ForwarderRelay> relay_;
};

TEST_F(ForwarderRelayTest, AnswersUnderLibunboundsIdAndSpelling) {
  Asker a;
  a.Ask(relay_->addresses()[0], 0x1234, kName, sizeof(kName));
  Turn();
  ASSERT_EQ(transport_.sent.size(), 1u);
  const FakeTransport::Sent& s = transport_.sent[0];
  EXPECT_TRUE(s.token & ForwarderRelay::kTokenBit);
  EXPECT_EQ(s.q.server.ToString(), "192.0.2.53:53");
  EXPECT_EQ(s.q.timeout_ms, 100);
  EXPECT_EQ(dns::NameKeyToText(s.q.qname.span()), "www.example.");
  Answer(s, "\x07");
  const std::vector<uint8_t> got = a.Read();
  ASSERT_FALSE(got.empty());
  dns::Message m;
  ASSERT_EQ(m.Parse(got, {}), dns::ParseError::kOk);
  EXPECT_EQ(m.id(), 0x1234);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(got.data() + 12), sizeof(kName)),
            std::string(kName, sizeof(kName)));
  EXPECT_EQ(m.count(dns::Section::kAnswer), 1);
  EXPECT_EQ(relay_->stats().answered, 1u);
  EXPECT_EQ(relay_->in_flight(), 0u);
}

TEST_F(ForwarderRelayTest, RetransmissionsWaitOnTheQuestionInFlight) {
  Asker a, b;
  a.Ask(relay_->addresses()[0], 1, kName, sizeof(kName));
  Turn();
  b.Ask(relay_->addresses()[0], 2, kName, sizeof(kName));
  Turn();
  ASSERT_EQ(transport_.sent.size(), 1u) << "one question upstream";
  EXPECT_EQ(relay_->stats().coalesced, 1u);
  Answer(transport_.sent[0], "\x08");
  dns::Message m;
  std::vector<uint8_t> ga = a.Read(), gb = b.Read();
  ASSERT_EQ(m.Parse(ga, {}), dns::ParseError::kOk);
  EXPECT_EQ(m.id(), 1);
  ASSERT_EQ(m.Parse(gb, {}), dns::ParseError::kOk);
  EXPECT_EQ(m.id(), 2);
}

TEST_F(ForwarderRelayTest, TimeoutsAreAskedAgainWithTwiceTheWaitThenServfail) {
  Asker a;
  a.Ask(relay_->addresses()[0], 7, kName, sizeof(kName));
  Turn();
  ASSERT_EQ(transport_.sent.size(), 1u);
  const uint64_t token = transport_.sent[0].token;
  // 100 + 200 + 400 ms fit in the 1,000 ms deadline; 800 more do not.
  relay_->OnFailure(token, LastHopTransport::Failure::kTimeout);
  relay_->OnFailure(token, LastHopTransport::Failure::kTimeout);
  ASSERT_EQ(transport_.sent.size(), 3u);
  EXPECT_EQ(transport_.sent[1].q.timeout_ms, 200);
  EXPECT_EQ(transport_.sent[2].q.timeout_ms, 400);
  EXPECT_EQ(relay_->stats().retries, 2u);
  EXPECT_TRUE(a.Read(milliseconds(50)).empty()) << "no answer while the forwarder is asked";
  relay_->OnFailure(token, LastHopTransport::Failure::kTimeout);
  EXPECT_EQ(transport_.sent.size(), 3u);
  std::vector<uint8_t> got = a.Read();
  dns::Message m;
  ASSERT_EQ(m.Parse(got, {}), dns::ParseError::kOk);
  EXPECT_EQ(m.id(), 7);
  EXPECT_EQ(m.rcode(), static_cast<uint16_t>(dns::Rcode::kServFail));
  EXPECT_EQ(relay_->stats().servfail, 1u);
  EXPECT_EQ(relay_->in_flight(), 0u);
  // A failure (unreachable, malformed) is not asked again.
  a.Ask(relay_->addresses()[0], 8, kName, sizeof(kName));
  Turn();
  ASSERT_EQ(transport_.sent.size(), 4u);
  relay_->OnFailure(transport_.sent[3].token, LastHopTransport::Failure::kFailed);
  got = a.Read();
  ASSERT_EQ(m.Parse(got, {}), dns::ParseError::kOk);
  EXPECT_EQ(m.id(), 8);
  EXPECT_EQ(m.rcode(), static_cast<uint16_t>(dns::Rcode::kServFail));
  EXPECT_EQ(transport_.sent.size(), 4u);
}

TEST_F(ForwarderRelayTest, WhatIsNotAQueryIsDropped) {
  Asker a;
  a.Ask(relay_->addresses()[0], 9, kName, sizeof(kName), /*response=*/true);
  const uint8_t garbage[] = {1, 2, 3};
  sendto(a.fd, garbage, sizeof(garbage), 0, relay_->addresses()[0].sa(), relay_->addresses()[0].len);
  Turn();
  EXPECT_TRUE(transport_.sent.empty());
  EXPECT_EQ(relay_->stats().dropped, 2u);
  EXPECT_EQ(relay_->stats().queries, 0u);
}

}  // namespace
}  // namespace weir::recursor
