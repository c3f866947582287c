// UpstreamTcpPool against a recursor played in the same event loop on
// loopback: real sockets, the test decides when and in which order the
// "recursor" answers, closes or refuses.
#include "upstream_tcp_pool.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "weir/net/dns_tcp.h"

namespace weir::fastpath {
namespace {

using Bytes = std::vector<uint8_t>;
using common::SocketAddress;
using Handle = UpstreamTransport::Handle;
using std::chrono::milliseconds;

// A query: header with `id`, then a 4-byte serial the answer echoes.
Bytes Query(uint16_t id, uint32_t serial) {
  Bytes q(16, 0);
  q[0] = static_cast<uint8_t>(id >> 8);
  q[1] = static_cast<uint8_t>(id);
  q[12] = static_cast<uint8_t>(serial >> 24);
  q[13] = static_cast<uint8_t>(serial >> 16);
  q[14] = static_cast<uint8_t>(serial >> 8);
  q[15] = static_cast<uint8_t>(serial);
  return q;
}
uint32_t SerialOf(std::span<const uint8_t> m) {
  return (uint32_t{m[12]} << 24) | (uint32_t{m[13]} << 16) | (uint32_t{m[14]} << 8) | m[15];
}

// The recursor: accepts, collects framed queries per connection, answers
// when told.
class FakeRecursor {
 public:
  explicit FakeRecursor(net::EventLoop& loop) : loop_(loop) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(listen_fd_, 64), 0);
    socklen_t len = sizeof(a);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    address_ = SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&a), len);
    loop_.Watch(listen_fd_, EPOLLIN, [this](uint32_t) { Accept(); });
  }
  ~FakeRecursor() {
    for (auto& c : conns_) {
      if (c->fd >= 0) Close(*c);
    }
    if (listen_fd_ >= 0) {
      loop_.Unwatch(listen_fd_);
      close(listen_fd_);
    }
  }
  struct Conn {
    int fd = -1;
    Bytes in;
    std::vector<Bytes> queries;  // received, not yet answered
  };
  const SocketAddress& address() const { return address_; }
  std::vector<std::unique_ptr<Conn>>& conns() { return conns_; }
  int open() const {
    return static_cast<int>(std::count_if(conns_.begin(), conns_.end(), [](auto& c) { return c->fd >= 0; }));
  }
  size_t received() const {
    size_t n = 0;
    for (auto& c : conns_) n += c->queries.size();
    return n;
  }
  // Answers every query received on `c`, last first.
  void AnswerAll(Conn& c) {
    Bytes out;
    for (auto it = c.queries.rbegin(); it != c.queries.rend(); ++it) {
      Bytes a = *it;
      a[2] |= 0x80;  // QR
      net::AppendFramed(a, &out);
    }
    c.queries.clear();
    ASSERT_EQ(send(c.fd, out.data(), out.size(), MSG_NOSIGNAL), static_cast<ssize_t>(out.size()));
  }
  void AnswerEverything() {
    for (auto& c : conns_) {
      if (c->fd >= 0) AnswerAll(*c);
    }
  }
  // Drops what closed connections still hold unanswered.
  void Forget() {
    for (auto& c : conns_) c->queries.clear();
  }
  void Close(Conn& c) {
    loop_.Unwatch(c.fd);
    close(c.fd);
    c.fd = -1;
  }
  void StopListening() {
    loop_.Unwatch(listen_fd_);
    close(listen_fd_);
    listen_fd_ = -1;
  }

 private:
  void Accept() {
    for (;;) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      auto c = std::make_unique<Conn>();
      c->fd = fd;
      Conn* raw = c.get();
      conns_.push_back(std::move(c));
      loop_.Watch(fd, EPOLLIN, [this, raw](uint32_t) { Read(*raw); });
    }
  }
  void Read(Conn& c) {
    uint8_t buf[65536];
    for (;;) {
      const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
      if (n == 0) return Close(c);
      if (n < 0) return;
      c.in.insert(c.in.end(), buf, buf + n);
      while (c.in.size() >= 2) {
        const size_t len = (size_t{c.in[0]} << 8) | c.in[1];
        if (c.in.size() < 2 + len) break;
        c.queries.emplace_back(c.in.begin() + 2, c.in.begin() + 2 + static_cast<std::ptrdiff_t>(len));
        c.in.erase(c.in.begin(), c.in.begin() + 2 + static_cast<std::ptrdiff_t>(len));
      }
    }
  }

  net::EventLoop& loop_;
  int listen_fd_ = -1;
  SocketAddress address_;
  std::vector<std::unique_ptr<Conn>> conns_;
};

// The forwarder's side: what came back for each try.
class Sink : public UpstreamTransport::Sink {
 public:
  explicit Sink(UpstreamTcpPool& pool) : pool_(pool) {}
  void OnDatagram(Handle, const SocketAddress&, std::span<const uint8_t>) override {}
  void OnProbeReply(Handle, const SocketAddress&, std::span<const uint8_t>) override {}
  void OnTcpMessage(Handle h, std::span<const uint8_t> m) override {
    answers[h] = SerialOf(m);
    pool_.Close(h);  // as the forwarder does
  }
  void OnTcpFailed(Handle h) override {
    failed.insert(h);
    pool_.Close(h);
  }
  std::map<Handle, uint32_t> answers;
  std::set<Handle> failed;

 private:
  UpstreamTcpPool& pool_;
};

class UpstreamTcpPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(loop_.Init().ok());
    rec_ = std::make_unique<FakeRecursor>(loop_);
  }
  void Make(UpstreamTcpPool::Options o) {
    pool_ = std::make_unique<UpstreamTcpPool>(loop_, o);
    sink_ = std::make_unique<Sink>(*pool_);
    pool_->SetSink(sink_.get());
  }
  // Runs the loop until `done` holds (or 3 s).
  bool Spin(const std::function<bool()>& done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (!done()) {
      if (std::chrono::steady_clock::now() > until) return false;
      loop_.RunOnce(milliseconds(5));
    }
    return true;
  }
  void SpinFor(milliseconds d) {
    const auto until = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < until) loop_.RunOnce(milliseconds(5));
  }

  net::EventLoop loop_;
  std::unique_ptr<FakeRecursor> rec_;  // made in SetUp, once the loop is
  std::unique_ptr<UpstreamTcpPool> pool_;
  std::unique_ptr<Sink> sink_;
};

TEST_F(UpstreamTcpPoolTest, ManyTriesShareThePoolAndEachGetsItsOwnAnswer) {
  Make({.connections = 4});
  // 1000 questions with distinct IDs: at most 4 connections, every answer
  // (written last first per connection) reaches the try that asked.
  std::map<Handle, uint32_t> asked;
  for (uint32_t i = 0; i < 1000; ++i) {
    const Handle h = pool_->Open(rec_->address(), Query(static_cast<uint16_t>(i * 7), i));
    ASSERT_GE(h, UpstreamTcpPool::kFirstHandle);
    asked[h] = i;
  }
  ASSERT_TRUE(Spin([&] { return rec_->received() == 1000; })) << rec_->received();
  EXPECT_EQ(rec_->open(), 4);
  EXPECT_EQ(pool_->connections(), 4u);
  rec_->AnswerEverything();
  ASSERT_TRUE(Spin([&] { return sink_->answers.size() == 1000; })) << sink_->answers.size();
  EXPECT_EQ(sink_->answers, asked);
  EXPECT_TRUE(sink_->failed.empty());
  EXPECT_EQ(pool_->stats().opened, 4u);
  EXPECT_EQ(pool_->tries(), 0u);
}

TEST_F(UpstreamTcpPoolTest, PastThePipelineDepthTriesWaitInOrder) {
  Make({.connections = 1});
  const size_t n = UpstreamTcpPool::kMaxPipelined + 50;
  std::vector<Handle> hs;
  for (uint32_t i = 0; i < n; ++i)
    hs.push_back(pool_->Open(rec_->address(), Query(static_cast<uint16_t>(i), i)));
  ASSERT_TRUE(Spin([&] { return rec_->received() == UpstreamTcpPool::kMaxPipelined; }));
  SpinFor(milliseconds(30));
  EXPECT_EQ(rec_->received(), UpstreamTcpPool::kMaxPipelined);
  EXPECT_FALSE(pool_->Queued(hs.front()));
  EXPECT_TRUE(pool_->Queued(hs.back()));
  EXPECT_EQ(pool_->stats().queued, 50u);
  // Answers make room: the queued ones go out on the same connection.
  rec_->AnswerEverything();
  ASSERT_TRUE(Spin([&] { return rec_->received() == 50; }));
  rec_->AnswerEverything();
  ASSERT_TRUE(Spin([&] { return sink_->answers.size() == n; }));
  EXPECT_EQ(rec_->open(), 1);
  EXPECT_EQ(pool_->stats().opened, 1u);
}

TEST_F(UpstreamTcpPoolTest, TwoTriesWithOneIdNeverShareAConnection) {
  Make({.connections = 1});
  const Handle a = pool_->Open(rec_->address(), Query(42, 1));
  const Handle b = pool_->Open(rec_->address(), Query(42, 2));
  ASSERT_TRUE(Spin([&] { return rec_->received() == 1; }));
  SpinFor(milliseconds(20));
  EXPECT_EQ(rec_->received(), 1u);  // b waits: its ID is outstanding
  EXPECT_TRUE(pool_->Queued(b));
  rec_->AnswerEverything();
  ASSERT_TRUE(Spin([&] { return rec_->received() == 1 && !pool_->Queued(b); }));
  rec_->AnswerEverything();
  ASSERT_TRUE(Spin([&] { return sink_->answers.size() == 2; }));
  EXPECT_EQ(sink_->answers[a], 1u);
  EXPECT_EQ(sink_->answers[b], 2u);
}

TEST_F(UpstreamTcpPoolTest, AnEndedTryKeepsItsIdUntilItsLateAnswer) {
  Make({.connections = 1});
  const Handle a = pool_->Open(rec_->address(), Query(7, 1));
  ASSERT_TRUE(Spin([&] { return rec_->received() == 1; }));
  pool_->Close(a);  // timed out at the forwarder
  const Handle b = pool_->Open(rec_->address(), Query(7, 2));
  EXPECT_TRUE(pool_->Queued(b));  // not on the connection a's answer will come on
  rec_->AnswerEverything();       // a's late answer
  ASSERT_TRUE(Spin([&] { return rec_->received() == 1 && !pool_->Queued(b); }));
  EXPECT_TRUE(sink_->answers.empty());  // a's answer went to nobody
  rec_->AnswerEverything();
  ASSERT_TRUE(Spin([&] { return sink_->answers.size() == 1; }));
  EXPECT_EQ(sink_->answers[b], 2u);
}

TEST_F(UpstreamTcpPoolTest, AClosedConnectionsQuestionsGoOutOnceMore) {
  Make({.connections = 2});
  std::vector<Handle> hs;
  for (uint32_t i = 0; i < 20; ++i)
    hs.push_back(pool_->Open(rec_->address(), Query(static_cast<uint16_t>(i), i)));
  ASSERT_TRUE(Spin([&] { return rec_->received() == 20; }));
  // The recursor closes every connection unanswered (its idle or lifetime
  // close racing the questions): each is asked again on new connections.
  for (auto& c : rec_->conns()) {
    c->queries.clear();
    rec_->Close(*c);
  }
  ASSERT_TRUE(Spin([&] { return rec_->received() == 20; }));
  EXPECT_EQ(pool_->stats().resent, 20u);
  EXPECT_TRUE(sink_->failed.empty());
  // Closed again: a second loss fails them.
  for (auto& c : rec_->conns()) {
    if (c->fd >= 0) rec_->Close(*c);
  }
  ASSERT_TRUE(Spin([&] { return sink_->failed.size() == 20; }));
  EXPECT_EQ(pool_->tries(), 0u);
}

TEST_F(UpstreamTcpPoolTest, ARefusedConnectionFailsItsTries) {
  Make({.connections = 4});
  const SocketAddress to = rec_->address();
  rec_->StopListening();
  const Handle h = pool_->Open(to, Query(1, 1));
  // Refused at connect() already (-1), or by the event that follows.
  if (h >= 0) {
    ASSERT_TRUE(Spin([&] { return sink_->failed.contains(h); }));
  }
  EXPECT_EQ(pool_->stats().connect_failed, 1u);
  EXPECT_EQ(pool_->stats().resent, 0u);
  EXPECT_EQ(pool_->connections(), 0u);
}

TEST_F(UpstreamTcpPoolTest, IdleRetiredAndStalledConnectionsClose) {
  Make({.connections = 2,
        .idle = milliseconds(100),
        .lifetime = milliseconds(100000),
        .stall = milliseconds(500)});
  const Handle a = pool_->Open(rec_->address(), Query(1, 1));
  ASSERT_TRUE(Spin([&] { return rec_->received() == 1; }));
  rec_->AnswerEverything();
  ASSERT_TRUE(Spin([&] { return sink_->answers.contains(a); }));
  const auto now = std::chrono::steady_clock::now();
  pool_->Housekeep(now);
  EXPECT_EQ(pool_->connections(), 1u);  // idle less than 100 ms
  pool_->Housekeep(now + milliseconds(200));
  EXPECT_EQ(pool_->connections(), 0u);
  ASSERT_TRUE(Spin([&] { return rec_->open() == 0; }));

  // A connection that owes an answer and sends nothing: dropped, its try
  // asked again on a fresh connection.
  const Handle b = pool_->Open(rec_->address(), Query(2, 2));
  ASSERT_TRUE(Spin([&] { return rec_->received() == 1; }));
  pool_->Housekeep(std::chrono::steady_clock::now() + milliseconds(600));
  ASSERT_TRUE(Spin([&] { return rec_->received() == 2; }));
  EXPECT_EQ(pool_->stats().resent, 1u);
  rec_->AnswerEverything();
  ASSERT_TRUE(Spin([&] { return sink_->answers.contains(b); }));

  // Past its lifetime a connection takes no new question.
  rec_->Forget();
  Make({.connections = 1, .idle = milliseconds(100000), .lifetime = milliseconds(50)});
  const Handle c = pool_->Open(rec_->address(), Query(3, 3));
  ASSERT_TRUE(Spin([&] { return rec_->received() == 1; }));
  EXPECT_FALSE(pool_->Queued(c));
  pool_->Housekeep(std::chrono::steady_clock::now() + milliseconds(60));  // retired, still owes c
  EXPECT_EQ(pool_->connections(), 1u);
  const Handle d = pool_->Open(rec_->address(), Query(4, 4));
  EXPECT_TRUE(pool_->Queued(d));  // the only connection allowed is retiring
  rec_->AnswerEverything();
  ASSERT_TRUE(Spin([&] { return sink_->answers.contains(c); }));
  pool_->Housekeep(std::chrono::steady_clock::now() + milliseconds(60));  // drained: closed, d gets a new one
  ASSERT_TRUE(Spin([&] { return !pool_->Queued(d); }));
  EXPECT_EQ(pool_->stats().opened, 2u);

  // A retired connection that holds only an ended try's ID gives its place
  // at once to the next question.
  ASSERT_TRUE(Spin([&] { return rec_->received() == 1; }));               // d written
  pool_->Housekeep(std::chrono::steady_clock::now() + milliseconds(60));  // retired, owes d
  pool_->Close(d);                                                        // timed out at the forwarder
  const Handle e = pool_->Open(rec_->address(), Query(5, 5));
  EXPECT_FALSE(pool_->Queued(e));
  EXPECT_EQ(pool_->stats().opened, 3u);
  EXPECT_EQ(pool_->connections(), 1u);
}

}  // namespace
}  // namespace weir::fastpath
