#include "weir/partitions/tagtable.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>

namespace weir::partitions {
namespace {

dns::NameKey Name(std::string_view s) {
  dns::NameKey k;
  EXPECT_TRUE(dns::NameKeyFromText(s, &k)) << s;
  return k;
}

TEST(TagLine, DefaultsAndEcsImpliesCity) {
  auto t = ParseTagLine("cdn.example.com");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->weight);
  EXPECT_FALSE(t->ecs);
  EXPECT_EQ(t->policy, Policy::kIterate);
  EXPECT_EQ(t->answer, AnswerMode::kSingle);
  EXPECT_EQ(t->level, CacheLevel::kGlobal);

  t = ParseTagLine("cdn.example.com ecs=on");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->level, CacheLevel::kCity);
  t = ParseTagLine("cdn.example.com ecs=on level=subnet");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->level, CacheLevel::kSubnet);
  t = ParseTagLine("cdn.example.com level=global ecs=on");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->level, CacheLevel::kGlobal);  // explicitly set wins
}

TEST(TagLine, FullLine) {
  auto t = ParseTagLine(
      "CDN.Example.com.  weight=on ecs=on\tpolicy=forward:127.0.0.1@5300,[2001:db8::53]@53,192.0.2.1 "
      "answer=ordered level=city");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->suffix, Name("cdn.example.com"));
  EXPECT_TRUE(t->weight);
  EXPECT_TRUE(t->ecs);
  EXPECT_EQ(t->policy, Policy::kForward);
  ASSERT_EQ(t->targets.size(), 3u);
  EXPECT_EQ(IpToString(t->targets[0].address), "127.0.0.1");
  EXPECT_EQ(t->targets[0].port, 5300);
  EXPECT_EQ(IpToString(t->targets[1].address), "2001:db8::53");
  EXPECT_EQ(t->targets[1].port, 53);
  EXPECT_EQ(t->targets[2].port, 53);
  EXPECT_EQ(t->answer, AnswerMode::kOrdered);
  // Round trip through the canonical text.
  auto again = ParseTagLine(FormatTag(*t));
  ASSERT_TRUE(again.ok()) << FormatTag(*t);
  EXPECT_EQ(FormatTag(*again), FormatTag(*t));
  EXPECT_EQ(again->targets, t->targets);
}

TEST(TagText, ErrorsCarryLineNumbers) {
  const std::pair<const char*, const char*> cases[] = {
      {"a.com weight=on\nb.com weight=maybe\n", "line 2: weight: expected on/off"},
      {"a.com colour=red\n", "line 1: unknown key 'colour'"},
      {"a.com weight=on weight=off\n", "line 1: key 'weight' given twice"},
      {"# c\na.com policy=forward\n", "line 2: policy=forward needs targets"},
      {"a.com policy=forward:\n", "line 1: policy=forward needs targets"},
      {"a.com policy=forward:1.2.3.4@0\n", "line 1: bad port"},
      {"a.com policy=forward:1.2.3.4@99999\n", "line 1: bad port"},
      {"a.com policy=forward:host.example\n", "line 1: bad target address"},
      {"a.com policy=recurse\n", "line 1: policy must be"},
      {"a.com answer=all\n", "line 1: answer must be"},
      {"a.com level=planet\n", "line 1: level must be"},
      {"a.com ecs\n", "line 1: expected key=value"},
      {"a..com\n", "line 1: bad domain suffix"},
      {"ex\\046ample.com\n", "line 1: bad domain suffix"},
      {"caf\xc3\xa9.com\n", "line 1: bad domain suffix"},
      {"a.com\n\nb.com\nA.COM.\n", "line 4: duplicate tag for a.com. (first on line 1)"},
  };
  for (const auto& [text, want] : cases) {
    auto t = TagTable::FromText(text);
    ASSERT_FALSE(t.ok()) << text;
    EXPECT_NE(std::string(t.status().message()).find(want), std::string::npos)
        << "got: " << t.status().message() << "\nwant: " << want;
  }
}

TEST(TagTable, MostSpecificSuffixWins) {
  auto t = TagTable::FromText(R"(
example.com weight=on
cdn.example.com ecs=on   # more specific
x.y.cdn.example.com level=subnet
net answer=ordered
)");
  ASSERT_TRUE(t.ok()) << t.status();
  const TagTable& tt = **t;
  auto find = [&](const char* n) {
    dns::NameKey k = Name(n);
    return tt.Lookup(k.span());
  };
  ASSERT_NE(find("www.example.com"), nullptr);
  EXPECT_TRUE(find("www.example.com")->weight);
  EXPECT_TRUE(find("example.com")->weight);
  EXPECT_TRUE(find("cdn.example.com")->ecs);
  EXPECT_TRUE(find("a.b.cdn.example.com")->ecs);
  EXPECT_EQ(find("x.y.cdn.example.com")->level, CacheLevel::kSubnet);
  EXPECT_EQ(find("z.x.y.cdn.example.com")->level, CacheLevel::kSubnet);
  EXPECT_EQ(find("y.cdn.example.com")->level, CacheLevel::kCity);
  EXPECT_EQ(find("xcdn.example.com")->level, CacheLevel::kGlobal);  // label boundary, not string suffix
  EXPECT_EQ(find("foo.net")->answer, AnswerMode::kOrdered);
  EXPECT_EQ(find("example.org"), nullptr);
  EXPECT_EQ(find("com"), nullptr);
  EXPECT_EQ(find("."), nullptr);
}

TEST(TagTable, RootTagMatchesEverything) {
  auto t = TagTable::FromText(". weight=on\nexample.com ecs=on\n");
  ASSERT_TRUE(t.ok());
  dns::NameKey a = Name("foo.org"), b = Name("a.example.com");
  ASSERT_NE((*t)->Lookup(a.span()), nullptr);
  EXPECT_TRUE((*t)->Lookup(a.span())->weight);
  EXPECT_TRUE((*t)->Lookup(b.span())->ecs);
}

TEST(TagTable, MalformedKeyIsUntagged) {
  auto t = TagTable::FromText("com\n");
  ASSERT_TRUE(t.ok());
  const uint8_t bad[] = {5, 'a', 'b'};  // label runs past the end
  EXPECT_EQ((*t)->Lookup(bad), nullptr);
  EXPECT_EQ((*t)->Lookup({}), nullptr);
}

// Random tags over a small vocabulary so names share suffixes; the table must
// agree with a scan over all tags that keeps the longest matching suffix.
TEST(TagTableProperty, AgreesWithLinearScan) {
  std::mt19937_64 rng(7);
  const char* words[] = {"a", "b", "cdn", "www", "example", "com", "net", "x1", "gslb", "edge"};
  auto random_name = [&](int max_labels) {
    int n = 1 + static_cast<int>(rng() % max_labels);
    std::string s;
    for (int i = 0; i < n; ++i) s += std::string(words[rng() % 10]) + ".";
    return s;
  };
  std::set<std::string> suffixes;
  while (suffixes.size() < 2000) suffixes.insert(random_name(4));
  std::string text;
  for (const auto& s : suffixes) text += s + " weight=on\n";
  auto t = TagTable::FromText(text);
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<dns::NameKey> keys;
  for (const auto& s : suffixes) keys.push_back(Name(s));

  for (int i = 0; i < 20000; ++i) {
    dns::NameKey q = Name(random_name(7));
    const dns::NameKey* best = nullptr;
    for (const auto& k : keys) {
      // k is a label-aligned suffix of q?
      if (k.len > q.len) continue;
      size_t off = q.len - k.len;
      if (!std::equal(k.bytes.begin(), k.bytes.begin() + k.len, q.bytes.begin() + off)) continue;
      size_t p = 0;
      while (p < off) p += 1 + q.bytes[p];
      if (p != off) continue;
      if (best == nullptr || k.len > best->len) best = &k;
    }
    const Tag* got = (*t)->Lookup(q.span());
    if (best == nullptr) {
      EXPECT_EQ(got, nullptr) << dns::NameKeyToText(q.span());
    } else {
      ASSERT_NE(got, nullptr) << dns::NameKeyToText(q.span());
      EXPECT_EQ(got->suffix, *best) << dns::NameKeyToText(q.span());
    }
  }
}

}  // namespace
}  // namespace weir::partitions
