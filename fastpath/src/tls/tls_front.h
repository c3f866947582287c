// The encrypted front for any backend: DNS over TLS and DNS over HTTPS
// ([tls], docs/encrypted.md) on kernel sockets, the TLS setup (certificates,
// session-ticket keys) and the thread that runs the server. The kernel
// backend listens on its DNS addresses; the DPDK backend on the addresses
// its exception interfaces get, so TLS and HTTP arrive through the kernel
// side of the exception path and are served by the same code.
//
// Threading: every call from the main thread but RenderMetrics (the metrics
// thread); the server runs on its own thread between Launch and Wait.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "tls/tls_server.h"
#include "weir/common/prometheus.h"
#include "weir/common/socket_address.h"
#include "weir/fastpath/config.h"
#include "weir/fastpath/node.h"
#include "weir/net/tls.h"

namespace weir::fastpath::tls {

// [tls] as the TLS library takes it.
net::TlsServerOptions ContextOptions(const TlsConfig& config);

class TlsFront {
 public:
  explicit TlsFront(const FastpathConfig& config) : config_(config.tls), httpdns_(config.httpdns) {}
  ~TlsFront();  // the thread joined, the sockets closed
  TlsFront(const TlsFront&) = delete;
  TlsFront& operator=(const TlsFront&) = delete;

  // DoT or DoH, or HTTPDNS on a plain HTTP port.
  bool enabled() const { return config_.enabled() || (httpdns_.enabled && httpdns_.http_port != 0); }
  // Loads the certificates (a clear error naming the file otherwise) and
  // binds the DoT and DoH ports on `addr`'s address (`freebind`: one the
  // host does not have yet). The first call loads; later ones only bind.
  absl::Status Listen(const common::SocketAddress& addr, bool freebind = false);
  // The server over node.core(slot).
  absl::Status Attach(Node& node, int slot);
  void Launch(const std::atomic<bool>& running);
  void Wait();
  // Reads the certificate files again; new connections use them, open ones
  // keep theirs. On error the old ones stay. `apply` false: only checks them.
  absl::Status Reload(bool apply);
  // "listening dot ADDR" / "listening doh ADDR" / "listening http ADDR" lines.
  std::string Describe() const;
  void RenderMetrics(common::PrometheusWriter& w) const;

 private:
  absl::Status Load();

  const TlsConfig& config_;
  const HttpDnsConfig& httpdns_;
  std::unique_ptr<net::TicketKeyRing> tickets_;
  std::shared_ptr<const net::TlsServerContext> context_;
  std::vector<TlsServer::ListenFd> fds_;
  std::vector<std::pair<Listener, common::SocketAddress>> bound_;
  std::unique_ptr<TlsServer> server_;
  std::thread thread_;
};

}  // namespace weir::fastpath::tls
