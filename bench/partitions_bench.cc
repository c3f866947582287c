// Micro-benchmarks for partitions/: city map, tag table, cache hits, SWRR
// answers, adaptive segment learns. Figures and commands are in bench/RESULTS.md ("partitions").
// Big tables are built once per process (function statics) so the ctest
// smoke run (--benchmark_min_time=0.001) stays short.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "weir/common/rcu.h"
#include "weir/dns/message.h"
#include "weir/dns/writer.h"
#include "weir/partitions/cache.h"
#include "weir/partitions/citymap.h"
#include "weir/partitions/segments.h"
#include "weir/partitions/swrr.h"
#include "weir/partitions/tagtable.h"
#include "weir/partitions/weight_factors.h"

namespace weir::partitions {
namespace {

using u128 = unsigned __int128;
constexpr size_t kLookupSet = 1 << 16;  // addresses / names cycled through

// ---------------------------------------------------------------- city map

struct CityBench {
  std::unique_ptr<const CityMap> map;
  std::vector<uint32_t> v4_inside, v4_uniform;
  std::vector<common::IpAddress> v6_inside;
};

// 50k prefixes per family, lengths like a carrier's: v4 /12../28 (most /16../24),
// v6 /32../64 under a handful of provider blocks; 500 cities.
const CityBench& GetCityBench() {
  static const CityBench* bench = [] {
    auto* b = new CityBench;
    std::mt19937_64 rng(1);
    std::vector<City> cities(500);
    for (size_t i = 0; i < cities.size(); ++i) cities[i].name = "city" + std::to_string(i);
    std::vector<CityPrefix> prefixes;
    std::set<std::pair<uint32_t, unsigned>> seen4;
    while (seen4.size() < 50000) {
      const unsigned len = 16 + rng() % 9 - (rng() % 8 == 0 ? 4 : 0) + (rng() % 16 == 0 ? 4 : 0);
      const uint32_t a = static_cast<uint32_t>(rng()) & (~0u << (32 - len));
      if (!seen4.insert({a, len}).second) continue;
      prefixes.push_back(
          {{common::IpAddress::V4(a), static_cast<uint8_t>(len)}, static_cast<PartitionId>(rng() % 499)});
    }
    std::vector<u128> blocks;
    for (int i = 0; i < 16; ++i)
      blocks.push_back((u128{0x2000 | (rng() & 0x1fff)} << 112) | (u128{rng() & 0xffff} << 96));
    std::set<std::pair<u128, unsigned>> seen6;
    std::vector<std::pair<u128, unsigned>> v6;
    while (seen6.size() < 50000) {
      const unsigned len = 32 + rng() % 33;
      u128 a = blocks[rng() % blocks.size()] | (((u128{rng()} << 64) | rng()) & (~u128{0} >> 32));
      a &= ~u128{0} << (128 - len);
      if (!seen6.insert({a, len}).second) continue;
      uint8_t bytes[16];
      for (int i = 0; i < 16; ++i) bytes[i] = static_cast<uint8_t>(a >> (120 - 8 * i));
      prefixes.push_back(
          {{common::IpAddress::V6(bytes), static_cast<uint8_t>(len)}, static_cast<PartitionId>(rng() % 499)});
      v6.push_back({a, len});
    }
    auto m = CityMap::Build(cities, prefixes, 499);
    if (!m.ok()) std::abort();
    b->map = *std::move(m);
    std::vector<std::pair<uint32_t, unsigned>> v4(seen4.begin(), seen4.end());
    for (size_t i = 0; i < kLookupSet; ++i) {
      const auto [a, len] = v4[rng() % v4.size()];
      b->v4_inside.push_back(a | (static_cast<uint32_t>(rng()) & ~(~0u << (32 - len))));
      b->v4_uniform.push_back(static_cast<uint32_t>(rng()));
      const auto [a6, len6] = v6[rng() % v6.size()];
      const u128 x = a6 | (((u128{rng()} << 64) | rng()) & ~(~u128{0} << (128 - len6)));
      uint8_t bytes[16];
      for (int j = 0; j < 16; ++j) bytes[j] = static_cast<uint8_t>(x >> (120 - 8 * j));
      b->v6_inside.push_back(common::IpAddress::V6(bytes));
    }
    return b;
  }();
  return *bench;
}

void BM_CityMapV4(benchmark::State& state) {
  const CityBench& b = GetCityBench();
  const std::vector<uint32_t>& addrs = state.range(0) == 0 ? b.v4_inside : b.v4_uniform;
  size_t i = 0;
  uint32_t sink = 0;
  for (auto _ : state) {
    sink += b.map->LookupV4(addrs[i]);
    i = (i + 1) & (kLookupSet - 1);
  }
  benchmark::DoNotOptimize(sink);
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(state.range(0) == 0 ? "inside prefixes" : "uniform random");
}
BENCHMARK(BM_CityMapV4)->Arg(0)->Arg(1);

void BM_CityMapV4Burst32(benchmark::State& state) {
  const CityBench& b = GetCityBench();
  const std::vector<uint32_t>& addrs = state.range(0) == 0 ? b.v4_inside : b.v4_uniform;
  size_t i = 0;
  PartitionId out[32];
  for (auto _ : state) {
    b.map->LookupV4Burst(&addrs[i], out, 32);
    benchmark::DoNotOptimize(out);
    i = (i + 32) & (kLookupSet - 1);
  }
  state.SetItemsProcessed(state.iterations() * 32);
  state.SetLabel(state.range(0) == 0 ? "inside prefixes" : "uniform random");
}
BENCHMARK(BM_CityMapV4Burst32)->Arg(0)->Arg(1);

void BM_CityMapV6(benchmark::State& state) {
  const CityBench& b = GetCityBench();
  size_t i = 0;
  uint32_t sink = 0;
  for (auto _ : state) {
    sink += b.map->LookupV6(b.v6_inside[i].bytes.data());
    i = (i + 1) & (kLookupSet - 1);
  }
  benchmark::DoNotOptimize(sink);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CityMapV6);

// The mixed-family burst API the fastpath uses for a recvmmsg batch, here on
// the same IPv6 addresses as BM_CityMapV6.
void BM_CityMapV6Burst32(benchmark::State& state) {
  const CityBench& b = GetCityBench();
  size_t i = 0;
  PartitionId out[32];
  for (auto _ : state) {
    b.map->LookupBurst(&b.v6_inside[i], out, 32);
    benchmark::DoNotOptimize(out);
    i = (i + 32) & (kLookupSet - 1);
  }
  state.SetItemsProcessed(state.iterations() * 32);
}
BENCHMARK(BM_CityMapV6Burst32);

// ---------------------------------------------------------------- tags

struct TagBench {
  std::unique_ptr<const TagTable> table;
  // Query names packed back to back, as they would sit in received packets.
  std::vector<uint8_t> arena;
  std::vector<std::pair<uint32_t, uint8_t>> qnames;  // offset, length
  // Label starts, as dns::ParseQuery gives them (dns::Query::qname_labels),
  // packed 8 per name (every bench name has fewer labels): the parsed
  // query's starts sit in a hot object, not in a 129-byte stride of DRAM.
  std::vector<std::array<uint8_t, 8>> labels;
  std::vector<std::span<const uint8_t>> label_spans;
};

// 100k tags "<word><i>.<tld>." / "cdn<i>.<word>.<tld>."; queries: 3-5 labels,
// half under a tag, half untagged.
const TagBench& GetTagBench(int ntags = 100000) {
  static std::map<int, const TagBench*> benches;
  const TagBench*& slot = benches[ntags];
  if (slot == nullptr)
    slot = [ntags] {
      auto* b = new TagBench;
      std::mt19937_64 rng(2);
      const char* tlds[] = {"com", "net", "cn", "org", "com.cn"};
      std::string text;
      std::vector<std::string> suffixes;
      for (int i = 0; i < ntags; ++i) {
        std::string s =
            (i % 2 ? "cdn" + std::to_string(i) + ".gslb" : "site" + std::to_string(i)) + "." + tlds[i % 5];
        suffixes.push_back(s);
        text += s + (i % 3 ? " weight=on ecs=on\n" : " weight=on\n");
      }
      auto t = TagTable::FromText(text);
      if (!t.ok()) std::abort();
      b->table = *std::move(t);
      b->labels.reserve(kLookupSet);  // (label_spans point into it)
      for (size_t i = 0; i < kLookupSet; ++i) {
        std::string q;
        if (i % 2 == 0) {
          q = "www.img" + std::to_string(rng() % 100) + "." + suffixes[rng() % suffixes.size()];
        } else {
          q = "www.host" + std::to_string(rng() % 1000000) + ".example." + tlds[rng() % 5];
        }
        dns::NameKey k;
        if (!dns::NameKeyFromText(q, &k)) std::abort();
        b->qnames.push_back({static_cast<uint32_t>(b->arena.size()), k.len});
        std::array<uint8_t, 8>& l = b->labels.emplace_back();
        size_t count = 0;
        for (size_t pos = 0;; pos += 1 + k.bytes[pos]) {
          if (count == l.size()) std::abort();
          l[count++] = static_cast<uint8_t>(pos);
          if (k.bytes[pos] == 0) break;
        }
        b->label_spans.emplace_back(l.data(), count);
        b->arena.insert(b->arena.end(), k.bytes.begin(), k.bytes.begin() + k.len);
      }
      return b;
    }();
  return *slot;
}

// range(0): tags; range(1): 1 = with the label starts the parser found (as
// the fastpath looks up), 0 = the lookup walks the name.
void BM_TagTableLookup(benchmark::State& state) {
  const TagBench& b = GetTagBench(static_cast<int>(state.range(0)));
  const bool parsed = state.range(1) != 0;
  size_t i = 0, found = 0;
  for (auto _ : state) {
    const auto [off, len] = b.qnames[i];
    found += b.table->Lookup({b.arena.data() + off, len},
                             parsed ? b.label_spans[i] : std::span<const uint8_t>()) != nullptr;
    i = (i + 1) & (kLookupSet - 1);
  }
  benchmark::DoNotOptimize(found);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TagTableLookup)->ArgsProduct({{100000, 1000}, {0, 1}});

void BM_TagTableLookupBurst32(benchmark::State& state) {
  const TagBench& b = GetTagBench(static_cast<int>(state.range(0)));
  std::vector<std::span<const uint8_t>> names;
  for (const auto& [off, len] : b.qnames) names.emplace_back(b.arena.data() + off, len);
  const Tag* out[32];
  size_t i = 0, found = 0;
  const bool parsed = state.range(1) != 0;
  for (auto _ : state) {
    b.table->LookupBurst(&names[i], parsed ? &b.label_spans[i] : nullptr, out, 32);
    for (const Tag* t : out) found += t != nullptr;
    i = (i + 32) & (kLookupSet - 1);
  }
  benchmark::DoNotOptimize(found);
  state.SetItemsProcessed(state.iterations() * 32);
}
BENCHMARK(BM_TagTableLookupBurst32)->ArgsProduct({{100000, 1000}, {0, 1}});

// ---------------------------------------------------------------- cache

std::vector<uint8_t> V4Bytes(uint32_t a) {
  return {uint8_t(a >> 24), uint8_t(a >> 16), uint8_t(a >> 8), uint8_t(a)};
}

CacheEntryPtr MakeEntry(Partition p, const dns::NameKey& q, uint32_t now) {
  CacheEntryBuilder b({p, q.span(), dns::type::kA});
  for (uint32_t a = 1; a <= 4; ++a) b.AddAddress(q.span(), V4Bytes(0x0a000000 + a), 3600);
  const uint8_t w[] = {10, 20, 30, 40};
  b.SetWeights(w);
  return *b.Build(EntryKind::kPositive, now);
}

struct CacheBench {
  common::FakeClock clock{1000};
  std::unique_ptr<Cache> cache;
  std::vector<dns::NameKey> names;
  std::vector<Partition> parts;
  double bytes_per_entry = 0;
  double mapped_bytes_per_entry = 0;  // slab chunks (partly used ones included) + index
};

// 1M weighted entries (4 A records each), 1000 city partitions x 1000 names.
const CacheBench& GetCacheBench() {
  static CacheBench* bench = [] {
    auto* b = new CacheBench;
    b->cache = std::make_unique<Cache>(CacheOptions{.byte_budget = size_t{1} << 30, .initial_slots = 1 << 21},
                                       b->clock);
    for (int i = 0; i < 1000; ++i) {
      dns::NameKey k;
      dns::NameKeyFromText("img" + std::to_string(i) + ".cdn.example.com", &k);
      b->names.push_back(k);
    }
    for (PartitionId c = 0; c < 1000; ++c) b->parts.push_back(PartitionKey(CacheLevel::kCity, c, {}));
    for (Partition p : b->parts) {
      for (const auto& n : b->names) b->cache->Insert(MakeEntry(p, n, b->clock.NowSeconds()));
    }
    const CacheStats s = b->cache->stats();
    b->bytes_per_entry = double(s.bytes) / double(s.entries);
    b->mapped_bytes_per_entry = double(s.slab_bytes + s.index_bytes) / double(s.entries);
    return b;
  }();
  return *bench;
}

// Key indices (partition * 1000 + name) for lookups: uniform over all 1M
// entries (the worst case: every lookup misses the CPU caches), or Zipf
// (s = 1) over a random permutation of them, the usual shape of DNS
// popularity.
std::vector<std::pair<uint16_t, uint16_t>> LookupKeys(bool zipf, uint64_t seed) {
  static const std::vector<double>* cdf = [] {
    auto* c = new std::vector<double>(1000000);
    double sum = 0;
    for (size_t i = 0; i < c->size(); ++i) (*c)[i] = sum += 1.0 / double(i + 1);
    for (double& x : *c) x /= sum;
    return c;
  }();
  static const std::vector<uint32_t>* perm = [] {
    auto* p = new std::vector<uint32_t>(1000000);
    for (uint32_t i = 0; i < p->size(); ++i) (*p)[i] = i;
    std::shuffle(p->begin(), p->end(), std::mt19937_64(9));
    return p;
  }();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<std::pair<uint16_t, uint16_t>> keys(kLookupSet);
  for (auto& k : keys) {
    uint32_t idx = static_cast<uint32_t>(rng() % 1000000);
    if (zipf) idx = (*perm)[std::lower_bound(cdf->begin(), cdf->end(), u(rng)) - cdf->begin()];
    k = {static_cast<uint16_t>(idx / 1000), static_cast<uint16_t>(idx % 1000)};
  }
  return keys;
}

void BM_CacheHit(benchmark::State& state) {
  const CacheBench& b = GetCacheBench();
  common::RcuThread rcu;
  const auto keys = LookupKeys(state.range(0) == 1, 3 + state.thread_index());
  size_t i = 0, hits = 0;
  const uint32_t now = b.clock.NowSeconds();
  for (auto _ : state) {
    const auto [p, n] = keys[i];
    Freshness f;
    const CacheKey key{b.parts[p], b.names[n].span(), dns::type::kA};
    hits += b.cache->Find(key, now, &f) != nullptr;
    i = (i + 1) & (kLookupSet - 1);
    if ((i & 31) == 0) rcu.Quiescent();
  }
  if (hits != static_cast<size_t>(state.iterations())) state.SkipWithError("miss in a hit benchmark");
  state.SetItemsProcessed(state.iterations());
  state.counters["bytes_per_entry"] = benchmark::Counter(b.bytes_per_entry, benchmark::Counter::kAvgThreads);
  state.counters["mapped_bytes_per_entry"] =
      benchmark::Counter(b.mapped_bytes_per_entry, benchmark::Counter::kAvgThreads);
  state.SetLabel(state.range(0) == 1 ? "zipf" : "uniform");
}
BENCHMARK(BM_CacheHit)->Arg(0)->Arg(1)->Threads(1)->Threads(2)->UseRealTime();

// An operator's flush of one name (weirctl cache flush NAME): the whole
// index of the 1M-entry cache is walked, in steps of 4096 slots under the
// writer lock. The name is not cached, so the cache is left as it is; the
// time is the walk's. `lock_hold_us`: one step, the longest an insert waits.
void BM_CacheFlushWalk(benchmark::State& state) {
  const CacheBench& b = GetCacheBench();
  Cache& cache = *b.cache;
  dns::NameKey absent;
  dns::NameKeyFromText("absent.example.org", &absent);
  size_t erased = 0;
  double seconds = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    erased += cache.EraseMatching([&](const CacheEntry& e) {
      return e.qname().size() == absent.len &&
             std::memcmp(e.qname().data(), absent.bytes.data(), absent.len) == 0;
    });
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  if (erased != 0) state.SkipWithError("the absent name was cached");
  const CacheStats st = cache.stats();
  const double steps = double(st.index_slots / 7 * 8) / 4096.0;
  state.counters["slots"] = double(st.index_slots);
  state.counters["lock_hold_us"] = seconds * 1e6 / (steps * double(state.iterations()));
}
BENCHMARK(BM_CacheFlushWalk)->Unit(benchmark::kMillisecond)->UseRealTime();

// The fast path's shape: hash and prefetch a burst of 32, then look up.
void BM_CacheHitBurst32(benchmark::State& state) {
  const CacheBench& b = GetCacheBench();
  common::RcuThread rcu;
  std::vector<CacheKey> keys;
  for (const auto& [p, n] : LookupKeys(state.range(0) == 1, 5 + state.thread_index())) {
    keys.push_back({b.parts[p], b.names[n].span(), dns::type::kA});
  }
  size_t i = 0, hits = 0;
  const uint32_t now = b.clock.NowSeconds();
  uint64_t hashes[32];
  const CacheEntry* out[32];
  Freshness fresh[32];
  for (auto _ : state) {
    for (int j = 0; j < 32; ++j) hashes[j] = HashCacheKey(keys[i + j]);
    b.cache->FindBurst(&keys[i], hashes, 32, now, out, fresh);
    for (int j = 0; j < 32; ++j) hits += out[j] != nullptr;
    i = (i + 32) & (kLookupSet - 1);
    rcu.Quiescent();
  }
  if (hits != static_cast<size_t>(state.iterations()) * 32) state.SkipWithError("miss in a hit benchmark");
  state.SetItemsProcessed(state.iterations() * 32);
  state.SetLabel(state.range(0) == 1 ? "zipf" : "uniform");
}
BENCHMARK(BM_CacheHitBurst32)->Arg(0)->Arg(1)->Threads(1)->Threads(2)->UseRealTime();

// ---------------------------------------------------------------- SWRR

// Pick + write the answer (single or ordered mode) for N hot weighted names
// picked in turn: 1,024 (the states in L2) or 100,000 (a carrier's hot set
// per worker: every state a cache miss).
std::string HotName(size_t i) { return "img" + std::to_string(i) + ".cdn.example.com"; }

// `names` weighted entries of city 1, HotName(i) each.
std::vector<CacheEntryPtr> HotEntries(size_t names) {
  std::vector<CacheEntryPtr> entries;
  for (size_t i = 0; i < names; ++i) {
    dns::NameKey k;
    dns::NameKeyFromText(HotName(i), &k);
    entries.push_back(MakeEntry(PartitionKey(CacheLevel::kCity, 1, {}), k, 1000));
  }
  return entries;
}

// Third argument 1: calibrate=on names, the factor set's lookup (name,
// partition) and the pick weights (weight x factor) before each pick, as the
// fastpath's handler does; every address of every name has a factor.
void BM_SwrrPickAndWrite(benchmark::State& state) {
  const size_t names = static_cast<size_t>(state.range(1));
  const bool calibrated = state.range(2) != 0;
  const std::vector<CacheEntryPtr> entries = HotEntries(names);
  BoundWeightFactors bound;
  if (calibrated) {
    std::string text;
    for (size_t i = 0; i < names; ++i) {
      for (uint32_t a = 1; a <= 4; ++a)
        text += HotName(i) + " city-1 10.0.0." + std::to_string(a) + " 1." + std::to_string(a) + "\n";
    }
    auto parsed = WeightFactors::FromText(text);
    if (!parsed.ok()) return state.SkipWithError(std::string(parsed.status().message()).c_str());
    bound = parsed->Bind(
        [](std::string_view) -> std::optional<Partition> { return PartitionKey(CacheLevel::kCity, 1, {}); });
  }
  SwrrTable swrr;
  const AnswerMode mode = state.range(0) == 0 ? AnswerMode::kSingle : AnswerMode::kOrdered;
  uint8_t buf[512];
  size_t i = 0, bytes = 0;
  for (auto _ : state) {
    AnswerWrite w;
    const CacheEntry& e = *entries[i];
    const FactorSet* f = calibrated ? bound.Find(e.partition(), e.qname()) : nullptr;
    WriteAnswer(e, mode, swrr, AnswerTtl::Aged(10), buf, sizeof buf, &w, nullptr, f);
    bytes += w.bytes;
    benchmark::DoNotOptimize(buf);
    if (++i == names) i = 0;
  }
  benchmark::DoNotOptimize(bytes);
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(std::string(mode == AnswerMode::kSingle ? "single" : "ordered") +
                 (calibrated ? " calibrated" : ""));
  state.counters["swrr_evictions"] = static_cast<double>(swrr.evictions());
}
BENCHMARK(BM_SwrrPickAndWrite)
    ->Args({0, 1024, 0})
    ->Args({1, 1024, 0})
    ->Args({0, 100000, 0})
    ->Args({0, 1024, 1})
    ->Args({1, 1024, 1})
    ->Args({0, 100000, 1});

// ------------------------------------------------------- adaptive segments

// SegmentTable::Learn on the forwarder for one name holding range(0)
// segments (every other /24, so none merge): range(1) 0, the same answer
// again (a refresh, the steady state's learn); 1, another answer for one
// of them each time (a change: the set is copied and republished).
void BM_SegmentLearn(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const bool change = state.range(1) != 0;
  common::RcuThread rcu;
  SegmentTable table(16, n + 16);
  dns::NameKey name;
  dns::NameKeyFromText("hot.seg.example", &name);
  auto subnet = [](size_t i) {
    common::IpAddress a;
    a.family = 4;
    const uint32_t v = (uint32_t{10} << 24) + static_cast<uint32_t>(2 * i) * 256;
    a.bytes[0] = static_cast<uint8_t>(v >> 24);
    a.bytes[1] = static_cast<uint8_t>(v >> 16);
    a.bytes[2] = static_cast<uint8_t>(v >> 8);
    return SubnetEcs(a);
  };
  std::vector<dns::ClientSubnet> subnets;
  for (size_t i = 0; i < n; ++i) subnets.push_back(subnet(i));
  for (size_t i = 0; i < n; ++i) table.Learn(name, dns::type::kA, subnets[i], 24, 1 + i % 7, 60, 1000, n);
  size_t i = 0;
  uint32_t now = 1000;
  for (auto _ : state) {
    const uint64_t fp = change ? 100 + (now & 1) : 1 + i % 7;
    benchmark::DoNotOptimize(table.Learn(name, dns::type::kA, subnets[i], 24, fp, 60, now, n));
    if (++i == n) {
      i = 0;
      ++now;
    }
    if (change) rcu.Quiescent();
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(change ? "change" : "refresh");
  state.counters["refreshed"] = static_cast<double>(table.stats().refreshed.Read());
}
BENCHMARK(BM_SegmentLearn)->ArgsProduct({{256, 9000}, {0, 1}});

}  // namespace
}  // namespace weir::partitions

BENCHMARK_MAIN();
