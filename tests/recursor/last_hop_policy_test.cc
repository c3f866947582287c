// The last-hop rules as pure functions: ECS choice, echo checks, rcode
// retries, bailiwick, CNAME chains and weights of one authoritative reply.
#include "weir/recursor/last_hop_policy.h"

#include <gtest/gtest.h>

#include <vector>

#include "weir/dns/writer.h"

namespace weir::recursor {
namespace {

dns::ClientSubnet Subnet(std::vector<uint8_t> addr, uint8_t source) {
  dns::ClientSubnet s;
  EXPECT_TRUE(dns::MakeClientSubnet(addr, source, &s));
  return s;
}

dns::NameKey Key(const char* text) {
  dns::NameKey k;
  EXPECT_TRUE(dns::NameKeyFromText(text, &k));
  return k;
}

TEST(ChooseEcs, FrontSubnetIsCappedAndTruncated) {
  const EcsSettings s;
  dns::ClientSubnet front = Subnet({198, 51, 100, 77}, 32);
  EcsChoice c = ChooseEcs(true, &front, {}, s);
  ASSERT_TRUE(c.send);
  EXPECT_EQ(c.subnet.source_prefix, 24);
  EXPECT_EQ(c.subnet.AddressBytes(), 3u);
  EXPECT_EQ(c.subnet.address[3], 0);
  EXPECT_EQ(c.subnet.address[2], 100);

  front = Subnet({198, 51, 100, 77}, 20);
  c = ChooseEcs(true, &front, {}, s);
  EXPECT_EQ(c.subnet.source_prefix, 20);
  EXPECT_EQ(c.subnet.address[2], 96);  // 100 & 0xf0

  std::vector<uint8_t> v6 = {0x20, 0x01, 0x0d, 0xb8, 1, 0, 0, 7, 0xff, 0, 0, 0, 0, 0, 0, 1};
  front = Subnet(v6, 128);
  c = ChooseEcs(true, &front, {}, s);
  EXPECT_EQ(c.subnet.source_prefix, 56);
  EXPECT_EQ(c.subnet.AddressBytes(), 7u);
  EXPECT_EQ(c.subnet.address[7], 0);
}

TEST(ChooseEcs, NoEcsForUntaggedOrZeroSource) {
  const EcsSettings s;
  dns::ClientSubnet front = Subnet({198, 51, 100, 77}, 24);
  EXPECT_FALSE(ChooseEcs(false, &front, {}, s).send);
  front = Subnet({0, 0, 0, 0}, 0);
  const EcsChoice c = ChooseEcs(true, &front, {}, s);
  EXPECT_FALSE(c.send);
  EXPECT_TRUE(c.zero_source);
  // No ECS from the front for a name that wants it: nothing sent, and the
  // answer must only serve queries without a subnet.
  const EcsChoice none = ChooseEcs(true, nullptr, std::vector<uint8_t>{127, 0, 0, 9}, s);
  EXPECT_FALSE(none.send);
  EXPECT_TRUE(none.zero_source);
  EXPECT_FALSE(ChooseEcs(false, nullptr, {}, s).zero_source);
}

TEST(ChooseEcs, ClientAddressFallbackUsesDefaultSources) {
  EcsSettings s;
  s.from_client_address = true;
  const std::vector<uint8_t> client = {127, 0, 102, 77};
  const EcsChoice c = ChooseEcs(true, nullptr, client, s);
  ASSERT_TRUE(c.send);
  EXPECT_EQ(c.subnet.source_prefix, 24);
  EXPECT_EQ(c.subnet.address[3], 0);
}

TEST(CheckEcsReply, Verdicts) {
  const dns::ClientSubnet sent = Subnet({198, 51, 100, 0}, 24);
  dns::Edns e;
  EXPECT_EQ(CheckEcsReply(true, sent, e).verdict, EcsReply::kGlobal);
  e.has_ecs = true;
  e.ecs = sent;
  e.ecs.scope_prefix = 16;
  EXPECT_EQ(CheckEcsReply(true, sent, e).verdict, EcsReply::kScoped);
  EXPECT_EQ(CheckEcsReply(true, sent, e).scope, 16);
  e.ecs.scope_prefix = 28;  // longer than the source: valid at the source length
  EXPECT_EQ(CheckEcsReply(true, sent, e).scope, 24);
  e.ecs.address[2] = 101;
  EXPECT_EQ(CheckEcsReply(true, sent, e).verdict, EcsReply::kForged);
  e.ecs = sent;
  e.ecs.family = dns::kEcsFamilyIpv6;
  EXPECT_EQ(CheckEcsReply(true, sent, e).verdict, EcsReply::kForged);
  e.ecs = sent;
  e.ecs.source_prefix = 16;
  EXPECT_EQ(CheckEcsReply(true, sent, e).verdict, EcsReply::kForged);
  EXPECT_EQ(CheckEcsReply(false, sent, e).verdict, EcsReply::kUnsolicited);
}

TEST(OnRcode, RetryWithoutEcsOnce) {
  EXPECT_EQ(OnRcode(0, true, false), RcodeAction::kAccept);
  EXPECT_EQ(OnRcode(3, true, false), RcodeAction::kAccept);
  EXPECT_EQ(OnRcode(5, true, false), RcodeAction::kWithoutEcs);
  EXPECT_EQ(OnRcode(1, true, false), RcodeAction::kWithoutEcs);
  EXPECT_EQ(OnRcode(5, true, true), RcodeAction::kNextServer);
  EXPECT_EQ(OnRcode(5, false, false), RcodeAction::kNextServer);
  EXPECT_EQ(OnRcode(2, true, false), RcodeAction::kNextServer);
}

TEST(IsAtOrBelow, LabelBoundaries) {
  EXPECT_TRUE(IsAtOrBelow(Key("a.cdn.example").span(), Key("cdn.example").span()));
  EXPECT_TRUE(IsAtOrBelow(Key("cdn.example").span(), Key("cdn.example").span()));
  EXPECT_TRUE(IsAtOrBelow(Key("cdn.example").span(), Key(".").span()));
  EXPECT_FALSE(IsAtOrBelow(Key("xcdn.example").span(), Key("cdn.example").span()));
  EXPECT_FALSE(IsAtOrBelow(Key("example").span(), Key("cdn.example").span()));
}

// A reply built with the codec's writer.
struct Reply {
  uint8_t buf[2048];
  size_t len = 0;
  dns::Message m;
};

void Build(Reply* r, const char* qname, uint16_t flags,
           const std::vector<std::pair<const char*, std::vector<uint8_t>>>& a, const char* cname_owner,
           const char* cname_target, std::vector<uint8_t> weights, bool weight_option) {
  dns::ResponseWriter w(r->buf, sizeof(r->buf));
  const dns::NameKey q = Key(qname);
  ASSERT_EQ(w.Begin(7, flags, q.span(), dns::type::kA, dns::klass::kIn), dns::ParseError::kOk);
  if (cname_owner != nullptr) {
    const dns::NameKey o = Key(cname_owner), t = Key(cname_target);
    w.AppendRecord(dns::Section::kAnswer, o.span(), dns::type::kCname, 1, 300, t.span());
  }
  for (const auto& [owner, addr] : a) {
    const dns::NameKey o = Key(owner);
    w.AppendRecord(dns::Section::kAnswer, o.span(), dns::type::kA, 1, 60, addr);
  }
  w.BeginOpt(1232, false);
  if (weight_option) w.AddWeights(65001, weights);
  r->len = w.Finish(sizeof(r->buf));
  ASSERT_EQ(r->m.Parse({r->buf, r->len}, {}), dns::ParseError::kOk);
}

TEST(ReadStep, TakesInBailiwickRecordsAndTheirWeights) {
  Reply r;
  Build(&r, "x.cdn.example", dns::flag::kQr | dns::flag::kAa,
        {{"x.cdn.example", {192, 0, 2, 1}},
         {"www.shop.example", {6, 6, 6, 6}},
         {"x.cdn.example", {192, 0, 2, 2}}},
        nullptr, nullptr, {5, 9, 3}, true);
  const StepResult s = ReadStep(r.m, Key("x.cdn.example"), dns::type::kA, Key("cdn.example").span(), 8);
  ASSERT_EQ(s.kind, StepResult::Kind::kAnswer);
  ASSERT_EQ(s.rrset.size(), 2u);
  EXPECT_EQ(s.out_of_bailiwick, 1u);
  EXPECT_TRUE(s.weighted);
  EXPECT_EQ(s.weights, (std::vector<uint8_t>{5, 3}));
}

TEST(ReadStep, CnameLeavingTheCutIsFollowedNotTrusted) {
  Reply r;
  Build(&r, "video.shop.example", dns::flag::kQr | dns::flag::kAa, {{"x.cdn.example", {6, 6, 6, 6}}},
        "video.shop.example", "x.cdn.example", {1}, true);
  const StepResult s = ReadStep(r.m, Key("video.shop.example"), dns::type::kA, Key("shop.example").span(), 8);
  ASSERT_EQ(s.kind, StepResult::Kind::kFollow);
  EXPECT_EQ(s.next, Key("x.cdn.example"));
  EXPECT_EQ(s.chain.size(), 1u);
  EXPECT_TRUE(s.rrset.empty());
  EXPECT_EQ(s.out_of_bailiwick, 1u);
}

TEST(ReadStep, CnameBudgetExhaustedIsTooLong) {
  Reply r;
  Build(&r, "a.shop.example", dns::flag::kQr | dns::flag::kAa, {}, "a.shop.example", "b.shop.example", {},
        false);
  EXPECT_EQ(ReadStep(r.m, Key("a.shop.example"), dns::type::kA, Key("shop.example").span(), 0).kind,
            StepResult::Kind::kTooLong);
}

// A reply with CNAMEs (owner -> target) in the answer and NS/SOA records in
// the authority section.
void BuildChain(Reply* r, const char* qname, uint16_t flags, uint16_t rcode,
                const std::vector<std::pair<const char*, const char*>>& cnames, const char* ns_owner,
                const char* soa_owner) {
  dns::ResponseWriter w(r->buf, sizeof(r->buf));
  const dns::NameKey q = Key(qname);
  ASSERT_EQ(w.Begin(7, static_cast<uint16_t>(flags | rcode), q.span(), dns::type::kA, dns::klass::kIn),
            dns::ParseError::kOk);
  for (const auto& [owner, target] : cnames) {
    const dns::NameKey o = Key(owner), t = Key(target);
    w.AppendRecord(dns::Section::kAnswer, o.span(), dns::type::kCname, 1, 300, t.span());
  }
  if (ns_owner != nullptr) {
    const dns::NameKey o = Key(ns_owner), t = Key("ns1.elsewhere.example");
    w.AppendRecord(dns::Section::kAuthority, o.span(), dns::type::kNs, 1, 300, t.span());
  }
  if (soa_owner != nullptr) {
    const dns::NameKey o = Key(soa_owner), m = Key("ns1.example"), h = Key("h.example");
    std::vector<uint8_t> rdata(m.bytes.begin(), m.bytes.begin() + m.len);
    rdata.insert(rdata.end(), h.bytes.begin(), h.bytes.begin() + h.len);
    for (uint32_t v : {1u, 3600u, 600u, 86400u, 60u}) {
      for (int sh = 24; sh >= 0; sh -= 8) rdata.push_back(static_cast<uint8_t>(v >> sh));
    }
    w.AppendRecord(dns::Section::kAuthority, o.span(), dns::type::kSoa, 1, 3600, rdata);
  }
  r->len = w.Finish(sizeof(r->buf));
  ASSERT_EQ(r->m.Parse({r->buf, r->len}, {}), dns::ParseError::kOk);
}

TEST(ReadStep, CnameIntoADelegatedChildIsFollowedFromItsOwnCut) {
  // The target is inside the cut but in a child zone the server does not
  // hold: AA=1, the CNAME alone. Not a NODATA: resolve the target.
  Reply r;
  BuildChain(&r, "video.example", dns::flag::kQr | dns::flag::kAa, 0, {{"video.example", "x.cdn.example"}},
             nullptr, nullptr);
  StepResult s = ReadStep(r.m, Key("video.example"), dns::type::kA, Key("example").span(), 8);
  ASSERT_EQ(s.kind, StepResult::Kind::kFollow);
  EXPECT_EQ(s.next, Key("x.cdn.example"));
  EXPECT_EQ(s.chain.size(), 1u);
  // BIND-style: AA=1 with the referral for the target's zone.
  BuildChain(&r, "video.example", dns::flag::kQr | dns::flag::kAa, 0, {{"video.example", "x.cdn.example"}},
             "cdn.example", nullptr);
  s = ReadStep(r.m, Key("video.example"), dns::type::kA, Key("example").span(), 8);
  ASSERT_EQ(s.kind, StepResult::Kind::kReferral);
  EXPECT_EQ(s.next, Key("x.cdn.example"));
  // The target does not exist: NXDOMAIN with the SOA ends the chain.
  BuildChain(&r, "video.example", dns::flag::kQr | dns::flag::kAa, 3, {{"video.example", "x.example"}},
             nullptr, "example");
  s = ReadStep(r.m, Key("video.example"), dns::type::kA, Key("example").span(), 8);
  ASSERT_EQ(s.kind, StepResult::Kind::kNegative);
  EXPECT_EQ(s.rcode, 3);
  EXPECT_EQ(s.authority.size(), 1u);
  // NODATA at the target with the SOA of its zone.
  BuildChain(&r, "video.example", dns::flag::kQr | dns::flag::kAa, 0, {{"video.example", "x.example"}},
             nullptr, "example");
  EXPECT_EQ(ReadStep(r.m, Key("video.example"), dns::type::kA, Key("example").span(), 8).kind,
            StepResult::Kind::kNegative);
}

TEST(ReadStep, DnameComesBeforeItsSynthesizedCname) {
  Reply r;
  dns::ResponseWriter w(r.buf, sizeof(r.buf));
  const dns::NameKey q = Key("www.d.example"), d = Key("d.example"), t = Key("t.example"),
                     target = Key("www.t.example");
  ASSERT_EQ(w.Begin(7, dns::flag::kQr | dns::flag::kAa, q.span(), dns::type::kA, dns::klass::kIn),
            dns::ParseError::kOk);
  w.AppendRecord(dns::Section::kAnswer, d.span(), 39, 1, 300, t.span());
  w.AppendRecord(dns::Section::kAnswer, q.span(), dns::type::kCname, 1, 300, target.span());
  const std::vector<uint8_t> addr = {192, 0, 2, 1};
  w.AppendRecord(dns::Section::kAnswer, target.span(), dns::type::kA, 1, 300, addr);
  r.len = w.Finish(sizeof(r.buf));
  ASSERT_EQ(r.m.Parse({r.buf, r.len}, {}), dns::ParseError::kOk);
  // A budget of one CNAME is enough: the DNAME does not count.
  const StepResult s = ReadStep(r.m, q, dns::type::kA, Key("example").span(), 1);
  ASSERT_EQ(s.kind, StepResult::Kind::kAnswer);
  ASSERT_EQ(s.chain.size(), 2u);
  EXPECT_EQ(s.chain[0].type, 39);
  EXPECT_EQ(s.chain[1].type, dns::type::kCname);
  EXPECT_EQ(s.rrset.size(), 1u);
}

TEST(ReadStep, LoopInsideOneReply) {
  Reply r;
  BuildChain(&r, "a.example", dns::flag::kQr | dns::flag::kAa, 0,
             {{"a.example", "b.example"}, {"b.example", "a.example"}}, nullptr, nullptr);
  EXPECT_EQ(ReadStep(r.m, Key("a.example"), dns::type::kA, Key("example").span(), 8).kind,
            StepResult::Kind::kLoop);
}

TEST(ReadStep, SoaAboveAForwardTagSuffixDatesTheNegative) {
  // policy=forward: the cut is the tag's suffix, the zone apex is above it.
  Reply r;
  BuildChain(&r, "nx.video.shop.example", dns::flag::kQr | dns::flag::kAa, 3, {}, nullptr, "shop.example");
  const StepResult s =
      ReadStep(r.m, Key("nx.video.shop.example"), dns::type::kA, Key("video.shop.example").span(), 8);
  ASSERT_EQ(s.kind, StepResult::Kind::kNegative);
  ASSERT_EQ(s.authority.size(), 1u);
  EXPECT_EQ(NegativeTtl(s.authority, 0), 60u);
}

TEST(ReadStep, InvalidWeightsAreNeutralised) {
  Reply r;
  Build(&r, "x.cdn.example", dns::flag::kQr | dns::flag::kAa,
        {{"x.cdn.example", {192, 0, 2, 1}}, {"x.cdn.example", {192, 0, 2, 2}}}, nullptr, nullptr, {0, 1},
        true);
  StepResult s = ReadStep(r.m, Key("x.cdn.example"), dns::type::kA, Key("cdn.example").span(), 8);
  EXPECT_TRUE(s.weight_option);
  EXPECT_FALSE(s.weighted);
  EXPECT_EQ(s.weight_verdict, dns::WeightVerdict::kZeroWeight);
  Build(&r, "x.cdn.example", dns::flag::kQr | dns::flag::kAa,
        {{"x.cdn.example", {192, 0, 2, 1}}, {"x.cdn.example", {192, 0, 2, 2}}}, nullptr, nullptr, {1}, true);
  s = ReadStep(r.m, Key("x.cdn.example"), dns::type::kA, Key("cdn.example").span(), 8);
  EXPECT_EQ(s.weight_verdict, dns::WeightVerdict::kCountMismatch);
  EXPECT_FALSE(s.weighted);
}

TEST(ReadStep, NodataWithoutAaOrSoaIsBogus) {
  Reply r;
  Build(&r, "x.cdn.example", dns::flag::kQr, {}, nullptr, nullptr, {}, false);
  EXPECT_EQ(ReadStep(r.m, Key("x.cdn.example"), dns::type::kA, Key("cdn.example").span(), 8).kind,
            StepResult::Kind::kBogus);
  Build(&r, "x.cdn.example", dns::flag::kQr | dns::flag::kAa, {}, nullptr, nullptr, {}, false);
  EXPECT_EQ(ReadStep(r.m, Key("x.cdn.example"), dns::type::kA, Key("cdn.example").span(), 8).kind,
            StepResult::Kind::kNegative);
}

}  // namespace
}  // namespace weir::recursor
