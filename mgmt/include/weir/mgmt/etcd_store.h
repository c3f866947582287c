// The etcd StoreBackend (docs/mgmt.md#etcd): several weir-mgmt instances
// share one etcd cluster. A committed version is the etcd revision of the
// commit's transaction; every instance watches the store's head and reads
// it again when another instance commits (or when its watch fell behind a
// compaction). Control plane only.
//
// Keys, under `prefix`:
//   origin               the store's id (created by the first instance)
//   head                 JSON: the commit id and, per kind (tags, citymap,
//                        accounts), the blob holding it and its SHA-256;
//                        its mod revision is the version
//   blob/ID/NNNNNN       a kind's content in chunks of at most 512 KiB
//                        (etcd's request limit is 1.5 MiB by default),
//                        written before the commit's transaction
//   audit/TIME-ID        JSON: actor, action, detail (the commit's revision
//                        is its mod revision)
//   nodes/NODE           JSON: the node registry
// A commit writes the changed kinds' blobs, then one transaction: if head's
// mod revision is still the base version, put head and the audit entry and
// delete the blobs head no longer names; otherwise nothing (a conflict; the
// new blobs are deleted). Blobs of a commit that died between the two steps
// are swept at the next start.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "weir/mgmt/etcd_client.h"
#include "weir/mgmt/store.h"

namespace weir::mgmt {

struct EtcdStoreOptions {
  etcd::ClientOptions client;
  std::string prefix = "/weir/";
  // This weir-mgmt instance's name in the node registry.
  std::string instance;
};

// Connects (creating the store's origin when the cluster holds none under
// the prefix). Fails when no member answers.
absl::StatusOr<std::unique_ptr<StoreBackend>> OpenEtcdBackend(const EtcdStoreOptions& options);

// Chunk size of blobs.
inline constexpr size_t kEtcdChunkBytes = 512 * 1024;

}  // namespace weir::mgmt
