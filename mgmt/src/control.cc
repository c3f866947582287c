#include "weir/mgmt/control.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "weir/common/log.h"
#include "weir/common/text.h"
#include "weir/mgmt/node_client.h"
#include "weir/mgmt/protocol.h"
#include "weir/net/event_loop.h"
#include "weir/net/socket.h"
#include "weir/partitions/partition.h"

namespace weir::mgmt {

using common::Cat;
using common::ToStd;

namespace {

// A request is a few hundred bytes; a peer that sends more is not weirctl.
constexpr uint32_t kMaxRequestBytes = 1 << 20;
// Per transport (control.h).
constexpr size_t kMaxConnections = kMaxControlConnections;
// weirctl sends its request at once; a peer that does not within this is
// closed. Once the reply is queued, it has kReplyDeadline to read it.
constexpr std::chrono::seconds kRequestDeadline{5};
constexpr std::chrono::seconds kReplyDeadline{30};
constexpr std::chrono::seconds kAcceptBackoff{1};

}  // namespace

absl::StatusOr<ControlArgs> ControlArgs::Parse(const std::vector<std::string>& args,
                                               std::initializer_list<std::string_view> known) {
  ControlArgs out;
  for (const std::string& a : args) {
    const size_t eq = a.find('=');
    if (eq == std::string::npos || eq == 0)
      return absl::InvalidArgumentError(Cat("'", a, "' is not key=value"));
    const std::string key = a.substr(0, eq);
    bool ok = false;
    for (std::string_view k : known) ok = ok || k == key;
    if (!ok) {
      std::string list;
      for (std::string_view k : known) list += Cat(list.empty() ? "" : ", ", k);
      return absl::InvalidArgumentError(
          Cat("unknown argument '", key, "'",
              known.size() == 0 ? " (this command takes none)" : Cat(" (takes ", list, ")")));
    }
    if (eq + 1 == a.size()) return absl::InvalidArgumentError(Cat("argument '", key, "' has no value"));
    if (!out.values_.emplace(key, a.substr(eq + 1)).second)
      return absl::InvalidArgumentError(Cat("argument '", key, "' given twice"));
  }
  return out;
}

std::string ControlArgs::Get(std::string_view key, std::string fallback) const {
  auto it = values_.find(key);
  return it == values_.end() ? fallback : it->second;
}

absl::StatusOr<uint64_t> ControlArgs::Number(std::string_view key, uint64_t fallback, uint64_t lo,
                                             uint64_t hi) const {
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  uint64_t v = 0;
  const std::string& s = it->second;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || v < lo || v > hi)
    return absl::InvalidArgumentError(
        Cat("'", key, "' must be a number from ", lo, " to ", hi, ", not '", s, "'"));
  return v;
}

bool ControlArgs::Flag(std::string_view key) const {
  const std::string v = Get(key);
  return v == "1" || v == "true" || v == "yes";
}

absl::StatusOr<NameSelection> NameSelection::Parse(const ControlArgs& a) {
  NameSelection s;
  const std::string name = a.Get("name");
  if (!name.empty()) {
    if (!dns::NameKeyFromText(name, &s.name))
      return absl::InvalidArgumentError(Cat("'", name, "' is not a domain name"));
    s.has_name = true;
  }
  s.suffix = a.Flag("suffix");
  if (s.suffix && !s.has_name) return absl::InvalidArgumentError("--suffix needs a name");
  const std::string type = a.Get("type");
  if (!type.empty()) {
    s.qtype = dns::TypeFromText(type);
    if (s.qtype == 0)
      return absl::InvalidArgumentError(Cat("unknown type '", type, "' (A, AAAA, MX, TYPE65, ...)"));
  }
  return s;
}

bool NameSelection::NameMatches(std::span<const uint8_t> key) const {
  if (!has_name) return true;
  if (suffix) return UnderSuffix(key, name.span());
  return key.size() == name.len && std::memcmp(key.data(), name.bytes.data(), name.len) == 0;
}

bool UnderSuffix(std::span<const uint8_t> name, std::span<const uint8_t> suffix) {
  size_t pos = 0;
  while (pos < name.size()) {
    if (name.size() - pos == suffix.size() &&
        std::memcmp(name.data() + pos, suffix.data(), suffix.size()) == 0)
      return true;
    if (name[pos] == 0) break;
    pos += 1 + name[pos];
  }
  return false;
}

std::string AddressText(const uint8_t* bytes, size_t len) {
  return common::IpToString(len == 4 ? common::IpAddress::V4(dns::Load32(bytes))
                                     : common::IpAddress::V6(bytes));
}

ControlReply BoundedReply(ControlReply reply) {
  const size_t bytes = reply.text.size() + reply.json.size();
  if (bytes <= kMaxControlReplyBytes) return reply;
  return ControlReply::Error(Cat("the reply would be ", bytes >> 20, " MiB, more than the ",
                                 kMaxControlReplyBytes >> 20,
                                 " MiB a reply may hold: narrow it (--name, --partition, --limit)"));
}

std::string DefaultControlSocket(std::string_view kind) { return Cat("/run/weir-", kind, "/control.sock"); }

void ParseControlTable(common::TomlChecker& c, const toml::table& root, std::string_view kind,
                       ControlConfig* out) {
  out->socket_path = DefaultControlSocket(kind);
  out->socket_is_default = true;
  const toml::table* t = common::SubTable(c, root, "control");
  if (t == nullptr) return;
  c.OnlyKeys(*t, "control", {"socket", "listen", "token_file"});
  if (t->get("socket") != nullptr) {
    c.String(*t, "socket", &out->socket_path);
    out->socket_is_default = false;
    if (out->socket_path.size() >= sizeof(sockaddr_un{}.sun_path)) {
      c.Fail(t->get("socket")->source(), Cat("[control] socket: a unix socket path has at most ",
                                             sizeof(sockaddr_un{}.sun_path) - 1, " bytes"));
    }
  }
  std::string listen;
  c.String(*t, "listen", &listen);
  c.String(*t, "token_file", &out->token_file);
  if (!listen.empty()) {
    auto a = common::SocketAddress::Parse(listen);
    if (!a.ok()) {
      c.Fail(t->get("listen")->source(), Cat("[control] listen: ", ToStd(a.status().message())));
    } else {
      out->tcp_listen = *a;
      out->tcp_enabled = true;
      if (out->token_file.empty())
        c.Fail(t->get("listen")->source(),
               "[control] listen needs 'token_file' (TCP peers must authenticate)");
    }
  }
}

struct ControlServer::Conn {
  int fd = -1;
  bool tcp = false;
  FrameReader reader;
  std::string out;
  bool done = false;  // the reply is queued: close once it is written
  net::EventLoop::TimerId deadline = 0;
};

ControlServer::ControlServer(ControlConfig config, ControlHandler handler)
    : config_(std::move(config)), handler_(std::move(handler)) {}

ControlServer::~ControlServer() { Stop(); }

absl::Status ControlServer::Bind() {
  if (config_.tcp_enabled) {
    auto token = ReadTokenFile(config_.token_file);
    if (!token.ok()) return absl::Status(token.status().code(), Cat("[control] ", token.status().message()));
    token_ = *token;
    auto fd = net::BindSocket(config_.tcp_listen, SOCK_STREAM, {.nonblocking = true, .listen_backlog = 16});
    if (!fd.ok()) return absl::Status(fd.status().code(), Cat("[control] listen: ", fd.status().message()));
    tcp_fd_ = *fd;
    tcp_bound_ = net::LocalAddress(tcp_fd_);
  }
  if (config_.socket_path.empty()) return absl::OkStatus();
  const std::string& path = config_.socket_path;
  auto fail = [&](std::string why) -> absl::Status {
    if (!config_.socket_is_default) {
      return absl::UnavailableError(Cat("[control] socket ", path, ": ", why));
    }
    common::LogWarning("control", "no control socket: ", path, ": ", why,
                       " (set [control] socket to a path this daemon can use, or \"\" for none)");
    return absl::OkStatus();
  };
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.size() >= sizeof(sa.sun_path)) return fail("path too long");
  std::memcpy(sa.sun_path, path.data(), path.size());
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    const std::string dir = path.substr(0, slash);
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
      return fail(Cat("cannot create ", dir, ": ", std::strerror(errno)));
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail(Cat("socket: ", std::strerror(errno)));
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      close(fd);
      return fail("exists and is not a socket");
    }
    // A socket file left by a daemon that died is removed; one a running
    // daemon answers on is not taken over.
    const int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool alive = probe >= 0 && connect(probe, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
    if (probe >= 0) close(probe);
    if (alive) {
      close(fd);
      return fail("in use by a running daemon");
    }
    unlink(path.c_str());
  }
  const mode_t old = umask(0117);  // srw-rw----: the daemon's user and group
  const int rc = bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  umask(old);
  if (rc != 0 || listen(fd, 16) != 0) {
    const std::string why = std::strerror(errno);
    close(fd);
    return fail(why);
  }
  unix_fd_ = fd;
  created_socket_file_ = true;
  return absl::OkStatus();
}

void ControlServer::Attach(net::EventLoop& loop) {
  loop_ = &loop;
  if (unix_fd_ >= 0) loop_->Watch(unix_fd_, EPOLLIN, [this](uint32_t) { Accept(unix_fd_, false); });
  if (tcp_fd_ >= 0) loop_->Watch(tcp_fd_, EPOLLIN, [this](uint32_t) { Accept(tcp_fd_, true); });
}

absl::Status ControlServer::StartThread() {
  own_loop_ = std::make_unique<net::EventLoop>();
  if (absl::Status st = own_loop_->Init(); !st.ok()) return st;
  Attach(*own_loop_);
  running_.store(true);
  thread_ = std::thread([this] {
    while (running_.load()) own_loop_->RunOnce(std::chrono::seconds(1));
  });
  return absl::OkStatus();
}

void ControlServer::Stop() {
  if (running_.exchange(false)) {
    own_loop_->Wake();
    thread_.join();
  }
  while (!conns_.empty()) Close(conns_.begin()->first);
  for (int* fd : {&unix_fd_, &tcp_fd_}) {
    if (*fd < 0) continue;
    if (loop_ != nullptr) loop_->Unwatch(*fd);
    close(*fd);
    *fd = -1;
  }
  if (created_socket_file_) {
    unlink(config_.socket_path.c_str());  // fails quietly once privileges are dropped
    created_socket_file_ = false;
  }
  loop_ = nullptr;
  own_loop_.reset();
}

std::string ControlServer::Describe() const {
  std::string out;
  if (unix_fd_ >= 0) out += Cat("control unix ", config_.socket_path, "\n");
  if (tcp_fd_ >= 0) out += Cat("control tcp ", tcp_bound_.ToString(), "\n");
  return out;
}

void ControlServer::Accept(int listen_fd, bool tcp) {
  for (;;) {
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The pending connection stays readable: without a pause the loop would spin.
        log_("accept: ", std::strerror(errno), " (pausing the control channel's accepts for 1 s)");
        loop_->Unwatch(listen_fd);
        loop_->After(kAcceptBackoff, [this, listen_fd, tcp] {
          if (loop_ != nullptr && listen_fd == (tcp ? tcp_fd_ : unix_fd_))
            loop_->Watch(listen_fd, EPOLLIN, [this, listen_fd, tcp](uint32_t) { Accept(listen_fd, tcp); });
        });
      }
      return;  // EAGAIN: all taken
    }
    size_t same = 0;
    for (const auto& [other, c] : conns_) same += c->tcp == tcp;
    if (same >= kMaxConnections) {
      close(fd);
      refused_.fetch_add(1, std::memory_order_relaxed);
      log_(tcp ? "TCP" : "unix", " control connections at their limit (", kMaxConnections, "): one refused");
      continue;
    }
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->tcp = tcp;
    c->deadline = loop_->After(kRequestDeadline, [this, fd] {
      auto it = conns_.find(fd);
      if (it == conns_.end()) return;
      it->second->deadline = 0;
      Close(fd);
    });
    conns_[fd] = std::move(c);
    loop_->Watch(fd, EPOLLIN, [this, fd](uint32_t events) { OnEvents(fd, events); });
  }
}

void ControlServer::Close(int fd) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  if (it->second->deadline != 0 && loop_ != nullptr) loop_->Cancel(it->second->deadline);
  if (loop_ != nullptr) loop_->Unwatch(fd);
  close(fd);
  conns_.erase(it);
}

void ControlServer::OnEvents(int fd, uint32_t events) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  Conn& c = *it->second;
  if (!c.done && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
    char buf[16384];
    for (;;) {
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) break;
      if (n <= 0) return Close(fd);
      c.reader.Feed(std::string_view(buf, static_cast<size_t>(n)));
      if (c.reader.buffered() > kMaxRequestBytes) return Close(fd);
      Serve(c);
      if (c.done) break;
    }
  }
  while (!c.out.empty()) {
    const ssize_t n = send(fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) return Close(fd);
    c.out.erase(0, static_cast<size_t>(n));
  }
  if (c.done && c.out.empty()) return Close(fd);
  loop_->Modify(fd, c.out.empty() ? EPOLLIN : EPOLLOUT);
}

void ControlServer::Serve(Conn& c) {
  auto m = c.reader.Next();
  auto reply = [&](const ControlReply& r) {
    c.out = Encode(Message{MsgType::kReply, {r.ok ? "ok" : "error", r.text, r.json}});
    c.done = true;
    if (c.deadline != 0) loop_->Cancel(c.deadline);
    const int fd = c.fd;
    c.deadline = loop_->After(kReplyDeadline, [this, fd] {
      auto it = conns_.find(fd);
      if (it == conns_.end()) return;
      it->second->deadline = 0;
      Close(fd);
    });
  };
  if (!m.ok()) return reply(ControlReply::Error(Cat("bad frame: ", ToStd(m.status().message()))));
  if (!m->has_value()) return;
  const Message& msg = **m;
  if (msg.type != MsgType::kRequest || msg.fields.size() < 4 || msg.fields[0] != kProtocol) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return reply(ControlReply::Error(
        Cat("expected a ", kProtocol, " REQUEST {protocol, token, actor, verb, args...}")));
  }
  if (c.tcp && !TokenEquals(msg.fields[1], token_)) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    log_("TCP control request refused: bad token");
    return reply(ControlReply::Error("bad token"));
  }
  ControlRequest req{msg.fields[2], msg.fields[3], {msg.fields.begin() + 4, msg.fields.end()}};
  requests_.fetch_add(1, std::memory_order_relaxed);
  reply(BoundedReply(handler_(req)));
}

}  // namespace weir::mgmt
