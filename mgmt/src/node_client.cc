#include "weir/mgmt/node_client.h"

#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "weir/common/text.h"
#include "weir/mgmt/node_config.h"

namespace weir::mgmt {

using common::Cat;
using common::ToStd;

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(Cat("cannot read token file ", path));
  std::string line;
  std::getline(f, line);
  const size_t b = line.find_first_not_of(" \t\r\n");
  const size_t e = line.find_last_not_of(" \t\r\n");
  line = b == std::string::npos ? std::string() : line.substr(b, e - b + 1);
  if (line.size() < 16)
    return absl::InvalidArgumentError(Cat(path, ": the token must have at least 16 characters"));
  return line;
}

NodeClient::NodeClient(NodeClientOptions options, ApplyFn apply)
    : options_(std::move(options)), apply_(std::move(apply)) {}

NodeClient::~NodeClient() { Stop(); }

absl::Status NodeClient::Start(uint64_t have_version, std::string have_origin) {
  applied_origin_ = std::move(have_origin);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) return absl::InternalError(Cat("eventfd: ", std::strerror(errno)));
  applied_.store(have_version);
  running_.store(true);
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void NodeClient::Stop() {
  if (!running_.exchange(false)) return;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
  thread_.join();
  close(wake_fd_);
  wake_fd_ = -1;
}

std::string NodeClient::last_error() const {
  std::lock_guard<std::mutex> l(mu_);
  return last_error_;
}

void NodeClient::SetError(std::string e) {
  std::lock_guard<std::mutex> l(mu_);
  last_error_ = std::move(e);
}

void NodeClient::Run() {
  int backoff = options_.reconnect_min_ms;
  while (running_.load()) {
    absl::Status st = Session();
    connected_.store(false);
    if (!running_.load()) break;
    SetError(std::string(ToStd(st.message())));
    std::fprintf(stderr, "weir-%s: mgmt %s: %s (retry in %d ms)\n", options_.kind.c_str(),
                 options_.mgmt.ToString().c_str(), std::string(st.message()).c_str(), backoff);
    pollfd p{wake_fd_, POLLIN, 0};
    poll(&p, 1, backoff);
    backoff = std::min(backoff * 2, options_.reconnect_max_ms);
    if (st.code() == absl::StatusCode::kCancelled) backoff = options_.reconnect_min_ms;  // a clean close
  }
}

absl::Status NodeClient::Session() {
  int fd = socket(options_.mgmt.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::InternalError(Cat("socket: ", std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  if (connect(fd, options_.mgmt.sa(), options_.mgmt.len) != 0 && errno != EINPROGRESS) {
    return absl::UnavailableError(Cat("connect: ", std::strerror(errno)));
  }
  pollfd pc[2] = {{fd, POLLOUT, 0}, {wake_fd_, POLLIN, 0}};
  if (poll(pc, 2, 5000) <= 0 || (pc[1].revents & POLLIN)) return absl::UnavailableError("connect: timed out");
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) return absl::UnavailableError(Cat("connect: ", std::strerror(err)));
  EnableKeepalive(fd);
  connected_.store(true);

  std::string out = Encode(Message{MsgType::kHello,
                                   {std::string(kProtocol), options_.token, options_.node_id, options_.kind,
                                    std::to_string(applied_.load()), applied_origin_}});
  FrameReader reader;
  char buf[65536];
  while (running_.load()) {
    pollfd p[2] = {{fd, static_cast<short>(POLLIN | (out.empty() ? 0 : POLLOUT)), 0}, {wake_fd_, POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(Cat("poll: ", std::strerror(errno)));
    }
    if (p[1].revents & POLLIN) break;
    if ((p[0].revents & POLLOUT) && !out.empty()) {
      ssize_t n = send(fd, out.data(), out.size(), MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EINTR)
        return absl::UnavailableError(Cat("send: ", std::strerror(errno)));
      if (n > 0) out.erase(0, static_cast<size_t>(n));
    }
    if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n < 0) return absl::UnavailableError(Cat("recv: ", std::strerror(errno)));
    if (n == 0) return absl::CancelledError("connection closed by mgmt");
    reader.Feed(std::string_view(buf, static_cast<size_t>(n)));
    for (;;) {
      auto m = reader.Next();
      if (!m.ok()) return absl::DataLossError(Cat("bad frame from mgmt: ", ToStd(m.status().message())));
      if (!m->has_value()) break;
      const Message& msg = **m;
      if (msg.type == MsgType::kError) {
        return absl::PermissionDeniedError(Cat("mgmt refused: ", msg.fields.empty() ? "" : msg.fields[0]));
      }
      if (msg.type != MsgType::kSnapshot) continue;  // newer mgmt: ignore what we do not know
      auto snap = SnapshotFromMessage(msg);
      if (!snap.ok()) return absl::DataLossError(Cat("bad snapshot: ", ToStd(snap.status().message())));
      absl::Status st = apply_(*snap);
      if (st.ok() && !options_.state_dir.empty()) {
        if (absl::Status ps = PersistSnapshot(options_.state_dir, *snap); !ps.ok()) {
          // Applied and answering; only a restart without mgmt would miss it.
          std::fprintf(stderr, "weir-%s: cannot store snapshot %llu: %s\n", options_.kind.c_str(),
                       static_cast<unsigned long long>(snap->version), std::string(ps.message()).c_str());
        }
      }
      if (st.ok()) {
        applied_.store(snap->version);
        applied_origin_ = snap->origin;
        out += Encode(Message{MsgType::kAck, {std::to_string(snap->version)}});
        std::fprintf(stderr, "weir-%s: applied mgmt snapshot version %llu\n", options_.kind.c_str(),
                     static_cast<unsigned long long>(snap->version));
      } else {
        rejected_.fetch_add(1);
        SetError(Cat("rejected version ", snap->version, ": ", ToStd(st.message())));
        out += Encode(
            Message{MsgType::kNack, {std::to_string(snap->version), std::string(ToStd(st.message()))}});
        std::fprintf(stderr, "weir-%s: rejected mgmt snapshot version %llu: %s\n", options_.kind.c_str(),
                     static_cast<unsigned long long>(snap->version), std::string(st.message()).c_str());
      }
    }
  }
  return absl::CancelledError("stopping");
}

absl::StatusOr<NodeStart> PrepareNode(const NodeMgmtConfig& config, const std::string& kind) {
  NodeStart out;
  auto token = ReadTokenFile(config.token_file);
  if (!token.ok()) return token.status();
  out.token = *token;
  if (mkdir(config.state_dir.c_str(), 0750) != 0 && errno != EEXIST) {
    return absl::UnavailableError(
        Cat("cannot create state_dir ", config.state_dir, ": ", std::strerror(errno)));
  }
  auto stored = LoadPersistedSnapshot(config.state_dir);
  if (stored.ok()) {
    if (absl::Status v = ValidateSnapshot(*stored); v.ok()) {
      out.stored = *std::move(stored);
    } else {
      std::fprintf(stderr, "weir-%s: ignoring stored snapshot: %s\n", kind.c_str(),
                   std::string(v.message()).c_str());
    }
  } else if (stored.status().code() != absl::StatusCode::kNotFound) {
    std::fprintf(stderr, "weir-%s: ignoring stored snapshot: %s\n", kind.c_str(),
                 std::string(stored.status().message()).c_str());
  }
  return out;
}

NodeClientOptions MakeNodeClientOptions(const NodeMgmtConfig& config, const std::string& kind,
                                        const std::string& token) {
  NodeClientOptions o;
  o.mgmt = config.address;
  o.token = token;
  o.node_id = config.node_id;
  o.kind = kind;
  o.state_dir = config.state_dir;
  return o;
}

}  // namespace weir::mgmt
