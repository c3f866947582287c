// weir-mgmt's HTTPDNS account requests (weirctl account ..., docs/mgmt.md#httpdns-accounts):
// the request's arguments checked, the change made in the Store, the reply
// built. A secret leaves weir-mgmt only in the reply to the add or rotate
// that made it (and in the snapshots pushed to weir-fastpath nodes): never
// in a log line, an audit entry, an error or a listing, which show its
// fingerprint instead.
//
// Single-threaded, on the mgmt event loop (as the Store). Control plane only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "weir/mgmt/commands.h"
#include "weir/mgmt/store.h"
#include "weir/mgmt/structured_reply.h"

namespace weir::mgmt {

// A new secret: 32 bytes from the kernel's CSPRNG as 64 lowercase hex digits.
std::string NewAccountSecret();

// What identifies a secret without revealing it: the first 12 hex digits of
// its SHA-256.
std::string SecretFingerprint(std::string_view secret);

// A change to the accounts, made.
struct AccountChange {
  uint64_t version = 0;
  std::string what;  // for mgmt's log: "account acme rotated" (no secret)
  StructuredReply reply;
};

// Runs `id` (kAccountAdd, kAccountRotate, kAccountRetire, kAccountSet,
// kAccountRm) with the request's arguments: NAME, then key=value
// (unsigned=on|off, legacy_md5=on|off, rps=N, secret=S as the command takes
// them). Without secret=, add and rotate make one with NewAccountSecret and
// the reply carries it; a secret the operator gave is not sent back.
absl::StatusOr<AccountChange> ChangeAccount(Store& store, Command id, const std::vector<std::string>& args,
                                            const std::string& actor);

// `account ls`: per account its settings, the number of live secrets and
// their fingerprints (current first), created and rotated.
StructuredReply ListAccounts(const Store& store);

}  // namespace weir::mgmt
