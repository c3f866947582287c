#include "weir/partitions/tagtable.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "test_util.h"

namespace weir::partitions {
namespace {

using testing::Key;

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
  EXPECT_EQ(t->suffix, Key("cdn.example.com"));
  EXPECT_TRUE(t->weight);
  EXPECT_TRUE(t->ecs);
  EXPECT_EQ(t->policy, Policy::kForward);
  ASSERT_EQ(t->targets.size(), 3u);
  EXPECT_EQ(common::IpToString(t->targets[0].address), "127.0.0.1");
  EXPECT_EQ(t->targets[0].port, 5300);
  EXPECT_EQ(common::IpToString(t->targets[1].address), "2001:db8::53");
  EXPECT_EQ(t->targets[1].port, 53);
  EXPECT_EQ(t->targets[2].port, 53);
  EXPECT_EQ(t->answer, AnswerMode::kOrdered);
  // Round trip through the canonical text.
  auto again = ParseTagLine(FormatTag(*t));
  ASSERT_TRUE(again.ok()) << FormatTag(*t);
  EXPECT_EQ(FormatTag(*again), FormatTag(*t));
  EXPECT_EQ(again->targets, t->targets);
}

TEST(TagLine, ActiveRefresh) {
  auto t = ParseTagLine("cdn.example.com weight=on refresh=active");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->active_refresh);
  EXPECT_EQ(FormatTag(*t),
            "cdn.example.com. weight=on ecs=off policy=iterate answer=single level=global refresh=active");
  auto again = ParseTagLine(FormatTag(*t));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->active_refresh);
  // passive (the default) writes nothing: older tag lines read back the same.
  t = ParseTagLine("cdn.example.com refresh=passive");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->active_refresh);
  EXPECT_EQ(FormatTag(*t).find("refresh"), std::string::npos);
}

TEST(TagLine, AdaptiveLevel) {
  auto t = ParseTagLine("seg.example.com weight=on ecs=on level=adaptive");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->level, CacheLevel::kAdaptive);
  EXPECT_EQ(t->max_segments, kDefaultSegmentsPerName);
  EXPECT_EQ(FormatTag(*t), "seg.example.com. weight=on ecs=on policy=iterate answer=single level=adaptive");
  t = ParseTagLine("seg.example.com ecs=on level=adaptive max_segments=512");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->max_segments, 512);
  auto again = ParseTagLine(FormatTag(*t));
  ASSERT_TRUE(again.ok()) << FormatTag(*t);
  EXPECT_EQ(again->max_segments, 512);
  EXPECT_EQ(FormatTag(*again), FormatTag(*t));
  t = ParseTagLine("seg.example.com ecs=on level=adaptive max_segments=65534");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->max_segments, 65534);
  const std::pair<const char*, const char*> bad[] = {
      {"a.com level=adaptive", "level=adaptive needs ecs=on"},
      {"a.com ecs=on level=city max_segments=4", "max_segments needs level=adaptive"},
      {"a.com ecs=on level=adaptive max_segments=0", "max_segments must be 1..65534"},
      {"a.com ecs=on level=adaptive max_segments=65535", "max_segments must be 1..65534"},
      {"a.com ecs=on level=adaptive max_segments=x", "max_segments must be 1..65534"},
      {"a.com weight=on ecs=on level=adaptive calibrate=on", "calibrate=on needs level=global or level=city"},
      {"a.com ecs=on level=segment", "level must be global, city, subnet or adaptive"},
  };
  for (const auto& [line, want] : bad) {
    auto r = ParseTagLine(line);
    ASSERT_FALSE(r.ok()) << line;
    EXPECT_NE(std::string(r.status().message()).find(want), std::string::npos) << line << ": " << r.status();
  }
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
      {"a.com refresh=sometimes\n", "line 1: refresh must be active or passive"},
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

TEST(TagText, EveryBadLineIsReportedInLineOrder) {
  common::LineErrors errors;
  auto t = TagTable::FromText("a.com weight=on\nb.com colour=red\na.com\nc..com\nA.com. ecs=on\n", &errors);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "line 2: unknown key 'colour'");
  EXPECT_EQ(errors.Render("tags.txt"), (std::vector<std::string>{
                                           "tags.txt:2: unknown key 'colour'",
                                           "tags.txt:3: duplicate tag for a.com. (first on line 1)",
                                           "tags.txt:4: bad domain suffix 'c..com'",
                                           "tags.txt:5: duplicate tag for a.com. (first on line 1)",
                                       }));
  common::LineErrors none;
  EXPECT_TRUE(TagTable::FromText("a.com weight=on\n", &none).ok());
  EXPECT_TRUE(none.empty());
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
    dns::NameKey k = Key(n);
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
  dns::NameKey a = Key("foo.org"), b = Key("a.example.com");
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
  for (const auto& s : suffixes) keys.push_back(Key(s));

  for (int i = 0; i < 20000; ++i) {
    dns::NameKey q = Key(random_name(7));
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

// The most specific tag suffix of q, by scanning every tag: k must be a
// label-aligned suffix of q.
const dns::NameKey* BruteForceMostSpecific(const std::vector<dns::NameKey>& keys, const dns::NameKey& q) {
  const dns::NameKey* best = nullptr;
  for (const auto& k : keys) {
    if (k.len > q.len) continue;
    const size_t off = q.len - k.len;
    if (!std::equal(k.bytes.begin(), k.bytes.begin() + k.len, q.bytes.begin() + off)) continue;
    size_t p = 0;
    while (p < off) p += 1 + q.bytes[p];
    if (p != off) continue;
    if (best == nullptr || k.len > best->len) best = &k;
  }
  return best;
}

// Random tag sets of every shape (root tag, 1-char to 63-char labels, keys
// longer than what an index record holds inline, up to 127 labels) against
// names built to hit the corner cases: a tag itself, its parent, a tag under
// extra labels, a tag's labels over another suffix, string-but-not-label
// suffixes, names shorter than 8 bytes, 255-byte names with 127 labels.
TEST(TagTableProperty, AgreesWithBruteForceOnRandomShapes) {
  std::mt19937_64 rng(20240611);
  const std::string vocab[] = {"a",
                               "b",
                               "cdn",
                               "www",
                               "example",
                               "com",
                               "cn",
                               "x1",
                               "gslb",
                               "edge",
                               "verylonglabelname-abcdefgh",
                               "img0123456789"};
  auto random_label = [&]() -> std::string {
    switch (rng() % 4) {
      case 0:
      case 1:
        return vocab[rng() % std::size(vocab)];
      case 2: {  // short random label, often 1 char
        std::string l(1 + rng() % 3, 'a');
        for (char& c : l) c = static_cast<char>('a' + rng() % 3);
        return l;
      }
      default: {  // any length up to 63, crossing 8-byte words
        std::string l(1 + rng() % 63, 'a');
        for (char& c : l) c = "abcdefghij0123456789-"[rng() % 21];
        if (l.front() == '-') l.front() = 'z';
        return l;
      }
    }
  };
  // Wire size of a name given as labels ("." joined), root byte included.
  auto wire_size = [](const std::vector<std::string>& labels) {
    size_t n = 1;
    for (const auto& l : labels) n += 1 + l.size();
    return n;
  };
  auto to_text = [](const std::vector<std::string>& labels) {
    if (labels.empty()) return std::string(".");
    std::string s;
    for (const auto& l : labels) s += l + ".";
    return s;
  };
  auto random_labels = [&](size_t max_labels) {
    std::vector<std::string> labels;
    const size_t n = rng() % (max_labels + 1);
    for (size_t i = 0; i < n; ++i) {
      std::string l = random_label();
      labels.push_back(l);
      if (wire_size(labels) > dns::kMaxNameWire) {
        labels.pop_back();
        break;
      }
    }
    return labels;
  };
  // prefix + suffix (may be longer than a name can be: callers check).
  auto join = [&](std::vector<std::string> prefix, const std::vector<std::string>& suffix) {
    prefix.insert(prefix.end(), suffix.begin(), suffix.end());
    return prefix;
  };

  size_t tagged = 0, untagged = 0;
  std::vector<dns::NameKey> burst_keys;
  std::vector<std::vector<uint8_t>> burst_starts;
  std::vector<const Tag*> burst_want;
  for (int round = 0; round < 40; ++round) {
    std::set<std::vector<std::string>> tag_labels;
    const size_t want = 1 + rng() % (round % 4 == 0 ? 5 : 1500);
    const size_t max_tag_labels = 1 + rng() % (round % 5 == 0 ? 30 : 6);
    if (rng() % 8 == 0) tag_labels.insert({});  // the root
    while (tag_labels.size() < want) {
      std::vector<std::string> l = random_labels(max_tag_labels);
      if (rng() % 3 == 0 && !tag_labels.empty()) {
        // Under or over an existing tag, so that tags nest.
        auto it = tag_labels.begin();
        std::advance(it, rng() % tag_labels.size());
        l = join(random_labels(2), *it);
        if (wire_size(l) > dns::kMaxNameWire) continue;
      }
      tag_labels.insert(l);
    }
    std::vector<Tag> tags;
    std::vector<dns::NameKey> keys;
    std::vector<std::vector<std::string>> tag_list(tag_labels.begin(), tag_labels.end());
    for (const auto& l : tag_list) {
      Tag t;
      t.suffix = Key(to_text(l));
      keys.push_back(t.suffix);
      tags.push_back(std::move(t));
    }
    auto table = TagTable::Build(std::move(tags));
    ASSERT_TRUE(table.ok()) << table.status();
    const TagTable& tt = **table;

    for (int i = 0; i < 4000; ++i) {
      const auto& some_tag = tag_list[rng() % tag_list.size()];
      std::vector<std::string> q;
      switch (rng() % 8) {
        case 0:  // a tag itself
          q = some_tag;
          break;
        case 1:  // its parent (one label less), or the root
          q = some_tag.empty() ? some_tag : std::vector<std::string>(some_tag.begin() + 1, some_tag.end());
          break;
        case 2:  // under a tag
          q = join(random_labels(4), some_tag);
          break;
        case 3: {  // a tag's labels over another suffix: shares a prefix, not a suffix
          q = join(some_tag, random_labels(2));
          break;
        }
        case 4: {  // the first label extended: a string suffix, not a label suffix
          q = some_tag;
          if (!q.empty()) {
            std::string l = random_label() + q.front();
            q.front() = l.substr(l.size() > 63 ? l.size() - 63 : 0);
          }
          break;
        }
        case 5: {  // 1-char labels up to 127 labels / 255 bytes over a tag
          q = some_tag;
          while (wire_size(q) + 2 <= dns::kMaxNameWire)
            q.insert(q.begin(), std::string(1, static_cast<char>('a' + rng() % 3)));
          break;
        }
        case 6:
          q = random_labels(rng() % 2 ? 3 : 127);
          break;
        default:
          q = {};  // the root
          break;
      }
      if (wire_size(q) > dns::kMaxNameWire) continue;
      const dns::NameKey key = Key(to_text(q));
      const dns::NameKey* best = BruteForceMostSpecific(keys, key);
      const Tag* got = tt.Lookup(key.span());
      // The same with the label starts given (as the fastpath passes the
      // parser's), and in a burst of names (checked below).
      std::vector<uint8_t> starts;
      for (size_t pos = 0;; pos += 1 + key.bytes[pos]) {
        starts.push_back(static_cast<uint8_t>(pos));
        if (key.bytes[pos] == 0) break;
      }
      EXPECT_EQ(tt.Lookup(key.span(), starts), got) << dns::NameKeyToText(key.span());
      burst_keys.push_back(key);
      burst_starts.push_back(std::move(starts));
      burst_want.push_back(got);
      if (best == nullptr) {
        ++untagged;
        EXPECT_EQ(got, nullptr) << dns::NameKeyToText(key.span()) << " -> "
                                << dns::NameKeyToText(got->suffix.span());
      } else {
        ++tagged;
        ASSERT_NE(got, nullptr) << dns::NameKeyToText(key.span());
        EXPECT_EQ(got->suffix, *best) << dns::NameKeyToText(key.span());
      }
    }
    // LookupBurst agrees with Lookup, with and without the starts, over
    // bursts of every length up to 70 (more than one internal stage).
    for (size_t at = 0; at < burst_keys.size();) {
      const size_t n = std::min<size_t>(burst_keys.size() - at, 1 + rng() % 70);
      std::vector<std::span<const uint8_t>> names, starts;
      for (size_t i = at; i < at + n; ++i) {
        names.push_back(burst_keys[i].span());
        starts.push_back(burst_starts[i]);
      }
      std::vector<const Tag*> out(n, &tt.tags().front());
      tt.LookupBurst(names.data(), starts.data(), out.data(), n);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], burst_want[at + i]) << i;
      std::fill(out.begin(), out.end(), &tt.tags().front());
      tt.LookupBurst(names.data(), nullptr, out.data(), n);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], burst_want[at + i]) << i;
      at += n;
    }
    burst_keys.clear();
    burst_starts.clear();
    burst_want.clear();
    // Every tag finds itself, whatever its length.
    for (const auto& k : keys) {
      const Tag* got = tt.Lookup(k.span());
      ASSERT_NE(got, nullptr) << dns::NameKeyToText(k.span());
      EXPECT_EQ(got->suffix, k);
    }
  }
  // Both outcomes were exercised, many times.
  EXPECT_GT(tagged, 20000u);
  EXPECT_GT(untagged, 5000u);
}

// A name is looked up in place, wherever it sits in memory: the index never
// reads outside the span (ASan checks this), including at the very end of an
// allocation and for names shorter than one 8-byte word.
TEST(TagTable, LooksUpNamesAtTheEndOfTheirBuffer) {
  auto t = TagTable::FromText("a. weight=on\nb.c ecs=on\ncdn0123456789.example.com level=subnet\n");
  ASSERT_TRUE(t.ok()) << t.status();
  for (const char* text : {".", "a.", "x.a.", "b.c.", "c.", "cdn0123456789.example.com",
                           "y.cdn0123456789.example.com", "dn0123456789.example.com"}) {
    const dns::NameKey k = Key(text);
    std::vector<uint8_t> exact(k.bytes.begin(), k.bytes.begin() + k.len);  // heap block of exactly len bytes
    const Tag* got = (*t)->Lookup(exact);
    const Tag* want = (*t)->Lookup(k.span());
    EXPECT_EQ(got, want) << text;
  }
  const dns::NameKey a = Key("x.a"), bc = Key("z.b.c"), cdn = Key("cdn0123456789.example.com");
  std::vector<uint8_t> buf(a.bytes.begin(), a.bytes.begin() + a.len);
  ASSERT_NE((*t)->Lookup(buf), nullptr);
  EXPECT_TRUE((*t)->Lookup(buf)->weight);
  buf.assign(bc.bytes.begin(), bc.bytes.begin() + bc.len);
  ASSERT_NE((*t)->Lookup(buf), nullptr);
  EXPECT_TRUE((*t)->Lookup(buf)->ecs);
  buf.assign(cdn.bytes.begin(), cdn.bytes.begin() + cdn.len);
  ASSERT_NE((*t)->Lookup(buf), nullptr);
  EXPECT_EQ((*t)->Lookup(buf)->level, CacheLevel::kSubnet);
  // Trailing bytes after the root, or a key too long: not a name.
  buf.push_back(0);
  EXPECT_EQ((*t)->Lookup(buf), nullptr);
  std::vector<uint8_t> huge(300, 0);
  huge[0] = 1;
  huge[1] = 'a';
  EXPECT_EQ((*t)->Lookup(huge), nullptr);
}

}  // namespace
}  // namespace weir::partitions
