// The JSON documents weir-mgmt's etcd store (etcd_store.cc) keeps in etcd:
// the head (which blob holds each part of the configuration), the HTTPDNS
// accounts part, and the node records. What is read back from etcd is
// outside input (another instance, an older version, an operator with
// etcdctl may have written it): the readers take any bytes and say what is
// wrong, never throw; tests/fuzz/etcd_store_json_fuzz.cc feeds them.
//
// Every document a reader accepts is written back by its writer to text
// that reads as the same value. Integers must be JSON integers in the
// field's range (the writers write nothing else).
//
// Pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "weir/mgmt/store.h"

namespace weir::mgmt::etcd_store_json {

// The accounts part: [{"name", "secret", "previous_secret", "allow_unsigned",
// "allow_legacy_md5", "rps", "created", "rotated"}, ...]. An error is
// DataLoss, "accounts: " and what is wrong.
nlohmann::json AccountsJson(const std::vector<AccountRecord>& accounts);
absl::StatusOr<std::vector<AccountRecord>> AccountsFromJson(std::string_view text);

// A node record (nodes/<id>): {"node", "kind", "peer", "acked_version",
// "nack_version", "nack_reason", "last_seen", "mgmt", "connected"}. The
// strings are as the node sent them, so not always UTF-8: invalid bytes
// are written as U+FFFD (what nlohmann's dump() would otherwise throw on).
// nullopt: not a node record.
nlohmann::json NodeJson(const NodeRecord& record);
std::optional<NodeRecord> NodeFromJson(std::string_view text);

// One part of the configuration as the head names it: the blob whose
// chunks (keys blob/<blob>/000000, ...) hold it, and its size and SHA-256
// (ContentDigest). No chunks: the part is empty, the rest is not read.
struct BlobRef {
  std::string blob;
  uint64_t chunks = 0;
  uint64_t bytes = 0;
  std::string sha256;
  friend bool operator==(const BlobRef&, const BlobRef&) = default;
};

// The head's parts, in the order of StoreHead::parts. Parts from
// kRequiredHeadParts on were added later: a head an older weir-mgmt wrote
// has none of them, and each reads as empty.
inline constexpr std::array<const char*, 4> kHeadParts = {"tags", "citymap", "accounts", "calibration"};
inline constexpr size_t kRequiredHeadParts = 3;

// The head: {"commit": id, "tags": ref, "citymap": ref, "accounts": ref,
// "calibration": ref}. The first kRequiredHeadParts parts must be there;
// "calibration" and "commit" (the id of the commit that wrote it) may be
// absent (an empty part, ""). An error is DataLoss, saying what is wrong.
struct StoreHead {
  std::string commit;
  std::array<BlobRef, kHeadParts.size()> parts;
  friend bool operator==(const StoreHead&, const StoreHead&) = default;
};
nlohmann::json HeadJson(const StoreHead& head);
absl::StatusOr<StoreHead> HeadFromJson(std::string_view text);

}  // namespace weir::mgmt::etcd_store_json
