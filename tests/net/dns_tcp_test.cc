#include "weir/net/dns_tcp.h"

#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

namespace weir::net {
namespace {

TEST(DnsTcpReader, AsksForThePrefixThenExactlyTheMessage) {
  DnsTcpReader r;
  EXPECT_EQ(r.Want(), 2u);
  const uint8_t first[] = {0x00};
  ASSERT_TRUE(r.Append(first));
  EXPECT_EQ(r.Want(), 1u);
  const uint8_t second[] = {0x03};
  ASSERT_TRUE(r.Append(second));
  EXPECT_EQ(r.Want(), 3u);
  EXPECT_FALSE(r.Complete());
  const uint8_t body[] = {1, 2, 3};
  ASSERT_TRUE(r.Append(body));
  EXPECT_TRUE(r.Complete());
  EXPECT_EQ(r.Want(), 0u);
  EXPECT_EQ(std::vector<uint8_t>(r.Message().begin(), r.Message().end()), std::vector<uint8_t>({1, 2, 3}));
}

TEST(DnsTcpReader, RefusesBytesPastTheMessage) {
  DnsTcpReader r;
  const uint8_t too_much[] = {0x00, 0x01, 0xaa, 0xbb};  // a 1-byte message and one byte more
  EXPECT_FALSE(r.Append(too_much));
  EXPECT_EQ(r.buffered(), 0u);
  const uint8_t prefix_and_body[] = {0x00, 0x01};
  ASSERT_TRUE(r.Append(prefix_and_body));
  const uint8_t body_and_more[] = {0xaa, 0xbb};
  EXPECT_FALSE(r.Append(body_and_more));
}

TEST(DnsTcpReader, NeverBuffersMoreThanTheLargestMessage) {
  // A server that keeps sending: a reader that takes only Want() bytes at a
  // time stops at 2 + 65535 however much is offered.
  DnsTcpReader r;
  std::vector<uint8_t> stream(1 << 20, 0xff);
  size_t off = 0;
  while (!r.Complete()) {
    const size_t n = std::min<size_t>(r.Want(), 4096);
    ASSERT_TRUE(r.Append({stream.data() + off, n}));
    off += n;
  }
  EXPECT_EQ(r.buffered(), DnsTcpReader::kMaxBytes);
  EXPECT_EQ(r.Message().size(), 65535u);
  const uint8_t more[] = {0};
  EXPECT_FALSE(r.Append(more));
}

// ---------------------------------------------------------------- the server-side stream

class DnsTcpStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    server_ = sv[0];
    client_ = sv[1];
  }
  void TearDown() override {
    close(server_);
    if (client_ >= 0) close(client_);
  }
  void Send(const std::vector<uint8_t>& bytes) {
    ASSERT_EQ(write(client_, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }
  static std::vector<uint8_t> Framed(std::vector<uint8_t> msg) {
    std::vector<uint8_t> out;
    AppendFramed(msg, &out);
    return out;
  }
  std::vector<uint8_t> Received() {
    std::vector<uint8_t> out(1 << 20);
    const ssize_t n = read(client_, out.data(), out.size());
    out.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return out;
  }
  // Every whole query the stream has, as vectors.
  std::vector<std::vector<uint8_t>> Queries(DnsTcpStream& s) {
    std::vector<std::vector<uint8_t>> out;
    std::span<const uint8_t> q;
    while (s.NextQuery(&q, now_)) out.emplace_back(q.begin(), q.end());
    return out;
  }
  int server_ = -1, client_ = -1;
  DnsTcpStream::Clock::time_point now_ = DnsTcpStream::Clock::now();
};

TEST_F(DnsTcpStreamTest, QueriesSplitAcrossReadsAndPipelined) {
  DnsTcpStream s(server_, 1 << 20, now_);
  std::vector<uint8_t> bytes = Framed({1, 2, 3});
  const std::vector<uint8_t> second = Framed({4, 5});
  bytes.insert(bytes.end(), second.begin(), second.end());
  // One byte at a time: no query before it is whole.
  size_t got = 0;
  for (uint8_t b : bytes) {
    Send({b});
    ASSERT_EQ(s.Read(now_), DnsTcpStream::Status::kOpen);
    got += Queries(s).size();
  }
  EXPECT_EQ(got, 2u);
  EXPECT_EQ(s.pending(), 2u);
  // Two at once in one read.
  Send(bytes);
  ASSERT_EQ(s.Read(now_), DnsTcpStream::Status::kOpen);
  EXPECT_EQ(Queries(s), (std::vector<std::vector<uint8_t>>{{1, 2, 3}, {4, 5}}));
  EXPECT_EQ(s.pending(), 4u);
}

TEST_F(DnsTcpStreamTest, HalfCloseGetsEveryAnswerThenIsDone) {
  DnsTcpStream s(server_, 1 << 20, now_);
  Send(Framed({1}));
  Send(Framed({2}));
  shutdown(client_, SHUT_WR);
  ASSERT_EQ(s.Read(now_), DnsTcpStream::Status::kOpen);
  ASSERT_EQ(Queries(s).size(), 2u);
  ASSERT_EQ(s.Read(now_), DnsTcpStream::Status::kOpen);  // EOF
  EXPECT_TRUE(s.read_closed());
  EXPECT_EQ(s.WantedEvents() & EPOLLIN, 0u);
  EXPECT_FALSE(s.Done());  // two answers owed
  ASSERT_EQ(s.Answer(std::vector<uint8_t>{9}), DnsTcpStream::Status::kOpen);
  EXPECT_FALSE(s.Done());
  ASSERT_EQ(s.Answer({}), DnsTcpStream::Status::kOpen);  // the second was dropped
  EXPECT_TRUE(s.Done());
  EXPECT_EQ(Received(), Framed({9}));
}

TEST_F(DnsTcpStreamTest, AnswersGivenLaterAndOutOfOrderAreOwedAcrossHalfClose) {
  // gslb-sim holds an answer back (injected latency) while later queries on
  // the connection are answered at once (RFC 7766 7): the stream only counts
  // what is owed, so a half-closed client still gets the late answer.
  DnsTcpStream s(server_, 1 << 20, now_);
  Send(Framed({1}));
  Send(Framed({2}));
  shutdown(client_, SHUT_WR);
  ASSERT_EQ(s.Read(now_), DnsTcpStream::Status::kOpen);
  std::span<const uint8_t> q;
  ASSERT_TRUE(s.NextQuery(&q, now_));
  const std::vector<uint8_t> held(q.begin(), q.end());  // answered later
  ASSERT_TRUE(s.NextQuery(&q, now_));
  ASSERT_EQ(s.Answer(std::vector<uint8_t>{20}), DnsTcpStream::Status::kOpen);  // the second, first
  ASSERT_EQ(s.Read(now_), DnsTcpStream::Status::kOpen);                        // EOF
  EXPECT_TRUE(s.read_closed());
  EXPECT_EQ(s.pending(), 1u);
  EXPECT_FALSE(s.Done());  // the held-back answer is still owed
  EXPECT_EQ(s.WantedEvents(), 0u);
  ASSERT_EQ(s.Answer(std::vector<uint8_t>{10, held[0]}), DnsTcpStream::Status::kOpen);
  EXPECT_TRUE(s.Done());
  std::vector<uint8_t> want = Framed({20});
  const std::vector<uint8_t> late = Framed({10, 1});
  want.insert(want.end(), late.begin(), late.end());
  EXPECT_EQ(Received(), want);
}

TEST_F(DnsTcpStreamTest, UnreadAnswersPauseReadingThenOverflow) {
  // The client reads nothing and the socket buffer is full: answers queue.
  const std::vector<uint8_t> junk(65536, 0);
  while (write(server_, junk.data(), junk.size()) > 0) {
  }
  DnsTcpStream s(server_, 4096, now_);
  for (int i = 0; i < 8; ++i) Send(Framed({static_cast<uint8_t>(i)}));
  ASSERT_EQ(s.Read(now_), DnsTcpStream::Status::kOpen);
  std::span<const uint8_t> q;
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(s.NextQuery(&q, now_));
  const std::vector<uint8_t> big(3000, 7);
  ASSERT_EQ(s.Answer(big), DnsTcpStream::Status::kOpen);
  EXPECT_FALSE(s.paused());  // 3002 unsent
  ASSERT_EQ(s.Answer(big), DnsTcpStream::Status::kOpen);
  EXPECT_TRUE(s.paused());  // 6004 >= 4096: no more queries until the client reads
  EXPECT_FALSE(s.NextQuery(&q, now_));
  EXPECT_TRUE(s.HasQuery());
  EXPECT_EQ(s.WantedEvents(), static_cast<uint32_t>(EPOLLOUT));
  // Queries taken before the pause still add answers, up to four times the bound.
  ASSERT_EQ(s.Answer(big), DnsTcpStream::Status::kOpen);      // 9006
  ASSERT_EQ(s.Answer(big), DnsTcpStream::Status::kOpen);      // 12008
  ASSERT_EQ(s.Answer(big), DnsTcpStream::Status::kOpen);      // 15010
  EXPECT_EQ(s.Answer(big), DnsTcpStream::Status::kOverflow);  // 18012 > 16384
  EXPECT_EQ(s.unsent(), 15010u);
}

TEST_F(DnsTcpStreamTest, AResetIsClose) {
  DnsTcpStream s(server_, 1 << 20, now_);
  Send(Framed({1, 2}));
  // Unread data at close makes the kernel send a reset on TCP; on a unix
  // socket pair the peer just goes away: reading sees EOF, writing fails.
  close(client_);
  client_ = -1;
  ASSERT_EQ(s.Read(now_), DnsTcpStream::Status::kOpen);
  ASSERT_EQ(Queries(s).size(), 1u);
  EXPECT_EQ(s.Answer(std::vector<uint8_t>(100, 1)), DnsTcpStream::Status::kClose);
}

TEST_F(DnsTcpStreamTest, StopReadingDrainsLikeAHalfClose) {
  // The server ends a connection (its lifetime is over): nothing more is
  // read, the answer owed still goes out, then it is done.
  DnsTcpStream s(server_, 1 << 20, now_);
  Send(Framed({1}));
  ASSERT_EQ(s.Read(now_), DnsTcpStream::Status::kOpen);
  ASSERT_EQ(Queries(s).size(), 1u);
  s.StopReading();
  EXPECT_EQ(s.WantedEvents() & EPOLLIN, 0u);
  EXPECT_FALSE(s.Done());
  Send(Framed({2}));
  ASSERT_EQ(s.Read(now_), DnsTcpStream::Status::kOpen);
  EXPECT_TRUE(Queries(s).empty());  // not read
  ASSERT_EQ(s.Answer(std::vector<uint8_t>{9}), DnsTcpStream::Status::kOpen);
  EXPECT_TRUE(s.Done());
  EXPECT_EQ(Received(), Framed({9}));
}

TEST_F(DnsTcpStreamTest, IdleTimeCountsFromTheLastWholeQuery) {
  DnsTcpStream s(server_, 1 << 20, now_);
  const auto later = now_ + std::chrono::seconds(5);
  Send({0x00});  // a byte, not a query (a slow client trickling)
  ASSERT_EQ(s.Read(later), DnsTcpStream::Status::kOpen);
  EXPECT_EQ(s.last_activity(), now_);
  Send({0x01, 0xaa});
  ASSERT_EQ(s.Read(later), DnsTcpStream::Status::kOpen);
  std::span<const uint8_t> q;
  ASSERT_TRUE(s.NextQuery(&q, later));
  EXPECT_EQ(s.last_activity(), later);
}

}  // namespace
}  // namespace weir::net
