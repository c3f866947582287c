// dns-reflector: the trivial DNS server weir-bench's own speed is measured
// against. It answers every query by sending it back with QR set, so
// whatever limits the rate it measures is the load generator and the kernel.
//
//   dns-reflector --listen ADDR:PORT [--batch N]
//
// ADDR is IPv4 or [IPv6]; port 0 picks a free one. Prints
// "listening udp ADDR:PORT" and "ready" once it serves and, after SIGTERM or
// SIGINT, "reflected N dropped M". Exit codes: 0 after a signal or --help,
// 1 when the socket cannot be bound, 2 for a bad command line.
//
// One thread, one socket: a recvmmsg of up to N datagrams, the bit flipped
// in place, one sendmmsg back.
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "weir/common/process_metrics.h"
#include "weir/common/socket_address.h"

namespace {

constexpr size_t kMaxBatch = 1024;      // the kernel's limit per sendmmsg (UIO_MAXIOV)
constexpr size_t kBufferSize = 65536;   // any UDP datagram fits, so none is truncated
constexpr int kSocketBuffer = 8 << 20;  // absorbs bursts of a load generator
constexpr size_t kDnsHeader = 12;

volatile sig_atomic_t g_stop = 0;
void OnStopSignal(int) { g_stop = 1; }

// Larger buffers if allowed: SO_*BUFFORCE passes net.core.*mem_max with
// CAP_NET_ADMIN, the plain option is capped by it. Failure only costs drops.
void GrowBuffer(int fd, int force_option, int option) {
  if (setsockopt(fd, SOL_SOCKET, force_option, &kSocketBuffer, sizeof(kSocketBuffer)) != 0) {
    setsockopt(fd, SOL_SOCKET, option, &kSocketBuffer, sizeof(kSocketBuffer));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen;
  size_t batch = 64;
  CLI::App app{
      "dns-reflector: answers every DNS query by sending it back with QR set, the server weir-bench's own "
      "speed is measured against (docs/bench.md)",
      "dns-reflector"};
  app.set_version_flag("--version", weir::common::VersionLine("dns-reflector"),
                       "print the version, commit and build, and exit");
  app.add_option("--listen", listen,
                 "UDP address to serve, ADDR:PORT or [IPv6]:PORT; port 0 picks a free one")
      ->type_name("ADDR:PORT")
      ->required()
      ->check([](const std::string& text) {
        auto addr = weir::common::SocketAddress::Parse(text);
        return addr.ok() ? std::string() : std::string(addr.status().message());
      });
  app.add_option("--batch", batch, "datagrams per recvmmsg/sendmmsg (default 64)")
      ->type_name("N")
      ->check(CLI::Range(size_t{1}, kMaxBatch));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version: 0; a usage error: 2, after CLI11 printed the reason.
    return app.exit(e) == 0 ? 0 : 2;
  }
  const auto addr = weir::common::SocketAddress::Parse(listen);  // checked above

  const int fd = socket(addr->family(), SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    std::fprintf(stderr, "dns-reflector: socket: %s\n", std::strerror(errno));
    return 1;
  }
  GrowBuffer(fd, SO_RCVBUFFORCE, SO_RCVBUF);
  GrowBuffer(fd, SO_SNDBUFFORCE, SO_SNDBUF);
  if (bind(fd, addr->sa(), addr->len) != 0) {
    std::fprintf(stderr, "dns-reflector: cannot bind udp %s: %s\n", addr->ToString().c_str(),
                 std::strerror(errno));
    return 1;
  }
  weir::common::SocketAddress bound;
  bound.len = sizeof(bound.storage);
  getsockname(fd, bound.sa(), &bound.len);

  // Without SA_RESTART a signal ends a blocked recvmmsg with EINTR. A signal
  // that lands just before the call is seen when the receive timeout ends it.
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  const timeval stop_check{0, 200'000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &stop_check, sizeof(stop_check));

  std::printf("listening udp %s\nready\n", bound.ToString().c_str());
  std::fflush(stdout);

  // Fixed arrays for the whole run: receive slots, and the answers (the
  // slots of at least a header) gathered for one sendmmsg.
  std::vector<uint8_t> buffers(batch * kBufferSize);
  std::vector<sockaddr_storage> peers(batch);
  std::vector<iovec> in_iov(batch), out_iov(batch);
  std::vector<mmsghdr> in(batch), out(batch);
  for (size_t i = 0; i < batch; ++i) {
    in_iov[i] = {&buffers[i * kBufferSize], kBufferSize};
    in[i].msg_hdr.msg_name = &peers[i];
    in[i].msg_hdr.msg_iov = &in_iov[i];
    in[i].msg_hdr.msg_iovlen = 1;
    out[i].msg_hdr.msg_iov = &out_iov[i];
    out[i].msg_hdr.msg_iovlen = 1;
  }

  uint64_t reflected = 0, dropped = 0;
  while (!g_stop) {
    for (size_t i = 0; i < batch; ++i) in[i].msg_hdr.msg_namelen = sizeof(sockaddr_storage);
    // MSG_WAITFORONE: block for the first datagram only, then take what is queued.
    const int got = recvmmsg(fd, in.data(), static_cast<unsigned>(batch), MSG_WAITFORONE, nullptr);
    if (got <= 0) continue;  // EINTR (checked above), the stop-check timeout, or a transient error

    size_t answers = 0;
    for (int i = 0; i < got; ++i) {
      if (in[i].msg_len < kDnsHeader) {
        ++dropped;
        continue;
      }
      auto* packet = static_cast<uint8_t*>(in_iov[i].iov_base);
      packet[2] |= 0x80;  // QR: this is a response
      out_iov[answers] = {packet, in[i].msg_len};
      out[answers].msg_hdr.msg_name = in[i].msg_hdr.msg_name;
      out[answers].msg_hdr.msg_namelen = in[i].msg_hdr.msg_namelen;
      ++answers;
    }

    // sendmmsg stops at the first datagram it cannot send: retry from there.
    // A datagram the kernel refuses (EAGAIN, ENOBUFS, an unreachable peer)
    // is counted and dropped so the rest still go.
    size_t next = 0;
    while (next < answers) {
      const int sent = sendmmsg(fd, &out[next], static_cast<unsigned>(answers - next), 0);
      if (sent > 0) {
        next += static_cast<size_t>(sent);
        reflected += static_cast<uint64_t>(sent);
      } else if (sent < 0 && errno == EINTR) {
        continue;
      } else {
        ++dropped;
        ++next;
      }
    }
  }

  std::printf("reflected %llu dropped %llu\n", static_cast<unsigned long long>(reflected),
              static_cast<unsigned long long>(dropped));
  std::fflush(stdout);
  close(fd);
  return 0;
}
