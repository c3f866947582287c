#include "tls_client.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <cstring>

#include "weir/common/text.h"

namespace weir::bench {
namespace {

// The index of the ex_data slot that points an SSL at its context.
int ContextIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

// OpenSSL's error queue as one line (emptied), or "" when it is empty.
std::string OpenSslErrors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    // "error:0A000086:SSL routines::certificate verify failed": the reason
    // after the last ':' is what a reader needs.
    const char* reason = std::strrchr(buf, ':');
    out += reason != nullptr && reason[1] != '\0' ? reason + 1 : buf;
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TlsClientContext>> TlsClientContext::Create(const TlsSettings& settings) {
  std::unique_ptr<TlsClientContext> c(new TlsClientContext(settings));
  c->ctx_ = SSL_CTX_new(TLS_client_method());
  if (c->ctx_ == nullptr) return absl::InternalError(common::Cat("SSL_CTX_new: ", OpenSslErrors()));
  SSL_CTX_set_min_proto_version(c->ctx_, TLS1_2_VERSION);
  // An EOF without close_notify is a close, not an error: servers drop idle
  // connections that way.
  SSL_CTX_set_options(c->ctx_, SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(c->ctx_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // Answers come as many small records: read what the socket has in one
  // read() rather than a header and a body per record.
  SSL_CTX_set_read_ahead(c->ctx_, 1);
  if (settings.insecure) {
    SSL_CTX_set_verify(c->ctx_, SSL_VERIFY_NONE, nullptr);
  } else {
    SSL_CTX_set_verify(c->ctx_, SSL_VERIFY_PEER, nullptr);
    if (!settings.ca_file.empty()) {
      if (SSL_CTX_load_verify_locations(c->ctx_, settings.ca_file.c_str(), nullptr) != 1) {
        return absl::InvalidArgumentError(
            common::Cat("--tls-ca ", settings.ca_file, ": no CA certificate read (", OpenSslErrors(), ")"));
      }
    } else if (SSL_CTX_set_default_verify_paths(c->ctx_) != 1) {
      return absl::InternalError(common::Cat("the system's CA store: ", OpenSslErrors()));
    }
  }
  if (!settings.alpn.empty()) {
    std::string wire(1, static_cast<char>(settings.alpn.size()));
    wire += settings.alpn;
    if (SSL_CTX_set_alpn_protos(c->ctx_, reinterpret_cast<const unsigned char*>(wire.data()),
                                static_cast<unsigned>(wire.size())) != 0) {
      return absl::InternalError(common::Cat("ALPN ", settings.alpn, ": ", OpenSslErrors()));
    }
  }
  // The client keeps no cache of its own: the new-session callback keeps
  // the latest ticket, which the next connection offers.
  SSL_CTX_set_session_cache_mode(c->ctx_, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(c->ctx_, &TlsClientContext::OnNewSession);
  return c;
}

TlsClientContext::~TlsClientContext() {
  for (SSL_SESSION* s : fresh_) SSL_SESSION_free(s);
  if (last_ != nullptr) SSL_SESSION_free(last_);
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
}

SSL_SESSION* TlsClientContext::TakeSession() {
  if (!fresh_.empty()) {
    SSL_SESSION* s = fresh_.back();
    fresh_.pop_back();
    if (SSL_SESSION_get_protocol_version(s) != TLS1_3_VERSION) {
      // A TLS 1.2 session resumes any number of times: it stays.
      SSL_SESSION_up_ref(s);
      fresh_.push_back(s);
    }
    if (last_ != nullptr) SSL_SESSION_free(last_);
    last_ = s;
  }
  if (last_ == nullptr) return nullptr;
  SSL_SESSION_up_ref(last_);
  return last_;
}

void TlsClientContext::Declined(const SSL_SESSION* offered) {
  if (offered == nullptr || offered != last_) return;
  SSL_SESSION_free(last_);
  last_ = nullptr;
}

int TlsClientContext::OnNewSession(SSL* ssl, SSL_SESSION* session) {
  auto* self = static_cast<TlsClientContext*>(SSL_get_ex_data(ssl, ContextIndex()));
  if (self == nullptr || !self->settings_.resume || SSL_SESSION_is_resumable(session) != 1) return 0;
  if (self->fresh_.size() >= kMaxSessions) {
    SSL_SESSION_free(self->fresh_.front());
    self->fresh_.pop_front();
  }
  self->fresh_.push_back(session);
  return 1;  // the reference is ours now
}

TlsStream::~TlsStream() {
  if (ssl_ != nullptr) SSL_free(ssl_);
}

absl::Status TlsStream::Start(int fd) {
  ERR_clear_error();
  ssl_ = SSL_new(context_->ctx());
  if (ssl_ == nullptr) return absl::InternalError(common::Cat("SSL_new: ", OpenSslErrors()));
  SSL_set_ex_data(ssl_, ContextIndex(), context_);
  if (SSL_set_fd(ssl_, fd) != 1) return absl::InternalError(common::Cat("SSL_set_fd: ", OpenSslErrors()));
  const TlsSettings& s = context_->settings();
  if (!s.name.empty() && SSL_set_tlsext_host_name(ssl_, s.name.c_str()) != 1) {
    return absl::InvalidArgumentError(common::Cat("--tls-name ", s.name, ": ", OpenSslErrors()));
  }
  if (!s.insecure) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl_);
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    const bool ok = !s.name.empty() ? X509_VERIFY_PARAM_set1_host(param, s.name.c_str(), 0) == 1
                                    : X509_VERIFY_PARAM_set1_ip_asc(param, s.server_ip.c_str()) == 1;
    if (!ok) {
      return absl::InvalidArgumentError(common::Cat(
          "cannot verify the name ", s.name.empty() ? s.server_ip : s.name, ": ", OpenSslErrors()));
    }
  }
  if (s.resume) {
    if (SSL_SESSION* session = context_->TakeSession()) {
      SSL_set_session(ssl_, session);  // takes a reference of its own
      offered_session_ = session;
      SSL_SESSION_free(session);
    }
  }
  SSL_set_connect_state(ssl_);
  return absl::OkStatus();
}

TlsIo TlsStream::Result(int ret) {
  const int err = SSL_get_error(ssl_, ret);
  switch (err) {
    case SSL_ERROR_WANT_READ:
      return TlsIo::kWantRead;
    case SSL_ERROR_WANT_WRITE:
      return TlsIo::kWantWrite;
    case SSL_ERROR_ZERO_RETURN:
      error_ = "the server closed the connection";
      return TlsIo::kClosed;
    case SSL_ERROR_SYSCALL: {
      const std::string queued = OpenSslErrors();
      if (errno == 0 && queued.empty()) {
        error_ = "the server closed the connection";
        return TlsIo::kClosed;
      }
      error_ = queued.empty() ? std::strerror(errno) : queued;
      return TlsIo::kError;
    }
    default:
      break;
  }
  error_ = OpenSslErrors();
  if (error_.empty()) error_ = common::Cat("SSL error ", err);
  const long verify = SSL_get_verify_result(ssl_);
  if (verify != X509_V_OK) error_ += common::Cat(" (", X509_verify_cert_error_string(verify), ")");
  return TlsIo::kError;
}

TlsIo TlsStream::Handshake() {
  ERR_clear_error();
  errno = 0;
  const int r = SSL_do_handshake(ssl_);
  if (r != 1) {
    return Result(r);
  }
  const TlsSettings& s = context_->settings();
  if (!s.alpn.empty()) {
    const unsigned char* proto = nullptr;
    unsigned len = 0;
    SSL_get0_alpn_selected(ssl_, &proto, &len);
    const std::string selected(reinterpret_cast<const char*>(proto), proto != nullptr ? len : 0);
    if ((s.alpn_required && selected.empty()) || (!selected.empty() && selected != s.alpn)) {
      error_ = selected.empty()
                   ? common::Cat("the server selected no ALPN protocol, not '", s.alpn, "'")
                   : common::Cat("the server selected ALPN '", selected, "', not '", s.alpn, "'");
      return TlsIo::kError;
    }
  }
  // A ticket the server would not take is not offered again.
  if (offered_session_ != nullptr && SSL_session_reused(ssl_) != 1) context_->Declined(offered_session_);
  return TlsIo::kDone;
}

TlsIo TlsStream::Read(uint8_t* buf, size_t cap, size_t* n) {
  ERR_clear_error();
  errno = 0;
  if (SSL_read_ex(ssl_, buf, cap, n) == 1) return TlsIo::kDone;
  return Result(0);
}

TlsIo TlsStream::Write(const uint8_t* data, size_t len, size_t* n) {
  ERR_clear_error();
  errno = 0;
  if (SSL_write_ex(ssl_, data, len, n) == 1) return TlsIo::kDone;
  return Result(0);
}

void TlsStream::Shutdown() {
  if (ssl_ == nullptr || !SSL_is_init_finished(ssl_)) return;
  ERR_clear_error();
  SSL_shutdown(ssl_);
  ERR_clear_error();
}

bool TlsStream::resumed() const { return ssl_ != nullptr && SSL_session_reused(ssl_) == 1; }

}  // namespace weir::bench
