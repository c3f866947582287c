// The TLS client side of weir-bench's DoT and DoH connections, on OpenSSL 3.
//
// TlsClientContext holds the SSL_CTX: verification as asked (--tls-ca,
// --tls-name, or --tls-insecure), the ALPN protocol offered ("dot" for DNS
// over TLS, "h2" for DNS over HTTPS), and the session tickets the server
// gives, so that the next connection can offer one (SSL_set_session) and
// the handshake resumes. A TLS 1.3 ticket is offered once, the newest
// first (RFC 8446 C.4: servers may take each only once); when none is left
// the last one offered is offered again (servers with stateless tickets
// take it), so a burst of new connections still resumes where it can.
//
// TlsStream is one connection's TLS over a connected non-blocking socket.
// Handshake(), Read() and Write() never block: they report what they wait
// for (readable or writable) and the caller polls the socket.
//
// Threading: a context is used by one sender thread, with the streams it
// made; nothing is shared between threads, so nothing is locked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;
typedef struct ssl_session_st SSL_SESSION;

namespace weir::bench {

struct TlsSettings {
  std::string ca_file;         // verify the chain against these CAs; empty: the system's store
  std::string name;            // SNI, and the name the certificate must carry
  std::string server_ip;       // without `name`: the address the certificate must carry
  bool insecure = false;       // verify nothing (a test certificate)
  std::string alpn;            // the protocol offered: "dot" or "h2"
  bool alpn_required = false;  // the server must select it (HTTP/2 needs it; DoT servers often select none)
  bool resume = true;          // offer the latest session ticket
};

class TlsClientContext {
 public:
  // An error names the file or setting that failed.
  static absl::StatusOr<std::unique_ptr<TlsClientContext>> Create(const TlsSettings& settings);
  ~TlsClientContext();
  TlsClientContext(const TlsClientContext&) = delete;
  TlsClientContext& operator=(const TlsClientContext&) = delete;

  const TlsSettings& settings() const { return settings_; }
  SSL_CTX* ctx() const { return ctx_; }
  // A session to offer, or null; the caller owns the reference returned.
  SSL_SESSION* TakeSession();
  // The server declined `offered`: it is not offered again.
  void Declined(const SSL_SESSION* offered);

 private:
  explicit TlsClientContext(TlsSettings settings) : settings_(std::move(settings)) {}
  static int OnNewSession(SSL* ssl, SSL_SESSION* session);

  static constexpr size_t kMaxSessions = 64;

  TlsSettings settings_;
  SSL_CTX* ctx_ = nullptr;
  std::deque<SSL_SESSION*> fresh_;  // not offered yet, oldest first (one reference each)
  SSL_SESSION* last_ = nullptr;     // the last one offered (one reference)
};

// What a non-blocking TLS call is waiting for, or how it ended.
enum class TlsIo : uint8_t {
  kDone,       // done (Read/Write: *n bytes)
  kWantRead,   // call again once the socket is readable
  kWantWrite,  // call again once the socket is writable
  kClosed,     // the peer closed the connection (close_notify or EOF)
  kError,      // a TLS or socket error: error() says which
};

class TlsStream {
 public:
  explicit TlsStream(TlsClientContext* context) : context_(context) {}
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  // Attaches to the connected socket `fd` (not owned) and prepares the
  // ClientHello: SNI, the name or address to verify, ALPN, and the latest
  // session ticket when resuming.
  absl::Status Start(int fd);
  // Drives the handshake. kDone once established (and ALPN checked).
  TlsIo Handshake();
  // Reads up to `cap` bytes of application data into `buf`.
  TlsIo Read(uint8_t* buf, size_t cap, size_t* n);
  // Writes up to `len` bytes; *n of them were taken.
  TlsIo Write(const uint8_t* data, size_t len, size_t* n);
  // Sends close_notify, best effort, without waiting for the peer's.
  void Shutdown();

  // The handshake resumed an earlier session (SSL_session_reused).
  bool resumed() const;
  // Why the last call returned kError or kClosed: OpenSSL's reason ("wrong
  // version number"), with the verification error when there was one
  // ("certificate verify failed (Hostname mismatch)").
  const std::string& error() const { return error_; }

 private:
  TlsIo Result(int ret);

  TlsClientContext* context_;
  SSL* ssl_ = nullptr;
  const SSL_SESSION* offered_session_ = nullptr;  // compared, never dereferenced
  std::string error_;
};

}  // namespace weir::bench
