// Traffic-share calibration factors at the front (docs/calibration.md):
// weir-mgmt's calibrator keeps a correction factor per (name, partition,
// address) and pushes them to the nodes; a weighted pick uses GSLB weight x
// factor, while the weights reported downstream (the weight option) stay
// the GSLB's.
//
// Text format (what weir-mgmt pushes), one address per line, '#' comments
// and blank lines allowed, fields separated by spaces or tabs:
//   NAME PARTITION ADDRESS FACTOR
//   cdn.example.com common 192.0.2.1 1.25
//   cdn.example.com beijing 2001:db8::1 0.8
// NAME is a host name (letters, digits, '-', '_'; any case, trailing dot
// optional), PARTITION `common` (level global) or a city name (1 to 64 of
// A-Z a-z 0-9 _ . -), ADDRESS an IPv4 or IPv6 address, FACTOR a finite
// decimal in [kMinFactor, kMaxFactor]. A (name, partition) set holds at most
// dns::kMaxWeightedAddresses addresses, each once.
//
// Two forms: WeightFactors is the parsed text, partitions named as text
// (the control plane's, built when a push arrives); BoundWeightFactors is
// that text bound to the partitions of the current city map, the immutable
// table the hit path reads. A new city map means a new Bind.
//
// Threading: both are immutable once built; any number of threads read them
// concurrently. The hit path reaches the current BoundWeightFactors through
// an RCU snapshot (common::RcuSnapshot) that a push or a city map change
// swaps. FactorSet::Find, Factor and PickWeights never allocate, lock or
// throw.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "weir/common/ip.h"
#include "weir/common/line_errors.h"
#include "weir/dns/message.h"
#include "weir/partitions/cache.h"
#include "weir/partitions/partition.h"

namespace weir::partitions {

// The bounds of a factor: the calibrator's own range (mgmt's
// CalibrationOptions: 0 < min_factor <= 1 <= max_factor <= 100) with room
// below, so that a push it may make is never refused here.
inline constexpr double kMinFactor = 0.001;
inline constexpr double kMaxFactor = 100;
// The partition name of level global.
inline constexpr std::string_view kCommonPartitionName = "common";

// One address of a set and its factor.
struct AddressFactor {
  common::IpAddress address;
  double factor = 1.0;
  friend bool operator==(const AddressFactor&, const AddressFactor&) = default;
};

// The pick weights of an RRset from its GSLB weights and one factor per
// address (factors[i] for weights[i]; weights.size() == factors.size() <=
// dns::kMaxWeightedAddresses, else `out` gets the weights unchanged).
// When every factor is exactly 1, `out` receives the weights unchanged and
// the result is 0. Otherwise eff_i = weights[i] x factors[i] is scaled so
// that the largest is 255, rounded to nearest and floored at 1: each ratio
// eff_i / eff_max holds to within 0.5/255 (rounding), except that an
// address below 1/510 of the largest still gets weight 1 (SWRR needs every
// address at least once per window). The result is then a digest of the
// pick weights (never 0), which the caller mixes into the SWRR fingerprint
// (MixPickDigest) so that a changed factor restarts the sequence; 0 again
// when the scaled weights equal the GSLB's, so the entry's sequence goes on.
// No allocation.
uint64_t PickWeights(std::span<const uint8_t> weights, std::span<const double> factors, uint8_t* out);

// The fingerprint a weighted pick uses: the entry's while the pick weights
// are the GSLB's (digest 0), another one per set of pick weights.
inline uint64_t MixPickDigest(uint64_t fingerprint, uint64_t digest) {
  return digest == 0 ? fingerprint : common::Mix64(fingerprint ^ digest);
}

// The factors of one (name, partition): addresses sorted by family, then
// bytes; each address once.
class FactorSet {
 public:
  std::span<const AddressFactor> addresses() const { return addresses_; }

  // The factor of the address whose RDATA is `rdata` (4 bytes: IPv4, 16:
  // IPv6); 1 for an address not in the set. Binary search, no allocation.
  // `known`, when given, is incremented when the address is in the set.
  double Factor(std::span<const uint8_t> rdata, size_t* known = nullptr) const;

  // PickWeights (above) for the address RRset of a cached entry: its
  // addresses' factors from this set, its weights. When the entry's
  // addresses are not exactly the set's addresses of their family (the
  // GSLB changed the set since the feedback), the GSLB's weights (and 0).
  // `out` has room for e.address_count() weights.
  uint64_t PickWeights(const CacheEntry& e, uint8_t* out) const;

  // A hash of the addresses and factors (never 0): the same for the same
  // content, whichever push it came with.
  uint64_t digest() const { return digest_; }

  friend bool operator==(const FactorSet&, const FactorSet&) = default;

 private:
  friend class WeightFactors;
  std::vector<AddressFactor> addresses_;
  uint64_t digest_ = 1;
};

// A set's key in the text: the name's canonical key and the partition's name.
struct FactorSetKey {
  dns::NameKey name;
  std::string partition;
  friend bool operator<(const FactorSetKey& a, const FactorSetKey& b);
  friend bool operator==(const FactorSetKey& a, const FactorSetKey& b) {
    return a.name == b.name && a.partition == b.partition;
  }
};

class BoundWeightFactors;

// The parsed text. Control plane only.
class WeightFactors {
 public:
  // Every bad line of `text` is added to `errors` (a bad field, a wrong
  // field count, an address twice in a set, a set over
  // dns::kMaxWeightedAddresses addresses); any error refuses the whole text
  // with the first one ("line N: reason").
  static absl::StatusOr<WeightFactors> FromText(std::string_view text, common::LineErrors* errors);
  static absl::StatusOr<WeightFactors> FromText(std::string_view text);

  // The canonical text, which FromText reads back equal: sets in key order
  // (wire name, then partition), addresses in order, names lower case with
  // the trailing dot, factors in their shortest exact form.
  std::string Format() const;

  // The sets for the partitions `resolve` knows: it is asked for every
  // partition name but `common` (always kCommonPartition) and returns the
  // partition as PartitionKey gives it, or nullopt for a city the current
  // city map lacks. A set that does not bind, or whose partition an earlier
  // set (in key order) already took, is left out and counted.
  BoundWeightFactors Bind(
      const std::function<std::optional<Partition>(std::string_view partition_name)>& resolve) const;

  const std::map<FactorSetKey, FactorSet>& sets() const { return sets_; }
  size_t size() const { return sets_.size(); }
  bool empty() const { return sets_.empty(); }

  friend bool operator==(const WeightFactors&, const WeightFactors&) = default;

 private:
  std::map<FactorSetKey, FactorSet> sets_;
};

// The factors the hit path looks up, by (partition, canonical qname).
class BoundWeightFactors {
 public:
  // The set of `qname` (a canonical key, as CacheEntry::qname) in partition
  // `p`, or nullptr. No allocation.
  const FactorSet* Find(Partition p, std::span<const uint8_t> qname) const;

  bool empty() const { return sets_.empty(); }
  size_t size() const { return sets_.size(); }
  // Sets of the text left out by Bind.
  size_t unbound_sets() const { return unbound_sets_; }

 private:
  friend class WeightFactors;
  struct Key {
    Partition partition;
    std::string qname;  // canonical key bytes
  };
  struct KeyView {
    Partition partition;
    std::span<const uint8_t> qname;
  };
  // Transparent, so that Find looks up a view without building a Key.
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(const KeyView& k) const;
    size_t operator()(const Key& k) const;
  };
  struct KeyEq {
    using is_transparent = void;
    static KeyView View(const Key& k);
    static const KeyView& View(const KeyView& k) { return k; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      const KeyView x = View(a), y = View(b);
      return x.partition == y.partition && x.qname.size() == y.qname.size() &&
             std::equal(x.qname.begin(), x.qname.end(), y.qname.begin());
    }
  };

  absl::flat_hash_map<Key, FactorSet, KeyHash, KeyEq> sets_;
  size_t unbound_sets_ = 0;
};

}  // namespace weir::partitions
