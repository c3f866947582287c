// The forwarder's defences against forged answers, without sockets: the
// keyed hash, 0x20, cookies and the table of tries.
#include "weir/fastpath/upstream_guard.h"

#include <cctype>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "weir/dns/writer.h"

namespace weir::fastpath {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<uint8_t> Wire(const char* text) {
  dns::NameKey k;
  EXPECT_TRUE(dns::NameKeyFromText(text, &k));
  return {k.bytes.begin(), k.bytes.begin() + k.len};
}

TEST(SipHash24, ReferenceVectors) {
  // The reference implementation's vectors: key 00..0f, message 00..(n-1).
  std::array<uint8_t, 16> key;
  for (int i = 0; i < 16; ++i) key[i] = static_cast<uint8_t>(i);
  uint8_t msg[15];
  for (int i = 0; i < 15; ++i) msg[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(SipHash24(key, {msg, 0}), 0x726fdb47dd0e0e31ull);
  EXPECT_EQ(SipHash24(key, {msg, 8}), 0x93f5f5799a932462ull);
  EXPECT_EQ(SipHash24(key, {msg, 15}), 0xa129ca6149be45e5ull);
}

TEST(RandomizeCase, ChangesOnlyTheCaseOfLetters) {
  SecureRandom rng;
  const std::vector<uint8_t> name = Wire("www.ex-1_ample.com");
  std::set<std::string> spellings;
  std::vector<bool> upper_seen(name.size()), lower_seen(name.size());
  for (int i = 0; i < 200; ++i) {
    std::vector<uint8_t> n = name;
    EXPECT_EQ(RandomizeCase(n.data(), n.size(), rng), 13);
    for (size_t j = 0; j < n.size(); ++j) {
      EXPECT_EQ(std::tolower(n[j]), name[j]) << j;  // label lengths, digits, '-' and '_' untouched
      if (std::isupper(n[j])) upper_seen[j] = true;
      if (std::islower(n[j])) lower_seen[j] = true;
    }
    spellings.insert(std::string(n.begin(), n.end()));
  }
  for (size_t j = 0; j < name.size(); ++j) {
    if (!std::isalpha(name[j])) continue;
    EXPECT_TRUE(upper_seen[j] && lower_seen[j]) << "letter " << j << " never changed case";
  }
  EXPECT_GT(spellings.size(), 190u);  // 2^13 spellings: 200 draws barely repeat
}

TEST(RandomizeCase, NameWithoutLettersHasNoEntropy) {
  SecureRandom rng;
  std::vector<uint8_t> n = Wire("1.2.3.4");
  const std::vector<uint8_t> before = n;
  EXPECT_EQ(RandomizeCase(n.data(), n.size(), rng), 0);
  EXPECT_EQ(n, before);
}

std::vector<uint8_t> Answer(const std::vector<uint8_t>& qname, std::span<const uint8_t> cookie = {},
                            bool with_cookie = false, uint16_t rcode_flags = 0) {
  std::vector<uint8_t> buf(512);
  dns::ResponseWriter w(buf.data(), buf.size());
  w.Begin(4711, dns::flag::kQr | rcode_flags, qname, dns::type::kA, dns::klass::kIn);
  w.BeginOpt(1232, false);
  if (with_cookie) w.AddOption(dns::option::kCookie, cookie);
  buf.resize(w.Finish(buf.size()));
  return buf;
}

TEST(SameSpelling, ComparesTheQuestionCaseExactly) {
  // Keys are lower case: the 0x20 spelling is written by hand.
  const char mixed[] = "\3wWw\7ExAmple\3com";
  const std::vector<uint8_t> name(mixed, mixed + sizeof(mixed));  // with the root's 0
  ASSERT_EQ(name.size(), 17u);
  const std::vector<uint8_t> sent = Answer(name);
  EXPECT_TRUE(SameSpelling(sent, Answer(name), 17));
  EXPECT_FALSE(SameSpelling(sent, Answer(Wire("www.example.com")), 17));
  std::vector<uint8_t> lower = sent;
  for (size_t i = dns::kHeaderSize; i < dns::kHeaderSize + 17; ++i) lower[i] = std::tolower(lower[i]);
  EXPECT_FALSE(SameSpelling(sent, lower, 17));
  EXPECT_FALSE(SameSpelling(sent, std::span<const uint8_t>(lower.data(), 20), 17));  // too short
}

TEST(CaseRandomization, OffAfterMismatchesOutnumberEchoesThenBack) {
  CaseRandomization c;
  const Clock::time_point t0 = Clock::now();
  EXPECT_TRUE(c.Enabled(t0));
  c.Echoed();
  c.Echoed();
  c.Echoed();
  // A few mismatches after many echoes: forgeries that guessed an ID, not a
  // server that drops case.
  EXPECT_FALSE(c.Mismatched(t0));
  EXPECT_FALSE(c.Mismatched(t0));
  EXPECT_FALSE(c.Mismatched(t0));
  EXPECT_TRUE(c.Enabled(t0));
  EXPECT_TRUE(c.Mismatched(t0));  // 4 > 3 echoes
  EXPECT_FALSE(c.Enabled(t0));
  EXPECT_FALSE(c.Enabled(t0 + CaseRandomization::kRetryAfter - std::chrono::seconds(1)));
  EXPECT_TRUE(c.Enabled(t0 + CaseRandomization::kRetryAfter));
  // Counts start again after the retry.
  EXPECT_FALSE(c.Mismatched(t0 + CaseRandomization::kRetryAfter));
}

TEST(CaseRandomization, ServerThatNeverEchoesLosesItAfterThree) {
  CaseRandomization c;
  const Clock::time_point t0 = Clock::now();
  EXPECT_FALSE(c.Mismatched(t0));
  EXPECT_FALSE(c.Mismatched(t0));
  EXPECT_TRUE(c.Mismatched(t0));
  EXPECT_FALSE(c.Enabled(t0));
}

common::SocketAddress Addr(const char* text) {
  auto a = common::SocketAddress::Parse(text, 53);
  EXPECT_TRUE(a.ok());
  return *a;
}

dns::Message Parse(const std::vector<uint8_t>& pkt) {
  dns::Message m;
  EXPECT_EQ(m.Parse(pkt, {}), dns::ParseError::kOk);
  return m;
}

TEST(UpstreamCookie, ClientCookiePerUpstreamAndSecret) {
  std::array<uint8_t, 16> s1{}, s2{};
  s2[0] = 1;
  const UpstreamCookie a(s1, Addr("192.0.2.1:53")), a2(s1, Addr("192.0.2.1:53"));
  const UpstreamCookie b(s1, Addr("192.0.2.2:53")), c(s1, Addr("192.0.2.1:5353")),
      d(s2, Addr("192.0.2.1:53"));
  const auto bytes = [](const UpstreamCookie& x) {
    auto s = x.OptionData();
    return std::vector<uint8_t>(s.begin(), s.end());
  };
  EXPECT_EQ(bytes(a).size(), 8u);
  EXPECT_EQ(bytes(a), bytes(a2));
  EXPECT_NE(bytes(a), bytes(b));
  EXPECT_NE(bytes(a), bytes(c));
  EXPECT_NE(bytes(a), bytes(d));
}

TEST(UpstreamCookie, LearnsTheServerCookieAndRefusesOthers) {
  std::array<uint8_t, 16> secret{};
  UpstreamCookie k(secret, Addr("192.0.2.1:53"));
  const auto q = Wire("www.example.com");
  std::vector<uint8_t> client(k.OptionData().begin(), k.OptionData().end());

  dns::Message none = Parse(Answer(q));
  EXPECT_EQ(k.Check(none), UpstreamCookie::Verdict::kAbsent);
  EXPECT_FALSE(k.server_supports());

  // Our client cookie alone (a server without server cookies): accepted.
  auto only_client = Answer(q, client, true);
  EXPECT_EQ(k.Check(Parse(only_client)), UpstreamCookie::Verdict::kOk);
  EXPECT_FALSE(k.server_supports());

  std::vector<uint8_t> full = client;
  for (int i = 0; i < 16; ++i) full.push_back(static_cast<uint8_t>(0xa0 + i));
  auto with_server = Answer(q, full, true);
  EXPECT_EQ(k.Check(Parse(with_server)), UpstreamCookie::Verdict::kOk);
  EXPECT_TRUE(k.server_supports());
  // The next query carries the server cookie.
  EXPECT_EQ(std::vector<uint8_t>(k.OptionData().begin(), k.OptionData().end()), full);

  std::vector<uint8_t> wrong = full;
  wrong[0] ^= 1;
  auto forged = Answer(q, wrong, true);
  EXPECT_EQ(k.Check(Parse(forged)), UpstreamCookie::Verdict::kWrong);
  std::vector<uint8_t> short_cookie(client.begin(), client.end());
  short_cookie.resize(12);  // 8 < length < 16
  auto malformed = Answer(q, short_cookie, true);
  EXPECT_EQ(k.Check(Parse(malformed)), UpstreamCookie::Verdict::kMalformed);
  // Refused answers teach nothing.
  EXPECT_EQ(std::vector<uint8_t>(k.OptionData().begin(), k.OptionData().end()), full);

  k.Forget();
  EXPECT_FALSE(k.server_supports());
  EXPECT_EQ(k.OptionData().size(), 8u);
}

TEST(TryTable, KeysInFlightAndLateAreNotReused) {
  int a = 1, b = 2;
  TryTable<int*> t(std::chrono::seconds(5), 100);
  const Clock::time_point t0 = Clock::now();
  const TryTable<int*>::Key k1{7, 0, 4711}, k2{7, 1, 4711}, k3{8, 0, 4711};
  EXPECT_TRUE(t.Free(k1, t0));
  t.Add(k1, &a);
  t.Add(k2, &b);
  EXPECT_FALSE(t.Free(k1, t0));
  EXPECT_TRUE(t.Free(k3, t0));  // another socket
  EXPECT_EQ(t.Find(k1), &a);
  EXPECT_EQ(t.Find(k2), &b);  // same socket and ID, another upstream
  EXPECT_EQ(t.Find(k3), nullptr);

  t.End(k1, /*expect_late=*/true, t0);
  EXPECT_EQ(t.Find(k1), nullptr);
  EXPECT_FALSE(t.Free(k1, t0 + std::chrono::seconds(4)));
  EXPECT_TRUE(t.TakeLate(k1, t0 + std::chrono::seconds(4)));
  EXPECT_FALSE(t.TakeLate(k1, t0 + std::chrono::seconds(4)));  // counted once

  t.End(k2, /*expect_late=*/false, t0);  // answered: nothing more to come
  EXPECT_FALSE(t.TakeLate(k2, t0));
  EXPECT_TRUE(t.Free(k2, t0));
}

TEST(TryTable, LateWindowAndCapacity) {
  TryTable<int*> t(std::chrono::seconds(5), 3);
  const Clock::time_point t0 = Clock::now();
  for (uint16_t id = 0; id < 4; ++id) t.End({1, 0, id}, true, t0);
  EXPECT_EQ(t.late(), 3u);  // the oldest went first
  EXPECT_TRUE(t.Free({1, 0, 0}, t0));
  EXPECT_FALSE(t.Free({1, 0, 3}, t0));
  EXPECT_FALSE(t.TakeLate({1, 0, 2}, t0 + std::chrono::seconds(5)));  // the window is over
  EXPECT_EQ(t.late(), 0u);
  EXPECT_TRUE(t.Free({1, 0, 3}, t0 + std::chrono::seconds(5)));
}

TEST(PortRange, EphemeralRangeLessReservedPorts) {
  SecureRandom rng;
  const PortRange r = PortRange::FromProc("32768\t32777\n", "32770,32772-32775\n");
  EXPECT_EQ(r.low(), 32768);
  EXPECT_EQ(r.high(), 32777);
  std::set<uint16_t> seen;
  for (int i = 0; i < 500; ++i) seen.insert(r.Draw(rng));
  EXPECT_EQ(seen, (std::set<uint16_t>{32768, 32769, 32771, 32776, 32777}));

  // Unreadable text: Linux's default range, nothing reserved.
  const PortRange d = PortRange::FromProc("", "garbage");
  EXPECT_EQ(d.low(), 32768);
  EXPECT_EQ(d.high(), 60999);
  EXPECT_FALSE(d.Reserved(40000));
  const PortRange low = PortRange::FromProc("80 90", "");  // below 1024: refused
  EXPECT_EQ(low.low(), 32768);

  const PortRange all = PortRange::FromProc("5000 5001", "5000-5001");
  EXPECT_EQ(all.Draw(rng), 0);
}

TEST(SecureRandom, BelowIsInRangeAndCoversIt) {
  SecureRandom rng;
  std::vector<int> seen(7);
  for (int i = 0; i < 7000; ++i) {
    const uint32_t v = rng.Below(7);
    ASSERT_LT(v, 7u);
    ++seen[v];
  }
  for (int n : seen) EXPECT_GT(n, 700);
}

}  // namespace
}  // namespace weir::fastpath
