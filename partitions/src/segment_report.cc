#include "weir/partitions/segment_report.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "weir/common/hash.h"
#include "weir/common/text.h"

namespace weir::partitions {
namespace {

std::string V4Text(uint32_t addr, int len) {
  common::IpAddress a = common::IpAddress::V4(addr);
  return common::Cat(common::IpToString(a), "/", len);
}

// The /24 numbers [first, last] as the fewest aligned prefixes.
void AddPrefixes(uint32_t first, uint32_t last, std::vector<std::pair<uint32_t, int>>* out) {
  uint64_t at = first;
  while (at <= last) {
    int bits = 0;  // of /24 numbers the block spans: 2^bits
    while (bits < 24 && (at & ((uint64_t{1} << (bits + 1)) - 1)) == 0 &&
           at + (uint64_t{1} << (bits + 1)) - 1 <= last) {
      ++bits;
    }
    out->emplace_back(static_cast<uint32_t>(at) << 8, 24 - bits);
    at += uint64_t{1} << bits;
  }
}

}  // namespace

absl::StatusOr<SegmentDiff> DiffSegments(const SegmentTable& table, const CityMap& citymap,
                                         const SegmentDiffOptions& options) {
  SegmentDiff diff;
  // The names studied: asked for, or the ones with the most segments.
  std::vector<const SegmentSet*> sets;
  table.ForEach([&](const SegmentSet& s) {
    if (s.segments().empty()) return;
    if (!options.names.empty()) {
      const bool wanted = std::any_of(options.names.begin(), options.names.end(), [&](const dns::NameKey& n) {
        return n.len == s.qname().len && std::memcmp(n.bytes.data(), s.qname().bytes.data(), n.len) == 0;
      });
      if (!wanted) return;
    }
    sets.push_back(&s);
  });
  if (options.names.empty() && sets.size() > options.max_names) {
    std::partial_sort(
        sets.begin(), sets.begin() + static_cast<std::ptrdiff_t>(options.max_names), sets.end(),
        [](const SegmentSet* a, const SegmentSet* b) { return a->segments().size() > b->segments().size(); });
    sets.resize(options.max_names);
  }
  diff.names = sets.size();

  // Every IPv4 /24 of the city map, once, with the city the map gives it.
  std::vector<uint32_t> slash24s;
  for (const CityPrefix& p : citymap.prefixes()) {
    if (p.cidr.address.family != 4) continue;
    const uint32_t base = dns::Load32(p.cidr.address.bytes.data()) >> 8;
    const uint64_t n = p.cidr.prefix >= 24 ? 1 : uint64_t{1} << (24 - p.cidr.prefix);
    if (slash24s.size() + n > options.max_slash24s) {
      return absl::ResourceExhaustedError(common::Cat("the city map holds more than ", options.max_slash24s,
                                                      " IPv4 /24s: name the names to compare (--name)"));
    }
    for (uint64_t i = 0; i < n; ++i) slash24s.push_back(base + static_cast<uint32_t>(i));
  }
  std::sort(slash24s.begin(), slash24s.end());
  slash24s.erase(std::unique(slash24s.begin(), slash24s.end()), slash24s.end());

  // Each /24's signature: the answers of the segments holding it, per name.
  struct Slash24 {
    uint32_t n;  // the /24's number (address >> 8)
    PartitionId city;
    uint64_t sig;  // 0: no segment learned holds it
  };
  std::vector<Slash24> rows;
  rows.reserve(slash24s.size());
  for (const uint32_t n : slash24s) {
    const SegmentAddress a{4, uint64_t{n} << 40};
    uint64_t sig = 0;
    for (size_t i = 0; i < sets.size(); ++i) {
      const Segment* s = sets[i]->Match(a);
      if (s != nullptr) sig = common::HashWords(sig ^ (i + 1) * common::kGolden64, s->fingerprint) | 1;
    }
    rows.push_back({n, citymap.LookupV4(n << 8), sig});
  }

  // Cells: (city, signature) -> their /24s.
  std::map<std::pair<PartitionId, uint64_t>, std::vector<uint32_t>> cells;
  std::map<PartitionId, SegmentDiff::City> cities;
  for (const Slash24& r : rows) {
    SegmentDiff::City& c = cities[r.city];
    c.city = r.city;
    ++c.slash24s;
    if (r.sig != 0) ++c.learned;
    cells[{r.city, r.sig}].push_back(r.n);
  }
  // Each learned cell's ECS source: its first /24 (before the unlearned
  // ones join it: the GSLB answered that one for the cell).
  std::map<std::pair<PartitionId, uint64_t>, uint32_t> first_learned;
  for (const auto& [key, list] : cells) first_learned[key] = list.front();
  // /24s no segment covers join their city's largest learned cell.
  std::map<PartitionId, uint64_t> largest;
  for (const auto& [key, list] : cells) {
    if (key.second == 0) continue;
    auto it = largest.find(key.first);
    if (it == largest.end() || cells[{key.first, it->second}].size() < list.size())
      largest[key.first] = key.second;
  }
  for (auto it = cells.begin(); it != cells.end();) {
    if (it->first.second == 0 && largest.contains(it->first.first)) {
      std::vector<uint32_t>& into = cells[{it->first.first, largest[it->first.first]}];
      into.insert(into.end(), it->second.begin(), it->second.end());
      std::sort(into.begin(), into.end());
      it = cells.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& [key, list] : cells) {
    if (key.second != 0) ++cities[key.first].cells;
  }
  for (const auto& [id, c] : cities) diff.cities.push_back(c);

  // Cities that are one cell with the same signature: one for the GSLB.
  absl::flat_hash_map<uint64_t, std::vector<PartitionId>> by_sig;
  for (const auto& [key, list] : cells) {
    if (key.second != 0 && cities[key.first].cells == 1) by_sig[key.second].push_back(key.first);
  }
  for (auto& [sig, ids] : by_sig) {
    if (ids.size() < 2) continue;
    std::sort(ids.begin(), ids.end());
    diff.alike.push_back(ids);
  }
  std::sort(diff.alike.begin(), diff.alike.end());

  // The proposal: a city per cell, one per group of alike cities. A split
  // city's largest cell keeps its name, the others are city.2, city.3, ...
  // by size.
  std::map<std::pair<PartitionId, uint64_t>, int> part;
  {
    std::map<PartitionId, std::vector<std::pair<size_t, uint64_t>>> by_city;
    for (const auto& [key, list] : cells) {
      if (key.second != 0) by_city[key.first].emplace_back(list.size(), key.second);
    }
    for (auto& [id, v] : by_city) {
      std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      for (size_t i = 0; i < v.size(); ++i) part[{id, v[i].second}] = static_cast<int>(i + 1);
    }
  }
  for (const auto& [key, list] : cells) {
    const auto [id, sig] = key;
    std::string name = citymap.city(id).name;
    if (cities[id].cells > 1 && sig != 0) {
      const int k = part[key];
      if (k > 1) name = common::Cat(name, ".", k);
    } else if (sig != 0 && cities[id].cells == 1) {
      const std::vector<PartitionId>& group = by_sig[sig];
      if (group.size() > 1) {
        // City names are [A-Za-z0-9_.-], at most 64 characters.
        name.clear();
        for (const PartitionId g : group) name += (name.empty() ? "" : "_") + citymap.city(g).name;
        if (name.size() > 64)
          name = common::Cat(citymap.city(group.front()).name.substr(0, 48), "_", group.size(), "cities");
      }
    }
    std::vector<std::pair<uint32_t, int>> prefixes;
    for (size_t i = 0; i < list.size();) {
      size_t j = i;
      while (j + 1 < list.size() && list[j + 1] == list[j] + 1) ++j;
      AddPrefixes(list[i], list[j], &prefixes);
      i = j + 1;
    }
    // Alike cities share the first city's ECS source.
    const uint32_t ecs = by_sig.contains(sig) && by_sig[sig].size() > 1 && sig != 0
                             ? first_learned[{by_sig[sig].front(), sig}]
                             : first_learned[key];
    for (const auto& [addr, len] : prefixes)
      diff.proposal.push_back({V4Text(addr, len), name, V4Text(ecs << 8, 24)});
  }
  // What the comparison does not cut (IPv6, IPv4 longer than /24): the
  // city map's own lines, unchanged.
  for (const CityPrefix& p : citymap.prefixes()) {
    if (p.cidr.address.family == 4 && p.cidr.prefix <= 24) continue;
    const City& c = citymap.city(p.city);
    const dns::ClientSubnet& e = c.EcsFor(p.cidr.address.family);
    std::string ecs;
    if (e.family != 0) {
      common::IpAddress a;
      a.family = e.family == dns::kEcsFamilyIpv4 ? 4 : 6;
      std::memcpy(a.bytes.data(), e.address.data(), a.family == 4 ? 4 : 16);
      ecs = common::Cat(common::IpToString(a), "/", int{e.source_prefix});
    }
    diff.proposal.push_back(
        {common::Cat(common::IpToString(p.cidr.address), "/", int{p.cidr.prefix}), c.name, ecs});
  }
  return diff;
}

}  // namespace weir::partitions
