#include "server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "authority.h"
#include "query_record.h"
#include "segments.h"
#include "weir/common/config_file.h"
#include "weir/common/text.h"
#include "weir/net/dns_tcp.h"
#include "weir/net/event_loop.h"

namespace weir::gslb_sim {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxMessage = 65535;
constexpr size_t kMaxConnections = 4096;
constexpr size_t kMaxControlRequest = 4096;
constexpr int kUdpBurst = 64;  // packets read per readiness event before polling others

bool ParseEndpoint(const std::string& text, sockaddr_storage* sa, socklen_t* len) {
  std::string host, port;
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') return false;
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos) return false;
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 0 || p > 65535) return false;
  std::memset(sa, 0, sizeof(*sa));
  auto* in = reinterpret_cast<sockaddr_in*>(sa);
  auto* in6 = reinterpret_cast<sockaddr_in6*>(sa);
  if (inet_pton(AF_INET, host.c_str(), &in->sin_addr) == 1) {
    in->sin_family = AF_INET;
    in->sin_port = htons(static_cast<uint16_t>(p));
    *len = sizeof(sockaddr_in);
    return true;
  }
  if (inet_pton(AF_INET6, host.c_str(), &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(static_cast<uint16_t>(p));
    *len = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

uint16_t PortOf(const sockaddr_storage& sa) {
  return ntohs(sa.ss_family == AF_INET ? reinterpret_cast<const sockaddr_in&>(sa).sin_port
                                       : reinterpret_cast<const sockaddr_in6&>(sa).sin6_port);
}
void SetPort(sockaddr_storage* sa, uint16_t port) {
  if (sa->ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(sa)->sin_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in6*>(sa)->sin6_port = htons(port);
  }
}

Client ClientFrom(const sockaddr_storage& sa, bool tcp) {
  Client c;
  c.tcp = tcp;
  if (sa.ss_family == AF_INET) {
    c.family = 1;
    std::memcpy(c.address.data(), &reinterpret_cast<const sockaddr_in&>(sa).sin_addr, 4);
  } else if (sa.ss_family == AF_INET6) {
    const auto& a6 = reinterpret_cast<const sockaddr_in6&>(sa).sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a6)) {
      c.family = 1;
      std::memcpy(c.address.data(), a6.s6_addr + 12, 4);
    } else {
      c.family = 2;
      std::memcpy(c.address.data(), a6.s6_addr, 16);
    }
  }
  return c;
}

double WallNow() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// Owns a file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

Fd MakeSocket(int family, int type) { return Fd(socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)); }

bool BindSocket(const Fd& fd, const sockaddr_storage& sa, socklen_t len) {
  const int one = 1;
  if (sa.ss_family == AF_INET6) setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  return bind(fd.get(), reinterpret_cast<const sockaddr*>(&sa), len) == 0;
}

// A DNS connection (framing, pipelining, half-close and the unread-answer
// bound are net::DnsTcpStream's) or a control connection (one command, one
// reply).
struct Connection {
  Fd fd;
  bool control = false;
  std::unique_ptr<net::DnsTcpStream> stream;  // DNS connections
  std::string in;                             // control connections
  std::string out;
  size_t out_pos = 0;
  bool peer_closed = false;
  bool replied = false;  // control: the one reply is in `out`
  sockaddr_storage peer{};
};

// Answers a test client does not read are kept up to this much.
constexpr size_t kMaxUnsent = 4 << 20;

struct Delayed {
  Clock::time_point due;
  uint64_t seq;
  bool tcp;
  uint32_t target;  // UDP socket index or connection id
  sockaddr_storage dest;
  socklen_t dest_len;
  std::string bytes;
  bool operator>(const Delayed& o) const { return due != o.due ? due > o.due : seq > o.seq; }
};

class Server {
 public:
  Server(const ServerOptions& opts, ZoneSet zones)
      : opts_(opts),
        segment_clock_(zones.segments ? zones.segments->config().change_every_s : 0, Clock::now()),
        authority_(std::move(zones), opts.weight_option_code, opts.seed),
        stats_(opts.stats_names),
        ring_(opts.log_capacity),
        buf_(kMaxMessage + 2) {}

  ~Server() {
    if (query_log_ != nullptr) std::fclose(query_log_);
  }

  int Run();

 private:
  bool Setup();
  bool AddListener(const std::string& text);
  void OnUdp(uint32_t index);
  void Accept(int listen_fd, bool control);
  void OnConnection(uint32_t id, uint32_t events);
  void ServeDnsFrames(uint32_t id, Connection& c);
  void ServeControl(Connection& c);
  std::string RunCommand(const std::string& line);
  std::string SegmentsCommand(const std::string& cmd, std::istringstream& in);
  void Flush(uint32_t id, Connection& c);
  // After any change to a DNS connection: closes it when done (half-closed,
  // every answer written), else watches what it waits for.
  void UpdateDns(uint32_t id, Connection& c);
  void Close(uint32_t id);
  // Queues a response held back by injected latency.
  void Delay(Delayed d);
  void SendDue();
  // Keeps one loop timer at the earliest delayed response.
  void ArmDelayTimer();
  // Answers one message; returns the response size (0: nothing to send).
  size_t Answer(std::span<const uint8_t> msg, const sockaddr_storage& from, bool tcp, uint32_t* delay_ms);

  const ServerOptions& opts_;
  // The segment model's change epoch ([segments] change_every_s).
  SegmentClock segment_clock_;
  Authority authority_;
  QueryStats stats_;
  QueryRing ring_;
  std::FILE* query_log_ = nullptr;
  std::vector<uint8_t> buf_;
  net::EventLoop loop_;
  Fd sigfd_;
  std::vector<Fd> udp_;
  std::vector<Fd> tcp_listeners_;
  Fd control_;
  std::unordered_map<uint32_t, Connection> conns_;
  uint32_t next_conn_ = 1;
  std::priority_queue<Delayed, std::vector<Delayed>, std::greater<Delayed>> delayed_;
  uint64_t next_seq_ = 0;
  net::EventLoop::TimerId delay_timer_ = 0;  // 0: none armed
  Clock::time_point delay_timer_at_{};
  bool stop_ = false;
};

bool Server::AddListener(const std::string& text) {
  sockaddr_storage sa;
  socklen_t len;
  if (!ParseEndpoint(text, &sa, &len)) {
    std::fprintf(stderr, "gslb-sim: bad listen address '%s' (want 127.0.0.1:5300 or [::1]:5300)\n",
                 text.c_str());
    return false;
  }
  const bool any_port = PortOf(sa) == 0;
  // With port 0, UDP picks the port and TCP must get the same one, so a
  // client can use one port for both; retry if TCP's is taken.
  for (int attempt = 0; attempt < (any_port ? 50 : 1); ++attempt) {
    sockaddr_storage bound = sa;
    if (any_port) SetPort(&bound, 0);
    Fd udp = MakeSocket(sa.ss_family, SOCK_DGRAM);
    if (udp.get() < 0 || !BindSocket(udp, bound, len)) {
      std::fprintf(stderr, "gslb-sim: udp %s: %s\n", text.c_str(), std::strerror(errno));
      return false;
    }
    socklen_t blen = sizeof(bound);
    getsockname(udp.get(), reinterpret_cast<sockaddr*>(&bound), &blen);
    const int rcvbuf = 4 << 20;
    setsockopt(udp.get(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    Fd tcp = MakeSocket(sa.ss_family, SOCK_STREAM);
    const int one = 1;
    setsockopt(tcp.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (tcp.get() < 0 || !BindSocket(tcp, bound, len) || listen(tcp.get(), 1024) != 0) {
      if (any_port && errno == EADDRINUSE) continue;
      std::fprintf(stderr, "gslb-sim: tcp %s: %s\n", text.c_str(), std::strerror(errno));
      return false;
    }
    const std::string where = SockaddrText(bound);
    std::printf("listening udp %s tcp %s\n", where.c_str(), where.c_str());
    const auto index = static_cast<uint32_t>(udp_.size());
    loop_.Watch(udp.get(), EPOLLIN, [this, index](uint32_t) { OnUdp(index); });
    loop_.Watch(tcp.get(), EPOLLIN, [this, fd = tcp.get()](uint32_t) { Accept(fd, false); });
    udp_.push_back(std::move(udp));
    tcp_listeners_.push_back(std::move(tcp));
    return true;
  }
  std::fprintf(stderr, "gslb-sim: %s: no port free for both UDP and TCP\n", text.c_str());
  return false;
}

bool Server::Setup() {
  if (absl::Status st = loop_.Init(); !st.ok()) {
    std::fprintf(stderr, "gslb-sim: %s\n", std::string(st.message()).c_str());
    return false;
  }
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  signal(SIGPIPE, SIG_IGN);
  sigfd_ = Fd(signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
  loop_.Watch(sigfd_.get(), EPOLLIN, [this](uint32_t) { stop_ = true; });
  if (!opts_.query_log_path.empty()) {
    query_log_ = std::fopen(opts_.query_log_path.c_str(), "a");
    if (query_log_ == nullptr) {
      std::fprintf(stderr, "gslb-sim: --query-log %s: %s\n", opts_.query_log_path.c_str(),
                   std::strerror(errno));
      return false;
    }
  }
  for (const std::string& l : opts_.listen) {
    if (!AddListener(l)) return false;
  }
  if (!opts_.control.empty()) {
    sockaddr_storage sa;
    socklen_t len;
    if (!ParseEndpoint(opts_.control, &sa, &len)) {
      std::fprintf(stderr, "gslb-sim: bad --control address '%s'\n", opts_.control.c_str());
      return false;
    }
    control_ = MakeSocket(sa.ss_family, SOCK_STREAM);
    const int one = 1;
    setsockopt(control_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (!BindSocket(control_, sa, len) || listen(control_.get(), 64) != 0) {
      std::fprintf(stderr, "gslb-sim: control %s: %s\n", opts_.control.c_str(), std::strerror(errno));
      return false;
    }
    socklen_t blen = sizeof(sa);
    getsockname(control_.get(), reinterpret_cast<sockaddr*>(&sa), &blen);
    std::printf("control %s\n", SockaddrText(sa).c_str());
    loop_.Watch(control_.get(), EPOLLIN, [this](uint32_t) { Accept(control_.get(), true); });
  }
  std::printf("ready\n");
  std::fflush(stdout);
  return true;
}

size_t Server::Answer(std::span<const uint8_t> msg, const sockaddr_storage& from, bool tcp,
                      uint32_t* delay_ms) {
  QueryRecord rec;
  rec.time = WallNow();
  if (authority_.zones().segments) authority_.SetSegmentsEpoch(segment_clock_.EpochAt(Clock::now()));
  rec.source = from;
  uint8_t* out = buf_.data() + 2;  // room for the TCP length prefix
  const size_t n = authority_.Handle(msg, ClientFrom(from, tcp), out, kMaxMessage, &rec);
  *delay_ms = rec.delay_ms;
  stats_.Count(rec);
  ring_.Add(rec);
  if (query_log_ != nullptr) {
    const std::string line = ToJson(rec);
    std::fwrite(line.data(), 1, line.size(), query_log_);
    std::fputc('\n', query_log_);
  }
  return n;
}

void Server::OnUdp(uint32_t index) {
  const int fd = udp_[index].get();
  uint8_t in[kMaxMessage];
  for (int i = 0; i < kUdpBurst; ++i) {
    sockaddr_storage from;
    socklen_t from_len = sizeof(from);
    const ssize_t got = recvfrom(fd, in, sizeof(in), 0, reinterpret_cast<sockaddr*>(&from), &from_len);
    if (got < 0) return;  // EAGAIN, or a transient error: epoll tells us when to retry
    uint32_t delay = 0;
    const size_t n = Answer({in, static_cast<size_t>(got)}, from, false, &delay);
    if (n == 0) continue;
    const uint8_t* resp = buf_.data() + 2;
    if (delay == 0) {
      sendto(fd, resp, n, 0, reinterpret_cast<sockaddr*>(&from), from_len);
    } else {
      Delay({Clock::now() + std::chrono::milliseconds(delay), next_seq_++, false, index, from, from_len,
             std::string(reinterpret_cast<const char*>(resp), n)});
    }
  }
}

void Server::Accept(int listen_fd, bool control) {
  for (;;) {
    sockaddr_storage peer;
    socklen_t len = sizeof(peer);
    Fd fd(accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (fd.get() < 0) return;
    if (conns_.size() >= kMaxConnections) continue;  // closed by Fd's destructor
    const int one = 1;
    setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const uint32_t id = next_conn_++;
    loop_.Watch(fd.get(), EPOLLIN | EPOLLRDHUP, [this, id](uint32_t events) { OnConnection(id, events); });
    Connection& c = conns_[id];
    c.fd = std::move(fd);
    c.control = control;
    c.peer = peer;
    if (!control) c.stream = std::make_unique<net::DnsTcpStream>(c.fd.get(), kMaxUnsent, Clock::now());
  }
}

void Server::ServeDnsFrames(uint32_t id, Connection& c) {
  std::span<const uint8_t> query;
  while (c.stream->NextQuery(&query, Clock::now())) {
    uint32_t delay = 0;
    const size_t n = Answer(query, c.peer, true, &delay);
    const std::span<const uint8_t> answer(buf_.data() + 2, n);
    if (n != 0 && delay != 0) {
      // Answered later (SendDue); pipelined answers may overtake it (RFC 7766 7).
      Delay({Clock::now() + std::chrono::milliseconds(delay),
             next_seq_++,
             true,
             id,
             {},
             0,
             std::string(reinterpret_cast<const char*>(answer.data()), n)});
      continue;
    }
    if (c.stream->Answer(answer) != net::DnsTcpStream::Status::kOpen) {  // n == 0: dropped
      Close(id);
      return;
    }
  }
}

void Server::UpdateDns(uint32_t id, Connection& c) {
  if (c.stream->Done()) return Close(id);
  uint32_t want = c.stream->WantedEvents();
  if (want & EPOLLIN) want |= EPOLLRDHUP;
  loop_.Modify(c.fd.get(), want);
}

std::string Server::RunCommand(const std::string& line) {
  std::istringstream in(line);
  std::string cmd;
  in >> cmd;
  if (cmd == "stats") return stats_.ToJson() + "\n";
  if (cmd == "log") {
    size_t n = 100;
    std::string arg;
    if (in >> arg) {
      char* end = nullptr;
      n = std::strtoul(arg.c_str(), &end, 10);
      if (*end != '\0') return "error: log takes a number\n";
    }
    return ring_.LastJsonLines(n);
  }
  if (cmd == "reset") {
    stats_.Reset();
    ring_.Reset();
    return "ok\n";
  }
  if (cmd == "set-weights") {
    std::string name, view, weights;
    if (!(in >> name >> view >> weights)) return "error: usage: set-weights NAME VIEW w1,w2,...\n";
    const std::string err = authority_.SetWeights(name, view, weights);
    return err.empty() ? "ok\n" : "error: " + err + "\n";
  }
  if (cmd == "reload") {
    absl::StatusOr<ZoneSet> zs = LoadConfig(opts_.config_path);
    if (!zs.ok()) {
      // One "error: " line per error of the file (the old zones stay).
      std::string reply;
      for (const std::string& e : common::ErrorLines(common::ToStd(zs.status().message())))
        reply += "error: " + e + "\n";
      return reply;
    }
    const uint32_t period = zs->segments ? zs->segments->config().change_every_s : 0;
    authority_.Replace(*std::move(zs));
    segment_clock_.SetPeriod(period, Clock::now());
    return "ok\n";
  }
  if (cmd.starts_with("segments-")) return SegmentsCommand(cmd, in);
  if (cmd == "help" || cmd.empty()) {
    return "commands: stats | log [N] | reset | set-weights NAME VIEW w1,w2,... | reload | "
           "segments-epoch [N] | segments-truth NAME|group=N [EPOCH] | segments-citymap | help\n";
  }
  return "error: unknown command '" + cmd + "'\n";
}

std::string Server::SegmentsCommand(const std::string& cmd, std::istringstream& in) {
  const std::shared_ptr<SegmentModel> model = authority_.zones().segments;
  if (!model) return "error: the config has no [segments]\n";
  const uint64_t now_epoch = segment_clock_.EpochAt(Clock::now());
  auto number = [](const std::string& text, uint64_t* out) {
    char* end = nullptr;
    errno = 0;
    *out = std::strtoull(text.c_str(), &end, 10);
    return !text.empty() && text[0] != '-' && *end == '\0' && errno == 0 && *out <= kMaxSegmentEpoch;
  };
  std::string arg;
  if (cmd == "segments-epoch") {
    if (!(in >> arg)) return std::to_string(now_epoch) + "\n";
    uint64_t epoch = 0;
    if (!number(arg, &epoch)) return "error: the epoch must be a number from 0 to 1000000\n";
    segment_clock_.Set(epoch, Clock::now());
    authority_.SetSegmentsEpoch(epoch);
    return "ok\n";
  }
  if (cmd == "segments-truth") {
    if (!(in >> arg)) return "error: usage: segments-truth NAME|group=N [EPOCH]\n";
    uint64_t epoch = now_epoch;
    std::string epoch_text;
    if (in >> epoch_text && !number(epoch_text, &epoch)) {
      return "error: the epoch must be a number from 0 to 1000000\n";
    }
    absl::StatusOr<std::string> json = SegmentTruth(*model, arg, epoch);
    return json.ok() ? *json + "\n" : "error: " + std::string(json.status().message()) + "\n";
  }
  if (cmd == "segments-citymap") return model->CityMapCsv();
  return "error: unknown command '" + cmd + "'\n";
}

void Server::ServeControl(Connection& c) {
  if (c.replied) return;  // one command per connection, already answered
  const size_t nl = c.in.find('\n');
  if (nl == std::string::npos) {
    if (c.in.size() > kMaxControlRequest) {
      c.out = "error: request too long\n";
      c.replied = true;
    } else if (c.peer_closed && !c.in.empty()) {
      c.out = RunCommand(c.in);  // a last line without a newline
      c.replied = true;
    }
    return;
  }
  std::string line = c.in.substr(0, nl);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  c.out = RunCommand(line);
  c.replied = true;
}

void Server::Flush(uint32_t id, Connection& c) {
  while (c.out_pos < c.out.size()) {
    const ssize_t n = send(c.fd.get(), c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      Close(id);
      return;
    }
    c.out_pos += static_cast<size_t>(n);
  }
  if (c.out_pos == c.out.size()) {
    c.out.clear();
    c.out_pos = 0;
  } else if (c.out_pos > (1 << 16)) {
    c.out.erase(0, c.out_pos);
    c.out_pos = 0;
  }
  const bool pending = !c.out.empty();
  // The control protocol is one command and one reply per connection; DNS
  // connections stay open until the client closes them.
  if (!pending && (c.peer_closed || c.replied)) {
    Close(id);
    return;
  }
  // Stop watching input once the peer has closed (it would fire forever).
  const uint32_t want =
      (c.peer_closed ? 0u : uint32_t{EPOLLIN | EPOLLRDHUP}) | (pending ? uint32_t{EPOLLOUT} : 0u);
  loop_.Modify(c.fd.get(), want);
}

void Server::OnConnection(uint32_t id, uint32_t events) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Connection& c = it->second;
  if (!c.control) {
    net::DnsTcpStream& st = *c.stream;
    if ((events & EPOLLOUT) && st.Flush() != net::DnsTcpStream::Status::kOpen) return Close(id);
    if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) &&
        st.Read(Clock::now()) != net::DnsTcpStream::Status::kOpen) {
      return Close(id);
    }
    ServeDnsFrames(id, c);
    if (auto again = conns_.find(id); again != conns_.end()) UpdateDns(id, again->second);
    return;
  }
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
    char tmp[16384];
    for (;;) {
      const ssize_t n = recv(c.fd.get(), tmp, sizeof(tmp), 0);
      if (n > 0) {
        c.in.append(tmp, static_cast<size_t>(n));
        if (c.in.size() > 4 * kMaxMessage) break;  // parse what we have first
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) c.peer_closed = true;
      break;
    }
    ServeControl(c);
  }
  Flush(id, c);
}

void Server::Close(uint32_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  loop_.Unwatch(it->second.fd.get());
  conns_.erase(it);
}

void Server::Delay(Delayed d) {
  delayed_.push(std::move(d));
  ArmDelayTimer();
}

void Server::ArmDelayTimer() {
  if (delayed_.empty()) return;
  const Clock::time_point due = delayed_.top().due;
  if (delay_timer_ != 0 && delay_timer_at_ <= due) return;  // fires early enough
  if (delay_timer_ != 0) loop_.Cancel(delay_timer_);
  delay_timer_at_ = due;
  delay_timer_ = loop_.At(due, [this] {
    delay_timer_ = 0;
    SendDue();
  });
}

void Server::SendDue() {
  const Clock::time_point now = Clock::now();
  while (!delayed_.empty() && delayed_.top().due <= now) {
    const Delayed& d = delayed_.top();
    if (!d.tcp) {
      sendto(udp_[d.target].get(), d.bytes.data(), d.bytes.size(), 0,
             reinterpret_cast<const sockaddr*>(&d.dest), d.dest_len);
    } else if (auto it = conns_.find(d.target); it != conns_.end() && it->second.stream) {
      const auto* bytes = reinterpret_cast<const uint8_t*>(d.bytes.data());
      if (it->second.stream->Answer({bytes, d.bytes.size()}) != net::DnsTcpStream::Status::kOpen) {
        Close(d.target);
      } else {
        UpdateDns(d.target, it->second);
      }
    }
    delayed_.pop();
  }
  ArmDelayTimer();
}

int Server::Run() {
  if (!Setup()) return 1;
  while (!stop_) {
    loop_.RunOnce(std::chrono::hours(1));
    if (query_log_ != nullptr) std::fflush(query_log_);
  }
  return 0;
}

}  // namespace

int RunServer(const ServerOptions& opts, ZoneSet zones) {
  auto server = std::make_unique<Server>(opts, std::move(zones));
  return server->Run();
}

}  // namespace weir::gslb_sim
