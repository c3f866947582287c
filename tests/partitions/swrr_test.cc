#include "weir/partitions/swrr.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>

#include "test_util.h"
#include "weir/common/rcu.h"

namespace weir::partitions {
namespace {

using testing::Key;
using testing::MakeAEntry;
using testing::V4;

std::vector<uint8_t> RandomWeights(std::mt19937_64& rng) {
  std::vector<uint8_t> w(1 + rng() % 16);
  for (auto& x : w) x = static_cast<uint8_t>(1 + rng() % 255);
  return w;
}

// Every window of sum(w) consecutive picks holds index i exactly w[i] times.
void ExpectExactWindows(const std::vector<uint8_t>& seq, const std::vector<uint8_t>& w) {
  const size_t total = std::accumulate(w.begin(), w.end(), size_t{0});
  ASSERT_GE(seq.size(), total);
  std::vector<size_t> count(w.size(), 0);
  for (size_t i = 0; i < total; ++i) ++count[seq[i]];
  for (size_t start = 0;; ++start) {
    for (size_t i = 0; i < w.size(); ++i) {
      ASSERT_EQ(count[i], w[i]) << "window at " << start << " address " << i << " of " << w.size();
    }
    if (start + total >= seq.size()) break;
    --count[seq[start]];
    ++count[seq[start + total]];
  }
}

// A weighted key (partition, name, A, IN) for tests, with its hash, which
// stands for the lineage a cache would give it (distinct keys, distinct
// numbers).
struct TestKey {
  dns::NameKey name;
  Partition partition = 0;
  uint16_t qtype = dns::type::kA;
  explicit TestKey(uint64_t id, Partition p = 0) : partition(p) {
    name = Key("k" + std::to_string(id) + ".cdn.example");
  }
  CacheKey key() const { return {partition, name.span(), qtype, dns::klass::kIn}; }
  uint64_t hash() const { return HashCacheKey(key()); }
  uint64_t lineage() const { return hash(); }
};

uint8_t PickFor(SwrrTable& t, const TestKey& k, uint64_t fingerprint, std::span<const uint8_t> w) {
  return t.Pick(k.lineage(), fingerprint, w);
}

TEST(Swrr, TwoToOneIsSmooth) {
  SwrrTable t;
  const std::vector<uint8_t> w = {2, 1};
  const TestKey k(42);
  std::string s;
  for (int i = 0; i < 6; ++i) s += "AB"[PickFor(t, k, 1, w)];
  EXPECT_EQ(s, "ABAABA");  // A A B spread as A B A, never A A B B
}

TEST(Swrr, PeekShowsTheCurrentValues) {
  SwrrTable t;
  const std::vector<uint8_t> w = {5, 3, 1};
  const TestKey k(42);
  int16_t cur[3];
  EXPECT_FALSE(t.Peek(k.lineage(), 7, 3, cur)) << "no state before the first pick";
  // nginx's sequence: after .0 -> {-4,3,1}, .1 -> {1,-3,2}, .0 -> {-3,0,3}.
  EXPECT_EQ(PickFor(t, k, 7, w), 0);
  EXPECT_EQ(PickFor(t, k, 7, w), 1);
  EXPECT_EQ(PickFor(t, k, 7, w), 0);
  ASSERT_TRUE(t.Peek(k.lineage(), 7, 3, cur));
  EXPECT_EQ(std::vector<int16_t>(cur, cur + 3), (std::vector<int16_t>{-3, 0, 3}));
  EXPECT_FALSE(t.Peek(k.lineage(), 8, 3, cur)) << "another fingerprint: another set";
  EXPECT_FALSE(t.Peek(k.lineage(), 7, 2, cur));
  // Sets of every size share the layout.
  const std::vector<uint8_t> big(64, 1);
  const TestKey k2(43);
  PickFor(t, k2, 1, big);
  int16_t bcur[64];
  ASSERT_TRUE(t.Peek(k2.lineage(), 1, 64, bcur));
  EXPECT_EQ(bcur[0], 1 - 64);
  EXPECT_EQ(bcur[63], 1);
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.starts(), 2u);
  EXPECT_EQ(t.evictions(), 0u);
}

TEST(Swrr, EqualWeightsAreRoundRobin) {
  SwrrTable t;
  const std::vector<uint8_t> w(5, 1);
  const TestKey k(7);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(PickFor(t, k, 9, w), i % 5);
}

TEST(Swrr, LineagesSharingABucketStayApart) {
  // The table compares whole lineages: 64 of them in a 64-state table (64
  // buckets, so some share one) keep their own sequences, one of them with
  // two sets whose fingerprints differ only in the low bits.
  SwrrTable t(64);
  const std::vector<uint8_t> w = {3, 2, 1};
  std::vector<std::string> seq(64);
  for (int round = 0; round < 12; ++round) {
    for (uint64_t l = 0; l < 64; ++l) seq[l] += "abc"[t.Pick(l * 0x10001 + 1, 9, w)];
  }
  for (const std::string& s : seq) EXPECT_EQ(s, "abacbaabacba");
  EXPECT_EQ(t.size(), 64u);
  EXPECT_EQ(t.resets(), 0u);
  EXPECT_EQ(t.evictions(), 0u);
  int16_t cur[3];
  EXPECT_FALSE(t.Peek(2, 9, 3, cur)) << "unknown lineage";
  EXPECT_FALSE(t.Peek(1, 8, 3, cur)) << "known lineage, another set";
  EXPECT_TRUE(t.Peek(1, 9, 3, cur));
}

TEST(SwrrProperty, EveryWindowIsExactPerWorker) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 300; ++round) {
    const std::vector<uint8_t> w = RandomWeights(rng);
    const size_t total = std::accumulate(w.begin(), w.end(), size_t{0});
    SwrrTable t(64);
    const TestKey k(round);
    std::vector<uint8_t> seq;
    for (size_t i = 0; i < total * 3 + rng() % total; ++i) seq.push_back(PickFor(t, k, 5, w));
    ExpectExactWindows(seq, w);
    EXPECT_EQ(t.starts(), w.size() > 1 ? 1u : 0u);
    EXPECT_EQ(t.resets(), 0u);
  }
}

TEST(SwrrProperty, CombinedShareAcrossWorkersIsWithinWorkerCount) {
  std::mt19937_64 rng(12);
  const TestKey k(99);
  for (int workers : {2, 4}) {
    for (int round = 0; round < 100; ++round) {
      const std::vector<uint8_t> w = RandomWeights(rng);
      const double total = std::accumulate(w.begin(), w.end(), 0.0);
      std::vector<SwrrTable> tables;
      for (int i = 0; i < workers; ++i) tables.emplace_back(64);
      std::vector<uint64_t> count(w.size(), 0);
      const size_t picks = static_cast<size_t>(total) * 5;
      for (size_t n = 1; n <= picks; ++n) {
        // Queries land on workers at random (RSS).
        ++count[PickFor(tables[rng() % workers], k, 3, w)];
        for (size_t i = 0; i < w.size(); ++i) {
          const double want = n * w[i] / total;
          ASSERT_LE(std::abs(count[i] - want), workers)
              << "after " << n << " picks, address " << i << " workers " << workers;
        }
      }
      // Share after every full cycle: within workers/total of the weight share.
      for (size_t i = 0; i < w.size(); ++i) {
        EXPECT_LE(std::abs(count[i] / double(picks) - w[i] / total), workers / total);
      }
    }
  }
}

// Through a cache: a refresh hands the key's lineage on, so a refresh with
// the same set continues the sequence; a changed set restarts it; a key's
// partitions and types are sequences of their own; a key evicted and cached
// again starts over.
TEST(SwrrProperty, RefreshWithSameSetKeepsSequenceAndChangeResets) {
  common::RcuThread rcu;  // this thread reads the cache
  std::mt19937_64 rng(13);
  common::FakeClock clock;
  const dns::NameKey q = Key("cdn.example.com");
  for (int round = 0; round < 100; ++round) {
    Cache cache({}, clock);
    std::vector<uint8_t> w = RandomWeights(rng);
    w.push_back(1);  // at least two addresses
    std::vector<uint32_t> addrs;
    for (size_t i = 0; i < w.size(); ++i) addrs.push_back(0x0a000001 + static_cast<uint32_t>(i));
    SwrrTable t(256);
    const CacheKey key{7, q.span(), dns::type::kA, dns::klass::kIn};
    auto cached = [&] {
      Freshness f;
      const CacheEntry* e = cache.Find(key, clock.NowSeconds(), &f);
      EXPECT_NE(e, nullptr);
      return e;
    };
    ASSERT_EQ(cache.Insert(MakeAEntry(7, q, addrs, w, clock.NowSeconds())), Cache::InsertResult::kInserted);
    const CacheEntry* e1 = cached();
    // The refresh brings the same set in another order (upstreams rotate).
    std::vector<size_t> perm(w.size());
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<uint32_t> addrs2;
    std::vector<uint8_t> w2;
    for (size_t i : perm) {
      addrs2.push_back(addrs[i]);
      w2.push_back(w[i]);
    }
    std::vector<uint8_t> seq;
    const size_t total = std::accumulate(w.begin(), w.end(), size_t{0});
    const size_t switch_at = rng() % (2 * total);
    const CacheEntry* e = e1;
    for (size_t i = 0; i < 3 * total; ++i) {
      if (i == switch_at) {
        ASSERT_EQ(cache.Insert(MakeAEntry(7, q, addrs2, w2, clock.NowSeconds())),
                  Cache::InsertResult::kReplaced);
        e = cached();
        ASSERT_EQ(e->fingerprint(), e1->fingerprint());
        ASSERT_EQ(e->lineage(), e1->lineage());
      }
      seq.push_back(t.Pick(*e));
    }
    // Both store the set in the same canonical order, so indices agree.
    std::vector<uint8_t> canonical(e->weights().begin(), e->weights().end());
    ExpectExactWindows(seq, canonical);
    EXPECT_EQ(t.resets(), 0u);

    // A changed weight resets the state and the new set is exact from there.
    w[0] = static_cast<uint8_t>(w[0] == 255 ? 1 : w[0] + 1);
    ASSERT_EQ(cache.Insert(MakeAEntry(7, q, addrs, w, clock.NowSeconds())), Cache::InsertResult::kReplaced);
    const CacheEntry* e3 = cached();
    EXPECT_NE(e3->fingerprint(), e1->fingerprint());
    std::vector<uint8_t> seq3;
    const size_t total3 = std::accumulate(w.begin(), w.end(), size_t{0});
    for (size_t i = 0; i < 2 * total3; ++i) seq3.push_back(t.Pick(*e3));
    EXPECT_EQ(t.resets(), 1u);
    EXPECT_EQ(t.size(), 1u);
    ExpectExactWindows(seq3, std::vector<uint8_t>(e3->weights().begin(), e3->weights().end()));

    // The same name in another partition is another key: its own lineage.
    ASSERT_EQ(cache.Insert(MakeAEntry(8, q, addrs, w, clock.NowSeconds())), Cache::InsertResult::kInserted);
    Freshness f;
    const CacheEntry* other =
        cache.Find({8, q.span(), dns::type::kA, dns::klass::kIn}, clock.NowSeconds(), &f);
    ASSERT_NE(other, nullptr);
    EXPECT_NE(other->lineage(), e3->lineage());
    const std::span<const uint8_t> ow = other->weights();
    EXPECT_EQ(t.Pick(*other), std::max_element(ow.begin(), ow.end()) - ow.begin())
        << "its own sequence, from the start: the largest weight first";

    // Evicted and cached again: a new life, a new sequence.
    const uint64_t before = e3->lineage();
    ASSERT_TRUE(cache.Erase(key));
    ASSERT_EQ(cache.Insert(MakeAEntry(7, q, addrs, w, clock.NowSeconds())), Cache::InsertResult::kInserted);
    EXPECT_NE(cached()->lineage(), before);
    EXPECT_EQ(t.starts(), 2u);
    t.Pick(*cached());
    EXPECT_EQ(t.starts(), 3u);
    rcu.Quiescent();
    cache.Barrier();
  }
}

// The hot set of a carrier: >= 100,000 weighted keys (names x cities) of
// every set size up to the cached cap, picked in random interleaved order
// on one worker. No key disturbs another: after whole cycles every address
// has exactly its weight's count (0 percentage points off).
TEST(SwrrProperty, HundredThousandKeysInterleavedKeepTheirShares) {
  constexpr size_t kKeys = 100'000;
  const size_t kSizes[] = {2, 4, 16, 17, 20, 64};
  std::mt19937_64 rng(14);
  struct K {
    TestKey key;
    uint64_t hash;
    std::vector<uint8_t> w;
    std::vector<uint32_t> count;
  };
  std::vector<K> keys;
  keys.reserve(kKeys);
  std::vector<uint32_t> order;  // one entry per pick: the key
  for (size_t i = 0; i < kKeys; ++i) {
    // Names spread over 20 cities' partitions.
    TestKey k(i / 20, PartitionKey(CacheLevel::kCity, static_cast<PartitionId>(i % 20), {}));
    const size_t n = kSizes[i % std::size(kSizes)];
    std::vector<uint8_t> w(n);
    // Small ratios (a GSLB's 1..9; 1..4 for large sets), so that whole
    // cycles of every key stay a few million picks.
    for (auto& x : w) x = static_cast<uint8_t>(n <= 4 ? 1 + rng() % 9 : 1 + rng() % 4);
    if (n == 4 && i % 3 == 0) w = {4, 3, 2, 1};
    const uint64_t h = k.lineage();
    const size_t total = std::accumulate(w.begin(), w.end(), size_t{0});
    order.insert(order.end(), total, static_cast<uint32_t>(i));
    keys.push_back({std::move(k), h, std::move(w), std::vector<uint32_t>(n, 0)});
  }
  std::shuffle(order.begin(), order.end(), rng);
  SwrrTable t;  // the default size
  ASSERT_GE(t.capacity(), kKeys);
  for (uint32_t i : order) {
    K& k = keys[i];
    ++k.count[t.Pick(k.hash, 1, k.w)];
  }
  double worst_pp = 0;
  size_t off = 0;
  for (const K& k : keys) {
    const double total = std::accumulate(k.w.begin(), k.w.end(), 0.0);
    for (size_t a = 0; a < k.w.size(); ++a) {
      worst_pp = std::max(worst_pp, 100 * std::abs(k.count[a] / total - k.w[a] / total));
      off += k.count[a] != k.w[a];
    }
  }
  EXPECT_LE(worst_pp, 0.5);
  EXPECT_EQ(off, 0u) << "addresses whose count is not their weight after one whole cycle";
  EXPECT_EQ(t.size(), kKeys);
  EXPECT_EQ(t.starts(), kKeys);
  EXPECT_EQ(t.evictions(), 0u);
  EXPECT_EQ(t.resets(), 0u);
}

// More keys than states: the least recently picked key gives its state up
// (counted), the others keep their sequences, and an evicted key starts over.
TEST(SwrrProperty, MoreKeysThanStatesEvictsTheLeastRecentlyPicked) {
  constexpr size_t kStates = 1024;
  SwrrTable t(kStates);
  const std::vector<uint8_t> w = {4, 3, 2, 1};
  std::vector<TestKey> keys;
  for (size_t i = 0; i < 5 * kStates; ++i) keys.emplace_back(i, PartitionKey(CacheLevel::kCity, 1, {}));
  // A hot key picked between every cold one is never the least recently used.
  const TestKey hot(1'000'000);
  std::vector<uint8_t> hot_seq;
  for (const TestKey& k : keys) {
    PickFor(t, k, 1, w);
    hot_seq.push_back(PickFor(t, hot, 1, w));
  }
  ExpectExactWindows(hot_seq, w);
  EXPECT_EQ(t.size(), kStates);
  EXPECT_EQ(t.starts(), keys.size() + 1);
  EXPECT_EQ(t.evictions(), keys.size() + 1 - kStates);
  int16_t cur[4];
  // The last kStates - 1 cold keys are held; the ones before were evicted.
  for (size_t i = 0; i < keys.size(); ++i) {
    const bool held = i + kStates - 1 >= keys.size();
    EXPECT_EQ(t.Peek(keys[i].lineage(), 1, 4, cur), held) << i;
  }
  // An evicted key restarts: its first pick is the largest weight again,
  // and it evicts the least recently picked (the oldest held cold key).
  const size_t oldest_held = keys.size() - (kStates - 1);
  EXPECT_EQ(PickFor(t, keys[0], 1, w), 0);
  EXPECT_FALSE(t.Peek(keys[oldest_held].lineage(), 1, 4, cur));
  EXPECT_TRUE(t.Peek(hot.lineage(), 1, 4, cur));
}

// Random churn over a small table: the index, the LRU list and the
// counters stay consistent (every held key is found, sizes add up).
TEST(SwrrProperty, ChurnKeepsTheTableConsistent) {
  std::mt19937_64 rng(15);
  SwrrTable t(300);
  std::vector<TestKey> keys;
  for (size_t i = 0; i < 1000; ++i) keys.emplace_back(i);
  std::vector<uint64_t> last(keys.size(), 0);  // pick number of the key's last pick
  std::vector<std::vector<uint8_t>> weights(keys.size());
  for (auto& w : weights) w = RandomWeights(rng), w.push_back(1);
  uint64_t pick = 0;
  for (int i = 0; i < 200'000; ++i) {
    // Skewed: a few keys are hot.
    const size_t k = rng() % 4 == 0 ? rng() % keys.size() : rng() % 100;
    PickFor(t, keys[k], 1, weights[k]);
    last[k] = ++pick;
  }
  EXPECT_EQ(t.size(), 300u);
  EXPECT_EQ(t.starts() - t.evictions(), 300u);
  // Exactly the 300 most recently picked keys are held.
  std::vector<uint64_t> sorted = last;
  std::sort(sorted.rbegin(), sorted.rend());
  const uint64_t cutoff = sorted[299];
  int16_t cur[64];
  for (size_t k = 0; k < keys.size(); ++k) {
    EXPECT_EQ(t.Peek(keys[k].lineage(), 1, weights[k].size(), cur), last[k] >= cutoff && last[k] > 0) << k;
  }
}

TEST(Swrr, LargeSetsAreExact) {
  SwrrTable t;
  std::vector<uint8_t> w(64);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<uint8_t>(1 + i * 3);
  std::vector<uint8_t> seq;
  const size_t total = std::accumulate(w.begin(), w.end(), size_t{0});
  const TestKey k(5);
  for (size_t i = 0; i < 2 * total; ++i) seq.push_back(PickFor(t, k, 5, w));
  ExpectExactWindows(seq, w);
}

// ---------------------------------------------------------------- answers

struct Parsed {
  std::vector<uint8_t> pkt;
  dns::Message msg;
  std::vector<dns::RrView> answers;
};

// Builds a whole response around WriteAnswer's bytes and parses it back with
// the dns codec: compression pointers must resolve, counts must add up.
Parsed Respond(const CacheEntry& e, AnswerMode mode, SwrrTable& t, AnswerTtl ttl, AnswerWrite* w,
               uint8_t* weights = nullptr) {
  Parsed p;
  p.pkt.resize(1500);
  dns::ResponseWriter rw(p.pkt.data(), p.pkt.size());
  EXPECT_EQ(rw.Begin(0x1234, dns::flag::kQr | dns::flag::kRa, e.qname(), e.qtype(), e.qclass()),
            dns::ParseError::kOk);
  const size_t off = dns::AnswerOffset(e.qname().size());
  EXPECT_EQ(rw.size(), off);
  EXPECT_TRUE(WriteAnswer(e, mode, t, ttl, p.pkt.data() + off, p.pkt.size() - off, w, weights));
  dns::Store16(p.pkt.data() + dns::kOffAncount, w->answer_count);
  dns::Store16(p.pkt.data() + dns::kOffNscount, w->authority_count);
  p.pkt.resize(off + w->bytes);
  EXPECT_EQ(p.msg.Parse(p.pkt, {}), dns::ParseError::kOk);
  auto it = p.msg.Records(dns::Section::kAnswer);
  dns::RrView rr;
  while (it.Next(&rr)) p.answers.push_back(rr);
  return p;
}

TEST(WriteAnswer, SingleAndOrderedFollowSwrr) {
  common::FakeClock clock;
  const dns::NameKey q = Key("www.example.com");
  auto e = MakeAEntry(3, q, {0x0a000001, 0x0a000002, 0x0a000003}, {3, 2, 1}, clock.NowSeconds(), 300,
                      {"www.example.com.cdn.net", "edge.gslb.cdn.net"});
  ASSERT_EQ(e->address_count(), 3);
  ASSERT_EQ(e->chain_count(), 2);
  SwrrTable t;
  std::vector<int> count(3, 0);
  for (int i = 0; i < 12; ++i) {
    AnswerWrite w;
    uint8_t weights[8];
    Parsed p = Respond(*e, AnswerMode::kSingle, t, AnswerTtl::Aged(100), &w, weights);
    ASSERT_EQ(p.answers.size(), 3u);
    EXPECT_EQ(p.answers[0].type, dns::type::kCname);
    EXPECT_EQ(p.answers[0].ttl, 300u);  // 400 - 100
    EXPECT_EQ(p.answers[2].type, dns::type::kA);
    EXPECT_EQ(p.answers[2].ttl, 200u);
    const uint8_t last = p.pkt[p.answers[2].rdata_offset + 3];
    EXPECT_EQ(last, w.picked + 1);
    EXPECT_EQ(weights[0], e->weights()[w.picked]);
    ++count[w.picked];
    // The owner of the A record is the chain's end.
    dns::NameKey owner;
    size_t end;
    ASSERT_EQ(dns::ReadName(p.pkt, p.answers[2].name_offset, &end, &owner), dns::ParseError::kOk);
    EXPECT_EQ(owner, Key("edge.gslb.cdn.net"));
  }
  EXPECT_EQ(count, (std::vector<int>{6, 4, 2}));

  for (int i = 0; i < 6; ++i) {
    AnswerWrite w;
    uint8_t weights[8];
    Parsed p = Respond(*e, AnswerMode::kOrdered, t, AnswerTtl::Aged(0), &w, weights);
    ASSERT_EQ(p.answers.size(), 5u);
    EXPECT_EQ(p.pkt[p.answers[2].rdata_offset + 3], w.picked + 1);  // the pick first
    std::vector<int> rest;
    for (int j = 3; j < 5; ++j) {
      rest.push_back(p.pkt[p.answers[j].rdata_offset + 3] - 1);
      dns::NameKey owner;
      size_t end;
      ASSERT_EQ(dns::ReadName(p.pkt, p.answers[j].name_offset, &end, &owner), dns::ParseError::kOk);
      EXPECT_EQ(owner, Key("edge.gslb.cdn.net"));
    }
    EXPECT_LT(rest[0], rest[1]);  // the others keep their order
    EXPECT_EQ(weights[1], e->weights()[rest[0]]);
    EXPECT_EQ(w.weight_count, 3);
  }

  AnswerWrite w;
  Parsed p = Respond(*e, AnswerMode::kAll, t, AnswerTtl::Aged(500), &w);
  ASSERT_EQ(p.answers.size(), 5u);
  EXPECT_EQ(p.answers[4].ttl, 0u);  // aged past zero -> 0
}

// RFC 8767 4: a stale answer has every record at the stale TTL, whatever
// each record's cached TTL (a long CNAME before a short address RRset, or
// every TTL already below the stale TTL), in every answer mode.
TEST(WriteAnswer, StaleAnswersCarryTheStaleTtlOnEveryRecord) {
  const dns::NameKey q = Key("www.example.com");
  for (const auto& [cname_ttl, a_ttl] : {std::pair<uint32_t, uint32_t>{3600, 60}, {20, 10}, {30, 30}}) {
    CacheEntryBuilder b({0, q.span(), dns::type::kA, dns::klass::kIn});
    const dns::NameKey edge = Key("edge.cdn.net");
    b.AddCname(q.span(), edge.span(), cname_ttl);
    for (uint32_t a : {1u, 2u, 3u}) b.AddAddress(edge.span(), V4(a), a_ttl);
    b.SetWeights(std::vector<uint8_t>{3, 2, 1});
    auto e = b.Build(EntryKind::kPositive, 1);
    ASSERT_TRUE(e.ok()) << e.status();
    ASSERT_EQ((*e)->ttl(), std::min(cname_ttl, a_ttl));
    SwrrTable t;
    for (AnswerMode mode : {AnswerMode::kAll, AnswerMode::kSingle, AnswerMode::kOrdered}) {
      AnswerWrite w;
      // Stale long after expiry: the age is past every TTL.
      const AnswerTtl ttl = (*e)->ServeTtl(1 + cname_ttl + a_ttl + 500, 30);
      ASSERT_TRUE(ttl.stale());
      Parsed p = Respond(**e, mode, t, ttl, &w);
      ASSERT_EQ(p.answers.size(), mode == AnswerMode::kSingle ? 2u : 4u);
      for (const dns::RrView& rr : p.answers) EXPECT_EQ(rr.ttl, 30u) << cname_ttl << "+" << a_ttl;
      // A stale TTL of 0 is honoured too (stale_answer_ttl = 0).
      Parsed z = Respond(**e, mode, t, AnswerTtl::Stale(0), &w);
      for (const dns::RrView& rr : z.answers) EXPECT_EQ(rr.ttl, 0u);
    }
    // Still fresh one second before expiry: aged, each record by itself.
    const AnswerTtl fresh = (*e)->ServeTtl(1 + std::min(cname_ttl, a_ttl) - 1, 30);
    EXPECT_FALSE(fresh.stale());
    AnswerWrite w;
    Parsed p = Respond(**e, AnswerMode::kAll, t, fresh, &w);
    ASSERT_EQ(p.answers.size(), 4u);
    EXPECT_EQ(p.answers[0].ttl, cname_ttl - (std::min(cname_ttl, a_ttl) - 1));
    EXPECT_EQ(p.answers[1].ttl, a_ttl - (std::min(cname_ttl, a_ttl) - 1));
  }
}

TEST(WriteAnswer, NoChainOwnerIsTheQname) {
  const dns::NameKey q = Key("a.example");
  auto e = MakeAEntry(0, q, {1, 2}, {}, 1);
  EXPECT_FALSE(e->has_weights());
  SwrrTable t;
  AnswerWrite w;
  Parsed p = Respond(*e, AnswerMode::kSingle, t, AnswerTtl::Aged(0), &w);
  ASSERT_EQ(p.answers.size(), 1u);
  dns::NameKey owner;
  size_t end;
  ASSERT_EQ(dns::ReadName(p.pkt, p.answers[0].name_offset, &end, &owner), dns::ParseError::kOk);
  EXPECT_EQ(owner, q);
  // Missing weights -> round robin.
  Parsed p2 = Respond(*e, AnswerMode::kSingle, t, AnswerTtl::Aged(0), &w);
  EXPECT_NE(p.pkt[p.answers[0].rdata_offset + 3], p2.pkt[p2.answers[0].rdata_offset + 3]);
}

TEST(WriteAnswer, TooSmallBufferFails) {
  const dns::NameKey q = Key("a.example");
  auto e = MakeAEntry(0, q, {1, 2}, {1, 1}, 1);
  SwrrTable t;
  AnswerWrite w;
  uint8_t buf[64];
  EXPECT_FALSE(WriteAnswer(*e, AnswerMode::kOrdered, t, {}, buf, 20, &w));
  EXPECT_TRUE(WriteAnswer(*e, AnswerMode::kSingle, t, {}, buf, 20, &w));
  EXPECT_FALSE(WriteAnswer(*e, AnswerMode::kAll, t, {}, buf, 31, &w));
}

// ---------------------------------------------------------------- WriteMessage

// The answer template against the general writer: ResponseWriter's header
// and question for the query, WriteAnswer's records, the same pick.
std::vector<uint8_t> ReferenceMessage(const CacheEntry& e, AnswerMode mode, SwrrTable& t, AnswerTtl ttl,
                                      const std::vector<uint8_t>& query, uint16_t flags) {
  dns::Query q;
  EXPECT_EQ(dns::ParseQuery(query, {}, &q), dns::ParseError::kOk);
  std::vector<uint8_t> out(4096);
  dns::ResponseWriter w(out.data(), out.size());
  EXPECT_EQ(w.BeginResponse(query, q, e.rcode()), dns::ParseError::kOk);
  if (flags != 0) w.AddFlags(flags);
  AnswerWrite aw;
  EXPECT_TRUE(WriteAnswer(e, mode, t, ttl, w.tail(), w.room(), &aw));
  w.Commit(dns::Section::kAnswer, aw.bytes, aw.answer_count);
  w.Commit(dns::Section::kAuthority, 0, aw.authority_count);
  out.resize(w.Finish(out.size()));
  return out;
}

std::vector<uint8_t> TemplateMessage(const CacheEntry& e, AnswerMode mode, SwrrTable& t, AnswerTtl ttl,
                                     const std::vector<uint8_t>& query, uint16_t flags, size_t cap = 4096) {
  std::vector<uint8_t> out(cap);
  AnswerWrite aw;
  out.resize(WriteMessage(e, mode, t, ttl, query.data(), flags, out.data(), out.size(), &aw));
  return out;
}

CacheEntryPtr MakeEntry(const CacheKey& key, EntryKind kind,
                        const std::function<void(CacheEntryBuilder&)>& add, uint32_t now) {
  CacheEntryBuilder b(key);
  add(b);
  auto e = b.Build(kind, now);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *std::move(e) : nullptr;
}

// Every kind of entry the cache holds, in every mode, aged, stale and as
// cached, for queries with the client's own case, RD/CD and AD: the same
// bytes as the general writer, pick after pick.
TEST(WriteMessage, AgreesWithTheGeneralWriterOnEveryKindOfEntry) {
  const uint32_t now = 1000;
  const dns::NameKey name = Key("www.example.com");
  const CacheKey a_key{kCommonPartition, name.span(), dns::type::kA, dns::klass::kIn};
  const CacheKey aaaa_key{kCommonPartition, name.span(), dns::type::kAaaa, dns::klass::kIn};
  const CacheKey mx_key{kCommonPartition, name.span(), dns::type::kMx, dns::klass::kIn};
  std::vector<std::pair<std::string, CacheEntryPtr>> entries;
  entries.emplace_back("one address", MakeAEntry(0, name, {0x0a000001}, {}, now));
  entries.emplace_back("weighted 3",
                       MakeAEntry(0, name, {0x0a000001, 0x0a000002, 0x0a000003}, {3, 2, 1}, now));
  entries.emplace_back("chain + weighted", MakeAEntry(0, name, {0x0a000001, 0x0a000002}, {1, 2}, now, 300,
                                                      {"a.cdn.example", "b.cdn.net"}));
  std::vector<uint32_t> many;
  std::vector<uint8_t> many_w;
  for (uint32_t i = 0; i < dns::kMaxWeightedAddresses; ++i) {
    many.push_back(0x0b000000 + i);
    many_w.push_back(static_cast<uint8_t>(1 + i % 7));
  }
  entries.emplace_back("64 weighted", MakeAEntry(0, name, many, many_w, now));
  entries.emplace_back("AAAA", MakeEntry(
                                   aaaa_key, EntryKind::kPositive,
                                   [&](CacheEntryBuilder& b) {
                                     for (uint8_t i = 1; i <= 3; ++i) {
                                       std::vector<uint8_t> v6(16, 0x20);
                                       v6[15] = i;
                                       b.AddAddress(name.span(), v6, 120 + i);
                                     }
                                   },
                                   now));
  entries.emplace_back("MX", MakeEntry(
                                 mx_key, EntryKind::kPositive,
                                 [&](CacheEntryBuilder& b) {
                                   const dns::NameKey mx = Key("mail.example.com");
                                   std::vector<uint8_t> rdata = {0, 10};
                                   rdata.insert(rdata.end(), mx.span().begin(), mx.span().end());
                                   b.AddAnswer(name.span(), dns::type::kMx, dns::klass::kIn, 600, rdata);
                                 },
                                 now));
  const std::vector<uint8_t> soa = {0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 60};
  const dns::NameKey zone = Key("example.com");
  // A negative entry carries the zone's SOA in its authority section.
  const auto negative = [&](const CacheKey& key, EntryKind kind) {
    return MakeEntry(
        key, kind,
        [&](CacheEntryBuilder& b) {
          b.AddAuthority(zone.span(), dns::type::kSoa, dns::klass::kIn, 300, soa);
        },
        now);
  };
  entries.emplace_back("NXDOMAIN", negative(a_key, EntryKind::kNxDomain));
  entries.emplace_back("NODATA", negative(aaaa_key, EntryKind::kNoData));
  entries.emplace_back("SERVFAIL", MakeEntry(
                                       a_key, EntryKind::kServFail, [](CacheEntryBuilder&) {}, now));

  const AnswerTtl ttls[] = {AnswerTtl::Aged(0), AnswerTtl::Aged(17), AnswerTtl::Aged(100000),
                            AnswerTtl::Stale(30)};
  for (const auto& [what, e] : entries) {
    ASSERT_NE(e, nullptr) << what;
    dns::testing::QuerySpec spec;
    spec.qname = "wWw.ExAmple.COM";
    spec.qtype = e->qtype();
    for (const AnswerMode mode : {AnswerMode::kAll, AnswerMode::kSingle, AnswerMode::kOrdered}) {
      SwrrTable reference, templated;
      for (int round = 0; round < 12; ++round) {
        spec.id = static_cast<uint16_t>(0x1000 + round * 77);
        spec.flags =
            static_cast<uint16_t>((round & 1 ? dns::flag::kRd : 0) | (round & 2 ? dns::flag::kCd : 0));
        spec.edns = round % 3 != 0;
        const std::vector<uint8_t> query = dns::testing::MakeQuery(spec);
        const uint16_t flags = round & 4 ? dns::flag::kAd : 0;
        const AnswerTtl ttl = ttls[round % 4];
        const std::vector<uint8_t> want = ReferenceMessage(*e, mode, reference, ttl, query, flags);
        const std::vector<uint8_t> got = TemplateMessage(*e, mode, templated, ttl, query, flags);
        ASSERT_EQ(got, want) << what << " mode " << static_cast<int>(mode) << " round " << round;
        // The client's spelling, and a message the codec reads.
        EXPECT_EQ(0, std::memcmp(got.data() + dns::kHeaderSize, query.data() + dns::kHeaderSize, name.len));
        dns::Message m;
        EXPECT_EQ(m.Parse(got, {}), dns::ParseError::kOk) << what;
      }
    }
  }
}

// Too small a buffer: 0, and the SWRR sequence has not moved (the general
// writer that then answers with TC picks what the template would have).
TEST(WriteMessage, TooSmallWritesNothingAndDoesNotPick) {
  const dns::NameKey name = Key("w.cdn.example");
  CacheEntryPtr e = MakeAEntry(0, name, {1, 2, 3}, {5, 1, 1}, 100);
  dns::testing::QuerySpec spec;
  spec.qname = "w.cdn.example";
  const std::vector<uint8_t> query = dns::testing::MakeQuery(spec);
  SwrrTable reference, templated;
  const size_t exact =
      ReferenceMessage(*e, AnswerMode::kSingle, reference, AnswerTtl::Aged(0), query, 0).size();
  SwrrTable fresh;
  EXPECT_TRUE(
      TemplateMessage(*e, AnswerMode::kSingle, templated, AnswerTtl::Aged(0), query, 0, exact - 1).empty());
  EXPECT_EQ(TemplateMessage(*e, AnswerMode::kSingle, templated, AnswerTtl::Aged(0), query, 0, exact).size(),
            exact);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(TemplateMessage(*e, AnswerMode::kSingle, templated, AnswerTtl::Aged(0), query, 0),
              ReferenceMessage(*e, AnswerMode::kSingle, reference, AnswerTtl::Aged(0), query, 0))
        << i;
  }
}

}  // namespace
}  // namespace weir::partitions
