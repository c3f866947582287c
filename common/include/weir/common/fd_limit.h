// The open-file limit (RLIMIT_NOFILE) a daemon's config needs, written once
// for weir-fastpath, weir-recursor and weir-mgmt (as unbound raises its own
// at start). Each daemon says what its config makes it open, term by term
// (its DescriptorsNeeded(), next to its config); Daemon::ConfigLoaded then
// raises the soft limit to that need, never past the hard limit and never
// lowering it. A hard limit below the need refuses the start with one line
// naming the need, the limit and the keys that drive it; --check prints the
// same line, since it runs under the same limits.
//
// Control plane only: everything runs on the main thread before the server
// starts.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace weir::common {

// Descriptors a config needs, as a sum an operator can read back.
class DescriptorNeed {
 public:
  struct Term {
    std::string what;  // as a message shows it: "tcp_max_connections 20000", "udp_sockets 256 x 2"
    uint64_t count = 0;
    std::string key;  // the config key to lower to need fewer; "" when no key sets it
  };

  // Adds `count` descriptors, described as `what`; `key` names the config
  // key that drives them ("" for fixed allowances). A zero count adds
  // nothing.
  void Add(std::string what, uint64_t count, std::string key = "");

  uint64_t Total() const;
  const std::vector<Term>& terms() const { return terms_; }
  // "tcp_max_connections 20000 + udp_sockets 256 x 2 families x 2 + ..."
  std::string Explain() const;
  // The keys of the largest terms, at most `n`, largest first (each once):
  // what an operator lowers when the hard limit cannot be raised.
  std::vector<std::string> LargestKeys(size_t n) const;

 private:
  std::vector<Term> terms_;
};

// RLIMIT_NOFILE; kUnlimited stands for RLIM_INFINITY.
struct OpenFileLimit {
  static constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();
  uint64_t soft = 0;
  uint64_t hard = 0;
};

struct OpenFileLimitDecision {
  enum class Action : uint8_t {
    kKeep,    // the soft limit already covers the need
    kRaise,   // set the soft limit to `soft`
    kRefuse,  // the hard limit is below the need: do not start
  };
  Action action = Action::kKeep;
  uint64_t soft = 0;  // the soft limit after the decision (kRefuse: unchanged)
};

// What to do with `current` for `needed` descriptors: keep a soft limit
// that covers it (a limit is never lowered), raise the soft limit to the
// need when the hard limit allows, refuse when it does not.
OpenFileLimitDecision DecideOpenFileLimit(uint64_t needed, OpenFileLimit current);

// The one line a refused start and --check print, e.g. "open-file limit:
// the config needs 21,312 descriptors (tcp_max_connections 20000 + ...),
// the hard limit is 1,024: raise LimitNOFILE in the systemd unit (or the
// hard limit it starts under) or lower tcp_max_connections".
std::string OpenFileLimitRefusal(const DescriptorNeed& need, OpenFileLimit current);

// 21312 -> "21,312"; kUnlimited -> "unlimited".
std::string GroupedCount(uint64_t n);

// The process's RLIMIT_NOFILE (getrlimit).
absl::StatusOr<OpenFileLimit> ReadOpenFileLimit();
// Sets the soft RLIMIT_NOFILE to `soft`, keeping the hard limit `hard`.
absl::Status SetOpenFileSoftLimit(uint64_t soft, uint64_t hard);

}  // namespace weir::common
