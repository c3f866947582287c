#include "weir/partitions/entry_from_answer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "test_util.h"
#include "weir/partitions/tagtable.h"

namespace weir::partitions {
namespace {

using dns::testing::WireName;
using testing::Ip;
using testing::Key;
using Outcome = CacheFill::Outcome;

constexpr uint32_t kNow = 1'000'000;

// One record of an upstream answer; the owner keeps its spelling.
struct Rr {
  std::string owner;
  uint16_t type = dns::type::kA;
  uint32_t ttl = 300;
  std::vector<uint8_t> rdata;
  dns::Section section = dns::Section::kAnswer;
  uint16_t klass = dns::klass::kIn;
};

// An upstream answer as a recursor sends it; records in section order.
struct AnswerSpec {
  std::string qname = "www.example.com";
  uint16_t qtype = dns::type::kA;
  uint16_t flags = dns::flag::kQr | dns::flag::kRd | dns::flag::kRa;
  dns::Rcode rcode = dns::Rcode::kNoError;
  std::vector<Rr> records;
  std::optional<std::vector<uint8_t>> weights;  // the weight option
  std::optional<dns::ClientSubnet> ecs;
};

// What the forwarder knows of the question.
struct Question {
  std::string qname = "www.example.com";
  uint16_t qtype = dns::type::kA;
  Partition partition = kCommonPartition;
  bool tagged = false;
  bool dnssec = false;
  const TagTable* tags = nullptr;
  CacheLimits limits;
};

std::vector<uint8_t> AnswerBytes(const AnswerSpec& s) {
  std::vector<uint8_t> buf(65535);
  dns::ResponseWriter w(buf.data(), buf.size());
  EXPECT_EQ(
      w.Begin(0x1234, s.flags | static_cast<uint16_t>(s.rcode), WireName(s.qname), s.qtype, dns::klass::kIn),
      dns::ParseError::kOk);
  for (const Rr& r : s.records) {
    EXPECT_EQ(w.AppendRecord(r.section, WireName(r.owner), r.type, r.klass, r.ttl, r.rdata),
              dns::ParseError::kOk)
        << r.owner;
  }
  if (s.weights || s.ecs) {
    EXPECT_EQ(w.BeginOpt(1232, false), dns::ParseError::kOk);
    if (s.ecs) {
      EXPECT_EQ(w.AddEcs(*s.ecs), dns::ParseError::kOk);
    }
    if (s.weights) {
      EXPECT_EQ(w.AddWeights(dns::kDefaultWeightOptionCode, *s.weights), dns::ParseError::kOk);
    }
  }
  buf.resize(w.Finish(buf.size()));
  return buf;
}

// Parses the answer and builds the entry for the question.
CacheFill Fill(const AnswerSpec& s, const Question& q = {}) {
  const std::vector<uint8_t> bytes = AnswerBytes(s);
  dns::Message m;
  EXPECT_EQ(m.Parse(bytes, {}), dns::ParseError::kOk);
  const dns::NameKey qname = Key(q.qname);
  AnswerToCache in;
  in.key = {q.partition, qname.span(), q.qtype, dns::klass::kIn};
  in.tagged = q.tagged;
  in.dnssec = q.dnssec;
  in.answer = &m;
  in.tags = q.tags;
  in.now = kNow;
  in.limits = q.limits;
  CacheFill fill = EntryFromAnswer(in);
  if (fill.outcome == Outcome::kEntry) {
    EXPECT_NE(fill.entry, nullptr);
    if (fill.entry != nullptr) {
      EXPECT_EQ(std::vector<uint8_t>(fill.entry->qname().begin(), fill.entry->qname().end()),
                std::vector<uint8_t>(qname.span().begin(), qname.span().end()));
      EXPECT_EQ(fill.entry->qtype(), q.qtype);
      EXPECT_EQ(fill.entry->partition(), q.partition);
      EXPECT_EQ(fill.entry->insert_time(), kNow);
    }
  } else {
    EXPECT_EQ(fill.entry, nullptr);
  }
  if (fill.outcome != Outcome::kLearn) {
    EXPECT_EQ(fill.learn_tag, nullptr);
  }
  return fill;
}

// An A or AAAA record, by the address's text.
Rr A(const std::string& owner, const std::string& ip, uint32_t ttl = 300) {
  const common::IpAddress a = Ip(ip);
  const size_t n = a.family == 4 ? 4 : 16;
  return {owner, a.family == 4 ? dns::type::kA : dns::type::kAaaa, ttl,
          std::vector<uint8_t>(a.bytes.begin(), a.bytes.begin() + n)};
}

Rr Cname(const std::string& owner, const std::string& target, uint32_t ttl = 300) {
  return {owner, dns::type::kCname, ttl, WireName(target)};
}

std::vector<uint8_t> SoaRdata(uint32_t minimum) {
  std::vector<uint8_t> out = WireName("ns.example.com");
  const std::vector<uint8_t> r = WireName("hostmaster.example.com");
  out.insert(out.end(), r.begin(), r.end());
  for (uint32_t v : {2024010101u, 3600u, 600u, 86400u, minimum}) {
    uint8_t b[4];
    dns::Store32(b, v);
    out.insert(out.end(), b, b + 4);
  }
  return out;
}

Rr Soa(uint32_t ttl, uint32_t minimum) {
  return {"example.com", dns::type::kSoa, ttl, SoaRdata(minimum), dns::Section::kAuthority};
}

// A record of an entry as a client reads it after the question.
struct Record {
  std::string owner;
  uint16_t type;
  uint32_t ttl;
  std::vector<uint8_t> rdata;  // names decompressed
};

// The entry's records (answer section, then authority), through a response
// written from the entry and parsed back.
std::vector<Record> RecordsOf(const CacheEntry& e) {
  std::vector<uint8_t> pkt(65535);
  dns::ResponseWriter w(pkt.data(), pkt.size());
  EXPECT_EQ(w.Begin(1, dns::flag::kQr, e.qname(), e.qtype(), e.qclass()), dns::ParseError::kOk);
  EXPECT_EQ(
      w.AppendRecords(dns::Section::kAnswer, e.records(),
                      static_cast<uint16_t>(e.answer_count() + e.authority_count()), e.ttl_offsets(), 0),
      dns::ParseError::kOk);
  pkt.resize(w.Finish(pkt.size()));
  dns::Message m;
  EXPECT_EQ(m.Parse(pkt, {}), dns::ParseError::kOk);
  std::vector<Record> out;
  dns::Message::Iterator it = m.Records(dns::Section::kAnswer);
  dns::RrView rr;
  while (it.Next(&rr)) {
    dns::NameKey owner;
    size_t end;
    EXPECT_EQ(dns::ReadName(m.bytes(), rr.name_offset, &end, &owner), dns::ParseError::kOk);
    std::vector<uint8_t> rdata(65535);
    size_t len = 0;
    EXPECT_EQ(dns::CopyRdataUncompressed(m.bytes(), rr, rdata.data(), rdata.size(), &len),
              dns::ParseError::kOk);
    rdata.resize(len);
    out.push_back({dns::NameKeyToText(owner.span()), rr.type, rr.ttl, rdata});
  }
  return out;
}

std::string Text(const std::vector<uint8_t>& name) { return dns::NameKeyToText(name); }

// The address RRset in cached order, as text.
std::vector<std::string> Addresses(const CacheEntry& e) {
  std::vector<std::string> out;
  for (const Record& r : RecordsOf(e)) {
    if (r.type != dns::type::kA && r.type != dns::type::kAaaa) continue;
    common::IpAddress a;
    a.family = r.type == dns::type::kA ? 4 : 6;
    std::copy(r.rdata.begin(), r.rdata.end(), a.bytes.begin());
    out.push_back(common::IpToString(a));
  }
  return out;
}

TEST(EntryFromAnswer, PlainA) {
  AnswerSpec s;
  s.flags |= dns::flag::kAd;
  s.records = {A("www.example.com", "192.0.2.1", 300)};
  Question q;
  q.partition = 7;
  const CacheFill f = Fill(s, q);
  ASSERT_EQ(f.outcome, Outcome::kEntry);
  EXPECT_FALSE(f.servfail);
  const CacheEntry& e = *f.entry;
  EXPECT_EQ(e.kind(), EntryKind::kPositive);
  EXPECT_EQ(e.rcode(), dns::Rcode::kNoError);
  EXPECT_EQ(e.ttl(), 300u);
  EXPECT_EQ(e.answer_count(), 1);
  EXPECT_EQ(e.chain_count(), 0);
  EXPECT_EQ(e.address_count(), 1);
  EXPECT_EQ(e.address_record_size(), 16);
  EXPECT_FALSE(e.has_weights());
  EXPECT_EQ(e.ecs_family(), 0);
  EXPECT_TRUE(e.flags() & dns::flag::kAd);
  EXPECT_EQ(Addresses(e), std::vector<std::string>{"192.0.2.1"});
}

TEST(EntryFromAnswer, Aaaa) {
  AnswerSpec s;
  s.qtype = dns::type::kAaaa;
  s.records = {A("www.example.com", "2001:db8::1", 120), A("www.example.com", "2001:db8::2", 60)};
  Question q;
  q.qtype = dns::type::kAaaa;
  const CacheFill f = Fill(s, q);
  ASSERT_EQ(f.outcome, Outcome::kEntry);
  EXPECT_EQ(f.entry->kind(), EntryKind::kPositive);
  EXPECT_EQ(f.entry->address_count(), 2);
  EXPECT_EQ(f.entry->address_record_size(), 28);
  EXPECT_EQ(f.entry->ttl(), 60u);
  EXPECT_EQ(Addresses(*f.entry), (std::vector<std::string>{"2001:db8::1", "2001:db8::2"}));
}

TEST(EntryFromAnswer, CnameChainOfThree) {
  AnswerSpec s;
  // Upper case as a recursor may relay it: the entry holds canonical names.
  s.records = {Cname("www.example.com", "A.Example.NET", 600), Cname("a.example.net", "b.example.org", 200),
               Cname("b.example.org", "edge.cdn.example", 900), A("edge.cdn.example", "192.0.2.10", 400),
               A("edge.cdn.example", "192.0.2.11", 400)};
  const CacheFill f = Fill(s);
  ASSERT_EQ(f.outcome, Outcome::kEntry);
  const CacheEntry& e = *f.entry;
  EXPECT_EQ(e.kind(), EntryKind::kPositive);
  EXPECT_EQ(e.chain_count(), 3);
  EXPECT_EQ(e.address_count(), 2);
  EXPECT_EQ(e.answer_count(), 5);
  EXPECT_EQ(e.ttl(), 200u);
  const std::vector<Record> r = RecordsOf(e);
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(r[0].owner, "www.example.com.");
  EXPECT_EQ(Text(r[0].rdata), "a.example.net.");
  EXPECT_EQ(r[1].owner, "a.example.net.");
  EXPECT_EQ(Text(r[1].rdata), "b.example.org.");
  EXPECT_EQ(r[2].owner, "b.example.org.");
  EXPECT_EQ(Text(r[2].rdata), "edge.cdn.example.");
  EXPECT_EQ(r[3].owner, "edge.cdn.example.");
  EXPECT_EQ(r[4].owner, "edge.cdn.example.");
  EXPECT_EQ(Addresses(e), (std::vector<std::string>{"192.0.2.10", "192.0.2.11"}));
}

std::string Hop(int i) { return "h" + std::to_string(i) + ".example.net"; }

// No fixed hop limit: a chain is followed as far as the answer's records go.
TEST(EntryFromAnswer, LongChainsAreFollowedFully) {
  // 30 CNAMEs to an address RRset (the weighted layout keeps up to 32).
  AnswerSpec s;
  s.records.push_back(Cname("www.example.com", Hop(1)));
  for (int i = 1; i < 30; ++i) s.records.push_back(Cname(Hop(i), Hop(i + 1)));
  s.records.push_back(A(Hop(30), "192.0.2.30"));
  CacheFill f = Fill(s);
  ASSERT_EQ(f.outcome, Outcome::kEntry);
  EXPECT_EQ(f.entry->kind(), EntryKind::kPositive);
  EXPECT_EQ(f.entry->chain_count(), 30);
  EXPECT_EQ(Addresses(*f.entry), std::vector<std::string>{"192.0.2.30"});

  // 40 CNAMEs to a TXT record, sent in reverse order: the walk does not
  // depend on where the records sit.
  AnswerSpec t;
  t.qtype = dns::type::kTxt;
  t.records.push_back({Hop(40), dns::type::kTxt, 300, {3, 'e', 'n', 'd'}});
  for (int i = 39; i >= 1; --i) t.records.push_back(Cname(Hop(i), Hop(i + 1)));
  t.records.push_back(Cname("www.example.com", Hop(1)));
  Question q;
  q.qtype = dns::type::kTxt;
  f = Fill(t, q);
  ASSERT_EQ(f.outcome, Outcome::kEntry);
  EXPECT_EQ(f.entry->kind(), EntryKind::kPositive);
  EXPECT_EQ(f.entry->answer_count(), 41);
  const std::vector<Record> r = RecordsOf(*f.entry);
  ASSERT_EQ(r.size(), 41u);
  for (int i = 0; i < 40; ++i) {
    EXPECT_EQ(r[i].type, dns::type::kCname);
    EXPECT_EQ(Text(r[i].rdata), Hop(i + 1) + ".");
  }
  EXPECT_EQ(r[40].owner, Hop(40) + ".");
  EXPECT_EQ(r[40].type, dns::type::kTxt);
}

// A loop is a broken answer: relayed as sent, never cached (neither as the
// chain up to the loop nor as NODATA).
TEST(EntryFromAnswer, CnameLoopIsNotCacheable) {
  AnswerSpec s;
  s.records = {Cname("www.example.com", "a.example.net"), Cname("a.example.net", "b.example.net"),
               Cname("b.example.net", "WWW.example.com"), A("www.example.com", "192.0.2.1")};
  CacheFill f = Fill(s);
  EXPECT_EQ(f.outcome, Outcome::kNotCacheable);

  s.records = {Cname("www.example.com", "www.example.com")};
  f = Fill(s);
  EXPECT_EQ(f.outcome, Outcome::kNotCacheable);

  // A name owning two CNAMEs (RFC 2181 10.1 allows one): the first is
  // followed, the other is off the chain.
  s.records = {Cname("www.example.com", "a.example.net"), Cname("www.example.com", "b.example.net"),
               A("a.example.net", "192.0.2.1"), A("b.example.net", "192.0.2.2")};
  f = Fill(s);
  ASSERT_EQ(f.outcome, Outcome::kEntry);
  EXPECT_EQ(f.entry->chain_count(), 1);
  EXPECT_EQ(Addresses(*f.entry), std::vector<std::string>{"192.0.2.1"});
}

TEST(EntryFromAnswer, RecordsOffTheChainAreLeftOut) {
  AnswerSpec s;
  Rr chaos = A("a.example.net", "192.0.2.99");
  chaos.klass = 3;
  s.records = {A("other.example.com", "192.0.2.50"),  // another name
               Cname("www.example.com", "a.example.net"),
               A("www.example.com", "192.0.2.51"),  // the qname, but the chain moved on
               A("a.example.net", "2001:db8::1"),   // another type
               chaos,                               // another class
               Cname("z.example.net", "a.example.net"),
               A("a.example.net", "192.0.2.1"),
               {"a.example.net", dns::type::kTxt, 300, {2, 'h', 'i'}}};
  const CacheFill f = Fill(s);
  ASSERT_EQ(f.outcome, Outcome::kEntry);
  EXPECT_EQ(f.entry->answer_count(), 2);
  EXPECT_EQ(f.entry->chain_count(), 1);
  EXPECT_EQ(Addresses(*f.entry), std::vector<std::string>{"192.0.2.1"});
}

TEST(EntryFromAnswer, NxDomainKeepsTheSoa) {
  AnswerSpec s;
  s.rcode = dns::Rcode::kNxDomain;
  s.records = {Cname("www.example.com", "gone.example.com", 3000), Soa(900, 300)};
  const CacheFill f = Fill(s);
  ASSERT_EQ(f.outcome, Outcome::kEntry);
  const CacheEntry& e = *f.entry;
  EXPECT_EQ(e.kind(), EntryKind::kNxDomain);
  EXPECT_EQ(e.rcode(), dns::Rcode::kNxDomain);
  EXPECT_EQ(e.ttl(), 300u);  // RFC 2308 5: min(SOA TTL, MINIMUM)
  EXPECT_EQ(e.answer_count(), 1);
  EXPECT_EQ(e.authority_count(), 1);
  const std::vector<Record> r = RecordsOf(e);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].owner, "example.com.");
  EXPECT_EQ(r[1].type, dns::type::kSoa);
  EXPECT_EQ(r[1].rdata, SoaRdata(300));
}

TEST(EntryFromAnswer, NoData) {
  AnswerSpec s;
  s.records = {Soa(600, 900)};
  Question q;
  q.limits.negative_max_ttl = 120;
  CacheFill f = Fill(s, q);
  ASSERT_EQ(f.outcome, Outcome::kEntry);
  EXPECT_EQ(f.entry->kind(), EntryKind::kNoData);
  EXPECT_EQ(f.entry->rcode(), dns::Rcode::kNoError);
  EXPECT_EQ(f.entry->ttl(), 120u);
  EXPECT_EQ(f.entry->answer_count(), 0);
  EXPECT_EQ(f.entry->authority_count(), 1);

  // The chain's last name has no record of the qtype.
  s.records = {Cname("www.example.com", "a.example.net"), A("a.example.net", "2001:db8::1"), Soa(600, 60)};
  f = Fill(s, q);
  ASSERT_EQ(f.outcome, Outcome::kEntry);
  EXPECT_EQ(f.entry->kind(), EntryKind::kNoData);
  EXPECT_EQ(f.entry->answer_count(), 1);
  EXPECT_EQ(f.entry->ttl(), 60u);

  // RFC 2308 5: without an SOA a negative answer is not cached.
  s.records = {};
  EXPECT_EQ(Fill(s, q).outcome, Outcome::kNotCacheable);
}

TEST(EntryFromAnswer, ServFail) {
  AnswerSpec s;
  s.rcode = dns::Rcode::kServFail;
  Question q;
  q.limits.servfail_ttl = 7;
  CacheFill f = Fill(s, q);
  EXPECT_TRUE(f.servfail);
  ASSERT_EQ(f.outcome, Outcome::kEntry);
  EXPECT_EQ(f.entry->kind(), EntryKind::kServFail);
  EXPECT_EQ(f.entry->rcode(), dns::Rcode::kServFail);
  EXPECT_EQ(f.entry->ttl(), 7u);

  // Still a SERVFAIL (a stale entry wins), but a truncated one is not cached.
  s.flags |= dns::flag::kTc;
  f = Fill(s, q);
  EXPECT_TRUE(f.servfail);
  EXPECT_EQ(f.outcome, Outcome::kNotCacheable);
}

TEST(EntryFromAnswer, OtherRcodesAreNotCacheable) {
  for (dns::Rcode rcode : {dns::Rcode::kRefused, dns::Rcode::kNotImp, dns::Rcode::kFormErr,
                           static_cast<dns::Rcode>(6) /* YXDOMAIN */}) {
    AnswerSpec s;
    s.rcode = rcode;
    s.records = {A("www.example.com", "192.0.2.1")};
    const CacheFill f = Fill(s);
    EXPECT_EQ(f.outcome, Outcome::kNotCacheable) << static_cast<int>(rcode);
    EXPECT_FALSE(f.servfail);
  }
}

TEST(EntryFromAnswer, TruncatedIsNotCacheable) {
  AnswerSpec s;
  s.flags |= dns::flag::kTc;
  s.records = {A("www.example.com", "192.0.2.1")};
  const CacheFill f = Fill(s);
  EXPECT_EQ(f.outcome, Outcome::kNotCacheable);
  EXPECT_FALSE(f.servfail);
}

TEST(EntryFromAnswer, DnssecAwareQuestionIsNotCacheable) {
  AnswerSpec s;
  s.records = {A("www.example.com", "192.0.2.1")};
  Question q;
  q.dnssec = true;
  EXPECT_EQ(Fill(s, q).outcome, Outcome::kNotCacheable);
  s.rcode = dns::Rcode::kNxDomain;
  s.records = {Soa(60, 60)};
  EXPECT_EQ(Fill(s, q).outcome, Outcome::kNotCacheable);
}

TEST(EntryFromAnswer, RecordThatCannotBeStoredIsNotCacheable) {
  // An MX whose RDATA stops inside its preference.
  AnswerSpec s;
  s.qtype = dns::type::kMx;
  s.records = {{"www.example.com", dns::type::kMx, 300, {0}}};
  Question q;
  q.qtype = dns::type::kMx;
  EXPECT_EQ(Fill(s, q).outcome, Outcome::kNotCacheable);

  // A CNAME with bytes after its target.
  s = {};
  Rr bad = Cname("www.example.com", "a.example.net");
  bad.rdata.push_back(0);
  s.records = {bad, A("a.example.net", "192.0.2.1")};
  EXPECT_EQ(Fill(s).outcome, Outcome::kNotCacheable);

  // An SOA cut short.
  s = {};
  s.rcode = dns::Rcode::kNxDomain;
  Rr soa = Soa(60, 60);
  soa.rdata.resize(soa.rdata.size() - 25);
  s.records = {soa};
  EXPECT_EQ(Fill(s).outcome, Outcome::kNotCacheable);
}

TEST(EntryFromAnswer, WeightsFollowTheirAddresses) {
  AnswerSpec s;
  s.records = {Cname("www.example.com", "pool.example.net"), A("pool.example.net", "192.0.2.3"),
               A("pool.example.net", "192.0.2.1"), A("pool.example.net", "192.0.2.2")};
  s.weights = std::vector<uint8_t>{30, 10, 20};
  CacheFill f = Fill(s);
  ASSERT_EQ(f.outcome, Outcome::kEntry);
  EXPECT_TRUE(f.entry->has_weights());
  // Stored in address order, each weight with the address it came with.
  EXPECT_EQ(Addresses(*f.entry), (std::vector<std::string>{"192.0.2.1", "192.0.2.2", "192.0.2.3"}));
  EXPECT_EQ(std::vector<uint8_t>(f.entry->weights().begin(), f.entry->weights().end()),
            (std::vector<uint8_t>{10, 20, 30}));

  // One weight per address or none: equal weights.
  s.weights = std::vector<uint8_t>{30, 10};
  f = Fill(s);
  ASSERT_EQ(f.outcome, Outcome::kEntry);
  EXPECT_FALSE(f.entry->has_weights());
  EXPECT_EQ(std::vector<uint8_t>(f.entry->weights().begin(), f.entry->weights().end()),
            (std::vector<uint8_t>{1, 1, 1}));
}

TEST(EntryFromAnswer, EcsScopeIsKept) {
  AnswerSpec s;
  s.records = {A("www.example.com", "192.0.2.1")};
  dns::ClientSubnet ecs;
  ASSERT_TRUE(dns::MakeClientSubnet(std::vector<uint8_t>{198, 51, 100, 0}, 24, &ecs));
  ecs.scope_prefix = 16;
  s.ecs = ecs;
  const CacheFill f = Fill(s);
  ASSERT_EQ(f.outcome, Outcome::kEntry);
  EXPECT_EQ(f.entry->ecs_family(), dns::kEcsFamilyIpv4);
  EXPECT_EQ(f.entry->ecs_source(), 24);
  EXPECT_EQ(f.entry->ecs_scope(), 16);
}

std::unique_ptr<const TagTable> Tags(const char* text) {
  auto t = TagTable::FromText(text);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

AnswerSpec IntoCdn() {
  AnswerSpec s;
  s.records = {
      Cname("www.example.com", "a.example.org", 300), Cname("a.example.org", "edge.cdn.example.net", 120),
      Cname("edge.cdn.example.net", "pop1.cdn.example.net", 10), A("pop1.cdn.example.net", "192.0.2.1", 20)};
  return s;
}

TEST(EntryFromAnswer, LearnsTheTagAChainEnters) {
  const auto tags = Tags("cdn.example.net weight=on\n");
  Question q;
  q.tags = tags.get();
  CacheFill f = Fill(IntoCdn(), q);
  ASSERT_EQ(f.outcome, Outcome::kLearn);
  ASSERT_NE(f.learn_tag, nullptr);
  EXPECT_EQ(f.learn_tag->suffix, Key("cdn.example.net"));
  EXPECT_TRUE(f.learn_tag->weight);
  EXPECT_EQ(f.learn_ttl, 120u);  // the chain up to the tagged name: min(300, 120)

  q.limits.max_ttl = 60;
  f = Fill(IntoCdn(), q);
  ASSERT_EQ(f.outcome, Outcome::kLearn);
  EXPECT_EQ(f.learn_ttl, 60u);

  AnswerSpec zero = IntoCdn();
  zero.records[1].ttl = 0;
  f = Fill(zero, q);
  ASSERT_EQ(f.outcome, Outcome::kLearn);
  EXPECT_EQ(f.learn_ttl, 1u);

  // ECS and city-level tags are learned too.
  for (const char* text : {"cdn.example.net ecs=on\n", "cdn.example.net level=subnet\n"}) {
    const auto t = Tags(text);
    q.tags = t.get();
    EXPECT_EQ(Fill(IntoCdn(), q).outcome, Outcome::kLearn) << text;
  }
}

TEST(EntryFromAnswer, NoLearningForTaggedQuestionsOrPlainTags) {
  const auto weighted = Tags("cdn.example.net weight=on\n");
  Question q;
  q.tags = weighted.get();
  q.tagged = true;
  CacheFill f = Fill(IntoCdn(), q);
  ASSERT_EQ(f.outcome, Outcome::kEntry);
  EXPECT_EQ(f.entry->chain_count(), 3);
  EXPECT_EQ(f.entry->ttl(), 10u);

  // A tag with nothing that splits the cache: the chain goes on.
  const auto plain = Tags("cdn.example.net\n");
  q.tags = plain.get();
  q.tagged = false;
  f = Fill(IntoCdn(), q);
  ASSERT_EQ(f.outcome, Outcome::kEntry);
  EXPECT_EQ(f.entry->chain_count(), 3);

  q.tags = nullptr;
  EXPECT_EQ(Fill(IntoCdn(), q).outcome, Outcome::kEntry);
}

TEST(EntryFromAnswer, LargeTxtRecordIsStored) {
  std::vector<uint8_t> txt;
  for (int i = 0; i < 20; ++i) {  // 20 strings of 250 octets: 5020 octets
    txt.push_back(250);
    for (int j = 0; j < 250; ++j) txt.push_back(static_cast<uint8_t>('a' + (i + j) % 26));
  }
  AnswerSpec s;
  s.qtype = dns::type::kTxt;
  s.records = {{"www.example.com", dns::type::kTxt, 300, txt}};
  Question q;
  q.qtype = dns::type::kTxt;
  const CacheFill f = Fill(s, q);
  ASSERT_EQ(f.outcome, Outcome::kEntry);
  EXPECT_EQ(f.entry->answer_count(), 1);
  const std::vector<Record> r = RecordsOf(*f.entry);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].type, dns::type::kTxt);
  EXPECT_EQ(r[0].rdata, txt);
}

TEST(EntryFromAnswer, CnameQuestionIsNotFollowed) {
  AnswerSpec s;
  s.qtype = dns::type::kCname;
  s.records = {Cname("www.example.com", "a.example.net"), A("a.example.net", "192.0.2.1")};
  Question q;
  q.qtype = dns::type::kCname;
  const CacheFill f = Fill(s, q);
  ASSERT_EQ(f.outcome, Outcome::kEntry);
  EXPECT_EQ(f.entry->kind(), EntryKind::kPositive);
  EXPECT_EQ(f.entry->answer_count(), 1);
  EXPECT_EQ(f.entry->address_count(), 0);
  const std::vector<Record> r = RecordsOf(*f.entry);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].type, dns::type::kCname);
  EXPECT_EQ(Text(r[0].rdata), "a.example.net.");
}

}  // namespace
}  // namespace weir::partitions
