#include "peer_tls.h"

#include <openssl/objects.h>
#include <sys/stat.h>

#include "weir/common/log.h"
#include "weir/common/text.h"
#include "weir/mgmt/structured_reply.h"

namespace weir::mgmt {

using common::Cat;
using common::ToStd;

absl::StatusOr<PeerCertificate> IdentifyPeer(const SSL* ssl) {
  PeerCertificate p;
  p.cn = net::PeerSubjectField(ssl, NID_commonName);
  const std::string unit = net::PeerSubjectField(ssl, NID_organizationalUnitName);
  if (unit == kNodeUnit) {
    p.role = CertRole::kNode;
  } else if (unit == kOperatorUnit) {
    p.role = CertRole::kOperator;
  } else {
    return absl::PermissionDeniedError(
        Cat("certificate '", p.cn, "' has OU '", unit, "', neither ", kNodeUnit, " nor ", kOperatorUnit));
  }
  if (p.cn.empty()) return absl::PermissionDeniedError("certificate without a CN");
  return p;
}

net::TlsServerOptions MgmtTlsOptions(const MgmtTlsConfig& config) {
  net::TlsServerOptions o;
  o.certificates.push_back({config.cert_file, config.key_file});
  o.min_version = TLS1_2_VERSION;
  o.session_tickets = false;
  o.client_ca = config.ca_file;
  return o;
}

bool MgmtTlsContext::Stamp::operator==(const Stamp& o) const {
  for (int i = 0; i < 3; ++i) {
    if (mtime[i].tv_sec != o.mtime[i].tv_sec || mtime[i].tv_nsec != o.mtime[i].tv_nsec) return false;
  }
  return true;
}

MgmtTlsContext::Stamp MgmtTlsContext::Read() const {
  Stamp s;
  const std::string* files[3] = {&config_.cert_file, &config_.key_file, &config_.ca_file};
  for (int i = 0; i < 3; ++i) {
    struct stat st {};
    if (stat(files[i]->c_str(), &st) == 0) s.mtime[i] = st.st_mtim;
  }
  return s;
}

int64_t MgmtTlsContext::not_after() const {
  return current_ == nullptr || current_->certificates().empty() ? 0 : current_->certificates()[0].not_after;
}

absl::Status MgmtTlsContext::Load() {
  stamp_ = Read();
  auto ctx = net::TlsServerContext::Create(MgmtTlsOptions(config_), nullptr);
  if (!ctx.ok()) return absl::Status(ctx.status().code(), Cat("[tls] ", ToStd(ctx.status().message())));
  current_ = *std::move(ctx);
  const net::TlsCertificateInfo& info = current_->certificates()[0];
  common::LogInfo("tls", "TLS certificate ", info.subject, ", expires ", UtcTimeText(info.not_after));
  return absl::OkStatus();
}

absl::Status MgmtTlsContext::MaybeReload(bool force) {
  const Stamp now = Read();
  if (!force && now == stamp_) return absl::OkStatus();
  // Read once per change: a file half written now is read again only when
  // it changes again (its writer's rename or last write does that).
  stamp_ = now;
  auto ctx = net::TlsServerContext::Create(MgmtTlsOptions(config_), nullptr);
  if (!ctx.ok()) {
    common::LogError(
        "tls", "TLS certificate not reloaded (the previous one is kept): ", ToStd(ctx.status().message()));
    return ctx.status();
  }
  current_ = *std::move(ctx);
  const net::TlsCertificateInfo& info = current_->certificates()[0];
  common::LogInfo("tls", "TLS certificate reloaded: ", info.subject, ", expires ",
                  UtcTimeText(info.not_after));
  return absl::OkStatus();
}

}  // namespace weir::mgmt
