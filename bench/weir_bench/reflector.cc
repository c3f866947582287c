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

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
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

constexpr const char* kUsage = "usage: dns-reflector --listen ADDR:PORT [--batch N] | --version";

int Usage(const std::string& why) {
  std::fprintf(stderr, "dns-reflector: %s (%s)\n", why.c_str(), kUsage);
  return 2;
}

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
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&](std::string_view flag, std::string* out) {
      if (arg == flag && i + 1 < argc) {
        *out = argv[++i];
        return true;
      }
      if (arg.size() > flag.size() && arg.substr(0, flag.size()) == flag && arg[flag.size()] == '=') {
        *out = std::string(arg.substr(flag.size() + 1));
        return true;
      }
      return false;
    };
    if (arg == "--help" || arg == "-h") {
      std::printf("%s\n", kUsage);
      return 0;
    }
    if (arg == "--version") {
      std::printf("%s\n", weir::common::VersionLine("dns-reflector").c_str());
      return 0;
    }
    std::string text;
    if (value("--listen", &listen)) continue;
    if (value("--batch", &text)) {
      char* end = nullptr;
      errno = 0;
      const unsigned long n = std::strtoul(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || errno != 0 || n < 1 || n > kMaxBatch || text[0] == '-') {
        return Usage("--batch wants a number from 1 to " + std::to_string(kMaxBatch) + ", not '" + text +
                     "'");
      }
      batch = n;
      continue;
    }
    return Usage("unknown or incomplete argument '" + std::string(arg) + "'");
  }
  if (listen.empty()) return Usage("--listen ADDR:PORT is required");
  auto addr = weir::common::SocketAddress::Parse(listen);
  if (!addr.ok()) return Usage("--listen: " + std::string(addr.status().message()));

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
