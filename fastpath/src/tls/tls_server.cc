#include "tls/tls_server.h"

#include <openssl/err.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <string>

#include "kernel/socket_util.h"
#include "weir/common/log.h"
#include "weir/common/rcu.h"
#include "weir/common/text.h"
#include "weir/dns/doh.h"
#include "weir/dns/message.h"
#include "weir/dns/writer.h"
#include "weir/net/acceptor.h"
#include "weir/net/proxy_protocol.h"

namespace weir::fastpath::tls {
namespace {

using common::Cat;

constexpr size_t Index(Listener k) { return static_cast<size_t>(k); }

// The largest PROXY v2 header accepted: 16 bytes, IPv6 addresses and ports,
// and room for TLVs (net::ParseProxyV2's own cap).
constexpr size_t kMaxProxyHeader = 16 + 536;

}  // namespace

TlsServer::TlsServer(Node& node, int slot, std::vector<ListenFd> listen_fds, TlsServerOptions options,
                     std::shared_ptr<const net::TlsServerContext> context, net::TicketKeyRing* tickets)
    : node_(node),
      core_(node.core(slot)),
      slot_(slot),
      listen_fds_(std::move(listen_fds)),
      options_(std::move(options)),
      context_(std::move(context)),
      tickets_(tickets),
      table_(options_.limits),
      handshake_limiter_(PerSourceRate(options_.handshakes_per_second_per_source, options_.limits)),
      out_(65535 + 2) {
  if (options_.httpdns != nullptr && options_.httpdns->enabled) {
    httpdns_ =
        std::make_unique<HttpDnsFront>(node_, core_, slot_, *options_.httpdns, options_.limits,
                                       [this](uint32_t conn, uint32_t stream, const net::HttpResponse& resp) {
                                         Conn* c = Find(conn);
                                         if (c == nullptr || c->phase != Phase::kHttp) return;
                                         table_.QueryDone(c->handle, now_);
                                         c->http->Respond(stream, resp);
                                       });
  }
}

TlsServer::~TlsServer() {
  for (auto& [id, c] : conns_) {
    if (c->ssl != nullptr) SSL_free(c->ssl);
    close(c->fd);
  }
  for (auto& [fd, l] : lingering_) close(fd);
}

absl::Status TlsServer::Init() {
  if (absl::Status st = loop_.Init(); !st.ok()) return st;
  node_.channel(slot_).wake_worker = [this] { loop_.Wake(); };
  loop_.SetWakeHandler([this] {
    mailbox_.RunPending();
    now_ = std::chrono::steady_clock::now();
    core_.DrainReturns(node_.NowSeconds(), *this);
    FlushHeld();
  });
  return absl::OkStatus();
}

TlsServer::Conn* TlsServer::Find(uint32_t id) {
  auto it = conns_.find(id);
  return it == conns_.end() ? nullptr : it->second.get();
}

// ---------------------------------------------------------------- accept

void TlsServer::Listen(int lfd, Listener kind) {
  net::WatchListener(loop_, lfd,
                     {.on_connection = [this, kind](const net::AcceptedConnection& c) { OnAccept(c, kind); },
                      .on_pause =
                          [this](int err) {
                            table_.AcceptPaused();
                            static common::RateLimitedLog accept_log({.component = "tls"});
                            accept_log("TLS accept: ", std::strerror(err), " (pausing accepts for 100 ms)");
                          }});
}

void TlsServer::OnAccept(const net::AcceptedConnection& ac, Listener kind) {
  const int cfd = ac.fd;
  const sockaddr_storage& ss = ac.peer;
  const socklen_t sl = ac.peer_len;
  now_ = std::chrono::steady_clock::now();
  const common::SocketAddress peer =
      common::SocketAddress::FromSockaddr(reinterpret_cast<const sockaddr*>(&ss), sl);
  // The handshake budget of the peer's prefix first (a proxy's
  // connections share the proxy's: limit the clients on the proxy): a
  // refused one costs a close, and is counted there only, not as a
  // connection accepted.
  const common::IpAddress peer_ip = kernel::ClientAddress(ss);
  if (handshake_limiter_.enabled()) {
    const uint32_t slot = handshake_limiter_.Track(peer_ip, node_.NowSeconds());
    if (!handshake_limiter_.TakeQuery(slot)) {
      ++stats_.handshakes_rate_limited[Index(kind)];
      close(cfd);
      return;
    }
  }
  const net::TcpConnectionTable::Admission a = table_.Admit(peer, now_);
  if (!a.admitted) {
    static common::RateLimitedLog limit_log({.component = "tls"});
    limit_log("TLS connection from ", peer.ToString(), " refused: ", net::RefusalText(a.refused, "tls."));
    close(cfd);
    return;
  }
  if (a.evict) Close(static_cast<uint32_t>(*a.evict), net::TcpCloseReason::kPressure);
  uint32_t id = next_conn_++;
  while (id == 0 || conns_.contains(id)) id = next_conn_++;
  auto c = std::make_unique<Conn>();
  c->id = id;
  c->fd = cfd;
  c->kind = kind;
  c->peer = peer;
  c->client = peer_ip;
  c->port = kernel::ClientPort(ss);
  c->handle = table_.Add(id, peer, now_);
  bool proxied = false;
  for (const common::Cidr& from : options_.proxy_protocol_from) proxied = proxied || from.Contains(peer_ip);
  c->phase = proxied ? Phase::kProxy : (kind == Listener::kHttp ? Phase::kSniff : Phase::kHandshake);
  c->handshake_timer = loop_.After(options_.handshake_timeout, [this, id] {
    Conn* t = Find(id);
    if (t == nullptr) return;
    t->handshake_timer = 0;
    if (t->phase == Phase::kProxy || t->phase == Phase::kHandshake || t->phase == Phase::kSniff) {
      ++stats_.handshakes_timed_out[Index(t->kind)];
      Close(id, net::TcpCloseReason::kIdle);
    }
  });
  c->events = EPOLLIN;
  conns_[id] = std::move(c);
  loop_.Watch(cfd, EPOLLIN, [this, id](uint32_t ev) { OnEvent(id, ev); });
}

// ---------------------------------------------------------------- phases

bool TlsServer::ReadProxyHeader(Conn& c) {
  // Peek, then take exactly the header: the TLS ClientHello behind it stays
  // in the socket for OpenSSL.
  uint8_t buf[kMaxProxyHeader];
  ssize_t n;
  do {
    n = recv(c.fd, buf, sizeof(buf), MSG_PEEK);
  } while (n < 0 && errno == EINTR);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return false;
  if (n < 0) return true;
  net::ProxyHeader header;
  switch (net::ParseProxyV2({buf, static_cast<size_t>(n)}, &header)) {
    case net::ProxyParse::kNeedMore:
      if (static_cast<size_t>(n) >= sizeof(buf)) break;
      return true;
    case net::ProxyParse::kDone: {
      ssize_t taken;
      do {
        taken = recv(c.fd, buf, header.length, 0);
      } while (taken < 0 && errno == EINTR);
      if (taken != static_cast<ssize_t>(header.length)) return false;
      if (!header.local) {
        c.client = kernel::ClientAddress(header.source.storage);
        c.port = header.source.port();
      }
      if (c.kind == Listener::kHttp) {
        c.phase = Phase::kSniff;
        return Sniff(c);
      }
      c.phase = Phase::kHandshake;
      return Handshake(c);
    }
    case net::ProxyParse::kInvalid:
      break;
  }
  ++stats_.proxy_headers_invalid[Index(c.kind)];
  static common::RateLimitedLog proxy_log({.component = "tls"});
  proxy_log("TLS connection from ", c.peer.ToString(), ": no valid PROXY protocol v2 header (closed)");
  return false;
}

bool TlsServer::Handshake(Conn& c) {
  if (c.ssl == nullptr) {
    c.ssl = context_->NewConnection(c.fd, c.kind == Listener::kDot ? net::kAlpnDot : net::kAlpnDoh);
    if (c.ssl == nullptr) return false;
  }
  ERR_clear_error();
  const int ret = SSL_do_handshake(c.ssl);
  if (ret != 1) {
    switch (SSL_get_error(c.ssl, ret)) {
      case SSL_ERROR_WANT_READ:
        c.events = EPOLLIN;
        return true;
      case SSL_ERROR_WANT_WRITE:
        c.events = EPOLLOUT;
        return true;
      default: {
        ++stats_.handshakes_failed[Index(c.kind)];
        static common::RateLimitedLog hs_log({.component = "tls"});
        hs_log("TLS handshake with ", c.peer.ToString(), " failed: ", net::TlsErrors());
        return false;
      }
    }
  }
  (SSL_session_reused(c.ssl) == 1 ? stats_.handshakes_resumed : stats_.handshakes_full)[Index(c.kind)]++;
  if (c.handshake_timer != 0) loop_.Cancel(c.handshake_timer);
  c.handshake_timer = 0;
  if (c.kind == Listener::kDot) {
    c.phase = Phase::kDot;
    c.io = std::make_unique<net::TlsStreamIo>(c.ssl);
    c.dot = std::make_unique<net::DnsTcpStream>(c.fd, options_.connection_buffer_bytes, now_, c.io.get());
    return ServeDot(c, EPOLLIN);
  }
  c.io = std::make_unique<net::TlsStreamIo>(c.ssl);
  // "http/1.1", or no ALPN: HTTP/2 over TLS needs ALPN (RFC 9113 3.2).
  return StartHttp(c, net::NegotiatedAlpn(c.ssl) == "h2", {});
}

bool TlsServer::Sniff(Conn& c) {
  if (!c.io) c.io = std::make_unique<net::SocketStreamIo>(c.fd);
  // HTTP/2 with prior knowledge starts with its preface (RFC 9113 3.3);
  // anything else is HTTP/1.1. One byte apart from "POST" at the second.
  uint8_t buf[64];
  const ssize_t n = c.io->Recv(buf, sizeof(buf));
  if (n == 0) return false;
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
  c.sniff.insert(c.sniff.end(), buf, buf + n);
  constexpr size_t kPreface = 24;
  const bool h2 = net::LooksLikeHttp2Preface(c.sniff);
  if (h2 && c.sniff.size() < kPreface) return true;  // undecided yet
  if (c.handshake_timer != 0) loop_.Cancel(c.handshake_timer);
  c.handshake_timer = 0;
  const std::vector<uint8_t> first = std::move(c.sniff);
  c.sniff = {};
  return StartHttp(c, h2, first);
}

bool TlsServer::StartHttp(Conn& c, bool http2, std::span<const uint8_t> first) {
  c.phase = Phase::kHttp;
  const uint32_t id = c.id;
  auto on_request = [this, id](net::HttpRequest&& r) { OnHttpRequest(id, std::move(r)); };
  if (http2) {
    ++stats_.http2_connections;
    c.http = net::MakeHttp2Session(options_.http, &stats_.http, on_request);
  } else {
    ++stats_.http1_connections;
    c.http = net::MakeHttp1Session(options_.http, &stats_.http, on_request);
  }
  // The server's SETTINGS go first, then whatever the client already sent.
  if (!FlushHttp(c)) return false;
  if (!first.empty()) {
    const bool ok = c.http->Receive(first, now_);
    if (Find(id) == nullptr) return true;
    if (!FlushHttp(c)) return false;
    if (!ok) {
      c.http->Shutdown();
      return c.out_off < c.out.size();
    }
  }
  return ServeHttp(c, EPOLLIN);
}

// ---------------------------------------------------------------- DoT

void TlsServer::NotePadding(Conn& c, std::span<const uint8_t> query) {
  if (!options_.padding || c.pads) return;
  dns::Query q;
  if (dns::ParseQuery(query, dns::ParseOptions{}, &q) == dns::ParseError::kOk && q.edns.has_padding)
    c.pads = true;
}

std::span<const uint8_t> TlsServer::MaybePad(const Conn& c, std::span<const uint8_t> answer) {
  if (!c.pads || answer.empty()) return answer;
  pad_.assign(answer.begin(), answer.end());
  if (!dns::PadToBlock(pad_, dns::kResponsePaddingBlock)) return answer;
  return pad_;
}

bool TlsServer::AnswerDot(Conn& c, std::span<const uint8_t> answer) {
  table_.QueryDone(c.handle, now_);
  switch (c.dot->Answer(MaybePad(c, answer))) {
    case net::DnsTcpStream::Status::kOverflow:
      Close(c.id, net::TcpCloseReason::kUnsent);
      return false;
    case net::DnsTcpStream::Status::kClose:
      Close(c.id, net::TcpCloseReason::kClient);
      return false;
    case net::DnsTcpStream::Status::kOpen:
      break;
  }
  if (c.dot->Done()) {
    Close(c.id, net::TcpCloseReason::kClient);
    return false;
  }
  return true;
}

bool TlsServer::ServeDot(Conn& c, uint32_t ev) {
  const uint32_t id = c.id;
  using Status = net::DnsTcpStream::Status;
  if ((ev & EPOLLOUT) && c.dot->Flush() != Status::kOpen) return false;
  if ((ev & (EPOLLHUP | EPOLLERR)) && c.dot->read_closed()) return false;
  const ClientInfo client{c.client, true, c.port, StreamKind::kDot};
  const ClientRoute route{slot_, Transport::kTcp, RouteToken(id, 0)};
  // OpenSSL may hold decrypted bytes the socket will not signal again:
  // read on while it does (bounded, so one client cannot hold the thread).
  // The answers to what one read brought go out together.
  c.dot->set_corked(true);
  c.rounds_out = false;
  for (int round = 0; round < 64; ++round) {
    c.rounds_out = round == 63;
    const uint64_t before = c.io->received();
    if ((ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLOUT)) && c.dot->Read(now_) != Status::kOpen) return false;
    std::span<const uint8_t> query;
    while (c.dot->NextQuery(&query, now_)) {
      table_.QueryRead(c.handle, now_);
      ++stats_.queries[Index(Listener::kDot)];
      msg_.assign(query.begin(), query.end());
      NotePadding(c, msg_);
      size_t out_len = 0;
      bool dropped = false;
      if (core_.HandleOne(msg_, client, route, node_.NowSeconds(), out_.data(), out_.size(), &out_len,
                          &dropped)) {
        if (!AnswerDot(c, {out_.data(), out_len})) return true;  // closed
      } else if (dropped) {
        if (!AnswerDot(c, {})) return true;
      }
      if (Find(id) == nullptr) return true;
    }
    // Nothing came (a partial record waits for the socket), or nothing more
    // is held: the socket's events take it from here.
    if (c.io->received() == before || !c.io->HasBuffered() || c.dot->paused() || c.dot->read_closed()) {
      c.rounds_out = false;
      break;
    }
    ev = EPOLLIN;
  }
  c.dot->set_corked(false);
  if (c.dot->Flush() != Status::kOpen) return false;
  if (c.dot->Done()) return false;
  return true;
}

// ---------------------------------------------------------------- DoH

void TlsServer::OnHttpRequest(uint32_t id, net::HttpRequest&& request) {
  Conn* c = Find(id);
  if (c == nullptr) return;
  if (HttpDnsFront::IsSubQuery(request.id)) {
    // An HTTP/1.1 connection past 2^31 requests: its numbers would read as
    // HTTPDNS sub-queries' routes. It ends here; the client reconnects.
    c->http->Shutdown();
    return RespondError(*c, request.id, 503, "too many requests on one connection: reconnect");
  }
  if (httpdns_ && dns::httpdns::IsHttpDnsTarget(request.target, options_.json_path)) {
    table_.QueryRead(c->handle, now_);
    httpdns_->OnRequest(id, c->client, c->port, c->kind != Listener::kHttp, request);
    return;
  }
  if (c->kind == Listener::kHttp) {  // DNS over HTTPS is never served in the clear (RFC 8484 5)
    return RespondError(*c, request.id, 404, "not found: this port serves HTTPDNS (/d, /resolve) only");
  }
  dns::doh::Paths paths{options_.doh_path, options_.json_path};
  const dns::doh::Request r =
      dns::doh::FromHttp(request.method, request.target, request.content_type, request.body, paths);
  if (r.status != 200) return RespondError(*c, request.id, r.status, r.error);
  if (r.json) ++stats_.doh_json_requests;
  ++stats_.queries[Index(Listener::kDoh)];
  table_.QueryRead(c->handle, now_);
  c->streams[request.id] = Stream{r.json};
  NotePadding(*c, r.query);
  msg_.assign(r.query.begin(), r.query.end());
  const ClientInfo client{c->client, true, c->port, StreamKind::kDoh};
  const ClientRoute route{slot_, Transport::kTcp, RouteToken(id, request.id)};
  size_t out_len = 0;
  bool dropped = false;
  if (core_.HandleOne(msg_, client, route, node_.NowSeconds(), out_.data(), out_.size(), &out_len,
                      &dropped)) {
    RespondDns(*c, request.id, {out_.data(), out_len});
  } else if (dropped) {
    RespondDns(*c, request.id, {});
  }  // else the answer comes back through SendHeld
}

void TlsServer::RespondError(Conn& c, uint32_t stream, int status, std::string_view why) {
  const std::string body = Cat(why, "\n");
  net::HttpResponse resp;
  resp.status = status;
  resp.content_type = "text/plain; charset=utf-8";
  resp.body = {reinterpret_cast<const uint8_t*>(body.data()), body.size()};
  c.http->Respond(stream, resp);
}

void TlsServer::RespondDns(Conn& c, uint32_t stream, std::span<const uint8_t> answer) {
  auto it = c.streams.find(stream);
  if (it == c.streams.end()) return;
  const bool json = it->second.json;
  c.streams.erase(it);
  table_.QueryDone(c.handle, now_);
  if (answer.empty()) {  // dropped (rate limit, a query not worth an answer)
    return RespondError(c, stream, 429, "query refused by the server's rate limit or policy");
  }
  const std::string cache_control = Cat("max-age=", dns::doh::MaxAge(answer));
  net::HttpResponse resp;
  std::string body;
  if (json) {
    body = dns::doh::ToJson(answer);
    resp.content_type = "application/dns-json";
    resp.body = {reinterpret_cast<const uint8_t*>(body.data()), body.size()};
  } else {
    resp.content_type = "application/dns-message";
    resp.body = MaybePad(c, answer);
  }
  resp.cache_control = cache_control;
  c.http->Respond(stream, resp);
}

bool TlsServer::FlushHttp(Conn& c) {
  c.http->TakeOutput(&c.out);
  c.want_write = false;
  while (c.out_off < c.out.size()) {
    const ssize_t n = c.io->Send(c.out.data() + c.out_off, c.out.size() - c.out_off);
    if (n > 0) {
      c.out_off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      c.want_write = c.io->wants_write();
      break;
    }
    return false;
  }
  if (c.out_off == c.out.size()) {
    c.out.clear();
    c.out_off = 0;
  } else if (c.out_off * 2 >= c.out.size()) {
    c.out.erase(c.out.begin(), c.out.begin() + static_cast<ptrdiff_t>(c.out_off));
    c.out_off = 0;
  }
  // A client that does not read its answers: bounded like DoT's.
  return c.out.size() - c.out_off <= 4 * options_.connection_buffer_bytes;
}

bool TlsServer::ServeHttp(Conn& c, uint32_t ev) {
  const uint32_t id = c.id;
  if ((ev & EPOLLOUT) && !FlushHttp(c)) return false;
  uint8_t buf[16384];
  c.rounds_out = false;
  for (int round = 0; round < 64; ++round) {
    const size_t unsent = c.out.size() - c.out_off;
    if (unsent >= options_.connection_buffer_bytes || !c.http->WantsRead()) break;
    const ssize_t r = c.io->Recv(buf, sizeof(buf));
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (c.io->wants_write()) c.want_write = true;
        break;
      }
      return false;  // a reset: close now
    }
    if (r == 0) {  // close_notify or EOF: answer what is pending, then close
      c.http->Shutdown();
      break;
    }
    const auto n = static_cast<size_t>(r);
    const bool ok = c.http->Receive({buf, n}, now_);
    if (Find(id) == nullptr) return true;
    if (!FlushHttp(c)) return false;
    if (!ok) {
      c.http->Shutdown();
      return c.out_off < c.out.size();  // the last bytes (GOAWAY, a 400) go out, then it closes
    }
    if (!c.io->HasBuffered() && n < sizeof(buf)) break;
    c.rounds_out = round == 63;
  }
  if (!FlushHttp(c)) return false;
  return !(c.http->Done() && c.out_off == c.out.size());
}

// ---------------------------------------------------------------- events

void TlsServer::OnEvent(uint32_t id, uint32_t ev) {
  Conn* c = Find(id);
  if (c == nullptr) return;
  now_ = std::chrono::steady_clock::now();
  bool open = true;
  switch (c->phase) {
    case Phase::kProxy:
      open = ReadProxyHeader(*c);
      break;
    case Phase::kHandshake:
      open = Handshake(*c);
      break;
    case Phase::kSniff:
      open = Sniff(*c);
      break;
    case Phase::kDot:
      open = ServeDot(*c, ev);
      break;
    case Phase::kHttp:
      open = ServeHttp(*c, ev);
      break;
  }
  c = Find(id);
  if (c == nullptr) return;
  if (!open) return Close(id, Overflowed(*c) ? net::TcpCloseReason::kUnsent : net::TcpCloseReason::kClient);
  Watch(*c);
  ReadAgainIfBuffered(*c);
}

void TlsServer::ReadAgainIfBuffered(const Conn& c) {
  // A connection read for its share of rounds may leave records OpenSSL
  // has already taken off the socket: no event will say so, so it is read
  // again on the loop's next turn (unless it is not read from now).
  // Only after reads that made progress used up their rounds: a partial
  // record also reads as "has pending", and waiting for its rest is the
  // socket's job (re-reading it would spin).
  if (c.io == nullptr || !c.rounds_out || !c.io->HasBuffered() || Paused(c)) return;
  if (c.phase == Phase::kHttp ? !c.http->WantsRead() : c.phase != Phase::kDot) return;
  if (std::find(again_.begin(), again_.end(), c.id) == again_.end()) again_.push_back(c.id);
}

bool TlsServer::Paused(const Conn& c) const {
  if (c.phase == Phase::kDot) return c.dot->paused();
  if (c.phase == Phase::kHttp) return c.out.size() - c.out_off >= options_.connection_buffer_bytes;
  return false;
}

bool TlsServer::Overflowed(const Conn& c) const {
  return c.phase == Phase::kHttp && c.out.size() - c.out_off > 4 * options_.connection_buffer_bytes;
}

void TlsServer::Watch(Conn& c) {
  uint32_t want = 0;
  switch (c.phase) {
    case Phase::kProxy:
    case Phase::kSniff:
      want = EPOLLIN;
      break;
    case Phase::kHandshake:
      want = c.events;
      break;
    case Phase::kDot:
      want = c.dot->WantedEvents() | (c.io->wants_write() ? uint32_t{EPOLLOUT} : 0u);
      break;
    case Phase::kHttp: {
      const bool unsent = c.out_off < c.out.size();
      if (unsent || c.want_write) want |= EPOLLOUT;
      if (c.out.size() - c.out_off < options_.connection_buffer_bytes && c.http->WantsRead()) want |= EPOLLIN;
      break;
    }
  }
  if (want == c.events && c.phase != Phase::kHandshake) return;
  c.events = want;
  loop_.Modify(c.fd, want);
}

void TlsServer::Close(uint32_t id, net::TcpCloseReason why) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& c = *it->second;
  table_.Remove(c.handle, why);
  if (httpdns_) httpdns_->ConnectionClosed(id);
  if (c.handshake_timer != 0) loop_.Cancel(c.handshake_timer);
  loop_.Unwatch(c.fd);
  if (c.ssl != nullptr) {
    // A close_notify when the session got that far; never waits for the
    // client's (the socket closes right after).
    if (c.phase == Phase::kDot || c.phase == Phase::kHttp) {
      SSL_set_quiet_shutdown(c.ssl, 0);
      SSL_shutdown(c.ssl);
    }
    ERR_clear_error();
    SSL_free(c.ssl);
  }
  // A session the server ends may have the client's data still coming.
  if ((c.phase == Phase::kDot || c.phase == Phase::kHttp) && why != net::TcpCloseReason::kPressure) {
    Linger(c.fd);
  } else {
    close(c.fd);
  }
  conns_.erase(it);
}

void TlsServer::Linger(int fd) {
  if (lingering_.size() >= kMaxLingering || shutdown(fd, SHUT_WR) != 0) {
    close(fd);
    return;
  }
  Lingering& l = lingering_[fd];
  l.timer = loop_.After(kLingerTime, [this, fd] {
    lingering_[fd].timer = 0;
    EndLinger(fd);
  });
  loop_.Watch(fd, EPOLLIN, [this, fd](uint32_t) {
    auto it = lingering_.find(fd);
    if (it == lingering_.end()) return;
    std::array<uint8_t, 16384> scratch;
    for (;;) {
      const ssize_t n = recv(fd, scratch.data(), scratch.size(), MSG_DONTWAIT);
      if (n > 0) {
        it->second.dropped += static_cast<size_t>(n);
        if (it->second.dropped < kLingerBytes) continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return;
      } else if (n < 0 && errno == EINTR) {
        continue;
      }
      return EndLinger(fd);  // the client closed, failed or sent too much
    }
  });
}

void TlsServer::EndLinger(int fd) {
  auto it = lingering_.find(fd);
  if (it == lingering_.end()) return;
  if (it->second.timer != 0) loop_.Cancel(it->second.timer);
  lingering_.erase(it);
  loop_.Unwatch(fd);
  close(fd);
}

void TlsServer::SendHeld(const ClientRoute& route, std::span<const uint8_t> answer) {
  const auto id = static_cast<uint32_t>(route.token >> 32);
  const auto stream = static_cast<uint32_t>(route.token & 0xffffffffu);
  Conn* c = Find(id);
  if (c == nullptr) return;  // the client went away
  // Answers that came back together leave together: queued here, written
  // once per connection by FlushHeld() after the batch.
  if (c->phase == Phase::kDot) {
    c->dot->set_corked(true);
    if (AnswerDot(*c, answer)) held_.push_back(id);
    return;
  }
  if (c->phase != Phase::kHttp) return;
  if (HttpDnsFront::IsSubQuery(stream)) {
    if (httpdns_) httpdns_->OnAnswer(id, stream, answer, core_.held_answer_info());
  } else {
    RespondDns(*c, stream, answer);
  }
  held_.push_back(id);
}

void TlsServer::FlushHeld() {
  for (uint32_t id : held_) {
    Conn* c = Find(id);
    if (c == nullptr) continue;
    if (c->phase == Phase::kDot) {
      if (!c->dot->corked()) continue;  // flushed already (listed twice)
      c->dot->set_corked(false);
      if (c->dot->Flush() != net::DnsTcpStream::Status::kOpen || c->dot->Done()) {
        Close(id, net::TcpCloseReason::kClient);
        continue;
      }
      Watch(*c);
      ReadAgainIfBuffered(*c);  // a DoT client paused on unsent answers may have more waiting
      continue;
    }
    // HTTP/1.1 answers in order and holds the pipelined requests behind a
    // full window: with room again, it parses them (no socket event will).
    if (c->http->WantsRead() && !c->http->Receive({}, now_)) c->http->Shutdown();
    if ((c = Find(id)) == nullptr) continue;
    if (!FlushHttp(*c)) {
      Close(id, net::TcpCloseReason::kUnsent);
      continue;
    }
    if (c->http->Done() && c->out_off == c->out.size()) {
      Close(id, net::TcpCloseReason::kClient);
      continue;
    }
    Watch(*c);
    ReadAgainIfBuffered(*c);
  }
  held_.clear();
}

void TlsServer::CloseExpired() {
  now_ = std::chrono::steady_clock::now();
  expired_.clear();
  table_.Expired(now_, &expired_);
  for (const auto& e : expired_) {
    Conn* c = Find(static_cast<uint32_t>(e.id));
    if (c == nullptr) continue;
    if (!e.drain || (c->phase != Phase::kDot && c->phase != Phase::kHttp)) {
      // Idle only because it stopped reading its answers (it is not read
      // from until it does): the answers it left are why it goes.
      Close(c->id,
            e.reason == net::TcpCloseReason::kIdle && Paused(*c) ? net::TcpCloseReason::kUnsent : e.reason);
      continue;
    }
    if (c->phase == Phase::kDot) {
      c->dot->StopReading();
      if (c->dot->Done()) {
        Close(c->id, e.reason);
        continue;
      }
    } else {
      c->http->Shutdown();
      if (!FlushHttp(*c) || (c->http->Done() && c->out_off == c->out.size())) {
        Close(c->id, e.reason);
        continue;
      }
    }
    Watch(*c);
  }
}

// ---------------------------------------------------------------- control

bool TlsServer::SwapContext(std::shared_ptr<const net::TlsServerContext> context) {
  return mailbox_.Call(
      [this, &context] {
        context_ = std::move(context);
        ++stats_.context_generation;
      },
      std::chrono::milliseconds(2000));
}

TlsStats TlsServer::Snapshot() const {
  TlsStats copy;
  auto* self = const_cast<TlsServer*>(this);
  self->mailbox_.Call(
      [&] {
        copy = stats_;
        if (httpdns_) copy.httpdns = httpdns_->Stats();
        const net::TcpConnectionTable::Stats& st = table_.stats();
        copy.open = st.open.load(std::memory_order_relaxed);
        copy.accepted = st.accepted.load(std::memory_order_relaxed);
        for (size_t r = 0; r < copy.closed.size(); ++r)
          copy.closed[r] = st.closed[r].load(std::memory_order_relaxed);
      },
      std::chrono::milliseconds(1000));
  return copy;
}

void TlsServer::RenderMetrics(common::PrometheusWriter& w) const {
  const TlsStats s = Snapshot();
  const char* kinds[] = {"dot", "doh", "http"};
  auto per_kind = [&](const char* name, const char* help, const std::array<uint64_t, TlsStats::kKinds>& v) {
    auto& f = w.Counter(name, help);
    for (size_t k = 0; k < TlsStats::kKinds; ++k) f.Add({{"transport", kinds[k]}}, v[k]);
  };
  auto& hs =
      w.Counter("weir_tls_handshakes_total",
                "TLS handshakes by transport and result (full, resumed, failed, timeout, rate_limited).");
  for (size_t k = 0; k < TlsStats::kKinds; ++k) {
    hs.Add({{"transport", kinds[k]}, {"result", "full"}}, s.handshakes_full[k]);
    hs.Add({{"transport", kinds[k]}, {"result", "resumed"}}, s.handshakes_resumed[k]);
    hs.Add({{"transport", kinds[k]}, {"result", "failed"}}, s.handshakes_failed[k]);
    hs.Add({{"transport", kinds[k]}, {"result", "timeout"}}, s.handshakes_timed_out[k]);
    hs.Add({{"transport", kinds[k]}, {"result", "rate_limited"}}, s.handshakes_rate_limited[k]);
  }
  per_kind("weir_tls_queries_total", "DNS queries received over TLS, by transport.", s.queries);
  per_kind("weir_tls_proxy_header_invalid_total",
           "Connections from a PROXY protocol peer closed for a missing or invalid header.",
           s.proxy_headers_invalid);
  w.Counter("weir_tls_connections_accepted_total",
            "Encrypted-front connections accepted (refused ones included).")
      .Add({}, s.accepted);
  auto& closed =
      w.Counter("weir_tls_connections_closed_total",
                "Encrypted-front connections closed or refused at accept, by reason (docs/metrics.md).");
  for (size_t r = 0; r < s.closed.size(); ++r) {
    closed.Add({{"reason", net::TcpCloseReasonName(static_cast<net::TcpCloseReason>(r))}}, s.closed[r]);
  }
  w.Gauge("weir_tls_connections", "Encrypted-front connections open.").Add({}, s.open);
  auto& http = w.Counter("weir_doh_connections_total", "DoH connections by HTTP version.");
  http.Add({{"version", "2"}}, s.http2_connections);
  http.Add({{"version", "1.1"}}, s.http1_connections);
  w.Counter("weir_doh_requests_total", "DoH requests received (both forms).").Add({}, s.http.requests);
  w.Counter("weir_doh_json_requests_total", "DoH requests in the JSON form.").Add({}, s.doh_json_requests);
  auto& resp = w.Counter("weir_doh_responses_total", "DoH responses by HTTP status class.");
  resp.Add({{"status", "2xx"}}, s.http.responses_2xx);
  resp.Add({{"status", "4xx"}}, s.http.responses_4xx);
  resp.Add({{"status", "5xx"}}, s.http.responses_5xx);
  w.Counter("weir_doh_streams_reset_total", "HTTP/2 streams the client reset before their response.")
      .Add({}, s.http.streams_reset_by_client);
  auto& hclosed = w.Counter("weir_doh_sessions_closed_total",
                            "DoH sessions the server ended for abuse or errors, by reason.");
  hclosed.Add({{"reason", "rapid_reset"}}, s.http.closed_rapid_reset);
  hclosed.Add({{"reason", "control_flood"}}, s.http.closed_control_flood);
  hclosed.Add({{"reason", "protocol_error"}}, s.http.closed_protocol_error);
  hclosed.Add({{"reason", "limit"}}, s.http.closed_limit);
  w.Counter("weir_tls_certificate_reloads_total", "Certificate sets the front switched to after a reload.")
      .Add({}, s.context_generation);
  if (httpdns_) RenderHttpDnsMetrics(w, s.httpdns);
}

void TlsServer::RenderHttpDnsMetrics(common::PrometheusWriter& w, const HttpDnsStats& s) const {
  using dns::httpdns::ErrorCode;
  auto& req = w.Counter("weir_httpdns_requests_total",
                        "HTTPDNS requests served (past authentication and quotas), by account and API.");
  auto& hosts = w.Counter("weir_httpdns_hosts_total", "Hosts asked in served HTTPDNS requests, by account.");
  auto& errors =
      w.Counter("weir_httpdns_errors_total",
                "HTTPDNS requests refused, by account and code (\"?\": an account weir does not know).");
  auto& results = w.Counter("weir_httpdns_host_results_total",
                            "HTTPDNS host answers by account and result (ok, nxdomain, no_ip...).");
  auto& ip = w.Counter("weir_httpdns_client_ip_total",
                       "HTTPDNS requests with ip=, by account and whether it picked the partition.");
  auto& stale = w.Counter("weir_httpdns_stale_hosts_total",
                          "HTTPDNS host answers served from an expired entry while it was refreshed.");
  for (const auto& [name, a] : s.accounts) {
    req.Add({{"account", name}, {"api", "d"}}, a.requests[0]);
    req.Add({{"account", name}, {"api", "resolve"}}, a.requests[1]);
    hosts.Add({{"account", name}}, a.hosts);
    for (size_t e = 1; e < a.errors.size(); ++e) {
      if (a.errors[e] == 0) continue;
      errors.Add({{"account", name}, {"code", dns::httpdns::ErrorCodeName(static_cast<ErrorCode>(e))}},
                 a.errors[e]);
    }
    for (const auto& [result, n] : a.results) results.Add({{"account", name}, {"result", result}}, n);
    ip.Add({{"account", name}, {"used", "true"}}, a.ip_honoured);
    ip.Add({{"account", name}, {"used", "false"}}, a.ip_ignored);
    stale.Add({{"account", name}}, a.stale);
  }
  w.Gauge("weir_httpdns_pending_requests", "HTTPDNS requests waiting for an upstream answer.")
      .Add({}, s.pending);
  w.Gauge("weir_httpdns_pending_queries", "DNS queries of waiting HTTPDNS requests still out.")
      .Add({}, s.pending_queries);
  auto& latency =
      w.Histogram("weir_httpdns_request_duration_seconds",
                  "HTTPDNS server time from the whole request to its response, by account and API.");
  for (const auto& [name, a] : s.accounts) {
    for (size_t api = 0; api < a.latency.size(); ++api) {
      latency.Histogram({{"account", name}, {"api", api == 0 ? "d" : "resolve"}}, kResponseLatencyBounds,
                        a.latency[api], a.latency_sum[api]);
    }
  }
}

// ---------------------------------------------------------------- loop

void TlsServer::Run(const std::atomic<bool>& running) {
  common::RcuThread rcu;
  loop_.SetWaitHooks([&rcu] { rcu.Offline(); }, [&rcu] { rcu.Online(); });
  for (const ListenFd& l : listen_fds_) Listen(l.fd, l.kind);
  while (running.load(std::memory_order_relaxed)) {
    core_.Turn();
    loop_.RunOnce(std::chrono::milliseconds(again_.empty() ? 100 : 0));
    if (!again_.empty()) {
      std::vector<uint32_t> ids;
      ids.swap(again_);
      for (uint32_t id : ids) OnEvent(id, EPOLLIN);
    }
    CloseExpired();
    if (tickets_ != nullptr) tickets_->Rotate(std::chrono::steady_clock::now());
    rcu.Quiescent();
  }
  for (const ListenFd& l : listen_fds_) loop_.Unwatch(l.fd);
}

}  // namespace weir::fastpath::tls
