// Names that became tagged through their answer (docs/behaviour.md#domain-tags): an
// untagged name whose CNAME chain enters a tagged suffix takes that tag, for
// the chain's TTL, so subscribers of different cities never share its answer.
//
// Threading: an immutable snapshot read by the workers under RCU; the
// forwarder thread (the only writer) publishes a new copy per change.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "weir/common/rcu.h"
#include "weir/partitions/tagtable.h"

namespace weir::fastpath {

class LearnedTags {
 public:
  struct Learned {
    partitions::Tag tag;
    uint32_t expires = 0;
  };

  // The learned tag of `qname` (a canonical key) if still valid at `now`.
  const partitions::Tag* Lookup(std::span<const uint8_t> qname, uint32_t now) const {
    if (names_.empty()) return nullptr;
    auto it = names_.find(absl::string_view(reinterpret_cast<const char*>(qname.data()), qname.size()));
    if (it == names_.end() || it->second.expires <= now) return nullptr;
    return &it->second.tag;
  }
  size_t size() const { return names_.size(); }

  // A copy with `qname` learned and expired names dropped; nullptr when the
  // copy would hold more than `max_names` (the caller then does not learn).
  std::unique_ptr<const LearnedTags> With(std::span<const uint8_t> qname, const partitions::Tag& tag,
                                          uint32_t expires, uint32_t now, size_t max_names) const {
    auto next = std::make_unique<LearnedTags>();
    next->names_.reserve(names_.size() + 1);
    for (const auto& [k, v] : names_) {
      if (v.expires > now) next->names_.emplace(k, v);
    }
    if (next->names_.size() >= max_names) return nullptr;
    next->names_[std::string(reinterpret_cast<const char*>(qname.data()), qname.size())] = {tag, expires};
    return next;
  }

 private:
  absl::flat_hash_map<std::string, Learned> names_;
};

using LearnedTagsHolder = common::RcuSnapshot<LearnedTags>;

}  // namespace weir::fastpath
