// weir-mgmt's TLS listener side (docs/mgmt.md#tls): the server context built
// from the [tls] files, rebuilt when one of them changes, and who a peer is
// by its client certificate.
//
// Threading: the mgmt loop thread (SIGHUP gets here through its mailbox).
#pragma once

#include <openssl/ssl.h>

#include <cstdint>
#include <ctime>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "weir/mgmt/server.h"
#include "weir/net/tls.h"

namespace weir::mgmt {

// The role a client certificate's subject OU gives its peer.
inline constexpr std::string_view kNodeUnit = "weir-node";
inline constexpr std::string_view kOperatorUnit = "weir-operator";
enum class CertRole { kNone, kNode, kOperator };

struct PeerCertificate {
  CertRole role = CertRole::kNone;
  std::string cn;
};

// The peer of a finished handshake: its role (OU) and its CN; an error
// when its certificate names neither role.
absl::StatusOr<PeerCertificate> IdentifyPeer(const SSL* ssl);

// The server options of the [tls] table: mutual TLS, TLS 1.2+, no
// resumption. --check and the start use the same.
net::TlsServerOptions MgmtTlsOptions(const MgmtTlsConfig& config);

class MgmtTlsContext {
 public:
  explicit MgmtTlsContext(MgmtTlsConfig config) : config_(std::move(config)) {}

  // Builds the first context (the start fails on an error).
  absl::Status Load();
  // Builds a new context when one of the files' modification times changed
  // (`force`: in any case). Connections made before keep theirs; on an
  // error the old context stays and the error is logged and returned.
  absl::Status MaybeReload(bool force);
  // A server connection on `fd` under the current context.
  SSL* NewConnection(int fd) const { return current_->NewConnection(fd, {}); }
  // The certificate's notAfter, in Unix seconds.
  int64_t not_after() const;

 private:
  struct Stamp {
    timespec mtime[3] = {};
    bool operator==(const Stamp& o) const;
  };
  Stamp Read() const;

  MgmtTlsConfig config_;
  std::unique_ptr<net::TlsServerContext> current_;
  Stamp stamp_;
};

}  // namespace weir::mgmt
