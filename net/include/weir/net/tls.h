// TLS for the encrypted front (DNS over TLS, DNS over HTTPS), on OpenSSL 3.
//
// TlsServerContext is one generation of the server's TLS setup: the
// certificate chains and keys (one per key type: an ECDSA and an RSA chain
// may be served side by side, each client getting the one it can verify),
// TLS 1.2 or 1.3 at least, no renegotiation, no compression, no 0-RTT.
// A reload builds a new context from the files; connections made under the
// old one keep it (OpenSSL counts the references) until they close, so a
// renewed certificate never drops a connection.
//
// Session resumption is stateless (RFC 5077 / RFC 8446 tickets): nothing
// per client is kept on the server. The tickets are sealed with a
// TicketKeyRing, which outlives contexts (a reload does not invalidate the
// tickets clients hold) and rotates: a new key seals new tickets every
// `rotation`; the previous key still opens tickets for one more period (a
// ticket opened with it is replaced), so a ticket lives at most two periods
// and a stolen key opens nothing after that.
//
// ALPN: each listener names the protocols it speaks ("dot"; "h2",
// "http/1.1"); the server picks the first of its own the client offers. A
// client that offers none of them (or no ALPN at all: many DoT stubs) goes
// on without one (RFC 7301 lets a server ignore the extension).
//
// TlsStreamIo puts a connection's SSL behind net::StreamIo, so the one
// DNS-over-TCP framing (dns_tcp.h) serves DoT as it serves TCP.
//
// Threading: a context is built on any thread and then used by one server
// thread; the key ring belongs to that thread (the ticket callback runs
// inside SSL_do_handshake on it).
#pragma once

#include <openssl/ssl.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "weir/net/dns_tcp.h"

namespace weir::net {

struct TlsCertificateFiles {
  std::string chain;  // PEM: the leaf first, then the intermediates
  std::string key;    // PEM private key (ECDSA or RSA), unencrypted
};

struct TlsServerOptions {
  std::vector<TlsCertificateFiles> certificates;  // at most one per key type
  int min_version = TLS1_2_VERSION;               // or TLS1_3_VERSION
  bool session_tickets = true;
  // Mutual TLS: a PEM file of the CAs that sign client certificates. Set,
  // every client must present a certificate one of them signed (the
  // handshake fails otherwise); empty, no client certificate is asked for.
  std::string client_ca;
};

// What a certificate file holds, for start-up lines and `--check`.
struct TlsCertificateInfo {
  std::string file;
  std::string subject;
  std::string key_type;   // "ECDSA P-256", "RSA 2048", ...
  int64_t not_after = 0;  // Unix seconds
};

class TicketKeyRing {
 public:
  using Clock = std::chrono::steady_clock;
  // `rotation`: how long one key seals new tickets.
  TicketKeyRing(std::chrono::seconds rotation, Clock::time_point now);

  // A new key seals from now when the current one is `rotation` old; keys
  // older than two periods are forgotten.
  void Rotate(Clock::time_point now);
  // Forces a new key now (tests).
  void RotateNow(Clock::time_point now);
  std::chrono::seconds rotation() const { return rotation_; }
  size_t size() const { return keys_.size(); }

  // The OpenSSL ticket callback's work (SSL_CTX_set_tlsext_ticket_key_evp_cb).
  int Seal(unsigned char name[16], unsigned char iv[16], EVP_CIPHER_CTX* cipher, EVP_MAC_CTX* mac);
  int Open(const unsigned char name[16], const unsigned char iv[16], EVP_CIPHER_CTX* cipher,
           EVP_MAC_CTX* mac);

 private:
  struct Key {
    std::array<unsigned char, 16> name{};
    std::array<unsigned char, 32> aes{};
    std::array<unsigned char, 32> hmac{};
    Clock::time_point created;
  };
  void Add(Clock::time_point now);

  std::chrono::seconds rotation_;
  std::vector<Key> keys_;  // newest first
};

class TlsServerContext {
 public:
  // Loads and checks every chain and key: each error names its file and
  // says what is wrong (unreadable, not PEM, expired or not yet valid, the
  // key not the certificate's, two chains of one key type). `tickets` seals
  // the session tickets (null: no resumption); it must outlive the context.
  static absl::StatusOr<std::unique_ptr<TlsServerContext>> Create(const TlsServerOptions& options,
                                                                  TicketKeyRing* tickets);
  // The same checks without building anything used later (`--check`).
  static absl::StatusOr<std::vector<TlsCertificateInfo>> Check(const TlsServerOptions& options);

  ~TlsServerContext();
  TlsServerContext(const TlsServerContext&) = delete;
  TlsServerContext& operator=(const TlsServerContext&) = delete;

  // A server-side connection on `fd` (not owned) speaking one of `alpn`
  // (wire form: length-prefixed names, as SSL_CTX_set_alpn_protos). `alpn`
  // must outlive the connection. Null when OpenSSL is out of memory.
  SSL* NewConnection(int fd, std::string_view alpn) const;
  const std::vector<TlsCertificateInfo>& certificates() const { return certs_; }

 private:
  TlsServerContext() = default;
  SSL_CTX* ctx_ = nullptr;
  std::vector<TlsCertificateInfo> certs_;
};

// The client side of a mutually authenticated stream: this end's
// certificate and key, and the CA the server's certificate must be signed
// by. With `server_name` the server's certificate must also carry that name
// (and it is sent as SNI); without it only the signature is checked.
struct TlsClientOptions {
  TlsCertificateFiles certificate;
  std::string ca;
  std::string server_name;
};

class TlsClientContext {
 public:
  // Loads and checks the files as TlsServerContext does (each error names
  // its file), and the CA file (readable, at least one certificate). An
  // expired certificate is loaded: the server refuses it and logs why
  // (`--check` uses TlsServerContext::Check to flag it first).
  static absl::StatusOr<std::unique_ptr<TlsClientContext>> Create(const TlsClientOptions& options);
  ~TlsClientContext();
  TlsClientContext(const TlsClientContext&) = delete;
  TlsClientContext& operator=(const TlsClientContext&) = delete;

  // A client-side connection on `fd` (not owned), in connect state. Null
  // when OpenSSL is out of memory.
  SSL* NewConnection(int fd) const;
  const TlsCertificateInfo& certificate() const { return cert_; }

 private:
  TlsClientContext() = default;
  SSL_CTX* ctx_ = nullptr;
  std::string server_name_;
  TlsCertificateInfo cert_;
};

// Why a handshake failed, as one line: OpenSSL's queued errors (cleared)
// and, when the peer's certificate was refused, the verification's reason:
// "certificate verify failed (certificate has expired)".
std::string TlsHandshakeError(const SSL* ssl);

// A field of the peer's certificate subject (NID_commonName,
// NID_organizationalUnitName), "" when the peer sent no certificate or the
// subject has no such field.
std::string PeerSubjectField(const SSL* ssl, int nid);

// ALPN lists in wire form.
inline constexpr std::string_view kAlpnDot{
    "\x03"
    "dot",
    4};
inline constexpr std::string_view kAlpnDoh{
    "\x02"
    "h2"
    "\x08"
    "http/1.1",
    12};

// The protocol a finished handshake agreed on ("" when none).
std::string_view NegotiatedAlpn(const SSL* ssl);

// The OpenSSL errors queued on this thread, as one line (and cleared).
std::string TlsErrors();

// A DoT connection's SSL as the byte stream of net::DnsTcpStream: reads and
// writes decrypt and encrypt; a close_notify from the client reads as EOF;
// "would block" in either direction reads as EAGAIN, and wants_write() says
// the TLS layer needs the socket writable to go on (a key update).
class TlsStreamIo final : public StreamIo {
 public:
  explicit TlsStreamIo(SSL* ssl) : ssl_(ssl) {}
  ssize_t Recv(void* buf, size_t len) override;
  ssize_t Send(const void* buf, size_t len) override;
  // Decrypted bytes OpenSSL holds that the socket will not signal.
  bool HasBuffered() const override { return SSL_has_pending(ssl_) == 1; }
  bool wants_write() const override { return wants_write_; }

 private:
  ssize_t Fail(int ret);
  SSL* ssl_;
  bool wants_write_ = false;
};

}  // namespace weir::net
