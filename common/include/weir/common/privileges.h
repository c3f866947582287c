// Running as an unprivileged user once the sockets are bound: what a daemon
// started as root without systemd does with --user (under systemd the unit
// starts it as the weir user with CAP_NET_BIND_SERVICE instead).
//
// Control plane only: called once, on the main thread, after the server has
// bound its sockets. glibc applies setuid/setgid to every thread of the
// process, so threads started before the drop lose root too.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace weir::common {

struct RunAs {
  std::string user;  // the name, for messages
  uid_t uid = 0;
  gid_t gid = 0;  // the group: GROUP of USER:GROUP, else the user's primary group
  bool explicit_group = false;
};

// Parses USER or USER:GROUP (names or numeric ids) against the system's
// user and group databases.
absl::StatusOr<RunAs> ResolveRunAs(std::string_view spec);

// Becomes `who`: supplementary groups of the user (or only the group given),
// then the group, then the user; checks that root cannot be regained.
// Without root it succeeds only when the process already runs as `who`.
absl::Status DropPrivileges(const RunAs& who);

}  // namespace weir::common
