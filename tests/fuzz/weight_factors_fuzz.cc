// Fuzzes the calibration factors' text (what weir-mgmt pushes to the nodes):
// any input is read or refused with every error listed, never a crash. What
// is accepted formats to a text that reads back equal and formats the same;
// its sets hold the documented rules (at most 64 addresses, each once, in
// order, factors in range); bound, every set is found under its partition
// and name, and its pick weights are 1..255 with digest 0 exactly when they
// are the GSLB's.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "weir/partitions/weight_factors.h"

namespace {

using weir::partitions::Partition;

// Cities named with a leading 'c' exist (their id from the name's length
// and first bytes); the others are not in the map.
std::optional<Partition> Resolve(std::string_view name) {
  if (name.empty() || name[0] != 'c') return std::nullopt;
  weir::partitions::PartitionId id = static_cast<weir::partitions::PartitionId>(name.size());
  for (char c : name.substr(0, 4)) id = static_cast<weir::partitions::PartitionId>(id * 31 + c);
  return weir::partitions::PartitionKey(weir::partitions::CacheLevel::kCity,
                                        id % weir::partitions::kMaxCities, {});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 65536) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  weir::common::LineErrors errors;
  auto f = weir::partitions::WeightFactors::FromText(text, &errors);
  FUZZ_CHECK(f.ok() == errors.empty());
  if (!f.ok()) {
    FUZZ_CHECK(f.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  const std::string formatted = f->Format();
  weir::common::LineErrors again_errors;
  auto again = weir::partitions::WeightFactors::FromText(formatted, &again_errors);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(*again == *f);
  FUZZ_CHECK(again->Format() == formatted);

  const weir::partitions::BoundWeightFactors bound = f->Bind(Resolve);
  FUZZ_CHECK(bound.size() + bound.unbound_sets() == f->size());
  size_t weight_byte = 0;
  for (const auto& [key, set] : f->sets()) {
    const auto addresses = set.addresses();
    FUZZ_CHECK(!addresses.empty() && addresses.size() <= weir::dns::kMaxWeightedAddresses);
    std::vector<uint8_t> weights;
    std::vector<double> factors;
    for (size_t i = 0; i < addresses.size(); ++i) {
      const weir::partitions::AddressFactor& a = addresses[i];
      FUZZ_CHECK(a.factor >= weir::partitions::kMinFactor && a.factor <= weir::partitions::kMaxFactor);
      if (i > 0) {
        const auto& p = addresses[i - 1].address;
        FUZZ_CHECK(p.family < a.address.family ||
                   (p.family == a.address.family && p.bytes < a.address.bytes));
      }
      const std::span<const uint8_t> rdata(a.address.bytes.data(), a.address.family == 4 ? 4 : 16);
      FUZZ_CHECK(set.Factor(rdata) == a.factor);
      // GSLB weights 1..255 from the input's bytes.
      weights.push_back(static_cast<uint8_t>(1 + data[weight_byte++ % size] % 255));
      factors.push_back(a.factor);
    }
    uint8_t out[weir::dns::kMaxWeightedAddresses];
    const uint64_t digest = weir::partitions::PickWeights(weights, factors, out);
    bool same = true;
    for (size_t i = 0; i < weights.size(); ++i) {
      FUZZ_CHECK(out[i] >= 1);
      same = same && out[i] == weights[i];
    }
    FUZZ_CHECK((digest == 0) == same);

    std::optional<Partition> p = key.partition == weir::partitions::kCommonPartitionName
                                     ? std::optional<Partition>(weir::partitions::kCommonPartition)
                                     : Resolve(key.partition);
    const weir::partitions::FactorSet* found = p.has_value() ? bound.Find(*p, key.name.span()) : nullptr;
    FUZZ_CHECK(p.has_value() == (found != nullptr));
    // Two city names may resolve to one partition here: the first set in
    // key order holds it.
    if (found != nullptr && *found != set) FUZZ_CHECK(bound.unbound_sets() > 0);
  }
  return 0;
}
