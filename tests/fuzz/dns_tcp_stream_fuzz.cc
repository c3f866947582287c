// Fuzzes the server side of DNS over TCP (net::DnsTcpStream), as
// weir-recursor's front, weir-fastpath's TCP server and gslb-sim run it, on a
// real socket pair: a client stream written in arbitrary pieces (prefixes
// split anywhere, many queries per write), then half-closed. Every whole
// query comes out once, in order, byte for byte; each is answered (some with
// nothing: dropped) and the client reads back exactly the framed answers;
// after the half-close the connection is Done() with nothing owed.
//
// Input: byte 0 seeds the piece sizes and which queries are dropped, the
// rest is what the client sends.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "fuzz_check.h"
#include "weir/net/dns_tcp.h"

namespace {

// What the client side has to read now.
void Drain(int fd, std::vector<uint8_t>* into) {
  uint8_t buf[65536];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      into->insert(into->end(), buf, buf + n);
      continue;
    }
    FUZZ_CHECK(n == 0 || errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
    return;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using weir::net::DnsTcpStream;
  if (size == 0 || size > 200000) return 0;  // within the socket buffers
  uint32_t rng = data[0] * 2246822519u + 7;
  auto next = [&rng] {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
  };
  const std::vector<uint8_t> stream(data + 1, data + size);
  std::vector<std::span<const uint8_t>> want;
  for (size_t at = 0; at + 2 <= stream.size();) {
    const size_t len = (size_t{stream[at]} << 8) | stream[at + 1];
    if (at + 2 + len > stream.size()) break;
    want.emplace_back(stream.data() + at + 2, len);
    at += 2 + len;
  }

  int sv[2];
  FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
  const int big = 1 << 20;
  setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
  setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
  const auto now = DnsTcpStream::Clock::time_point{};
  DnsTcpStream s(sv[0], size_t{1} << 20, now);

  std::vector<uint8_t> expected_answers;  // framed, as the client must read them
  std::vector<uint8_t> answers;           // what the client read
  size_t got = 0;
  auto serve = [&] {
    FUZZ_CHECK(s.Read(now) == DnsTcpStream::Status::kOpen);
    std::span<const uint8_t> q;
    while (s.NextQuery(&q, now)) {
      FUZZ_CHECK(got < want.size());
      FUZZ_CHECK(q.size() == want[got].size());
      FUZZ_CHECK(q.empty() || std::memcmp(q.data(), want[got].data(), q.size()) == 0);
      ++got;
      // Answer with the query itself (a copy: the span dies with the next
      // Read), or drop it.
      const std::vector<uint8_t> answer(q.begin(), q.end());
      if (next() % 5 != 0 && !answer.empty()) {
        weir::net::AppendFramed(answer, &expected_answers);
        FUZZ_CHECK(s.Answer(answer) == DnsTcpStream::Status::kOpen);
      } else {
        FUZZ_CHECK(s.Answer({}) == DnsTcpStream::Status::kOpen);
      }
    }
    FUZZ_CHECK(s.Flush() == DnsTcpStream::Status::kOpen);
    Drain(sv[1], &answers);
  };

  for (size_t pos = 0; pos < stream.size();) {
    size_t n = next() % 700 + 1;
    if (n > stream.size() - pos) n = stream.size() - pos;
    const ssize_t sent = send(sv[1], stream.data() + pos, n, MSG_NOSIGNAL);
    FUZZ_CHECK(sent > 0);
    pos += static_cast<size_t>(sent);
    serve();
  }
  FUZZ_CHECK(shutdown(sv[1], SHUT_WR) == 0);
  for (int i = 0; i < 64 && !s.read_closed(); ++i) serve();
  serve();
  FUZZ_CHECK(s.read_closed());
  FUZZ_CHECK(got == want.size());
  FUZZ_CHECK(s.pending() == 0);
  FUZZ_CHECK(s.Done());
  FUZZ_CHECK(answers == expected_answers);
  close(sv[0]);
  close(sv[1]);
  return 0;
}
