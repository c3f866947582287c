#include "weir/net/tls.h"

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "weir/common/text.h"

namespace weir::net {

using common::Cat;

std::string TlsErrors() {
  std::string out;
  unsigned long e;
  while ((e = ERR_get_error()) != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    // "error:0A000086:SSL routines::certificate verify failed": the reason is the last field.
    const char* reason = std::strrchr(buf, ':');
    out += reason != nullptr && reason[1] != '\0' ? reason + 1 : buf;
  }
  return out.empty() ? "unknown TLS error" : out;
}

// ---------------------------------------------------------------- tickets

TicketKeyRing::TicketKeyRing(std::chrono::seconds rotation, Clock::time_point now) : rotation_(rotation) {
  Add(now);
}

void TicketKeyRing::Add(Clock::time_point now) {
  Key k;
  // RAND_bytes fails only when the CSPRNG cannot be seeded: then no key is
  // safe, and the ring keeps what it has (tickets still seal, with an older key).
  if (RAND_bytes(k.name.data(), k.name.size()) != 1 || RAND_bytes(k.aes.data(), k.aes.size()) != 1 ||
      RAND_bytes(k.hmac.data(), k.hmac.size()) != 1) {
    ERR_clear_error();
    if (!keys_.empty()) return;
  }
  k.created = now;
  keys_.insert(keys_.begin(), k);
}

void TicketKeyRing::RotateNow(Clock::time_point now) {
  Add(now);
  // The new key and the one before it: a ticket lives at most two periods.
  if (keys_.size() > 2) keys_.resize(2);
}

void TicketKeyRing::Rotate(Clock::time_point now) {
  if (keys_.empty() || now - keys_.front().created >= rotation_) RotateNow(now);
}

namespace {

// The ticket cipher, fetched once (EVP_aes_256_cbc() is an implicit fetch,
// a provider lookup per ticket sealed or opened).
const EVP_CIPHER* TicketCipher() {
  static EVP_CIPHER* const cipher = EVP_CIPHER_fetch(nullptr, "AES-256-CBC", nullptr);
  return cipher;
}

bool InitMac(EVP_MAC_CTX* mac, const std::array<unsigned char, 32>& key) {
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, const_cast<unsigned char*>(key.data()),
                                        key.size()),
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_end(),
  };
  return EVP_MAC_CTX_set_params(mac, params) == 1;
}

}  // namespace

int TicketKeyRing::Seal(unsigned char name[16], unsigned char iv[16], EVP_CIPHER_CTX* cipher,
                        EVP_MAC_CTX* mac) {
  if (keys_.empty()) return -1;
  const Key& k = keys_.front();
  if (RAND_bytes(iv, 16) != 1) return -1;
  std::memcpy(name, k.name.data(), 16);
  if (EVP_EncryptInit_ex(cipher, TicketCipher(), nullptr, k.aes.data(), iv) != 1) return -1;
  return InitMac(mac, k.hmac) ? 1 : -1;
}

int TicketKeyRing::Open(const unsigned char name[16], const unsigned char iv[16], EVP_CIPHER_CTX* cipher,
                        EVP_MAC_CTX* mac) {
  for (size_t i = 0; i < keys_.size(); ++i) {
    const Key& k = keys_[i];
    if (std::memcmp(name, k.name.data(), 16) != 0) continue;
    if (EVP_DecryptInit_ex(cipher, TicketCipher(), nullptr, k.aes.data(), iv) != 1) return -1;
    if (!InitMac(mac, k.hmac)) return -1;
    return i == 0 ? 1 : 2;  // 2: opened with an older key, issue a new ticket
  }
  return 0;  // an unknown or forgotten key: a full handshake
}

// ---------------------------------------------------------------- context

namespace {

int RingIndex() {
  static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

int TicketCallback(SSL* ssl, unsigned char name[16], unsigned char iv[16], EVP_CIPHER_CTX* cipher,
                   EVP_MAC_CTX* mac, int enc) {
  auto* ring = static_cast<TicketKeyRing*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), RingIndex()));
  if (ring == nullptr) return enc ? -1 : 0;
  return enc ? ring->Seal(name, iv, cipher, mac) : ring->Open(name, iv, cipher, mac);
}

// The connection's ALPN list is its app data (NewConnection).
int AlpnSelect(SSL* ssl, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
               unsigned int inlen, void*) {
  const auto* ours = static_cast<const std::string_view*>(SSL_get_app_data(ssl));
  if (ours == nullptr) return SSL_TLSEXT_ERR_NOACK;
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, outlen, reinterpret_cast<const unsigned char*>(ours->data()),
                            static_cast<unsigned>(ours->size()), in, inlen) != OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_NOACK;
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};

std::string KeyType(EVP_PKEY* key) {
  const int bits = EVP_PKEY_get_bits(key);
  switch (EVP_PKEY_get_base_id(key)) {
    case EVP_PKEY_EC: {
      char group[64] = {0};
      size_t len = 0;
      if (EVP_PKEY_get_utf8_string_param(key, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof(group), &len) == 1) {
        return Cat("ECDSA ", group);
      }
      return Cat("ECDSA ", bits);
    }
    case EVP_PKEY_RSA:
      return Cat("RSA ", bits);
    case EVP_PKEY_ED25519:
      return "Ed25519";
    default:
      return Cat("key type ", EVP_PKEY_get_base_id(key));
  }
}

int64_t AsUnixSeconds(const ASN1_TIME* t) {
  tm out{};
  if (ASN1_TIME_to_tm(t, &out) != 1) return 0;
  return static_cast<int64_t>(timegm(&out));
}

// Loads one chain + key pair and checks it; `info` describes it.
// `check_dates`: an expired or not yet valid certificate is an error (a
// client leaves that to the server, which says so in its log).
absl::Status LoadPair(const TlsCertificateFiles& files, std::unique_ptr<X509, X509Free>* leaf,
                      std::unique_ptr<EVP_PKEY, PkeyFree>* key, TlsCertificateInfo* info,
                      bool check_dates = true) {
  ERR_clear_error();
  std::unique_ptr<BIO, BioFree> cb(BIO_new_file(files.chain.c_str(), "r"));
  if (!cb) {
    return absl::InvalidArgumentError(
        Cat(files.chain, ": cannot read the certificate chain: ", std::strerror(errno)));
  }
  leaf->reset(PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr));
  if (!*leaf) {
    ERR_clear_error();
    return absl::InvalidArgumentError(Cat(files.chain, ": no PEM certificate in it"));
  }
  std::unique_ptr<BIO, BioFree> kb(BIO_new_file(files.key.c_str(), "r"));
  if (!kb) {
    return absl::InvalidArgumentError(
        Cat(files.key, ": cannot read the private key: ", std::strerror(errno)));
  }
  // No passphrase callback: an encrypted key fails here instead of prompting.
  char empty[] = "";
  key->reset(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, empty));
  if (!*key) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        Cat(files.key, ": no PEM private key in it (an encrypted key is not supported)"));
  }
  info->file = files.chain;
  char subject[256] = {0};
  X509_NAME_oneline(X509_get_subject_name(leaf->get()), subject, sizeof(subject));
  info->subject = subject;
  info->key_type = KeyType(key->get());
  info->not_after = AsUnixSeconds(X509_get0_notAfter(leaf->get()));
  if (check_dates && X509_cmp_current_time(X509_get0_notAfter(leaf->get())) <= 0) {
    return absl::InvalidArgumentError(Cat(files.chain, ": the certificate (", subject, ") has expired"));
  }
  if (check_dates && X509_cmp_current_time(X509_get0_notBefore(leaf->get())) >= 0) {
    return absl::InvalidArgumentError(Cat(files.chain, ": the certificate (", subject, ") is not valid yet"));
  }
  if (X509_check_private_key(leaf->get(), key->get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        Cat(files.key, ": this key does not belong to the certificate in ", files.chain));
  }
  return absl::OkStatus();
}

// A CA file: readable, and at least one PEM certificate in it.
absl::Status CheckCaFile(const std::string& path) {
  ERR_clear_error();
  std::unique_ptr<BIO, BioFree> b(BIO_new_file(path.c_str(), "r"));
  if (!b) return absl::InvalidArgumentError(Cat(path, ": cannot read the CA file: ", std::strerror(errno)));
  std::unique_ptr<X509, X509Free> ca(PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr));
  if (!ca) {
    ERR_clear_error();
    return absl::InvalidArgumentError(Cat(path, ": no PEM certificate in the CA file"));
  }
  return absl::OkStatus();
}

absl::Status CheckAll(const TlsServerOptions& options, std::vector<TlsCertificateInfo>* infos) {
  if (options.certificates.empty()) return absl::InvalidArgumentError("no certificate configured");
  if (!options.client_ca.empty()) {
    if (absl::Status st = CheckCaFile(options.client_ca); !st.ok()) return st;
  }
  std::vector<int> types;
  for (const TlsCertificateFiles& f : options.certificates) {
    std::unique_ptr<X509, X509Free> leaf;
    std::unique_ptr<EVP_PKEY, PkeyFree> key;
    TlsCertificateInfo info;
    if (absl::Status st = LoadPair(f, &leaf, &key, &info); !st.ok()) return st;
    const int type = EVP_PKEY_get_base_id(key.get());
    for (int t : types) {
      if (t == type) {
        return absl::InvalidArgumentError(
            Cat(f.chain, ": a second ", info.key_type, " certificate (one chain per key type)"));
      }
    }
    types.push_back(type);
    infos->push_back(std::move(info));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<TlsCertificateInfo>> TlsServerContext::Check(const TlsServerOptions& options) {
  std::vector<TlsCertificateInfo> infos;
  if (absl::Status st = CheckAll(options, &infos); !st.ok()) return st;
  return infos;
}

absl::StatusOr<std::unique_ptr<TlsServerContext>> TlsServerContext::Create(const TlsServerOptions& options,
                                                                           TicketKeyRing* tickets) {
  std::unique_ptr<TlsServerContext> c(new TlsServerContext());
  if (absl::Status st = CheckAll(options, &c->certs_); !st.ok()) return st;
  ERR_clear_error();
  c->ctx_ = SSL_CTX_new(TLS_server_method());
  if (c->ctx_ == nullptr) return absl::InternalError(Cat("TLS context: ", TlsErrors()));
  SSL_CTX* ctx = c->ctx_;
  SSL_CTX_set_min_proto_version(ctx, options.min_version);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  // An idle connection keeps no read or write buffer (10,000 idle clients
  // cost their SSL state, not 2 x 16 KiB each); writes may be partial and
  // retried from a buffer that moved (DnsTcpStream compacts its own).
  SSL_CTX_set_mode(
      ctx, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_max_early_data(ctx, 0);
  // A burst of pipelined queries arrives as several records: read what the
  // socket has in one read(2), not a header and then a body per record.
  SSL_CTX_set_read_ahead(ctx, 1);
  for (const TlsCertificateFiles& f : options.certificates) {
    if (SSL_CTX_use_certificate_chain_file(ctx, f.chain.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, f.key.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
      return absl::InvalidArgumentError(Cat(f.chain, ": ", TlsErrors()));
    }
  }
  // Stateless resumption only: no server-side session cache.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  if (options.session_tickets && tickets != nullptr) {
    SSL_CTX_set_ex_data(ctx, RingIndex(), tickets);
    SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, TicketCallback);
    SSL_CTX_set_num_tickets(ctx, 1);
    // Clients may keep a ticket as long as some key can still open it.
    SSL_CTX_set_timeout(ctx, static_cast<long>(2 * tickets->rotation().count()));
  } else {
    SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
    SSL_CTX_set_num_tickets(ctx, 0);
  }
  SSL_CTX_set_alpn_select_cb(ctx, AlpnSelect, nullptr);
  if (!options.client_ca.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, options.client_ca.c_str(), nullptr) != 1) {
      return absl::InvalidArgumentError(Cat(options.client_ca, ": ", TlsErrors()));
    }
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(options.client_ca.c_str());
    if (names != nullptr) SSL_CTX_set_client_CA_list(ctx, names);
    ERR_clear_error();
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return c;
}

TlsServerContext::~TlsServerContext() { SSL_CTX_free(ctx_); }

SSL* TlsServerContext::NewConnection(int fd, std::string_view alpn) const {
  SSL* ssl = SSL_new(ctx_);
  if (ssl == nullptr) return nullptr;
  if (SSL_set_fd(ssl, fd) != 1) {
    SSL_free(ssl);
    return nullptr;
  }
  // Read by AlpnSelect; the views are constants (kAlpnDot, kAlpnDoh). No
  // list: no protocol is agreed.
  static const std::string_view kDot = kAlpnDot, kDoh = kAlpnDoh;
  const std::string_view* list = alpn.empty() ? nullptr : alpn == kAlpnDot ? &kDot : &kDoh;
  SSL_set_app_data(ssl, const_cast<std::string_view*>(list));
  SSL_set_accept_state(ssl);
  return ssl;
}

absl::StatusOr<std::unique_ptr<TlsClientContext>> TlsClientContext::Create(const TlsClientOptions& options) {
  std::unique_ptr<TlsClientContext> c(new TlsClientContext());
  {
    std::unique_ptr<X509, X509Free> leaf;
    std::unique_ptr<EVP_PKEY, PkeyFree> key;
    if (absl::Status st = LoadPair(options.certificate, &leaf, &key, &c->cert_, /*check_dates=*/false);
        !st.ok()) {
      return st;
    }
  }
  if (absl::Status st = CheckCaFile(options.ca); !st.ok()) return st;
  ERR_clear_error();
  c->ctx_ = SSL_CTX_new(TLS_client_method());
  if (c->ctx_ == nullptr) return absl::InternalError(Cat("TLS context: ", TlsErrors()));
  SSL_CTX* ctx = c->ctx_;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_NO_TICKET);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (SSL_CTX_use_certificate_chain_file(ctx, options.certificate.chain.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx, options.certificate.key.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1) {
    return absl::InvalidArgumentError(Cat(options.certificate.chain, ": ", TlsErrors()));
  }
  if (SSL_CTX_load_verify_locations(ctx, options.ca.c_str(), nullptr) != 1) {
    return absl::InvalidArgumentError(Cat(options.ca, ": ", TlsErrors()));
  }
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  c->server_name_ = options.server_name;
  return c;
}

TlsClientContext::~TlsClientContext() { SSL_CTX_free(ctx_); }

SSL* TlsClientContext::NewConnection(int fd) const {
  SSL* ssl = SSL_new(ctx_);
  if (ssl == nullptr) return nullptr;
  bool ok = SSL_set_fd(ssl, fd) == 1;
  if (ok && !server_name_.empty()) {
    ok = SSL_set_tlsext_host_name(ssl, server_name_.c_str()) == 1 &&
         SSL_set1_host(ssl, server_name_.c_str()) == 1;
  }
  if (!ok) {
    SSL_free(ssl);
    return nullptr;
  }
  SSL_set_connect_state(ssl);
  return ssl;
}

std::string TlsHandshakeError(const SSL* ssl) {
  std::string out = TlsErrors();
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) out += Cat(" (", X509_verify_cert_error_string(verify), ")");
  return out;
}

std::string PeerSubjectField(const SSL* ssl, int nid) {
  X509* peer = SSL_get0_peer_certificate(ssl);
  if (peer == nullptr) return "";
  X509_NAME* subject = X509_get_subject_name(peer);
  const int i = X509_NAME_get_index_by_NID(subject, nid, -1);
  if (i < 0) return "";
  unsigned char* text = nullptr;
  const int len = ASN1_STRING_to_UTF8(&text, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, i)));
  if (len < 0) return "";
  std::string out(reinterpret_cast<char*>(text), static_cast<size_t>(len));
  OPENSSL_free(text);
  return out;
}

std::string_view NegotiatedAlpn(const SSL* ssl) {
  const unsigned char* p = nullptr;
  unsigned int len = 0;
  SSL_get0_alpn_selected(ssl, &p, &len);
  return p == nullptr ? std::string_view() : std::string_view(reinterpret_cast<const char*>(p), len);
}

// ---------------------------------------------------------------- stream

ssize_t TlsStreamIo::Fail(int ret) {
  switch (SSL_get_error(ssl_, ret)) {
    case SSL_ERROR_WANT_READ:
      errno = EAGAIN;
      return -1;
    case SSL_ERROR_WANT_WRITE:
      wants_write_ = true;
      errno = EAGAIN;
      return -1;
    case SSL_ERROR_ZERO_RETURN:  // close_notify: the client is done sending
      return 0;
    default:  // a reset, EOF without close_notify, a bad record
      ERR_clear_error();
      errno = ECONNRESET;
      return -1;
  }
}

ssize_t TlsStreamIo::Recv(void* buf, size_t len) {
  wants_write_ = false;
  ERR_clear_error();  // SSL_get_error reads the thread's queue: nothing stale in it
  size_t n = 0;
  const int ret = SSL_read_ex(ssl_, buf, len, &n);
  if (ret == 1) {
    received_ += n;
    return static_cast<ssize_t>(n);
  }
  return Fail(ret);
}

ssize_t TlsStreamIo::Send(const void* buf, size_t len) {
  wants_write_ = false;
  ERR_clear_error();
  size_t n = 0;
  const int ret = SSL_write_ex(ssl_, buf, len, &n);
  if (ret == 1) return static_cast<ssize_t>(n);
  return Fail(ret);
}

}  // namespace weir::net
