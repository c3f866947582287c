#include "weir/partitions/cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "test_util.h"
#include "weir/common/rcu.h"
#include "weir/partitions/swrr.h"

namespace weir::partitions {
namespace {

using testing::Key;
using testing::MakeAEntry;
using testing::V4;

class CacheTest : public ::testing::Test {
 protected:
  common::RcuThread rcu_;  // the test thread reads the cache
  common::FakeClock clock_{1000};
};

TEST_F(CacheTest, InsertFindRefreshErase) {
  Cache cache({}, clock_);
  const dns::NameKey q = Key("www.example.com");
  const CacheKey key{5, q.span(), dns::type::kA};
  Freshness f;
  EXPECT_EQ(cache.Find(key, clock_.NowSeconds(), &f), nullptr);
  EXPECT_EQ(f, Freshness::kMiss);

  EXPECT_EQ(cache.Insert(MakeAEntry(5, q, {1, 2}, {1, 2}, clock_.NowSeconds())),
            Cache::InsertResult::kInserted);
  const CacheEntry* e = cache.Find(key, clock_.NowSeconds(), &f);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(f, Freshness::kFresh);
  EXPECT_EQ(e->address_count(), 2);
  EXPECT_TRUE(e->has_weights());

  // Other qtype, class, partition or name: miss.
  EXPECT_EQ(cache.Find({5, q.span(), dns::type::kAaaa}, clock_.NowSeconds(), &f), nullptr);
  EXPECT_EQ(cache.Find({5, q.span(), dns::type::kA, 3}, clock_.NowSeconds(), &f), nullptr);
  EXPECT_EQ(cache.Find({6, q.span(), dns::type::kA}, clock_.NowSeconds(), &f), nullptr);
  const dns::NameKey q2 = Key("www.example.org");
  EXPECT_EQ(cache.Find({5, q2.span(), dns::type::kA}, clock_.NowSeconds(), &f), nullptr);

  EXPECT_EQ(cache.Insert(MakeAEntry(5, q, {1, 2, 3}, {}, clock_.NowSeconds())),
            Cache::InsertResult::kReplaced);
  rcu_.Quiescent();
  e = cache.Find(key, clock_.NowSeconds(), &f);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->address_count(), 3);
  EXPECT_EQ(cache.stats().entries, 1u);

  EXPECT_TRUE(cache.Erase(key));
  EXPECT_FALSE(cache.Erase(key));
  EXPECT_EQ(cache.Find(key, clock_.NowSeconds(), &f), nullptr);
  EXPECT_EQ(cache.stats().entries, 0u);
}

TEST_F(CacheTest, TtlStaleWindowAndServfail) {
  Cache cache({.stale_window = 100}, clock_);
  const dns::NameKey q = Key("a.example");
  const CacheKey key{0, q.span(), dns::type::kA};
  cache.Insert(MakeAEntry(0, q, {1}, {}, clock_.NowSeconds(), 60));
  Freshness f;
  clock_.Advance(59);
  const CacheEntry* e = cache.Find(key, clock_.NowSeconds(), &f);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(f, Freshness::kFresh);
  EXPECT_EQ(e->ServeTtl(clock_.NowSeconds(), 30).Of(60), 1u);
  clock_.Advance(1);
  e = cache.Find(key, clock_.NowSeconds(), &f);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(f, Freshness::kStale);
  EXPECT_EQ(e->ServeTtl(clock_.NowSeconds(), 30).Of(60), 30u);  // stale answers carry the stale TTL
  EXPECT_EQ(e->ServeTtl(clock_.NowSeconds(), 30).Of(3600), 30u);
  EXPECT_EQ(e->ServeTtl(clock_.NowSeconds(), 30).Of(5), 30u);
  clock_.Advance(99);
  EXPECT_NE(cache.Find(key, clock_.NowSeconds(), &f), nullptr);
  EXPECT_EQ(f, Freshness::kStale);
  clock_.Advance(1);
  EXPECT_EQ(cache.Find(key, clock_.NowSeconds(), &f), nullptr);
  EXPECT_EQ(f, Freshness::kMiss);
  cache.Maintain();
  EXPECT_EQ(cache.stats().entries, 0u);
  EXPECT_EQ(cache.stats().expired_evictions, 1u);

  // SERVFAIL: short, never stale.
  CacheEntryBuilder b({0, q.span(), dns::type::kAaaa});
  auto sf = b.Build(EntryKind::kServFail, clock_.NowSeconds(), {.servfail_ttl = 5});
  ASSERT_TRUE(sf.ok());
  EXPECT_EQ((*sf)->rcode(), dns::Rcode::kServFail);
  cache.Insert(*std::move(sf));
  const CacheKey k6{0, q.span(), dns::type::kAaaa};
  ASSERT_NE(cache.Find(k6, clock_.NowSeconds() + 4, &f), nullptr);
  EXPECT_EQ(cache.Find(k6, clock_.NowSeconds() + 5, &f), nullptr);
}

TEST_F(CacheTest, TtlClamps) {
  const dns::NameKey q = Key("a.example");
  CacheEntryBuilder b({0, q.span(), dns::type::kA});
  b.AddAddress(q.span(), V4(1), 5).AddAddress(q.span(), V4(2), 999999);
  auto e = b.Build(EntryKind::kPositive, 1, {.min_ttl = 30, .max_ttl = 3600});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ((*e)->ttl(), 30u);
  // Written TTLs are clamped too.
  SwrrTable t;
  AnswerWrite w;
  uint8_t buf[128];
  ASSERT_TRUE(WriteAnswer(**e, AnswerMode::kAll, t, {}, buf, sizeof buf, &w));
  EXPECT_EQ(dns::Load32(buf + 6), 30u);
  EXPECT_EQ(dns::Load32(buf + 16 + 6), 3600u);
}

std::vector<uint8_t> SoaRdata(uint32_t minimum) {
  dns::NameKey m = Key("ns.example"), r = Key("host.example");
  std::vector<uint8_t> out(m.bytes.begin(), m.bytes.begin() + m.len);
  out.insert(out.end(), r.bytes.begin(), r.bytes.begin() + r.len);
  for (uint32_t v : {2024010101u, 3600u, 600u, 86400u, minimum}) {
    uint8_t b[4];
    dns::Store32(b, v);
    out.insert(out.end(), b, b + 4);
  }
  return out;
}

TEST_F(CacheTest, NegativeEntriesFollowRfc2308) {
  Cache cache({}, clock_);
  const dns::NameKey q = Key("nope.www.example"), zone = Key("example");
  const dns::NameKey target = Key("gone.example");
  CacheEntryBuilder b({0, q.span(), dns::type::kA});
  b.AddCname(q.span(), target.span(), 3000);
  b.AddAuthority(zone.span(), dns::type::kSoa, dns::klass::kIn, 900, SoaRdata(300));
  auto e = b.Build(EntryKind::kNxDomain, clock_.NowSeconds());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->ttl(), 300u);  // min(SOA TTL 900, MINIMUM 300)
  EXPECT_EQ((*e)->rcode(), dns::Rcode::kNxDomain);
  EXPECT_EQ((*e)->answer_count(), 1);
  EXPECT_EQ((*e)->authority_count(), 1);
  cache.Insert(*std::move(e));
  Freshness f;
  const CacheEntry* got = cache.Find({0, q.span(), dns::type::kA}, clock_.NowSeconds() + 10, &f);
  ASSERT_NE(got, nullptr);

  // Write the whole response and parse it: SOA TTL is the remaining negative TTL.
  std::vector<uint8_t> pkt(512);
  dns::ResponseWriter rw(pkt.data(), pkt.size());
  ASSERT_EQ(rw.Begin(1, dns::flag::kQr | 3, q.span(), dns::type::kA, dns::klass::kIn), dns::ParseError::kOk);
  SwrrTable t;
  AnswerWrite w;
  const size_t off = dns::AnswerOffset(q.len);
  ASSERT_TRUE(WriteAnswer(*got, AnswerMode::kSingle, t, got->ServeTtl(clock_.NowSeconds() + 10, 30),
                          pkt.data() + off, pkt.size() - off, &w));
  dns::Store16(pkt.data() + dns::kOffAncount, w.answer_count);
  dns::Store16(pkt.data() + dns::kOffNscount, w.authority_count);
  pkt.resize(off + w.bytes);
  dns::Message m;
  ASSERT_EQ(m.Parse(pkt, {}), dns::ParseError::kOk);
  auto it = m.Records(dns::Section::kAuthority);
  dns::RrView rr;
  ASSERT_TRUE(it.Next(&rr));
  EXPECT_EQ(rr.type, dns::type::kSoa);
  EXPECT_EQ(rr.ttl, 290u);

  // No SOA: not cacheable.
  CacheEntryBuilder nosoa({0, q.span(), dns::type::kA});
  EXPECT_FALSE(nosoa.Build(EntryKind::kNoData, clock_.NowSeconds()).ok());
}

TEST_F(CacheTest, BuilderRejectsBrokenChains) {
  const dns::NameKey q = Key("a.example"), other = Key("b.example"), t = Key("t.example");
  CacheEntryBuilder b({0, q.span(), dns::type::kA});
  b.AddCname(other.span(), t.span(), 60);
  EXPECT_FALSE(b.Build(EntryKind::kPositive, 1).ok());
  CacheEntryBuilder b2({0, q.span(), dns::type::kA});
  b2.AddCname(q.span(), t.span(), 60).AddAddress(q.span(), V4(1), 60);  // owner must be t
  EXPECT_FALSE(b2.Build(EntryKind::kPositive, 1).ok());
  CacheEntryBuilder b3({0, q.span(), dns::type::kA});
  const uint8_t three[] = {1, 2, 3};
  b3.AddAddress(q.span(), three, 60);
  EXPECT_FALSE(b3.Build(EntryKind::kPositive, 1).ok());
}

TEST_F(CacheTest, InvalidWeightsMeanEqualWeights) {
  const dns::NameKey q = Key("a.example");
  auto e = MakeAEntry(0, q, {1, 2, 3}, {5, 0, 1}, 1);  // a zero weight
  EXPECT_FALSE(e->has_weights());
  EXPECT_EQ(std::vector<uint8_t>(e->weights().begin(), e->weights().end()), (std::vector<uint8_t>{1, 1, 1}));
  e = MakeAEntry(0, q, {1, 2, 3}, {5, 1}, 1);  // count mismatch
  EXPECT_FALSE(e->has_weights());
  e = MakeAEntry(0, q, {3, 1, 2}, {30, 10, 20}, 1);  // sorted, weights follow
  EXPECT_TRUE(e->has_weights());
  EXPECT_EQ(std::vector<uint8_t>(e->weights().begin(), e->weights().end()),
            (std::vector<uint8_t>{10, 20, 30}));
}

// More addresses than can be weighted (64): cached all the same, as a plain
// answer (every record, no weights), so a large answer is a hit the next time.
TEST_F(CacheTest, AnswerWithMoreAddressesThanCanBeWeightedIsCachedPlain) {
  const dns::NameKey q = Key("big.example");
  CacheEntryBuilder b({kCommonPartition, q.span(), dns::type::kA, dns::klass::kIn});
  for (int i = 0; i < 150; ++i) {
    const std::array<uint8_t, 4> a{10, 0, static_cast<uint8_t>(i / 250), static_cast<uint8_t>(i % 250 + 1)};
    b.AddAddress(q.span(), a, 300);
  }
  std::vector<uint8_t> w(150, 1);
  b.SetWeights(w);
  auto e = b.Build(EntryKind::kPositive, 1);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->address_count(), 0);
  EXPECT_FALSE((*e)->has_weights());
  EXPECT_EQ((*e)->answer_count(), 150);
  // Every record, its owner a pointer to the question's name: 16 bytes each.
  EXPECT_EQ((*e)->records().size(), 150u * 16);
  SwrrTable swrr;
  uint8_t buf[4096];
  AnswerWrite aw;
  ASSERT_TRUE(WriteAnswer(**e, AnswerMode::kSingle, swrr, {}, buf, sizeof(buf), &aw));
  EXPECT_EQ(aw.answer_count, 150);

  // 64 distinct addresses (duplicates are one record) keep the weighted layout.
  CacheEntryBuilder b64({kCommonPartition, q.span(), dns::type::kA, dns::klass::kIn});
  for (int i = 0; i < 70; ++i) {
    const std::array<uint8_t, 4> a{10, 0, 0, static_cast<uint8_t>(i % 64 + 1)};
    b64.AddAddress(q.span(), a, 300);
  }
  auto e64 = b64.Build(EntryKind::kPositive, 1);
  ASSERT_TRUE(e64.ok()) << e64.status();
  EXPECT_EQ((*e64)->address_count(), 64);
}

// A key of city A never returns city B's entry, whatever the names.
TEST_F(CacheTest, PartitionsNeverMix) {
  std::mt19937_64 rng(5);
  Cache cache({}, clock_);
  std::vector<dns::NameKey> names;
  for (int i = 0; i < 200; ++i) names.push_back(Key("n" + std::to_string(i) + ".cdn.example"));
  const common::IpAddress client = common::IpAddress::V4(0x0a010203);
  std::vector<Partition> parts;
  for (PartitionId c = 0; c < 20; ++c) parts.push_back(PartitionKey(CacheLevel::kCity, c, client));
  parts.push_back(kCommonPartition);
  parts.push_back(PartitionKey(CacheLevel::kSubnet, 0, client));
  // Each entry's address encodes (partition index, name index).
  for (size_t p = 0; p < parts.size(); ++p) {
    for (size_t n = 0; n < names.size(); ++n) {
      if (rng() % 3 == 0) continue;
      cache.Insert(
          MakeAEntry(parts[p], names[n], {static_cast<uint32_t>(p << 16 | n)}, {}, clock_.NowSeconds()));
    }
  }
  size_t hits = 0;
  for (int i = 0; i < 100000; ++i) {
    const size_t p = rng() % parts.size(), n = rng() % names.size();
    Freshness f;
    const CacheEntry* e = cache.Find({parts[p], names[n].span(), dns::type::kA}, clock_.NowSeconds(), &f);
    if (e == nullptr) continue;
    ++hits;
    ASSERT_EQ(e->partition(), parts[p]);
    const uint8_t* rdata = e->records().data() + e->chain_bytes() + 12;
    ASSERT_EQ(dns::Load32(rdata), p << 16 | n);
  }
  EXPECT_GT(hits, 50000u);
}

TEST_F(CacheTest, PartitionStatsFollowInsertsEvictionsAndErases) {
  Cache cache({.byte_budget = 1 << 20}, clock_);
  const common::IpAddress client = common::IpAddress::V4(0x0a010203);
  const Partition city3 = PartitionKey(CacheLevel::kCity, 3, client);
  const Partition subnet = PartitionKey(CacheLevel::kSubnet, 0, client);
  const dns::NameKey a = Key("a.example"), b = Key("b.example");
  cache.Insert(MakeAEntry(kCommonPartition, a, {1}, {}, clock_.NowSeconds()));
  cache.Insert(MakeAEntry(city3, a, {1, 2}, {1, 2}, clock_.NowSeconds()));
  cache.Insert(MakeAEntry(city3, b, {1}, {}, clock_.NowSeconds()));
  cache.Insert(MakeAEntry(city3, b, {1, 2, 3}, {}, clock_.NowSeconds()));  // a refresh
  cache.Insert(MakeAEntry(subnet, a, {1}, {}, clock_.NowSeconds()));
  const Partition answer = AnswerPartition(7);  // a level=adaptive answer
  cache.Insert(MakeAEntry(answer, a, {1}, {}, clock_.NowSeconds()));
  std::vector<PartitionCacheStats> s = cache.partition_stats();
  ASSERT_EQ(s.size(), kCityStatsGroup + 3u + 1u);
  EXPECT_EQ(s[PartitionStatsGroup(kCommonPartition)].entries, 1u);
  EXPECT_EQ(s[PartitionStatsGroup(subnet)].entries, 1u);
  EXPECT_EQ(PartitionStatsGroup(answer), kAdaptiveStatsGroup);
  EXPECT_EQ(s[kAdaptiveStatsGroup].entries, 1u);
  EXPECT_EQ(s[PartitionStatsGroup(city3)].entries, 2u);
  EXPECT_EQ(s[PartitionStatsGroup(city3)].inserts, 2u);
  EXPECT_EQ(s[kCityStatsGroup].entries, 0u);  // city 0: never used
  uint64_t bytes = 0;
  for (const PartitionCacheStats& p : s) bytes += p.bytes;
  EXPECT_EQ(bytes + cache.stats().index_bytes, cache.stats().bytes);

  EXPECT_TRUE(cache.Erase({city3, b.span(), dns::type::kA}));
  s = cache.partition_stats();
  EXPECT_EQ(s[PartitionStatsGroup(city3)].entries, 1u);
  EXPECT_EQ(s[PartitionStatsGroup(city3)].evictions, 0u) << "an erase is not an eviction";

  // Past the stale window: the sweep evicts them as expired.
  clock_.Advance(cache.options().stale_window + 3600);
  cache.Maintain(1 << 20);
  s = cache.partition_stats();
  for (const PartitionCacheStats& p : s) EXPECT_EQ(p.entries, 0u);
  EXPECT_EQ(s[PartitionStatsGroup(city3)].expired_evictions, 1u);
  EXPECT_EQ(s[PartitionStatsGroup(kCommonPartition)].expired_evictions, 1u);
  rcu_.Quiescent();
}

TEST_F(CacheTest, EraseMatchingRemovesOnlyWhatMatchesAcrossSteps) {
  // A small first index and small steps: the walk sees rehashes and many
  // steps; entries inserted between steps may be missed, never kept wrongly.
  Cache cache({.initial_slots = 16}, clock_);
  const common::IpAddress client = common::IpAddress::V4(0x0a010203);
  const Partition city1 = PartitionKey(CacheLevel::kCity, 1, client);
  std::vector<dns::NameKey> names;
  for (int i = 0; i < 3000; ++i) names.push_back(Key("n" + std::to_string(i) + ".example"));
  for (const dns::NameKey& n : names) {
    cache.Insert(MakeAEntry(kCommonPartition, n, {1}, {}, clock_.NowSeconds()));
    cache.Insert(MakeAEntry(city1, n, {2}, {}, clock_.NowSeconds()));
  }
  ASSERT_EQ(cache.stats().entries, 6000u);
  size_t visited = 0;
  cache.ForEach([&](const CacheEntry&) { return ++visited < 10; });
  EXPECT_EQ(visited, 10u) << "ForEach stops when the visitor says so";
  visited = 0;
  cache.ForEach([&](const CacheEntry&) { return ++visited, true; }, 7);
  EXPECT_EQ(visited, 6000u);

  // Every city-1 copy of an even name.
  auto even_city1 = [&](const CacheEntry& e) {
    if (e.partition() != city1) return false;
    const std::string text = dns::NameKeyToText(e.qname());
    return (std::stoi(text.substr(1, text.find('.') - 1)) % 2) == 0;
  };
  EXPECT_EQ(cache.EraseMatching(even_city1, 5), 1500u);
  rcu_.Quiescent();
  Freshness f;
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_NE(cache.Find({kCommonPartition, names[i].span(), dns::type::kA}, clock_.NowSeconds(), &f),
              nullptr);
    EXPECT_EQ(cache.Find({city1, names[i].span(), dns::type::kA}, clock_.NowSeconds(), &f) == nullptr,
              i % 2 == 0)
        << i;
  }
  const CacheStats st = cache.stats();
  EXPECT_EQ(st.entries, 4500u);
  EXPECT_EQ(st.flushed, 1500u);
  EXPECT_EQ(st.evictions, 0u) << "a flush is not an eviction";
  const std::vector<PartitionCacheStats> groups = cache.partition_stats();
  EXPECT_EQ(groups[PartitionStatsGroup(city1)].flushed, 1500u);
  EXPECT_EQ(groups[PartitionStatsGroup(city1)].entries, 1500u);
  EXPECT_EQ(groups[PartitionStatsGroup(kCommonPartition)].flushed, 0u);
  EXPECT_EQ(cache.EraseMatching([](const CacheEntry&) { return true; }), 4500u);
  EXPECT_EQ(cache.stats().entries, 0u);
  rcu_.Quiescent();
  cache.Barrier();
}

TEST_F(CacheTest, ByteBudgetEvictsColdEntriesFirst) {
  const size_t budget = 2 << 20;
  Cache cache({.byte_budget = budget}, clock_);
  const size_t hot = 1000;
  std::vector<dns::NameKey> names;
  for (size_t i = 0; i < 40000; ++i) names.push_back(Key("host" + std::to_string(i) + ".example.com"));
  Freshness f;
  for (size_t i = 0; i < names.size(); ++i) {
    cache.Insert(MakeAEntry(0, names[i], {1, 2, 3, 4}, {1, 2, 3, 4}, clock_.NowSeconds()));
    // Readers keep touching the first `hot` names.
    if (i % 64 == 0) {
      for (size_t h = 0; h < hot && h <= i; ++h)
        cache.Find({0, names[h].span(), dns::type::kA}, clock_.NowSeconds(), &f);
    }
    ASSERT_LE(cache.stats().bytes, budget);
    if (i % 1024 == 0) {
      // Grace periods at a known pace: eviction order, not reclaim timing, is tested here.
      rcu_.Quiescent();
      cache.Barrier();
    }
  }
  const CacheStats s = cache.stats();
  EXPECT_GT(s.evictions, 20000u);
  size_t hot_hits = 0, cold_hits = 0;
  for (size_t i = 0; i < hot; ++i)
    hot_hits += cache.Find({0, names[i].span(), dns::type::kA}, clock_.NowSeconds(), &f) != nullptr;
  for (size_t i = hot; i < 2 * hot; ++i)
    cold_hits += cache.Find({0, names[i].span(), dns::type::kA}, clock_.NowSeconds(), &f) != nullptr;
  EXPECT_GT(hot_hits, hot * 9 / 10);
  EXPECT_LT(cold_hits, hot / 10);
  rcu_.Quiescent();
}

// Names of 3..~120 wire bytes: short ones take the memcmp path of the key
// compare, long ones spill out of the entry's first cache line.
dns::NameKey VariedName(size_t i) {
  std::string s = std::to_string(i);
  if (i % 3 == 1) s += ".example";
  if (i % 3 == 2)
    s += "." + std::string(20 + i % 40, 'x') + "." + std::string(1 + i % 50, 'y') + ".example.com";
  return Key(s);
}

// Insert, refresh and erase at random against a model, through the index's
// growth (a 2-bucket index at first) and its displaced entries; Find and
// FindBurst (bursts of more than 32) must agree with the model.
TEST_F(CacheTest, FindAndFindBurstMatchAModel) {
  Cache cache({.byte_budget = size_t{1} << 30, .initial_slots = 16}, clock_);
  std::mt19937_64 rng(11);
  constexpr size_t kKeys = 3000;
  std::vector<dns::NameKey> names;
  for (size_t i = 0; i < kKeys; ++i) names.push_back(VariedName(i));
  std::map<size_t, uint32_t> model;  // key -> address (version)
  uint32_t version = 0;
  auto key_of = [&](size_t k) {
    return CacheKey{static_cast<Partition>(k % 7), names[k].span(), dns::type::kA};
  };
  auto check = [&] {
    std::vector<CacheKey> keys;
    std::vector<uint64_t> hashes;
    std::vector<size_t> ids;
    for (int i = 0; i < 45; ++i) {
      ids.push_back(rng() % kKeys);
      keys.push_back(key_of(ids.back()));
      hashes.push_back(HashCacheKey(keys.back()));
    }
    std::vector<const CacheEntry*> out(keys.size());
    std::vector<Freshness> fresh(keys.size());
    cache.FindBurst(keys.data(), hashes.data(), keys.size(), clock_.NowSeconds(), out.data(), fresh.data());
    for (size_t i = 0; i < keys.size(); ++i) {
      Freshness f;
      const CacheEntry* e = cache.Find(keys[i], clock_.NowSeconds(), &f);
      ASSERT_EQ(e, out[i]) << "key " << ids[i];
      ASSERT_EQ(f, fresh[i]);
      auto it = model.find(ids[i]);
      if (it == model.end()) {
        ASSERT_EQ(e, nullptr) << "key " << ids[i];
        continue;
      }
      ASSERT_NE(e, nullptr) << "key " << ids[i];
      ASSERT_EQ(dns::Load32(e->records().data() + 12), it->second);
      ASSERT_TRUE(
          std::equal(e->qname().begin(), e->qname().end(), keys[i].qname.begin(), keys[i].qname.end()));
    }
  };
  for (int op = 0; op < 30000; ++op) {
    const size_t k = rng() % kKeys;
    if (rng() % 4 == 0) {
      EXPECT_EQ(cache.Erase(key_of(k)), model.erase(k) == 1);
    } else {
      ++version;
      const auto r = cache.Insert(MakeAEntry(static_cast<Partition>(k % 7), names[k], {version}, {}, 1000));
      EXPECT_EQ(r, model.contains(k) ? Cache::InsertResult::kReplaced : Cache::InsertResult::kInserted);
      model[k] = version;
    }
    if (op % 97 == 0) {
      check();
      ASSERT_EQ(cache.stats().entries, model.size());
      rcu_.Quiescent();
    }
  }
  EXPECT_GT(cache.stats().rehashes, 5u);
}

// The cached copy (in the slab, or outside it for big entries) answers
// exactly like the entry that was built.
TEST_F(CacheTest, CachedCopyEqualsBuiltEntry) {
  Cache cache({}, clock_);
  const dns::NameKey q = VariedName(200), t = Key("target.example.net");
  for (int records : {2, 40}) {  // 40 TXT records of 200 bytes: beyond the slab's block sizes
    CacheEntryBuilder b({3, q.span(), dns::type::kTxt});
    b.AddCname(q.span(), t.span(), 500);
    for (int i = 0; i < records; ++i) {
      b.AddAnswer(t.span(), dns::type::kTxt, dns::klass::kIn, 100 + i, std::vector<uint8_t>(200, uint8_t(i)));
    }
    b.SetEcs(1, 24, 20).SetFlags(dns::flag::kAd);
    auto built = b.Build(EntryKind::kPositive, clock_.NowSeconds());
    ASSERT_TRUE(built.ok()) << built.status();
    auto again = b.Build(EntryKind::kPositive, clock_.NowSeconds());
    const CacheEntry& want = **again;
    cache.Insert(*std::move(built));
    Freshness f;
    const CacheEntry* got = cache.Find({3, q.span(), dns::type::kTxt}, clock_.NowSeconds(), &f);
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(got) % 64, 0u);
    auto same = [](auto a, auto b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); };
    EXPECT_TRUE(same(got->qname(), want.qname()));
    EXPECT_TRUE(same(got->records(), want.records()));
    EXPECT_TRUE(same(got->ttl_offsets(), want.ttl_offsets()));
    EXPECT_TRUE(same(got->weights(), want.weights()));
    EXPECT_EQ(got->hash(), want.hash());
    EXPECT_EQ(got->ttl(), want.ttl());
    EXPECT_EQ(got->answer_count(), records + 1);
    EXPECT_EQ(got->chain_bytes(), want.chain_bytes());
    EXPECT_EQ(got->flags(), dns::flag::kAd);
    EXPECT_EQ(got->ecs_family(), 1);
    EXPECT_EQ(got->ecs_source(), 24);
    EXPECT_EQ(got->ecs_scope(), 20);
    EXPECT_EQ(got->memory_bytes() % 64, 0u);
    EXPECT_GE(got->memory_bytes(), want.records().size());
    rcu_.Quiescent();
  }
}

// Evicted entries' blocks are reused: churning through 20x the budget
// leaves the slab near the budget.
TEST_F(CacheTest, SlabMemoryIsReusedAfterEviction) {
  const size_t budget = 1 << 20;
  Cache cache({.byte_budget = budget}, clock_);
  for (size_t i = 0; i < 100000; ++i) {
    cache.Insert(MakeAEntry(0, VariedName(i), {1, 2, 3, 4}, {1, 2, 3, 4}, clock_.NowSeconds()));
    if (i % 256 == 0) rcu_.Quiescent();
    // A grace period every 512 evictions (64 KB of blocks, under the
    // retired cap): every insert is taken and reuses freed blocks.
    if (i % 512 == 0) cache.Barrier();
  }
  const CacheStats s = cache.stats();
  EXPECT_EQ(s.reclaiming, 0u);
  EXPECT_EQ(s.inserts, 100000u);
  EXPECT_GT(s.evictions, 80000u);
  EXPECT_LE(s.retired_bytes, budget / 8);
  EXPECT_LE(s.bytes, budget);
  std::printf("budget %zu, slab %llu, refused while reclaiming %llu\n", budget,
              static_cast<unsigned long long>(s.slab_bytes), static_cast<unsigned long long>(s.reclaiming));
  EXPECT_LE(s.slab_bytes, budget * 5 / 4);
}

// The bound holds however late grace periods come: here none comes at all
// (the only reader never passes a quiescent state) while 100k entries churn.
TEST_F(CacheTest, ByteBudgetHoldsWithoutGracePeriods) {
  const size_t budget = 1 << 20;
  Cache cache({.byte_budget = budget}, clock_);
  size_t refused = 0;
  for (size_t i = 0; i < 100000; ++i) {
    const auto r =
        cache.Insert(MakeAEntry(0, VariedName(i), {1, 2, 3, 4}, {1, 2, 3, 4}, clock_.NowSeconds()));
    refused += r == Cache::InsertResult::kReclaiming;
  }
  CacheStats s = cache.stats();
  std::printf("budget %zu, slab %llu, retired %llu, refused %zu\n", budget,
              static_cast<unsigned long long>(s.slab_bytes), static_cast<unsigned long long>(s.retired_bytes),
              refused);
  EXPECT_GT(refused, 0u);
  EXPECT_EQ(s.reclaiming, refused);
  EXPECT_LE(s.bytes, budget);
  EXPECT_LE(s.retired_bytes, budget / 8);
  EXPECT_LE(s.slab_bytes, budget * 5 / 4);
  // Once the readers move on, the retired blocks come back and inserts are
  // taken again, in the same memory.
  rcu_.Quiescent();
  cache.Barrier();
  EXPECT_EQ(cache.Insert(MakeAEntry(0, VariedName(200000), {1, 2, 3, 4}, {1, 2, 3, 4}, clock_.NowSeconds())),
            Cache::InsertResult::kInserted);
  s = cache.stats();
  EXPECT_LE(s.slab_bytes, budget * 5 / 4);
}

// An A entry of about `size` bytes: up to 64 addresses, then a CNAME chain
// of long names (1 unit: a 128-byte block; 200: about 2.6 KB; 400: a big
// entry, outside the slab).
CacheEntryPtr EntryWithAddresses(size_t name, size_t size, uint32_t now) {
  std::vector<uint32_t> addresses;
  for (size_t a = 0; a < std::min<size_t>(size, 64); ++a)
    addresses.push_back(static_cast<uint32_t>(0x0a000000 + a));
  std::vector<std::string> chain;
  for (size_t c = 64; c + 12 <= size; c += 12)
    chain.push_back("c" + std::to_string(c) + "." + std::string(50, 'x'));
  return MakeAEntry(0, VariedName(name), addresses, {}, now, 300, chain);
}

// Slab classes fragment: a budget filled with small blocks, then with big
// ones (then small again...) leaves every old chunk mapped for a few live
// blocks unless chunks are drained. Slab + index stay within 1.25x the
// budget at every insert, and the cache still holds a working set after
// each shift (draining does not empty it).
TEST_F(CacheTest, SlabFootprintHoldsWhenEntrySizesShift) {
  const size_t budget = 1 << 20;
  Cache cache({.byte_budget = budget}, clock_);
  size_t name = 0;
  uint64_t worst = 0;
  for (size_t addresses : {1, 200, 3, 60, 1, 400, 120, 10}) {
    size_t taken = 0;
    for (size_t i = 0; i < 20000; ++i) {
      const auto r = cache.Insert(EntryWithAddresses(name++, addresses, clock_.NowSeconds()));
      taken += r == Cache::InsertResult::kInserted;
      if (i % 64 == 0) rcu_.Quiescent();
      if (i % 512 == 0) cache.Barrier();
      const CacheStats s = cache.stats();
      worst = std::max(worst, s.slab_bytes + s.index_bytes);
      ASSERT_LE(s.slab_bytes + s.index_bytes, budget * 5 / 4)
          << "entries of " << addresses << " addresses, insert " << i;
      ASSERT_LE(s.bytes, budget);
    }
    rcu_.Quiescent();
    cache.Barrier();
    const CacheStats s = cache.stats();
    std::printf(
        "%3zu addresses: taken %zu/20000, entries %llu, bytes %llu, slab %llu, drains %llu (%llu "
        "evictions)\n",
        addresses, taken, static_cast<unsigned long long>(s.entries),
        static_cast<unsigned long long>(s.bytes), static_cast<unsigned long long>(s.slab_bytes),
        static_cast<unsigned long long>(s.slab_drains), static_cast<unsigned long long>(s.drain_evictions));
    // Inserts refused while drained chunks wait for their grace period are
    // the price of the bound; the new size still takes the cache over.
    Cache probe({}, clock_);
    probe.Insert(EntryWithAddresses(0, addresses, clock_.NowSeconds()));
    const size_t block = probe.stats().bytes - probe.stats().index_bytes;
    EXPECT_GE(taken * block, budget) << addresses;
    EXPECT_GE(s.bytes, budget / 2) << addresses;
  }
  std::printf("worst slab + index: %llu (budget %zu)\n", static_cast<unsigned long long>(worst), budget);
  EXPECT_GT(cache.stats().slab_drains, 0u);
}

// The bound against an adversary: a reader that passes a quiescent state
// only every few thousand lookups, a writer that never waits for a grace
// period, entries of mixed sizes across many slab classes. Checked after
// every insert, whatever the scheduling.
TEST_F(CacheTest, ByteBudgetHoldsAgainstARarelyQuiescentReader) {
  const size_t budget = 1 << 20;
  Cache cache({.byte_budget = budget}, clock_);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> lookups{0};
  const uint32_t now = clock_.NowSeconds();
  std::thread reader([&] {
    common::RcuThread rcu;
    std::mt19937 rng(7);
    uint64_t n = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const dns::NameKey q = VariedName(rng() % 60000);
      const CacheKey key{0, q.span(), dns::type::kA};
      Freshness freshness;
      const CacheEntry* e = cache.Find(key, now, &freshness);
      if (e != nullptr && e->qtype() != dns::type::kA) std::abort();
      if (++n % 5000 == 0) rcu.Quiescent();
    }
    lookups.store(n);
  });
  std::mt19937 rng(11);
  const size_t sizes[] = {1, 2, 4, 16, 40, 90, 200, 400};
  size_t taken = 0;
  for (size_t i = 0; i < 60000; ++i) {
    const auto r = cache.Insert(EntryWithAddresses(i, sizes[rng() % 8], now));
    taken += r == Cache::InsertResult::kInserted;
    if (i % 256 == 0) rcu_.Quiescent();
    const CacheStats s = cache.stats();
    ASSERT_LE(s.slab_bytes + s.index_bytes, budget * 5 / 4) << "insert " << i;
    ASSERT_LE(s.retired_bytes, budget / 8 + 2 * 64 * 1024) << "insert " << i;
    ASSERT_LE(s.bytes, budget);
  }
  stop.store(true);
  reader.join();
  const CacheStats s = cache.stats();
  std::printf("taken %zu/60000, refused while reclaiming %llu, drains %llu, reader lookups %llu\n", taken,
              static_cast<unsigned long long>(s.reclaiming), static_cast<unsigned long long>(s.slab_drains),
              static_cast<unsigned long long>(lookups.load()));
  EXPECT_GT(taken, 0u);
  // Once the reader is gone, the memory comes back and inserts are taken.
  rcu_.Quiescent();
  cache.Barrier();
  EXPECT_EQ(cache.Insert(EntryWithAddresses(100000, 4, clock_.NowSeconds())), Cache::InsertResult::kInserted);
  EXPECT_LE(cache.stats().slab_bytes + cache.stats().index_bytes, budget * 5 / 4);
}

TEST_F(CacheTest, WeightedEntryWithFourARecordsFitsIn256Bytes) {
  Cache cache({.byte_budget = size_t{1} << 30}, clock_);
  const size_t n = 100000;
  for (size_t i = 0; i < n; ++i) {
    const dns::NameKey q = Key("www" + std::to_string(i) + ".example.com");
    cache.Insert(MakeAEntry(PartitionKey(CacheLevel::kCity, static_cast<PartitionId>(i % 300), {}), q,
                            {0x0a000001, 0x0a000002, 0x0a000003, 0x0a000004}, {10, 20, 30, 40},
                            clock_.NowSeconds()));
  }
  const CacheStats s = cache.stats();
  ASSERT_EQ(s.entries, n);
  const double per_entry = double(s.bytes) / double(s.entries);
  // With the slab's own overhead (partly used chunks) instead of the blocks.
  const double mapped_per_entry = double(s.slab_bytes + s.index_bytes) / double(s.entries);
  std::printf("bytes per weighted 4xA entry incl. index: %.1f, incl. slab overhead %.1f (index slots %llu)\n",
              per_entry, mapped_per_entry, static_cast<unsigned long long>(s.index_slots));
  EXPECT_LE(per_entry, 256.0);
  EXPECT_LE(mapped_per_entry, 256.0);
}

}  // namespace
}  // namespace weir::partitions
