#include "tls/tls_front.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "weir/common/log.h"
#include "weir/common/text.h"
#include "weir/net/socket.h"

namespace weir::fastpath::tls {

using common::Cat;

net::TlsServerOptions ContextOptions(const TlsConfig& config) {
  net::TlsServerOptions o;
  for (const TlsConfig::Certificate& c : config.certificates) o.certificates.push_back({c.chain, c.key});
  o.min_version = config.min_version == "1.3" ? TLS1_3_VERSION : TLS1_2_VERSION;
  o.session_tickets = config.session_tickets;
  return o;
}

TlsFront::~TlsFront() {
  Wait();
  server_.reset();
  for (const auto& l : fds_) close(l.fd);
}

absl::Status TlsFront::Load() {
  if (!tickets_) {
    tickets_ = std::make_unique<net::TicketKeyRing>(std::chrono::seconds(config_.ticket_rotation_s),
                                                    std::chrono::steady_clock::now());
  }
  auto ctx = net::TlsServerContext::Create(ContextOptions(config_), tickets_.get());
  if (!ctx.ok()) return absl::InvalidArgumentError(Cat("[tls] ", ctx.status().message()));
  context_ = std::move(*ctx);
  return absl::OkStatus();
}

absl::Status TlsFront::Listen(const common::SocketAddress& addr, bool freebind) {
  if (!context_ && config_.enabled()) {
    if (absl::Status st = Load(); !st.ok()) return st;
  }
  for (Listener kind : {Listener::kDot, Listener::kDoh, Listener::kHttp}) {
    uint16_t port = 0;
    switch (kind) {
      case Listener::kDot:
        port = config_.enabled() ? config_.dot_port : 0;
        break;
      case Listener::kDoh:
        port = config_.enabled() ? config_.doh_port : 0;
        break;
      case Listener::kHttp:
        port = httpdns_.enabled ? httpdns_.http_port : 0;
        break;
    }
    if (port == 0) continue;
    common::SocketAddress at = addr;
    at.set_port(port);
    auto fd =
        net::BindSocket(at, SOCK_STREAM, {.nonblocking = true, .listen_backlog = 1024, .freebind = freebind});
    if (!fd.ok()) return fd.status();
    fds_.push_back({*fd, kind});
    bound_.emplace_back(kind, net::LocalAddress(*fd));
  }
  return absl::OkStatus();
}

absl::Status TlsFront::Attach(Node& node, int slot) {
  TlsServerOptions o;
  o.limits = config_.limits;
  o.handshakes_per_second_per_source = config_.handshakes_per_second_per_source;
  o.handshake_timeout = std::chrono::milliseconds(config_.handshake_timeout_ms);
  o.connection_buffer_bytes = static_cast<size_t>(config_.connection_buffer_bytes);
  o.padding = config_.padding;
  o.doh_path = config_.doh_path;
  o.json_path = config_.json_path;
  o.http.max_concurrent_streams = static_cast<uint32_t>(config_.http_max_streams);
  o.http.max_header_bytes = static_cast<size_t>(config_.http_max_header_bytes);
  o.http.max_body_bytes = static_cast<size_t>(config_.http_max_body_bytes);
  o.proxy_protocol_from = config_.proxy_protocol_from;
  o.httpdns = &httpdns_;
  if (httpdns_.enabled) {
    o.http.max_target_bytes =
        std::max<size_t>(o.http.max_target_bytes, static_cast<size_t>(httpdns_.max_url_bytes));
  }
  // The plain HTTPDNS port without [tls]: its connection bounds are [tls]'s defaults.
  server_ = std::make_unique<TlsServer>(node, slot, fds_, std::move(o), context_, tickets_.get());
  return server_->Init();
}

void TlsFront::Launch(const std::atomic<bool>& running) {
  if (server_) thread_ = std::thread([this, &running] { server_->Run(running); });
}

void TlsFront::Wait() {
  if (thread_.joinable()) thread_.join();
}

absl::Status TlsFront::Reload(bool apply) {
  if (!server_ || !config_.enabled()) return absl::OkStatus();
  auto ctx = net::TlsServerContext::Create(ContextOptions(config_), tickets_.get());
  if (!ctx.ok())
    return absl::InvalidArgumentError(
        Cat("[tls] ", ctx.status().message(), " (kept the certificates in use)"));
  if (!apply) return absl::OkStatus();
  std::shared_ptr<const net::TlsServerContext> next = std::move(*ctx);
  if (!server_->SwapContext(next)) {
    return absl::UnavailableError("[tls] the encrypted front did not take the new certificates in time");
  }
  context_ = std::move(next);
  for (const net::TlsCertificateInfo& i : context_->certificates()) {
    common::LogInfo("tls", "certificate ", i.file, ": ", i.subject, " (", i.key_type, ")");
  }
  return absl::OkStatus();
}

std::string TlsFront::Describe() const {
  std::string out;
  for (const auto& [kind, addr] : bound_) {
    const char* name = kind == Listener::kDot ? "dot " : (kind == Listener::kDoh ? "doh " : "http ");
    out += Cat("listening ", name, addr.ToString(), "\n");
  }
  return out;
}

void TlsFront::RenderMetrics(common::PrometheusWriter& w) const {
  if (server_) server_->RenderMetrics(w);
}

}  // namespace weir::fastpath::tls
