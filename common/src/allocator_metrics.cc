#include "weir/common/allocator_metrics.h"

#include <cstddef>

// jemalloc's control interface, weak: it resolves to jemalloc's when the
// daemon links it (WEIR_JEMALLOC) and stays null otherwise, so the common
// library and its tests need no allocator.
extern "C" int mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp, size_t newlen)
    __attribute__((weak));

namespace weir::common {
namespace {

bool ReadSize(const char* name, uint64_t* out) {
  size_t v = 0;
  size_t len = sizeof(v);
  if (mallctl(name, &v, &len, nullptr, 0) != 0 || len != sizeof(v)) return false;
  *out = v;
  return true;
}

}  // namespace

std::optional<AllocatorSample> ReadAllocatorSample() {
  if (mallctl == nullptr) return std::nullopt;
  // The statistics are a snapshot taken at the last epoch: advance it.
  uint64_t epoch = 1;
  size_t len = sizeof(epoch);
  if (mallctl("epoch", &epoch, &len, &epoch, len) != 0) return std::nullopt;
  AllocatorSample s;
  s.allocator = "jemalloc";
  const char* version = nullptr;
  size_t vlen = sizeof(version);
  if (mallctl("version", &version, &vlen, nullptr, 0) == 0 && version != nullptr) s.version = version;
  if (!ReadSize("stats.allocated", &s.allocated_bytes) || !ReadSize("stats.active", &s.active_bytes) ||
      !ReadSize("stats.resident", &s.resident_bytes) || !ReadSize("stats.mapped", &s.mapped_bytes)) {
    return std::nullopt;  // built without --enable-stats
  }
  return s;
}

void AddAllocatorMetrics(PrometheusWriter& w, const std::optional<AllocatorSample>& s) {
  if (!s) return;
  w.Gauge("weir_allocator_info", "1, labelled with the memory allocator and its version.")
      .Add({{"allocator", s->allocator}, {"version", s->version}}, 1);
  w.Gauge("weir_allocator_allocated_bytes", "Bytes allocated by the program (jemalloc stats.allocated).")
      .Add({}, s->allocated_bytes);
  w.Gauge("weir_allocator_active_bytes", "Bytes in the allocator's active pages (jemalloc stats.active).")
      .Add({}, s->active_bytes);
  w.Gauge("weir_allocator_resident_bytes",
          "Bytes of the allocator's pages resident in memory, metadata included (jemalloc stats.resident).")
      .Add({}, s->resident_bytes);
  w.Gauge("weir_allocator_mapped_bytes", "Bytes in the allocator's mapped extents (jemalloc stats.mapped).")
      .Add({}, s->mapped_bytes);
}

void AddAllocatorMetrics(PrometheusWriter& w) { AddAllocatorMetrics(w, ReadAllocatorSample()); }

}  // namespace weir::common
