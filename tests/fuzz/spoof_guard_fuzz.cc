// Fuzzes the last hop's spoofing checks (weir/recursor/spoof_guard.h) on
// arbitrary bytes: RandomizeCase over the input as a wire name (only the
// case bit of letters may change, the name stays the same name), the COOKIE
// option of an answer (only a well-formed one is learnt, and what goes out
// next is always 8 or 16..40 bytes starting with the client cookie), and
// SameSpelling of the input as a reply.
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "fuzz_check.h"
#include "weir/dns/message.h"
#include "weir/recursor/spoof_guard.h"

namespace {

using namespace weir;

bool IsLetter(uint8_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

void CheckCase(std::span<const uint8_t> in) {
  std::vector<uint8_t> name(in.begin(), in.end());
  std::mt19937_64 rng(in.size());
  const int letters = recursor::RandomizeCase(name, rng);
  FUZZ_CHECK(name.size() == in.size() && letters >= 0 && static_cast<size_t>(letters) <= in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    FUZZ_CHECK(name[i] == in[i] || (IsLetter(in[i]) && (name[i] ^ in[i]) == 0x20));
  }
  dns::NameKey a, b;
  size_t end_a = 0, end_b = 0;
  const dns::ParseError ea = dns::ReadName(in, 0, &end_a, &a);
  const dns::ParseError eb = dns::ReadName(name, 0, &end_b, &b);
  FUZZ_CHECK(ea == eb);
  if (ea == dns::ParseError::kOk) FUZZ_CHECK(end_a == end_b && a == b);
  // The reply that echoes the name as sent matches; the input itself
  // matches only when nothing changed.
  std::vector<uint8_t> reply(12, 0);
  reply.insert(reply.end(), name.begin(), name.end());
  FUZZ_CHECK(recursor::SameSpelling(reply, name));
  FUZZ_CHECK(recursor::SameSpelling(in, name) ==
             (in.size() >= 12 + name.size() && std::memcmp(in.data() + 12, name.data(), name.size()) == 0));
}

void CheckCookie(std::span<const uint8_t> in) {
  using recursor::CookieJar;
  CookieJar jar({});
  const auto server = *common::SocketAddress::Parse("192.0.2.1:53");
  const auto local = *common::SocketAddress::Parse("127.0.0.1:1");
  const auto client = jar.ClientCookie(local, server);
  const CookieJar::Verdict v = CookieJar::Check(client, true, in);
  const bool well_formed = in.size() >= 16 && in.size() <= 40;
  FUZZ_CHECK((v == CookieJar::Verdict::kMalformed) == !well_formed);
  FUZZ_CHECK(v != CookieJar::Verdict::kGood || std::memcmp(in.data(), client.data(), 8) == 0);
  jar.Learn(server, in);
  FUZZ_CHECK(jar.DoesCookies(server) == well_formed);
  uint8_t out[CookieJar::kMaxOption];
  const size_t n = jar.OptionData(client, server, out);
  FUZZ_CHECK(n == (well_formed ? in.size() : 8u));
  FUZZ_CHECK(std::memcmp(out, client.data(), 8) == 0);
  if (well_formed) FUZZ_CHECK(std::memcmp(out + 8, in.data() + 8, n - 8) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> in(data, size);
  CheckCase(in);
  CheckCookie(in);
  return 0;
}
