#include "weir/recursor/bounded_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace weir::recursor {
namespace {

TEST(BoundedCache, NeverHoldsMoreThanItsCapacity) {
  BoundedCache<int, int> c(100);
  for (int i = 0; i < 10000; ++i) {
    c.Put(i, i, 1000 + static_cast<uint32_t>(i));
    ASSERT_LE(c.size(), 100u);
  }
  EXPECT_EQ(c.size(), 100u);
  EXPECT_EQ(c.evictions(), 9900u);
  // The newest entry is always kept: eviction happens before the insert.
  ASSERT_NE(c.Find(9999), nullptr);
  EXPECT_EQ(c.Find(9999)->value, 9999);
}

TEST(BoundedCache, SmallCacheEvictsTheEntryExpiringSoonest) {
  BoundedCache<std::string, int> c(4);
  c.Put("a", 1, 50);
  c.Put("b", 2, 10);  // soonest
  c.Put("c", 3, 90);
  c.Put("d", 4, 70);
  c.Put("e", 5, 60);
  EXPECT_EQ(c.Find("b"), nullptr);
  for (const char* k : {"a", "c", "d", "e"}) EXPECT_NE(c.Find(k), nullptr) << k;
  c.Put("f", 6, 80);
  EXPECT_EQ(c.Find("a"), nullptr);
}

TEST(BoundedCache, ReplacingAKeyEvictsNothing) {
  BoundedCache<int, int> c(2);
  c.Put(1, 1, 10);
  c.Put(2, 2, 20);
  c.Put(1, 11, 30);
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(c.evictions(), 0u);
  EXPECT_EQ(c.Find(1)->value, 11);
  EXPECT_EQ(c.Find(1)->expires, 30u);
  // FindOrInsert keeps what is there.
  EXPECT_EQ(c.FindOrInsert(2, 99, 99).value, 2);
}

TEST(BoundedCache, SampledEvictionPrefersExpiredEntries) {
  // Half the entries are expired, half live: a sample of 8 contains an
  // expired one with probability 1 - 2^-8, so almost every eviction must hit
  // an expired entry (a blind eviction would hit a live one half the time).
  BoundedCache<int, int> c(1000, 42);
  const uint32_t now = 5000;
  for (int i = 0; i < 1000; ++i) c.Put(i, i, i % 2 == 0 ? now - 1 : now + 1000);
  for (int i = 1000; i < 1200; ++i) c.Put(i, i, now + 2000);
  int live_lost = 0;
  for (int i = 1; i < 1000; i += 2) live_lost += c.Find(i) == nullptr ? 1 : 0;
  EXPECT_LE(live_lost, 20) << "of 200 evictions";
  EXPECT_EQ(c.size(), 1000u);
}

TEST(BoundedCache, EraseKeepsTheIndexConsistent) {
  BoundedCache<int, int> c(100);
  for (int i = 0; i < 50; ++i) c.Put(i, i * 10, static_cast<uint32_t>(i));
  EXPECT_TRUE(c.Erase(0));  // the last slot moves into slot 0
  EXPECT_FALSE(c.Erase(0));
  EXPECT_EQ(c.EraseExpired(20), 20u);  // expires 1..20
  EXPECT_EQ(c.size(), 29u);
  for (int i = 21; i < 50; ++i) {
    ASSERT_NE(c.Find(i), nullptr) << i;
    EXPECT_EQ(c.Find(i)->value, i * 10);
  }
  for (int i = 0; i <= 20; ++i) EXPECT_EQ(c.Find(i), nullptr) << i;
  c.Clear();
  EXPECT_EQ(c.size(), 0u);
  EXPECT_EQ(c.Find(30), nullptr);
}

TEST(BoundedCache, EraseMatchingCountsFlushedApartFromEvictions) {
  BoundedCache<int, int> c(3);
  for (int i = 0; i < 5; ++i) c.Put(i, i * 10, 100);  // two evictions
  ASSERT_EQ(c.evictions(), 2u);
  EXPECT_EQ(c.inserts(), 5u);
  c.Put(4, 41, 100);  // a replacement inserts no key
  EXPECT_EQ(c.inserts(), 5u);
  std::vector<int> kept;
  c.ForEach([&](const auto& e) {
    kept.push_back(e.key);
    return true;
  });
  EXPECT_EQ(kept.size(), 3u);
  // Only the even keys go; a pred may change what it keeps.
  const size_t n = c.EraseMatching([](auto& e) {
    if (e.key % 2 != 0) {
      e.value = -1;
      return false;
    }
    return true;
  });
  EXPECT_EQ(n,
            static_cast<size_t>(std::count_if(kept.begin(), kept.end(), [](int k) { return k % 2 == 0; })));
  EXPECT_GT(n, 0u);
  EXPECT_EQ(c.flushed(), n);
  EXPECT_EQ(c.evictions(), 2u);  // a flush is not an eviction
  for (int k : kept) {
    if (k % 2 == 0) {
      EXPECT_EQ(c.Find(k), nullptr) << k;
    } else {
      ASSERT_NE(c.Find(k), nullptr) << k;
      EXPECT_EQ(c.Find(k)->value, -1);
    }
  }
  // The sweep's EraseIf is no flush.
  c.EraseIf([](const auto&) { return true; });
  EXPECT_EQ(c.flushed(), n);
  EXPECT_EQ(c.size(), 0u);
}

}  // namespace
}  // namespace weir::recursor
