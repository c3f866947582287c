#include "weir/common/privileges.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <vector>

#include "weir/common/text.h"

namespace weir::common {
namespace {

std::optional<unsigned long> Number(std::string_view s) {
  unsigned long v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::vector<char> LookupBuffer() {
  long n = sysconf(_SC_GETPW_R_SIZE_MAX);
  return std::vector<char>(n > 0 ? static_cast<size_t>(n) * 4 : 65536);
}

}  // namespace

absl::StatusOr<RunAs> ResolveRunAs(std::string_view spec) {
  const size_t colon = spec.find(':');
  const std::string user(spec.substr(0, colon));
  if (user.empty()) return absl::InvalidArgumentError(Cat("--user: '", spec, "': no user name"));
  RunAs r;
  r.user = user;
  std::vector<char> buf = LookupBuffer();
  passwd pw{};
  passwd* found = nullptr;
  int rc = 0;
  if (auto uid = Number(user)) {
    rc = getpwuid_r(static_cast<uid_t>(*uid), &pw, buf.data(), buf.size(), &found);
  } else {
    rc = getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found);
  }
  if (rc != 0) return absl::InvalidArgumentError(Cat("--user: looking up '", user, "': ", std::strerror(rc)));
  if (found == nullptr) return absl::InvalidArgumentError(Cat("--user: no such user '", user, "'"));
  r.uid = pw.pw_uid;
  r.gid = pw.pw_gid;
  r.user = pw.pw_name;
  if (colon != std::string_view::npos) {
    const std::string group(spec.substr(colon + 1));
    if (group.empty())
      return absl::InvalidArgumentError(Cat("--user: '", spec, "': no group name after ':'"));
    ::group gr{};
    ::group* gfound = nullptr;
    if (auto gid = Number(group)) {
      rc = getgrgid_r(static_cast<gid_t>(*gid), &gr, buf.data(), buf.size(), &gfound);
    } else {
      rc = getgrnam_r(group.c_str(), &gr, buf.data(), buf.size(), &gfound);
    }
    if (rc != 0)
      return absl::InvalidArgumentError(Cat("--user: looking up group '", group, "': ", std::strerror(rc)));
    if (gfound == nullptr) return absl::InvalidArgumentError(Cat("--user: no such group '", group, "'"));
    r.gid = gr.gr_gid;
    r.explicit_group = true;
  }
  return r;
}

absl::Status DropPrivileges(const RunAs& who) {
  if (geteuid() != 0) {
    if (geteuid() == who.uid && getegid() == who.gid) return absl::OkStatus();
    return absl::PermissionDeniedError(
        Cat("--user ", who.user, ": only root can change user (running as uid ", geteuid(), ")"));
  }
  // Supplementary groups first, while still root: the user's own, or just
  // the one group named.
  if (who.explicit_group) {
    if (setgroups(1, &who.gid) != 0) return absl::InternalError(Cat("setgroups: ", std::strerror(errno)));
  } else if (initgroups(who.user.c_str(), who.gid) != 0) {
    return absl::InternalError(Cat("initgroups(", who.user, "): ", std::strerror(errno)));
  }
  if (setresgid(who.gid, who.gid, who.gid) != 0)
    return absl::InternalError(Cat("setgid: ", std::strerror(errno)));
  if (setresuid(who.uid, who.uid, who.uid) != 0)
    return absl::InternalError(Cat("setuid: ", std::strerror(errno)));
  if (who.uid != 0 && (setuid(0) == 0 || seteuid(0) == 0)) {
    return absl::InternalError("privilege drop failed: root could be regained");
  }
  return absl::OkStatus();
}

}  // namespace weir::common
