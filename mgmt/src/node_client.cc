#include "weir/mgmt/node_client.h"

#include <fcntl.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "weir/common/log.h"
#include "weir/common/text.h"
#include "weir/mgmt/node_config.h"
#include "weir/mgmt/protocol.h"
#include "weir/net/event_loop.h"
#include "weir/net/tls.h"

namespace weir::mgmt {

using common::Cat;
using common::ToStd;

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(Cat("cannot read token file ", path, ": ", std::strerror(errno)));
  std::string line;
  std::getline(f, line);
  auto token = TokenFromText(line);
  if (!token.ok()) return absl::InvalidArgumentError(Cat(path, ": ", ToStd(token.status().message())));
  return token;
}

namespace {

// weir-mgmt sends nothing to a node that runs its current version, so a
// session that stayed up this long counts as working even without a frame:
// losing it starts a new round (the next address at once) instead of
// counting towards the back-off.
constexpr auto kEstablishedAfter = std::chrono::seconds(1);

// One read or write on a TLS session: bytes, or -1 with errno EAGAIN (the
// socket is not ready), or 0 at the peer's close_notify; a failure sets
// `error` to OpenSSL's reason ("sslv3 alert certificate expired").
ssize_t TlsTransfer(SSL* ssl, bool write, void* buf, size_t len, std::string* error) {
  ERR_clear_error();
  size_t n = 0;
  const int ret = write ? SSL_write_ex(ssl, buf, len, &n) : SSL_read_ex(ssl, buf, len, &n);
  if (ret == 1) return static_cast<ssize_t>(n);
  switch (SSL_get_error(ssl, ret)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
      errno = EAGAIN;
      return -1;
    case SSL_ERROR_ZERO_RETURN:
      return 0;
    default:
      *error = Cat("TLS: ", net::TlsHandshakeError(ssl));
      errno = ECONNRESET;
      return -1;
  }
}

}  // namespace

struct NodeClient::Session {
  uint64_t serial = 0;  // distinct per session of this client
  size_t index = 0;     // in options_.mgmt
  int fd = -1;
  bool connected = false;
  net::EventLoop::Clock::time_point connected_at{};
  // A frame other than ERROR was received and handled: mgmt speaks to us.
  bool got_frame = false;
  net::EventLoop::TimerId connect_timer = 0;
  std::string out;
  FrameReader reader;
  // With TLS: the context loaded for this session, its SSL, and whether the
  // handshake is still going on.
  std::unique_ptr<net::TlsClientContext> tls;
  SSL* ssl = nullptr;
  bool handshaking = false;
  ~Session() {
    if (ssl != nullptr) SSL_free(ssl);
  }
};

NodeClient::NodeClient(NodeClientOptions options, ApplyFn apply)
    : options_(std::move(options)), apply_(std::move(apply)) {}

NodeClient::~NodeClient() { Stop(); }

absl::Status NodeClient::Start(Snapshot stored) {
  const uint64_t version = stored.version;
  std::string origin = stored.origin;
  current_ = std::move(stored);
  return Start(version, std::move(origin));
}

absl::Status NodeClient::Start(uint64_t have_version, std::string have_origin) {
  if (options_.mgmt.empty()) return absl::InvalidArgumentError("no weir-mgmt address");
  applied_origin_ = std::move(have_origin);
  loop_ = std::make_unique<net::EventLoop>();
  if (absl::Status st = loop_->Init(); !st.ok()) return st;
  loop_->SetWakeHandler([this] {
    std::vector<std::function<void()>> fns;
    {
      std::lock_guard<std::mutex> l(posted_mu_);
      fns.swap(posted_);
    }
    for (auto& fn : fns) fn();
  });
  applied_.store(have_version);
  backoff_ms_ = options_.reconnect_min_ms;
  next_ = 0;
  last_connected_ = -1;
  round_failures_ = 0;
  running_.store(true);
  thread_ = std::thread([this] {
    Connect();
    // Stop() wakes the loop; everything else is the socket or a timer.
    while (running_.load()) loop_->RunOnce(std::chrono::seconds(1));
    if (session_ != nullptr) {
      if (session_->fd >= 0) {
        loop_->Unwatch(session_->fd);
        close(session_->fd);
      }
      session_.reset();
    }
    connected_.store(false);
    SetCurrent("");
  });
  return absl::OkStatus();
}

void NodeClient::Post(std::function<void()> fn) {
  // Under the lock: Stop() cannot take the loop away meanwhile.
  std::lock_guard<std::mutex> l(posted_mu_);
  if (!running_.load()) return;
  posted_.push_back(std::move(fn));
  loop_->Wake();
}

void NodeClient::Stop() {
  {
    std::lock_guard<std::mutex> l(posted_mu_);
    if (!running_.exchange(false)) return;
  }
  loop_->Wake();
  thread_.join();
  loop_.reset();
}

std::string NodeClient::last_error() const {
  std::lock_guard<std::mutex> l(mu_);
  return last_error_;
}

void NodeClient::SetError(std::string e) {
  std::lock_guard<std::mutex> l(mu_);
  last_error_ = std::move(e);
}

std::string NodeClient::current_mgmt() const {
  std::lock_guard<std::mutex> l(mu_);
  return current_mgmt_;
}

void NodeClient::SetCurrent(std::string address) {
  std::lock_guard<std::mutex> l(mu_);
  current_mgmt_ = std::move(address);
}

void NodeClient::End(const absl::Status& why) {
  const Session& s = *session_;
  const size_t lost = s.index;
  const bool had_session = s.connected;
  const bool established =
      s.got_frame || (s.connected && net::EventLoop::Clock::now() - s.connected_at >= kEstablishedAfter);
  if (s.connect_timer != 0) loop_->Cancel(s.connect_timer);
  if (s.fd >= 0) {
    loop_->Unwatch(s.fd);
    close(s.fd);
  }
  session_.reset();
  connected_.store(false);
  SetCurrent("");
  if (!running_.load()) return;
  const std::string reason(ToStd(why.message()));
  SetError(reason);
  // The next address at once; the back-off only once a whole round of
  // addresses failed in a row, so a node finds a live mgmt quickly and an
  // outage of all of them is not a busy loop.
  const size_t n = options_.mgmt.size();
  next_ = (lost + 1) % n;
  if (established) {
    round_failures_ = 0;
    backoff_ms_ = options_.reconnect_min_ms;
  } else {
    ++round_failures_;
  }
  int delay_ms = 0;
  if (round_failures_ >= n) {
    delay_ms = backoff_ms_;
    backoff_ms_ = std::min(backoff_ms_ * 2, options_.reconnect_max_ms);
    round_failures_ = 0;
  }
  const std::string from = options_.mgmt[lost].ToString();
  const std::string to = options_.mgmt[next_].ToString();
  const char* what = had_session ? " lost (" : " unreachable (";
  if (delay_ms == 0) {
    failover_log_("mgmt ", from, what, reason, "); trying ", to);
  } else {
    connection_log_("mgmt ", from, what, reason, "); ", n > 1 ? "every address failed; " : "", "trying ", to,
                    " in ", delay_ms, " ms");
  }
  loop_->After(std::chrono::milliseconds(delay_ms), [this] { Connect(); });
}

void NodeClient::Connect() {
  const common::SocketAddress& a = options_.mgmt[next_];
  session_ = std::make_unique<Session>();
  session_->serial = ++session_serial_;
  session_->index = next_;
  const int fd = socket(a.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return End(absl::InternalError(Cat("socket: ", std::strerror(errno))));
  session_->fd = fd;
  if (connect(fd, a.sa(), a.len) != 0 && errno != EINPROGRESS) {
    return End(absl::UnavailableError(Cat("connect: ", std::strerror(errno))));
  }
  session_->connect_timer = loop_->After(std::chrono::milliseconds(options_.connect_timeout_ms), [this] {
    session_->connect_timer = 0;
    End(absl::UnavailableError("connect: timed out"));
  });
  loop_->Watch(fd, EPOLLOUT, [this](uint32_t events) {
    if (session_->handshaking) return Handshake();
    if (session_->connected) return OnSession(events);
    OnConnected();
  });
}

void NodeClient::OnConnected() {
  Session& s = *session_;
  loop_->Cancel(s.connect_timer);
  s.connect_timer = 0;
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) return End(absl::UnavailableError(Cat("connect: ", std::strerror(err))));
  EnableKeepalive(s.fd);
  if (!options_.tls_cert_file.empty()) {
    // The files as they are now: a renewed certificate is used from here on.
    auto ctx = net::TlsClientContext::Create({.certificate = {options_.tls_cert_file, options_.tls_key_file},
                                              .ca = options_.tls_ca_file,
                                              .server_name = options_.tls_server_name});
    if (!ctx.ok()) return End(absl::FailedPreconditionError(Cat("TLS: ", ToStd(ctx.status().message()))));
    s.tls = *std::move(ctx);
    s.ssl = s.tls->NewConnection(s.fd);
    if (s.ssl == nullptr) return End(absl::InternalError(Cat("TLS: ", net::TlsErrors())));
    s.handshaking = true;
    s.connect_timer = loop_->After(std::chrono::milliseconds(options_.connect_timeout_ms), [this] {
      session_->connect_timer = 0;
      End(absl::UnavailableError("TLS handshake: timed out"));
    });
    return Handshake();
  }
  StartSession();
}

void NodeClient::Handshake() {
  Session& s = *session_;
  ERR_clear_error();
  const int ret = SSL_do_handshake(s.ssl);
  if (ret == 1) {
    s.handshaking = false;
    loop_->Cancel(s.connect_timer);
    s.connect_timer = 0;
    return StartSession();
  }
  switch (SSL_get_error(s.ssl, ret)) {
    case SSL_ERROR_WANT_READ:
      return loop_->Modify(s.fd, EPOLLIN);
    case SSL_ERROR_WANT_WRITE:
      return loop_->Modify(s.fd, EPOLLIN | EPOLLOUT);
    default:
      return End(absl::UnavailableError(Cat("TLS handshake: ", net::TlsHandshakeError(s.ssl))));
  }
}

void NodeClient::StartSession() {
  Session& s = *session_;
  s.connected = true;
  s.connected_at = net::EventLoop::Clock::now();
  connected_.store(true);
  SetCurrent(options_.mgmt[s.index].ToString());
  if (last_connected_ >= 0 && static_cast<size_t>(last_connected_) != s.index) {
    failovers_.fetch_add(1, std::memory_order_relaxed);
  }
  last_connected_ = static_cast<int>(s.index);
  // "delta": this node takes incremental pushes against what it runs (it
  // knows the content of its version, or runs none yet).
  s.out = Encode(Message{MsgType::kHello,
                         {std::string(kProtocol), options_.token, options_.node_id, options_.kind,
                          std::to_string(applied_.load()), applied_origin_,
                          current_ || applied_.load() == 0 ? std::string(kDeltaCapability) : std::string()}});
  OnSession(EPOLLOUT);  // HELLO goes out now; then watches the stream
}

void NodeClient::OnSession(uint32_t events) {
  Session& s = *session_;
  std::string tls_error;
  if ((events & EPOLLOUT) && !s.out.empty()) {
    ssize_t n = s.ssl != nullptr ? TlsTransfer(s.ssl, true, s.out.data(), s.out.size(), &tls_error)
                                 : send(s.fd, s.out.data(), s.out.size(), MSG_NOSIGNAL);
    if (!tls_error.empty()) return End(absl::UnavailableError(tls_error));
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return End(absl::UnavailableError(Cat("send: ", std::strerror(errno))));
    }
    if (n > 0) s.out.erase(0, static_cast<size_t>(n));
  }
  // TLS may hold decrypted bytes the socket will not signal again: read them too.
  while ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) || (s.ssl != nullptr && SSL_has_pending(s.ssl) == 1)) {
    events &= ~static_cast<uint32_t>(EPOLLIN | EPOLLHUP | EPOLLERR);
    char buf[65536];
    ssize_t n = s.ssl != nullptr ? TlsTransfer(s.ssl, false, buf, sizeof(buf), &tls_error)
                                 : recv(s.fd, buf, sizeof(buf), 0);
    if (!tls_error.empty()) return End(absl::UnavailableError(tls_error));
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return End(absl::UnavailableError(Cat("recv: ", std::strerror(errno))));
    }
    if (n == 0) return End(absl::CancelledError("connection closed by mgmt"));
    if (n > 0) {
      s.reader.Feed(std::string_view(buf, static_cast<size_t>(n)));
      if (absl::Status st = HandleFrames(); !st.ok()) return End(st);
    }
  }
  loop_->Modify(s.fd, EPOLLIN | (s.out.empty() ? 0u : static_cast<uint32_t>(EPOLLOUT)));
}

absl::Status NodeClient::HandleFrames() {
  Session& s = *session_;
  for (;;) {
    auto m = s.reader.Next();
    if (!m.ok()) return absl::DataLossError(Cat("bad frame from mgmt: ", ToStd(m.status().message())));
    if (!m->has_value()) return absl::OkStatus();
    const Message& msg = **m;
    if (msg.type == MsgType::kError) {
      return absl::PermissionDeniedError(Cat("mgmt refused: ", msg.fields.empty() ? "" : msg.fields[0]));
    }
    if (msg.type == MsgType::kControl && msg.fields.size() >= 3) {
      // id, actor, verb, args...: answered in order, on this thread.
      ControlRequest req{
          Cat("weir-mgmt: ", msg.fields[1]), msg.fields[2], {msg.fields.begin() + 3, msg.fields.end()}};
      s.got_frame = true;
      if (auto async = async_control_.find(req.verb); async != async_control_.end()) {
        // Answered when its work is done, on this thread, into the session
        // it came on (if that is still the one).
        async->second(req, [this, id = msg.fields[0], serial = s.serial](ControlReply r) {
          Post([this, id, serial, r = BoundedReply(std::move(r))] {
            if (session_ == nullptr || session_->serial != serial || !session_->connected) return;
            session_->out +=
                Encode(Message{MsgType::kControlReply, {id, r.ok ? "ok" : "error", r.text, r.json}});
            OnSession(EPOLLOUT);
          });
        });
        continue;
      }
      const ControlReply r =
          BoundedReply(control_ ? control_(req) : ControlReply::Error("this node has no control handler"));
      s.out +=
          Encode(Message{MsgType::kControlReply, {msg.fields[0], r.ok ? "ok" : "error", r.text, r.json}});
      s.got_frame = true;
      continue;
    }
    if (msg.type == MsgType::kDelta) {
      auto delta = DeltaFromMessage(msg);
      if (!delta.ok()) return absl::DataLossError(Cat("bad delta: ", ToStd(delta.status().message())));
      s.got_frame = true;
      HandleDelta(*delta);
      continue;
    }
    if (msg.type != MsgType::kSnapshot) continue;  // newer mgmt: ignore what we do not know
    auto snap = SnapshotFromMessage(msg);
    if (!snap.ok()) return absl::DataLossError(Cat("bad snapshot: ", ToStd(snap.status().message())));
    s.got_frame = true;
    HandleSnapshot(*snap, nullptr);
  }
}

void NodeClient::HandleDelta(const SnapshotDelta& delta) {
  Session& s = *session_;
  // The version guards first: a delta to a version this node runs or has
  // passed is answered as a snapshot of it would be.
  if (delta.origin == applied_origin_ && delta.version <= applied_.load()) {
    Snapshot same;
    same.version = delta.version;
    same.origin = delta.origin;
    return HandleSnapshot(same, nullptr);
  }
  absl::StatusOr<Snapshot> next =
      absl::FailedPreconditionError("this node holds no snapshot to apply a delta to");
  SnapshotParts changed;
  if (current_) next = ApplyDelta(*current_, delta, &changed);
  if (!next.ok()) {
    // weir-mgmt sends the whole snapshot after this NACK.
    deltas_refused_.fetch_add(1, std::memory_order_relaxed);
    s.out += Encode(Message{MsgType::kNack,
                            {std::to_string(delta.version), std::string(ToStd(next.status().message())),
                             std::string(kResendWhole)}});
    rejected_log_("mgmt delta to version ", delta.version, " not applied: ", ToStd(next.status().message()),
                  " (asking for the whole snapshot)");
    return;
  }
  deltas_applied_.fetch_add(1, std::memory_order_relaxed);
  HandleSnapshot(*next, &changed);
}

void NodeClient::HandleSnapshot(const Snapshot& snap, const SnapshotParts* parts) {
  Session& s = *session_;
  const uint64_t runs = applied_.load();
  // Versions count per database (origin): within one, a node never goes
  // back, whichever mgmt instance of the cluster pushes (one that lags
  // behind the others, say). Another origin is a new database: applied.
  if (snap.origin == applied_origin_ && snap.version < runs) {
    const std::string reason = Cat("older than version ", runs, " this node runs");
    rejected_.fetch_add(1);
    SetError(Cat("rejected version ", snap.version, ": ", reason));
    s.out += Encode(Message{MsgType::kNack, {std::to_string(snap.version), reason}});
    rejected_log_("rejected mgmt snapshot version ", snap.version, " from ",
                  options_.mgmt[s.index].ToString(), ": ", reason);
    return;
  }
  if (snap.origin == applied_origin_ && snap.version == runs) {
    s.out += Encode(Message{MsgType::kAck, {std::to_string(snap.version)}});
    common::LogInfo("mgmt", "mgmt ", options_.mgmt[s.index].ToString(), " sent version ", snap.version,
                    ", which this node runs: acknowledged, not applied again");
    return;
  }
  // The parts that differ from what the node runs; every part when it
  // runs nothing known (the first snapshot).
  const SnapshotParts changed = parts != nullptr ? *parts
                                : current_       ? DiffParts(*current_, snap)
                                                 : SnapshotParts{};
  absl::Status st = apply_(snap, changed);
  if (st.ok()) {
    applied_parts_[0].fetch_add(changed.tags ? 1 : 0, std::memory_order_relaxed);
    applied_parts_[1].fetch_add(changed.citymap ? 1 : 0, std::memory_order_relaxed);
    applied_parts_[2].fetch_add(changed.accounts ? 1 : 0, std::memory_order_relaxed);
    applied_parts_[3].fetch_add(changed.factors ? 1 : 0, std::memory_order_relaxed);
  }
  if (st.ok() && !options_.state_dir.empty()) {
    if (absl::Status ps = PersistSnapshot(options_.state_dir, snap); !ps.ok()) {
      // Applied and answering; only a restart without mgmt would miss it.
      common::LogError("mgmt", "cannot store snapshot ", snap.version, ": ", ToStd(ps.message()));
    }
  }
  if (st.ok()) {
    applied_.store(snap.version);
    applied_origin_ = snap.origin;
    current_ = snap;
    s.out += Encode(Message{MsgType::kAck, {std::to_string(snap.version)}});
    common::LogInfo("mgmt", "applied mgmt snapshot version ", snap.version);
  } else {
    rejected_.fetch_add(1);
    SetError(Cat("rejected version ", snap.version, ": ", ToStd(st.message())));
    s.out +=
        Encode(Message{MsgType::kNack, {std::to_string(snap.version), std::string(ToStd(st.message()))}});
    rejected_log_("rejected mgmt snapshot version ", snap.version, ": ", ToStd(st.message()));
  }
}

absl::StatusOr<NodeStart> PrepareNode(const NodeMgmtConfig& config, const std::string& kind) {
  NodeStart out;
  // With TLS the token is optional (the certificate authenticates).
  if (!config.token_file.empty()) {
    auto token = ReadTokenFile(config.token_file);
    if (!token.ok()) return token.status();
    out.token = *token;
  }
  if (mkdir(config.state_dir.c_str(), 0750) != 0 && errno != EEXIST) {
    return absl::UnavailableError(
        Cat("cannot create state_dir ", config.state_dir, ": ", std::strerror(errno)));
  }
  // A file an older version stored is group-readable; it may hold the
  // HTTPDNS accounts' secrets (every new one is created 0600).
  if (const std::string file = config.state_dir + "/snapshot";
      chmod(file.c_str(), 0600) != 0 && errno != ENOENT) {
    common::LogWarning("mgmt", "cannot make ", file, " private: ", std::strerror(errno));
  }
  auto stored = LoadPersistedSnapshot(config.state_dir);
  if (stored.ok()) {
    if (absl::Status v = ValidateSnapshot(*stored); v.ok()) {
      out.stored = *std::move(stored);
    } else {
      common::LogWarning("mgmt", "ignoring the stored ", kind, " snapshot: ", ToStd(v.message()));
    }
  } else if (stored.status().code() != absl::StatusCode::kNotFound) {
    common::LogWarning("mgmt", "ignoring the stored ", kind, " snapshot: ", ToStd(stored.status().message()));
  }
  return out;
}

NodeClientOptions MakeNodeClientOptions(const NodeMgmtConfig& config, const std::string& kind,
                                        const std::string& token) {
  NodeClientOptions o;
  o.mgmt = config.addresses;
  o.token = token;
  o.node_id = config.node_id;
  o.kind = kind;
  o.state_dir = config.state_dir;
  o.tls_cert_file = config.tls_cert_file;
  o.tls_key_file = config.tls_key_file;
  o.tls_ca_file = config.tls_ca_file;
  o.tls_server_name = config.tls_server_name;
  return o;
}

void NodeClient::RenderMetrics(common::PrometheusWriter& w) const {
  w.Gauge("weir_mgmt_snapshot_version", "The mgmt snapshot version this node runs.")
      .Add({}, applied_version());
  w.Gauge("weir_mgmt_connected", "1 while the node is connected to weir-mgmt.").Add({}, connected() ? 1 : 0);
  w.Counter("weir_mgmt_rejected_total", "Snapshots from weir-mgmt this node rejected.").Add({}, rejected());
  w.Counter("weir_mgmt_failovers_total",
            "Sessions this node opened to another weir-mgmt address than its previous session's.")
      .Add({}, failovers());
  auto& pushes =
      w.Counter("weir_mgmt_deltas_total",
                "Incremental pushes (DELTA) from weir-mgmt: applied, or refused because this node's "
                "base differs (the whole snapshot follows).");
  pushes.Add({{"result", "applied"}}, deltas_applied_.load(std::memory_order_relaxed));
  pushes.Add({{"result", "refused"}}, deltas_refused_.load(std::memory_order_relaxed));
  auto& parts =
      w.Counter("weir_mgmt_applied_parts_total",
                "Parts of weir-mgmt's versions this node rebuilt (a part a version did not change is "
                "kept as built: a tag change does not rebuild the city map).");
  parts.Add({{"part", "tags"}}, applied_parts_[0].load(std::memory_order_relaxed));
  parts.Add({{"part", "citymap"}}, applied_parts_[1].load(std::memory_order_relaxed));
  parts.Add({{"part", "accounts"}}, applied_parts_[2].load(std::memory_order_relaxed));
  parts.Add({{"part", "factors"}}, applied_parts_[3].load(std::memory_order_relaxed));
}

}  // namespace weir::mgmt
