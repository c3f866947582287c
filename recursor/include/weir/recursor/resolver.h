// The recursive resolver under weir-recursor's ordinary names and zone-cut
// lookups: libunbound in the daemon (unbound_resolver.h), a scripted fake in
// unit tests. Results are DNS messages as the resolver built them.
//
// Threading: every call, and every callback, on the owning loop's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace weir::recursor {

struct ResolverResult {
  int err = 0;                      // non-zero: the resolver itself failed (no packet)
  std::span<const uint8_t> packet;  // the answer message; empty when there is none
  bool secure = false;              // DNSSEC-validated
  bool bogus = false;               // validation failed
};

class Resolver {
 public:
  using Callback = std::function<void(const ResolverResult& result)>;
  virtual ~Resolver() = default;
  // Starts a lookup of `name` (text, absolute or not); false when the
  // resolver refused it (then `cb` is never called). The result's packet is
  // valid during the callback only.
  virtual bool Resolve(const std::string& name, uint16_t type, uint16_t klass, Callback cb) = 0;
};

}  // namespace weir::recursor
