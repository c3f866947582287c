// The zone-cut finder against a scripted resolver and a fake clock: the
// walk (NS, SOA of a negative answer, one label up after a CNAME, SERVFAIL
// or nothing), the server addresses, sharing, caching by zone and expiry.
#include "weir/recursor/zone_cuts.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "scripted_resolver.h"

namespace weir::recursor {
namespace {

using namespace test_support;  // the scripted resolver and its record builders

class ZoneCutsTest : public ::testing::Test {
 protected:
  ZoneCutsTest()
      : finder_(resolver_, clock_, {.do_ip6 = false, .max_ttl = 3600, .max_entries = 100}, Log()) {}
  ZoneCutFinder::Log Log() {
    return [this](const std::string& line) { log_.push_back(line); };
  }
  void Zone(const std::string& zone, const std::string& address, uint32_t ns_ttl = 3600,
            uint32_t a_ttl = 3600) {
    resolver_.Zone(zone, address, ns_ttl, a_ttl);
  }
  // Find() and deliver everything; the cut's zone text and first server, or "none".
  std::string Find(const std::string& name) {
    std::string got = "pending";
    finder_.Find(Key(name), [&](const ZoneCut* z) {
      got = z == nullptr ? "none"
                         : dns::NameKeyToText(z->cut.span()) + " " + z->servers.front().ToString() + " x" +
                               std::to_string(z->servers.size());
    });
    resolver_.Deliver();
    return got;
  }

  ScriptedResolver resolver_;
  common::FakeClock clock_{1000};
  std::vector<std::string> log_;
  ZoneCutFinder finder_;
};

TEST_F(ZoneCutsTest, NegativeAnswerNamesTheZoneBySoa) {
  Zone("cdn.example.", "192.0.2.53");
  resolver_.Script("x.cdn.example.", dns::type::kNs,
                   {3, {}, {{"cdn.example.", dns::type::kSoa, 60, SoaRdata("cdn.example.")}}});
  EXPECT_EQ(Find("x.cdn.example"), "cdn.example. 192.0.2.53:53 x1");
  EXPECT_EQ(resolver_.asked,
            (std::vector<std::pair<std::string, uint16_t>>{{"x.cdn.example.", dns::type::kNs},
                                                           {"cdn.example.", dns::type::kNs},
                                                           {"ns1.cdn.example.", dns::type::kA}}));
  // Every name of the zone shares the cached cut, without a query.
  resolver_.asked.clear();
  const ZoneCut* z = finder_.Cached(Key("other.deep.cdn.example"));
  ASSERT_NE(z, nullptr);
  EXPECT_EQ(dns::NameKeyToText(z->cut.span()), "cdn.example.");
  EXPECT_TRUE(resolver_.asked.empty());
  EXPECT_EQ(finder_.Cached(Key("example")), nullptr);
  EXPECT_EQ(finder_.stats().lookups, 1u);
  EXPECT_EQ(finder_.stats().resolver_queries, 3u);
}

TEST_F(ZoneCutsTest, CnameServfailOrNothingMoveOneLabelUp) {
  Zone("shop.example.", "192.0.2.1");
  resolver_.Script("video.shop.example.", dns::type::kNs,
                   {0, {{"video.shop.example.", dns::type::kCname, 300, NameRdata("x.cdn.example.")}}, {}});
  EXPECT_EQ(Find("video.shop.example"), "shop.example. 192.0.2.1:53 x1");
  finder_.Clear();
  // a.b.shop.example: unscripted, SERVFAIL (say a CNAME loop): up to b., then
  // NODATA without SOA at b.: up again.
  resolver_.Script("b.shop.example.", dns::type::kNs, {0, {}, {}});
  EXPECT_EQ(Find("a.b.shop.example"), "shop.example. 192.0.2.1:53 x1");
}

TEST_F(ZoneCutsTest, TtlIsTheShortestOfNsAndAddressesAndTheCutExpires) {
  Zone("cdn.example.", "192.0.2.53", /*ns_ttl=*/300, /*a_ttl=*/40);
  ASSERT_EQ(Find("cdn.example"), "cdn.example. 192.0.2.53:53 x1");
  clock_.Advance(39);
  EXPECT_NE(finder_.Cached(Key("x.cdn.example")), nullptr);
  clock_.Advance(1);
  EXPECT_EQ(finder_.Cached(Key("x.cdn.example")), nullptr);
}

TEST_F(ZoneCutsTest, ConcurrentLookupsShareOneWalk) {
  Zone("cdn.example.", "192.0.2.53");
  int calls = 0;
  for (int i = 0; i < 3; ++i)
    finder_.Find(Key("cdn.example"), [&](const ZoneCut* z) { calls += z != nullptr; });
  resolver_.Deliver();
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(finder_.stats().lookups, 1u);
  EXPECT_EQ(resolver_.asked.size(), 2u);  // NS, then A of ns1: no AAAA with do_ip6 off
}

TEST_F(ZoneCutsTest, NoServerAddressesIsAFailureLoggedOnce) {
  resolver_.Script("lame.example.", dns::type::kNs,
                   {0, {{"lame.example.", dns::type::kNs, 3600, NameRdata("ns.nowhere.example.")}}, {}});
  int failures = 0;
  for (int i = 0; i < 2; ++i)
    finder_.Find(Key("lame.example"), [&](const ZoneCut* z) { failures += z == nullptr; });
  resolver_.Deliver();
  EXPECT_EQ(failures, 2);
  EXPECT_EQ(finder_.stats().failures, 1u);
  ASSERT_EQ(log_.size(), 1u);
  EXPECT_NE(log_[0].find("lame.example."), std::string::npos);
  EXPECT_EQ(finder_.size(), 0u);  // nothing cached: the next query tries again
}

TEST_F(ZoneCutsTest, TheRootWithoutNsGivesUp) {
  EXPECT_EQ(Find("a.b.c"), "none");  // SERVFAIL all the way up, the root included
  EXPECT_EQ(resolver_.asked.back(), (std::pair<std::string, uint16_t>{".", dns::type::kNs}));
}

}  // namespace
}  // namespace weir::recursor
