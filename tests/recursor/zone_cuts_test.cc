// The zone-cut finder against a scripted resolver and a fake clock: the
// walk (NS, SOA of a negative answer, one label up after a CNAME, SERVFAIL
// or nothing), the server addresses, sharing, caching by zone and expiry.
#include "weir/recursor/zone_cuts.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "weir/dns/writer.h"

namespace weir::recursor {
namespace {

dns::NameKey Key(const std::string& text) {
  dns::NameKey k;
  EXPECT_TRUE(dns::NameKeyFromText(text, &k)) << text;
  return k;
}

struct Rr {
  std::string owner;
  uint16_t type;
  uint32_t ttl;
  std::vector<uint8_t> rdata;
};

std::vector<uint8_t> NameRdata(const std::string& text) {
  const dns::NameKey k = Key(text);
  return {k.bytes.begin(), k.bytes.begin() + k.len};
}

std::vector<uint8_t> SoaRdata(const std::string& zone) {
  std::vector<uint8_t> r = NameRdata("ns1." + zone);
  const std::vector<uint8_t> h = NameRdata("hostmaster." + zone);
  r.insert(r.end(), h.begin(), h.end());
  for (uint32_t v : {1u, 3600u, 600u, 86400u, 60u}) {
    for (int sh = 24; sh >= 0; sh -= 8) r.push_back(static_cast<uint8_t>(v >> sh));
  }
  return r;
}

// Answers by (name, type); unscripted questions get SERVFAIL. Callbacks are
// delivered later, from Deliver(), as libunbound delivers them.
class ScriptedResolver : public Resolver {
 public:
  struct Reply {
    uint16_t rcode = 0;
    std::vector<Rr> answer, authority;
  };
  void Script(const std::string& name, uint16_t type, Reply r) {
    script_[{Lower(name), type}] = std::move(r);
  }
  bool Resolve(const std::string& name, uint16_t type, uint16_t, Callback cb) override {
    asked.emplace_back(Lower(name), type);
    pending_.emplace_back(Build(Lower(name), type), std::move(cb));
    return true;
  }
  // Delivers until nothing is pending; returns how many were delivered.
  size_t Deliver() {
    size_t n = 0;
    while (!pending_.empty()) {
      auto [pkt, cb] = std::move(pending_.front());
      pending_.pop_front();
      cb(ResolverResult{0, pkt, false, false});
      ++n;
    }
    return n;
  }
  std::vector<std::pair<std::string, uint16_t>> asked;

 private:
  static std::string Lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (s.empty() || s.back() != '.') s.push_back('.');
    return s;
  }
  std::vector<uint8_t> Build(const std::string& name, uint16_t type) {
    Reply r;
    auto it = script_.find({name, type});
    if (it != script_.end()) {
      r = it->second;
    } else {
      r.rcode = 2;
    }
    std::vector<uint8_t> buf(4096);
    dns::ResponseWriter w(buf.data(), buf.size());
    const dns::NameKey q = Key(name);
    EXPECT_EQ(w.Begin(1, static_cast<uint16_t>(dns::flag::kQr | dns::flag::kRa | r.rcode), q.span(), type,
                      dns::klass::kIn),
              dns::ParseError::kOk);
    for (auto [section, list] :
         {std::pair{dns::Section::kAnswer, &r.answer}, std::pair{dns::Section::kAuthority, &r.authority}}) {
      for (const Rr& rr : *list) {
        const dns::NameKey o = Key(rr.owner);
        EXPECT_EQ(w.AppendRecord(section, o.span(), rr.type, dns::klass::kIn, rr.ttl, rr.rdata),
                  dns::ParseError::kOk);
      }
    }
    buf.resize(w.Finish(buf.size()));
    return buf;
  }
  std::map<std::pair<std::string, uint16_t>, Reply> script_;
  std::deque<std::pair<std::vector<uint8_t>, Callback>> pending_;
};

class ZoneCutsTest : public ::testing::Test {
 protected:
  ZoneCutsTest()
      : finder_(resolver_, clock_, {.do_ip6 = false, .max_ttl = 3600, .max_entries = 100}, Log()) {}
  ZoneCutFinder::Log Log() {
    return [this](const std::string& line) { log_.push_back(line); };
  }
  // The zone `zone` with NS ns1.<zone> at `address`.
  void Zone(const std::string& zone, const std::string& address, uint32_t ns_ttl = 3600,
            uint32_t a_ttl = 3600) {
    resolver_.Script(zone, dns::type::kNs,
                     {0, {{zone, dns::type::kNs, ns_ttl, NameRdata("ns1." + zone)}}, {}});
    std::vector<uint8_t> a(4);
    EXPECT_EQ(inet_pton(AF_INET, address.c_str(), a.data()), 1);
    resolver_.Script("ns1." + zone, dns::type::kA, {0, {{"ns1." + zone, dns::type::kA, a_ttl, a}}, {}});
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
  partitions::FakeClock clock_{1000};
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
