// A versioned configuration snapshot: everything mgmt pushes to a node (the
// tag table, the city map, the HTTPDNS accounts and the calibration's weight
// factors, in their text formats),
// and the file a node keeps of the last one it applied, so it can start while
// mgmt is down (docs/behaviour.md#management). Control plane only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "weir/mgmt/protocol.h"

namespace weir::mgmt {

struct Snapshot {
  uint64_t version = 0;
  std::string tags;     // TagTable text format (partitions/README.md)
  std::string citymap;  // CityMap CSV
  // The id of the mgmt database that made it: versions are only comparable
  // within one database (a restored or new database starts its own count).
  std::string origin;
  // The HTTPDNS accounts, secrets included (dns::httpdns::FormatAccounts
  // text). Only weir-fastpath nodes get them; a snapshot from a mgmt that
  // predates accounts has none. (Initialised so that `Snapshot{v, tags,
  // citymap, origin}` still names every member for -Wmissing-field-initializers.)
  std::string accounts = {};
  // The traffic-share calibration's weight factors of the names whose tag
  // has calibrate=on (partitions::WeightFactors text; docs/calibration.md).
  // weir-fastpath nodes only, like the accounts.
  std::string factors = {};
  friend bool operator==(const Snapshot&, const Snapshot&) = default;
};

// Which parts of a snapshot a push changed (a node rebuilds only those; the
// first snapshot a node takes changes every part).
struct SnapshotParts {
  bool tags = true;
  bool citymap = true;
  bool accounts = true;
  bool factors = true;
  bool any() const { return tags || citymap || accounts || factors; }
  static SnapshotParts None() { return {false, false, false, false}; }
};

// SNAPSHOT {version, tags, citymap, origin[, accounts[, factors]]}: the
// accounts field is sent only when there are accounts or factors, the
// factors only when there are factors, so a node that predates them keeps
// taking snapshots without any, and a message without them decodes as none.
Message SnapshotMessage(const Snapshot& s);
absl::StatusOr<Snapshot> SnapshotFromMessage(const Message& m);

// Which parts differ between two snapshots.
SnapshotParts DiffParts(const Snapshot& a, const Snapshot& b);

// An incremental push: what turns the snapshot a node runs (`base_version`
// of `origin`) into `version`. Each part that changed is a splice of the
// base part: its first `prefix` and last `suffix` bytes are kept and
// `middle` goes between them (a tag or city-map line added, removed or
// changed is a splice of that line), with the SHA-256 of the result, so a
// node whose base differs finds out and asks for the whole snapshot (NACK).
struct SnapshotDelta {
  uint64_t version = 0;
  uint64_t base_version = 0;
  std::string origin;
  struct Part {
    std::string name;  // "tags" | "citymap" | "accounts" | "factors"
    size_t prefix = 0;
    size_t suffix = 0;
    std::string middle;
    std::string sha256;
  };
  std::vector<Part> parts;
};
// The delta from `base` to `target` (same origin); the accounts and factors
// parts only `fastpath_parts` (only weir-fastpath is given them).
SnapshotDelta MakeDelta(const Snapshot& base, const Snapshot& target, bool fastpath_parts);
Message DeltaMessage(const SnapshotDelta& d);
absl::StatusOr<SnapshotDelta> DeltaFromMessage(const Message& m);
// `base` with the delta applied; an error (nothing changed) when the delta
// is not from `base` or a part does not come out as its SHA-256 says.
// `changed` gets the parts it changed.
absl::StatusOr<Snapshot> ApplyDelta(const Snapshot& base, const SnapshotDelta& d, SnapshotParts* changed);

// The SHA-256 of a snapshot part, in hex: what `weirctl status` shows of the
// store and a node reports of what it runs, to compare the two.
std::string ContentDigest(std::string_view part);

// Checks that every part builds (the same parsers the nodes use); errors
// name the part and the line: "tags: line 3: ...", "citymap: line 7: ...",
// "accounts: line 2: ...", "factors: line 4: ..." (never showing a secret).
// A part equal to that part of `valid` (a snapshot checked before) is not
// checked again: a tag change does not parse the city map.
absl::Status ValidateSnapshot(const Snapshot& s, const Snapshot* valid = nullptr);

// The size of Encode(SnapshotMessage(s)), without encoding it.
size_t EncodedSnapshotBytes(const Snapshot& s);

// The node's copy: `dir`/snapshot, written to a temporary file, synced and
// renamed over the old one, so a crash leaves the old or the new file, never
// half of one. The file carries a checksum; a damaged file is an error. It
// holds the accounts' secrets: it is created with mode 0600.
absl::Status PersistSnapshot(const std::string& dir, const Snapshot& s);
// NotFound when the node never stored one.
absl::StatusOr<Snapshot> LoadPersistedSnapshot(const std::string& dir);
// The file is "weir-snapshot/1\n", this checksum of the body (16 hex
// digits), "\n", then the body (the encoded snapshot message).
std::string PersistedSnapshotChecksum(std::string_view body);

}  // namespace weir::mgmt
