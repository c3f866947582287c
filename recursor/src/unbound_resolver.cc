#include "unbound_resolver.h"

#include <dirent.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "weir/common/log.h"
#include "weir/common/text.h"
#include "weir/recursor/unbound_log.h"

namespace weir::recursor {

using common::Cat;

namespace {

// Runs in the resolving process libunbound forks (the daemon forks nothing
// else), before libunbound's own code: the copies of the daemon's network
// sockets are closed there. Otherwise a client's TCP connection, or the mgmt
// connection, open at the fork would stay open in the child after the
// daemon closes it (no FIN until the child ends). Unix sockets (the journal,
// which the child's log lines use) and pipes (libunbound's own) stay.
void CloseInheritedNetworkSockets() {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return;
  const int self = dirfd(d);
  std::vector<int> close_fds;
  while (dirent* e = readdir(d)) {
    const int fd = std::atoi(e->d_name);
    if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd <= 2 || fd == self) continue;
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) continue;
    if (ss.ss_family == AF_INET || ss.ss_family == AF_INET6) close_fds.push_back(fd);
  }
  closedir(d);
  for (int fd : close_fds) close(fd);
}

}  // namespace

UnboundResolver::~UnboundResolver() {
  if (ctx_ != nullptr) ub_ctx_delete(ctx_);  // ends the process; pending callbacks never run
  for (Request* r : pending_) delete r;
}

absl::Status UnboundResolver::Init(const RecursorConfig& config) {
  static std::once_flag atfork;
  std::call_once(atfork, [] { pthread_atfork(nullptr, nullptr, &CloseInheritedNetworkSockets); });
  config_ = config;
  return Create();
}

absl::Status UnboundResolver::Create() {
  const RecursorConfig& config = config_;
  ctx_ = ub_ctx_create();
  if (ctx_ == nullptr) return absl::InternalError("libunbound: cannot create a context");
  // libunbound's lines go to weir's log (unbound_log.h), not to its own
  // stderr format or syslog.
  if (FILE* log = UnboundLogStream(); log != nullptr) ub_ctx_debugout(ctx_, log);
  auto set = [&](const char* opt, const std::string& val) -> absl::Status {
    const int err = ub_ctx_set_option(ctx_, opt, val.c_str());
    if (err != 0)
      return absl::InvalidArgumentError(Cat("libunbound option ", opt, " ", val, ": ", ub_strerror(err)));
    return absl::OkStatus();
  };
  absl::Status st;
  // The test hierarchy and loopback forwarders live on 127.0.0.0/8.
  if (!(st = set("do-not-query-localhost:", "no")).ok()) return st;
  if (!(st = set("do-ip6:", config.do_ip6 ? "yes" : "no")).ok()) return st;
  if (!(st = set("edns-buffer-size:", "1232")).ok()) return st;
  if (!(st = set("verbosity:", std::to_string(config.verbosity))).ok()) return st;
  if (!(st = set("use-syslog:", "no")).ok()) return st;
  // libunbound's own cache answers ordinary names too: the same caps.
  if (!(st = set("cache-max-ttl:", std::to_string(config.max_ttl))).ok()) return st;
  if (!(st = set("cache-max-negative-ttl:", std::to_string(config.negative_max_ttl))).ok()) return st;
  if (!(st = set("harden-glue:", config.harden_glue ? "yes" : "no")).ok()) return st;
  using Qmin = RecursorConfig::QnameMinimisation;
  if (!(st = set("qname-minimisation:", config.qname_minimisation == Qmin::kOff ? "no" : "yes")).ok())
    return st;
  if (!(st = set("qname-minimisation-strict:", config.qname_minimisation == Qmin::kStrict ? "yes" : "no"))
           .ok())
    return st;
  if (!(st = set("trust-anchor-signaling:", config.trust_anchor_signaling ? "yes" : "no")).ok()) return st;
  if (!(st = set("aggressive-nsec:", config.aggressive_nsec ? "yes" : "no")).ok()) return st;
  // Blind spoofing: 0x20 on every query (libunbound re-asks without it and
  // compares when an authority does not echo the case), and the reaction
  // to unwanted replies. libunbound exposes no counters (ub_ctx has no
  // statistics call): what it does shows in its log lines.
  if (!(st = set("use-caps-for-id:", config.use_caps_for_id ? "yes" : "no")).ok()) return st;
  // libunbound 1.17 takes the old name of caps-exempt only. It has no
  // client cookies (upstream-cookies came in unbound 1.21).
  for (const std::string& zone : config.caps_exempt) {
    if (!(st = set("caps-whitelist:", zone)).ok()) return st;
  }
  if (!(st = set("unwanted-reply-threshold:", std::to_string(config.ub_unwanted_reply_threshold))).ok())
    return st;
  if (!(st = set("tcp-upstream:", config.tcp_upstream ? "yes" : "no")).ok()) return st;
  if (!(st = set("outgoing-num-tcp:", std::to_string(config.outgoing_tcp))).ok()) return st;
  if (!(st = set("harden-below-nxdomain:", config.harden_below_nxdomain ? "yes" : "no")).ok()) return st;
  if (!(st = set("harden-dnssec-stripped:", config.harden_dnssec_stripped ? "yes" : "no")).ok()) return st;
  if (!(st = set("harden-referral-path:", config.harden_referral_path ? "yes" : "no")).ok()) return st;
  if (!config.val_override_date.empty()) {
    if (!(st = set("val-override-date:", config.val_override_date)).ok()) return st;
  }
  if (!config.root_hints.empty()) {
    if (!(st = set("root-hints:", config.root_hints)).ok()) return st;
  }
  for (const common::SocketAddress& f : config.forwarders) {
    std::string text = f.ToString();  // "1.2.3.4:53" or "[::1]:53" -> "1.2.3.4@53"
    const size_t colon = text.rfind(':');
    std::string host = text.substr(0, colon);
    if (!host.empty() && host.front() == '[') host = host.substr(1, host.size() - 2);
    const std::string fwd = Cat(host, "@", f.port());
    const int err = ub_ctx_set_fwd(ctx_, fwd.c_str());
    if (err != 0)
      return absl::InvalidArgumentError(Cat("libunbound forwarder ", fwd, ": ", ub_strerror(err)));
  }
  if (!config.trust_anchor.empty()) {
    const int err = ub_ctx_add_ta_file(ctx_, config.trust_anchor.c_str());
    if (err != 0) {
      return absl::InvalidArgumentError(Cat("trust anchor ", config.trust_anchor, ": ", ub_strerror(err)));
    }
  } else {
    // No anchor, no validation: skip the validator module altogether.
    if (!(st = set("module-config:", "iterator")).ok()) return st;
  }
  // A resolving process of its own (forked at the first lookup, so after
  // the privilege drop), not a thread: the process has its own memory, and
  // a crash or fatal exit inside libunbound ends only it (Process()
  // restarts it).
  const int err = ub_ctx_async(ctx_, 0);
  if (err != 0) return absl::InternalError(Cat("libunbound async: ", ub_strerror(err)));
  // Through the zone API, not the "local-zone:" option: libunbound 1.17
  // ignores "NAME nodefault" given as an option. Adding a zone finalizes the
  // context, so this comes after every option.
  for (const std::string& zone : config.local_zones) {
    const size_t sp = zone.find(' ');
    const std::string name = zone.substr(0, sp), type = zone.substr(sp + 1);
    const int e = ub_ctx_zone_add(ctx_, name.c_str(), type.c_str());
    if (e != 0) return absl::InvalidArgumentError(Cat("local zone ", zone, ": ", ub_strerror(e)));
  }
  return absl::OkStatus();
}

int UnboundResolver::fd() const { return ctx_ != nullptr ? ub_fd(ctx_) : -1; }

void UnboundResolver::Process() {
  if (ctx_ == nullptr || ub_process(ctx_) != UB_PIPE) return;
  // The resolving process is gone (killed, crashed, or a fatal exit inside
  // libunbound): a new context and process; the lookups in flight fail now
  // (their clients get SERVFAIL or a stale answer) instead of at their
  // deadline.
  ++restarts_;
  static common::RateLimitedLog restart_log{{.level = common::LogLevel::kError, .component = "unbound"}};
  restart_log("libunbound's resolving process ended: starting a new one (", pending_.size(),
              " lookups in flight failed)");
  if (watch_fd_) watch_fd_(ub_fd(ctx_), false);
  std::vector<Request*> lost(pending_.begin(), pending_.end());
  pending_.clear();
  ub_ctx_delete(ctx_);
  ctx_ = nullptr;
  if (absl::Status st = Create(); !st.ok()) {
    // The same config worked at start: only resources can fail here.
    common::LogError("unbound", "cannot start libunbound again: ", common::ToStd(st.message()));
    if (ctx_ != nullptr) ub_ctx_delete(ctx_);
    ctx_ = nullptr;
  }
  if (watch_fd_ && ctx_ != nullptr) watch_fd_(ub_fd(ctx_), true);
  for (Request* r : lost) {
    Callback cb = std::move(r->cb);
    delete r;
    cb(ResolverResult{UB_PIPE, {}, false, false});
  }
}

bool UnboundResolver::Resolve(const std::string& name, uint16_t type, uint16_t klass, Callback cb) {
  if (ctx_ == nullptr) return false;
  auto* r = new Request{this, std::move(cb)};
  int async_id = 0;
  const int err = ub_resolve_async(ctx_, name.c_str(), type, klass, r, &UnboundResolver::Done, &async_id);
  if (err != 0) {
    delete r;
    return false;
  }
  pending_.insert(r);
  return true;
}

void UnboundResolver::Done(void* arg, int err, ub_result* result) {
  auto* r = static_cast<Request*>(arg);
  r->self->pending_.erase(r);
  Callback cb = std::move(r->cb);
  delete r;
  ResolverResult out{err, {}, false, false};
  if (err == 0 && result != nullptr) {
    if (result->answer_packet != nullptr && result->answer_len > 0) {
      out.packet = {static_cast<const uint8_t*>(result->answer_packet),
                    static_cast<size_t>(result->answer_len)};
    }
    out.secure = result->secure != 0;
    out.bogus = result->bogus != 0;
  }
  cb(out);
  if (result != nullptr) ub_resolve_free(result);
}

}  // namespace weir::recursor
