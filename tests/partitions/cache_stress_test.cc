// Concurrency stress: reader threads look up, validate and answer from the
// cache (and the city map / tag table holders) while a writer inserts,
// refreshes, erases, evicts over budget and expires, and a control thread
// swaps snapshots. Meant to run under ThreadSanitizer (build with
// -DWEIR_TSAN=ON) or ASan (-DWEIR_SANITIZE=ON): no torn entries, no
// use-after-free, readers always make progress.
//
// Duration: WEIR_STRESS_SECONDS (default 10).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>

#include "test_util.h"
#include "weir/common/rcu.h"
#include "weir/partitions/cache.h"
#include "weir/partitions/citymap.h"
#include "weir/partitions/swrr.h"
#include "weir/partitions/tagtable.h"

namespace weir::partitions {
namespace {

using testing::Key;
using testing::V4;

constexpr size_t kNames = 20000;
constexpr size_t kPartitions = 4;

int StressSeconds() {
  const char* s = std::getenv("WEIR_STRESS_SECONDS");
  return s != nullptr && std::atoi(s) > 0 ? std::atoi(s) : 10;
}

// Content is a function of (key index, version), so a reader can check that
// every byte of an entry belongs to one and the same version.
CacheEntryPtr MakeVersioned(const std::vector<dns::NameKey>& names, size_t key, uint32_t version,
                            uint32_t now) {
  const size_t name = key % kNames;
  const Partition part = PartitionKey(CacheLevel::kCity, static_cast<PartitionId>(key / kNames), {});
  CacheKey k{part, names[name].span(), dns::type::kA};
  CacheEntryBuilder b(k);
  const size_t n = 1 + version % 8;
  std::vector<uint8_t> w;
  for (size_t i = 0; i < n; ++i) {
    b.AddAddress(names[name].span(), V4(static_cast<uint32_t>(key << 12 | (version & 0xff) << 4 | i)),
                 1 + version % 20);
    w.push_back(static_cast<uint8_t>((version + i) % 255 + 1));
  }
  b.SetWeights(w);
  auto e = b.Build(EntryKind::kPositive, now);
  return e.ok() ? *std::move(e) : nullptr;
}

// Returns an empty string when the entry is whole.
std::string Validate(const CacheEntry& e, size_t key, const CacheKey& k) {
  if (e.partition() != k.partition) return "partition";
  if (e.qname().size() != k.qname.size() || !std::equal(k.qname.begin(), k.qname.end(), e.qname().begin())) {
    return "qname";
  }
  const size_t n = e.address_count();
  if (n < 1 || n > 8 || e.address_record_size() != 16 || e.chain_bytes() != 0) return "layout";
  const uint8_t* rec = e.records().data();
  const uint32_t first = dns::Load32(rec + 12);
  const uint32_t version_byte = (first >> 4) & 0xff;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t a = dns::Load32(rec + i * 16 + 12);
    if ((a >> 12) != key || ((a >> 4) & 0xff) != version_byte || (a & 0xf) != i) return "address";
    if (dns::Load16(rec + i * 16) != (0xc000 | dns::kHeaderSize)) return "owner";
    // Weights and count are functions of the version (mod 256 here).
    if (e.weights()[i] == 0) return "weight";
  }
  // 256 is a multiple of 8, so the count follows from the version's low byte.
  if (n != 1 + version_byte % 8) return "count";
  return "";
}

TEST(CacheStress, ReadersWriterAndSnapshotSwaps) {
  const int seconds = StressSeconds();
  common::FakeClock clock(1000);
  Cache cache({.byte_budget = 512 << 10, .stale_window = 2, .initial_slots = 64}, clock);
  std::vector<dns::NameKey> names;
  for (size_t i = 0; i < kNames; ++i) names.push_back(Key("n" + std::to_string(i) + ".cdn.example.net"));

  auto csv_a = CityMap::FromCsv("10.0.0.0/8,a,192.0.2.0\n2001:db8::/32,a,\n");
  auto csv_b = CityMap::FromCsv("10.0.0.0/8,b,198.51.100.0\n10.1.0.0/16,c,\n");
  ASSERT_TRUE(csv_a.ok() && csv_b.ok());
  CityMapHolder cities(*std::move(csv_a));
  auto tags0 = TagTable::FromText("cdn.example.net weight=on ecs=on\n");
  ASSERT_TRUE(tags0.ok());
  TagTableHolder tags(*std::move(tags0));

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> failures{0};
  const int readers = std::max(2u, std::thread::hardware_concurrency());
  std::vector<uint64_t> bursts(readers, 0), hits(readers, 0), max_burst_ns(readers, 0);
  std::vector<std::thread> threads;

  for (int r = 0; r < readers; ++r) {
    threads.emplace_back([&, r] {
      common::RcuThread rcu;
      SwrrTable swrr(1024);
      std::mt19937_64 rng(100 + r);
      uint8_t buf[512];
      while (!stop.load(std::memory_order_relaxed)) {
        const auto t0 = std::chrono::steady_clock::now();
        const uint32_t now = clock.NowSeconds();
        const CityMap* map = cities.Get();
        const TagTable* tt = tags.Get();
        // Half the bursts go through FindBurst (the fast path's shape).
        size_t keys[32];
        CacheKey ks[32];
        uint64_t hashes[32];
        const CacheEntry* found[32];
        Freshness fresh[32];
        for (int i = 0; i < 32; ++i) {
          keys[i] = rng() % (kNames * kPartitions);
          ks[i] = CacheKey{PartitionKey(CacheLevel::kCity, static_cast<PartitionId>(keys[i] / kNames), {}),
                           names[keys[i] % kNames].span(), dns::type::kA};
          hashes[i] = HashCacheKey(ks[i]);
        }
        const bool burst = rng() % 2 == 0;
        if (burst) cache.FindBurst(ks, hashes, 32, now, found, fresh);
        for (int i = 0; i < 32; ++i) {
          const size_t key = keys[i];
          const CacheKey& k = ks[i];
          if (map->city(map->LookupV4(0x0a010203)).name.empty() || tt->Lookup(k.qname) == nullptr) {
            failures.fetch_add(1);
          }
          Freshness f;
          const CacheEntry* e = burst ? found[i] : cache.Find(k, hashes[i], now, &f);
          if (e == nullptr) {
            if (rng() % 64 == 0) cache.TryInsert(MakeVersioned(names, key, 0, now));
            continue;
          }
          ++hits[r];
          if (std::string why = Validate(*e, key, k); !why.empty()) {
            if (failures.fetch_add(1) < 5) ADD_FAILURE() << "torn entry: " << why;
          }
          AnswerWrite w;
          if (!WriteAnswer(*e, rng() % 2 ? AnswerMode::kSingle : AnswerMode::kOrdered, swrr,
                           e->ServeTtl(now, 30), buf, sizeof buf, &w) ||
              dns::Load32(buf + 12) >> 12 != key) {
            failures.fetch_add(1);
          }
        }
        rcu.Quiescent();
        const uint64_t ns =
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
                .count();
        max_burst_ns[r] = std::max<uint64_t>(max_burst_ns[r], ns);
        ++bursts[r];
      }
    });
  }

  uint64_t writes = 0;
  threads.emplace_back([&] {
    common::RcuThread rcu;
    std::mt19937_64 rng(7);
    std::vector<uint32_t> version(kNames * kPartitions, 0);
    while (!stop.load(std::memory_order_relaxed)) {
      for (int i = 0; i < 64; ++i) {
        const size_t key = rng() % (kNames * kPartitions);
        const int op = static_cast<int>(rng() % 16);
        if (op == 0) {
          cache.Erase({PartitionKey(CacheLevel::kCity, static_cast<PartitionId>(key / kNames), {}),
                       names[key % kNames].span(), dns::type::kA});
        } else {
          cache.Insert(MakeVersioned(names, key, ++version[key], clock.NowSeconds()));
        }
        ++writes;
      }
      if (writes % 1024 == 0) {
        // One second per 1024 writes, whatever the build's speed: entries
        // live 3..23 s, so some expire past the stale window and the rest
        // are evicted by CLOCK once the budget (~2.5k entries) is full.
        clock.Advance(1);
        cache.Maintain(8192);
      }
      rcu.Quiescent();
    }
  });

  threads.emplace_back([&] {  // control plane: unregistered, swaps snapshots
    bool flip = false;
    while (!stop.load(std::memory_order_relaxed)) {
      auto m = CityMap::FromCsv(flip ? "10.0.0.0/8,a,192.0.2.0\n" : "10.0.0.0/8,b,\n10.1.0.0/16,c,\n");
      cities.Publish(*std::move(m));
      auto t =
          TagTable::FromText(flip ? "cdn.example.net weight=on\n" : "example.net ecs=on\nnet weight=on\n");
      tags.Publish(*std::move(t));
      flip = !flip;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });

  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  stop.store(true);
  for (auto& t : threads) t.join();

  const CacheStats s = cache.stats();
  std::printf(
      "writes %llu, entries %llu, bytes %llu, slab %llu, evictions %llu, expired %llu, rehashes %llu, busy "
      "%llu\n",
      (unsigned long long)writes, (unsigned long long)s.entries, (unsigned long long)s.bytes,
      (unsigned long long)s.slab_bytes, (unsigned long long)s.evictions,
      (unsigned long long)s.expired_evictions, (unsigned long long)s.rehashes, (unsigned long long)s.busy);
  for (int r = 0; r < readers; ++r) {
    std::printf("reader %d: bursts %llu hits %llu max burst %.1f us\n", r, (unsigned long long)bursts[r],
                (unsigned long long)hits[r], max_burst_ns[r] / 1000.0);
    EXPECT_GT(bursts[r], 100u) << "reader " << r << " made no progress";
    EXPECT_GT(hits[r], 0u);
  }
  EXPECT_EQ(failures.load(), 0u);
  EXPECT_GT(s.evictions, 0u);
  EXPECT_GT(s.expired_evictions, 0u);
  EXPECT_LE(s.bytes, size_t{512} << 10);
  // Freed entry blocks are reused (without reuse the writes would need
  // ~100x the budget). Blocks waiting for a grace period are not counted in
  // `bytes`, hence the margin.
  EXPECT_LE(s.slab_bytes, size_t{2} << 20);
}

}  // namespace
}  // namespace weir::partitions
