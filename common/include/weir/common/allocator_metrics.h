// The memory allocator's own view of the heap, for every daemon's metrics:
// jemalloc's stats.allocated (bytes the program holds) and stats.resident
// (bytes of the allocator's pages in RAM: the heap's share of the RSS, with
// its fragmentation and dirty pages), read through mallctl after an "epoch"
// refresh. A daemon linked with jemalloc (weir-recursor with WEIR_JEMALLOC,
// the default) has them; without it (the other daemons, sanitizer and fuzz
// builds) mallctl is absent and the families are left out.
//
// Threading: thread-safe (mallctl is).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "weir/common/prometheus.h"

namespace weir::common {

struct AllocatorSample {
  std::string_view allocator;  // "jemalloc"
  std::string_view version;    // jemalloc's version string
  uint64_t allocated_bytes = 0;
  uint64_t active_bytes = 0;
  uint64_t resident_bytes = 0;
  uint64_t mapped_bytes = 0;
};

// jemalloc's statistics now, or nothing when jemalloc is not the process's
// allocator (or was built without statistics).
std::optional<AllocatorSample> ReadAllocatorSample();

// weir_allocator_{allocated,active,resident,mapped}_bytes and
// weir_allocator_info{allocator, version}; nothing without jemalloc.
void AddAllocatorMetrics(PrometheusWriter& w, const std::optional<AllocatorSample>& sample);
void AddAllocatorMetrics(PrometheusWriter& w);

}  // namespace weir::common
