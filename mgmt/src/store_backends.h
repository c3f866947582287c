// The StoreBackends weir-mgmt can keep its store in (store.h). Control plane only.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "weir/mgmt/store.h"

namespace weir::mgmt {

// SQLite at `path` (created if needed; ":memory:" for tests): one weir-mgmt.
absl::StatusOr<std::unique_ptr<StoreBackend>> OpenSqliteBackend(const std::string& path);

}  // namespace weir::mgmt
