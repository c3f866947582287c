// 0x20: the case of the question's letters, its byte-for-byte check, and
// the memory of the servers that do not preserve it (used by the fastpath's
// forwarder and the recursor's last hop).
#include "weir/dns/case_randomization.h"

#include <gtest/gtest.h>

#include <cctype>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "weir/common/secure_random.h"
#include "weir/dns/message.h"
#include "weir/dns/writer.h"

namespace weir::dns {
namespace {

using common::SocketAddress;

std::vector<uint8_t> Wire(const char* text) {
  NameKey k;
  EXPECT_TRUE(NameKeyFromText(text, &k));
  return {k.bytes.begin(), k.bytes.begin() + k.len};
}

SocketAddress Addr(const char* text) { return *SocketAddress::Parse(text, 53); }

TEST(RandomizeCaseTest, FlipsLettersOnlyAndKeepsTheName) {
  std::mt19937_64 rng(7);
  const std::vector<uint8_t> plain = Wire("www-1.ex_ample.com");
  std::set<std::vector<uint8_t>> seen;
  std::vector<bool> upper_seen(plain.size()), lower_seen(plain.size());
  for (int i = 0; i < 200; ++i) {
    std::vector<uint8_t> w = plain;
    EXPECT_EQ(RandomizeCase(w, rng), 13);  // wwwexamplecom
    ASSERT_EQ(w.size(), plain.size());
    for (size_t j = 0; j < w.size(); ++j) {
      // Length bytes, '-', '_' and '1' untouched; letters change case only.
      EXPECT_EQ(std::tolower(w[j]), plain[j]) << j;
      if (std::isupper(w[j])) upper_seen[j] = true;
      if (std::islower(w[j])) lower_seen[j] = true;
    }
    NameKey a, b;
    size_t end = 0;
    ASSERT_EQ(ReadName(w, 0, &end, &a), ParseError::kOk);
    ASSERT_EQ(ReadName(plain, 0, &end, &b), ParseError::kOk);
    EXPECT_EQ(a, b) << "the same name for everyone but a byte-for-byte check";
    seen.insert(w);
  }
  for (size_t j = 0; j < plain.size(); ++j) {
    if (!std::isalpha(plain[j])) continue;
    EXPECT_TRUE(upper_seen[j] && lower_seen[j]) << "letter " << j << " never changed case";
  }
  EXPECT_GT(seen.size(), 190u) << "2^13 spellings: 200 draws barely repeat";
}

TEST(RandomizeCaseTest, NameWithoutLettersHasNoEntropy) {
  std::mt19937_64 rng(1);
  std::vector<uint8_t> w = Wire("1.2.3.4");
  const std::vector<uint8_t> before = w;
  EXPECT_EQ(RandomizeCase(w, rng), 0);
  EXPECT_EQ(w, before);
  std::vector<uint8_t> root = {0};
  EXPECT_EQ(RandomizeCase(root, rng), 0);
}

TEST(RandomizeCaseTest, SecureRandomGivesDifferentCases) {
  common::SecureRandom r;
  std::set<std::vector<uint8_t>> seen;
  // One 64-bit draw a name: 600 names cross the 4 KiB buffer's refill.
  for (int i = 0; i < 600; ++i) {
    std::vector<uint8_t> w = Wire("abcdefghijklmnopqrstuvwxyz.example");
    EXPECT_EQ(RandomizeCase(w, r), 33);
    seen.insert(w);
  }
  EXPECT_EQ(seen.size(), 600u);
}

TEST(RandomizeCaseTest, StopsAtTheEndOfATruncatedName) {
  std::mt19937_64 rng(3);
  std::vector<uint8_t> w = {7, 'e', 'x', 'a'};  // a label that claims more than there is
  EXPECT_EQ(RandomizeCase(w, rng), 3);
  EXPECT_EQ(w.size(), 4u);
}

std::vector<uint8_t> Answer(const std::vector<uint8_t>& qname) {
  std::vector<uint8_t> buf(512);
  ResponseWriter w(buf.data(), buf.size());
  w.Begin(4711, flag::kQr, qname, type::kA, klass::kIn);
  buf.resize(w.Finish(buf.size()));
  return buf;
}

TEST(SameSpellingTest, ByteForByteAtTheQuestion) {
  std::vector<uint8_t> sent = Wire("www.example.com");
  sent[1] = 'W';
  std::vector<uint8_t> reply(12, 0);
  reply.insert(reply.end(), sent.begin(), sent.end());
  reply.insert(reply.end(), {0, 1, 0, 1});
  EXPECT_TRUE(SameSpelling(reply, sent));
  reply[13] = 'w';  // the authority lower-cased it (or a forger guessed)
  EXPECT_FALSE(SameSpelling(reply, sent));
  reply.resize(14);
  EXPECT_FALSE(SameSpelling(reply, sent)) << "a short reply never matches";
}

TEST(SameSpellingTest, WholeAnswersInAnotherCaseDoNotMatch) {
  // Name keys are lower case: the 0x20 spelling is written by hand.
  const char mixed[] = "\3wWw\7ExAmple\3com";
  const std::vector<uint8_t> name(mixed, mixed + sizeof(mixed));  // with the root's 0
  ASSERT_EQ(name.size(), 17u);
  EXPECT_TRUE(SameSpelling(Answer(name), name));
  EXPECT_FALSE(SameSpelling(Answer(Wire("www.example.com")), name));
  std::vector<uint8_t> upper = Answer(name);
  for (size_t i = kHeaderSize; i < kHeaderSize + 17; ++i) upper[i] = std::toupper(upper[i]);
  EXPECT_FALSE(SameSpelling(upper, name));
  EXPECT_FALSE(SameSpelling(std::span<const uint8_t>(Answer(name).data(), 20), name)) << "too short";
}

TEST(CaseMemoryTest, RemembersPerServerAndPortForAWhile) {
  CaseMemory m;
  const auto t0 = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  const SocketAddress a = Addr("192.0.2.1:53"), b = Addr("192.0.2.2:53"),
                      a_other_port = Addr("192.0.2.1:5353"), v6 = Addr("[2001:db8::1]:53");
  EXPECT_TRUE(m.Preserves(a, t0));
  m.NotPreserved(a, t0);
  EXPECT_FALSE(m.Preserves(a, t0 + std::chrono::seconds(1)));
  EXPECT_TRUE(m.Preserves(b, t0));
  EXPECT_TRUE(m.Preserves(a_other_port, t0)) << "another port, another server (a forwarder's upstreams)";
  EXPECT_TRUE(m.Preserves(v6, t0));
  EXPECT_FALSE(m.Preserves(a, t0 + CaseMemory::kHold - std::chrono::seconds(1)));
  EXPECT_TRUE(m.Preserves(a, t0 + CaseMemory::kHold)) << "0x20 is tried again after the hold";
  EXPECT_EQ(m.size(), 1u);
}

TEST(CaseMemoryTest, NewProofRestartsTheHold) {
  CaseMemory m;
  const auto t0 = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  const SocketAddress a = Addr("192.0.2.1:53");
  m.NotPreserved(a, t0);
  EXPECT_TRUE(m.Preserves(a, t0 + CaseMemory::kHold));
  // Tried again after the hold, the server still rewrites the case.
  m.NotPreserved(a, t0 + CaseMemory::kHold);
  EXPECT_FALSE(m.Preserves(a, t0 + CaseMemory::kHold + std::chrono::seconds(1)));
  EXPECT_EQ(m.size(), 1u);
}

}  // namespace
}  // namespace weir::dns
