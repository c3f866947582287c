// Fuzzes the checks both tiers make of an upstream answer against blind
// spoofing (weir/dns/case_randomization.h, weir/dns/cookies.h), on
// arbitrary bytes taken three ways:
//
//  * as an answer: Message::Parse, then the cookie rule over UDP and TCP
//    (with the fuzzer's option, and with our client cookie patched in, the
//    paths that learn a server cookie), the 0x20 spelling compare and case
//    randomisation of its question name;
//  * as a wire name: RandomizeCase changes only the case bit of letters and
//    the name stays the same name; SameSpelling of the input as a reply;
//  * as a COOKIE option: only a well-formed one is learnt, and what goes out
//    next is always 8 or 16..40 bytes starting with the client cookie;
//  * as the COOKIE option of a query at a server (weir/dns/server_cookies.h):
//    malformed exactly when not 8 or 16..40 bytes, never valid from another
//    address, and the cookie the server answers with is valid when echoed.
#include <cctype>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "fuzz_check.h"
#include "weir/common/secure_random.h"
#include "weir/common/socket_address.h"
#include "weir/dns/case_randomization.h"
#include "weir/dns/cookies.h"
#include "weir/dns/message.h"
#include "weir/dns/server_cookies.h"

namespace {

using namespace weir;
using dns::CookieJar;

const common::SocketAddress& Server() {
  static const common::SocketAddress kServer = *common::SocketAddress::Parse("192.0.2.1:53", 53);
  return kServer;
}

// What a query to the server would carry next: 8 or 16..40 bytes, the
// client cookie first, and a server cookie exactly when it does cookies.
void CheckOption(const CookieJar& jar, const CookieJar::ClientCookieBytes& client) {
  uint8_t out[CookieJar::kMaxOption];
  const size_t n = jar.OptionData(client, Server(), out);
  FUZZ_CHECK(n == 8 || (n >= 16 && n <= 40));
  FUZZ_CHECK(std::memcmp(out, client.data(), 8) == 0);
  FUZZ_CHECK(jar.DoesCookies(Server()) == (n > 8));
}

void CheckAnswer(std::span<const uint8_t> pkt, common::SecureRandom& rng) {
  dns::Message m;
  if (m.Parse(pkt, {}) != dns::ParseError::kOk) return;
  CookieJar jar({});
  const CookieJar::ClientCookieBytes client = jar.ClientCookie({}, Server());
  for (const bool tcp : {false, true}) {
    CookieJar::Verdict v{};
    const CookieJar::Outcome o = jar.OnAnswer(client, Server(), m, tcp, &v);
    FUZZ_CHECK(o != CookieJar::Outcome::kBadCookie ||
               (!tcp && m.rcode() == CookieJar::kRcodeBadCookie &&
                (v == CookieJar::Verdict::kGood || v == CookieJar::Verdict::kAbsent)));
    if (v == CookieJar::Verdict::kWrongClient || v == CookieJar::Verdict::kMalformed)
      FUZZ_CHECK(o == CookieJar::Outcome::kRefuse);
    CheckOption(jar, client);
  }
  // The same answer carrying our client cookie (a fuzzer cannot guess it):
  // the paths that learn a server cookie.
  static uint8_t copy[65536];
  if (m.edns().has_cookie && m.edns().cookie_len >= 8 && pkt.size() <= sizeof(copy)) {
    std::memcpy(copy, pkt.data(), pkt.size());
    std::memcpy(copy + m.edns().cookie_offset, client.data(), 8);
    dns::Message again;
    // A compression pointer elsewhere may point into the bytes just replaced
    // (a name made of the cookie): then the copy is no answer at all, and the
    // parser's refusal is the right outcome, not a finding.
    if (again.Parse({copy, pkt.size()}, {}) == dns::ParseError::kOk) {
      const bool well_formed = m.edns().cookie_len >= 16 && m.edns().cookie_len <= 40;
      const CookieJar::Outcome o = jar.OnAnswer(client, Server(), again, false);
      FUZZ_CHECK((o == CookieJar::Outcome::kRefuse) == !well_formed);
      if (well_formed) FUZZ_CHECK(jar.DoesCookies(Server()));
      CheckOption(jar, client);
    }
  }

  // The case checks below need the question name written out at offset 12
  // (m.qname().len bytes). A name compressed with a pointer (into the header,
  // say) is not: its spelling never equals a name weir sent, so such an answer
  // is refused as a mismatch, which dns::SameSpelling's own tests cover.
  const size_t qlen = m.qname().len;
  size_t pos = dns::kHeaderSize;
  while (pos < pkt.size() && pkt[pos] != 0 && (pkt[pos] & 0xc0) == 0) pos += pkt[pos] + 1u;
  if (pos >= pkt.size() || pkt[pos] != 0 || pos + 1 != dns::kHeaderSize + qlen) return;
  FUZZ_CHECK(dns::SameSpelling(pkt, {pkt.data() + dns::kHeaderSize, qlen}));
  uint8_t name[dns::kMaxNameWire];
  std::memcpy(name, pkt.data() + dns::kHeaderSize, qlen);
  const int letters = dns::RandomizeCase({name, qlen}, rng);
  FUZZ_CHECK(letters >= 0 && static_cast<size_t>(letters) <= qlen);
  for (size_t i = 0; i < qlen; ++i) FUZZ_CHECK(std::tolower(name[i]) == m.qname().bytes[i]);
}

bool IsLetter(uint8_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

void CheckCase(std::span<const uint8_t> in) {
  std::vector<uint8_t> name(in.begin(), in.end());
  std::mt19937_64 rng(in.size());
  const int letters = dns::RandomizeCase(name, rng);
  FUZZ_CHECK(name.size() == in.size() && letters >= 0 && static_cast<size_t>(letters) <= in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    FUZZ_CHECK(name[i] == in[i] || (IsLetter(in[i]) && (name[i] ^ in[i]) == 0x20));
  }
  // weir randomises only names it wrote itself, uncompressed: for those the
  // name reads the same (a pointer's offset byte could be flipped as a letter).
  size_t pos = 0;
  while (pos < in.size() && in[pos] != 0 && (in[pos] & 0xc0) == 0) pos += in[pos] + 1u;
  const bool uncompressed = pos < in.size() && in[pos] == 0;
  dns::NameKey a, b;
  size_t end_a = 0, end_b = 0;
  const dns::ParseError ea = dns::ReadName(in, 0, &end_a, &a);
  const dns::ParseError eb = dns::ReadName(name, 0, &end_b, &b);
  if (uncompressed) FUZZ_CHECK(ea == eb);
  if (uncompressed && ea == dns::ParseError::kOk) FUZZ_CHECK(end_a == end_b && a == b);
  // The reply that echoes the name as sent matches; the input itself
  // matches only when nothing changed.
  std::vector<uint8_t> reply(12, 0);
  reply.insert(reply.end(), name.begin(), name.end());
  FUZZ_CHECK(dns::SameSpelling(reply, name));
  FUZZ_CHECK(dns::SameSpelling(in, name) ==
             (in.size() >= 12 + name.size() && std::memcmp(in.data() + 12, name.data(), name.size()) == 0));
}

void CheckCookie(std::span<const uint8_t> in) {
  CookieJar jar({});
  const auto local = *common::SocketAddress::Parse("127.0.0.1:1");
  const auto client = jar.ClientCookie(local, Server());
  const CookieJar::Verdict v = CookieJar::Check(client, true, in);
  const bool well_formed = in.size() >= 16 && in.size() <= 40;
  FUZZ_CHECK((v == CookieJar::Verdict::kMalformed) == !well_formed);
  FUZZ_CHECK(v != CookieJar::Verdict::kGood || std::memcmp(in.data(), client.data(), 8) == 0);
  jar.Learn(Server(), in);
  FUZZ_CHECK(jar.DoesCookies(Server()) == well_formed);
  uint8_t out[CookieJar::kMaxOption];
  const size_t n = jar.OptionData(client, Server(), out);
  FUZZ_CHECK(n == (well_formed ? in.size() : 8u));
  FUZZ_CHECK(std::memcmp(out, client.data(), 8) == 0);
  if (well_formed) FUZZ_CHECK(std::memcmp(out + 8, in.data() + 8, n - 8) == 0);
  CheckOption(jar, client);
}

void CheckServerCookie(std::span<const uint8_t> in) {
  using Verdict = dns::ServerCookies::Verdict;
  dns::ServerCookies cookies({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  static constexpr uint8_t kIp[4] = {192, 0, 2, 7};
  static constexpr uint8_t kOtherIp[4] = {192, 0, 2, 8};
  // The time from the input, so the fuzzer reaches both edges of the window.
  const uint32_t now =
      in.size() >= 16
          ? (uint32_t{in[12]} << 24 | uint32_t{in[13]} << 16 | uint32_t{in[14]} << 8 | uint32_t{in[15]}) + 60
          : 1700000000;
  dns::ServerCookies::OptionBytes reply{};
  const Verdict v = cookies.Judge(true, in, kIp, now, &reply);
  const bool well_formed = in.size() == 8 || (in.size() >= 16 && in.size() <= 40);
  FUZZ_CHECK((v == Verdict::kMalformed) == !well_formed);
  FUZZ_CHECK((v == Verdict::kClientOnly) == (in.size() == 8));
  if (!well_formed) return;
  FUZZ_CHECK(std::memcmp(reply.data(), in.data(), 8) == 0);
  dns::ServerCookies::OptionBytes again{};
  FUZZ_CHECK(cookies.Judge(true, reply, kIp, now + 3600, &again) == Verdict::kValid);
  FUZZ_CHECK(cookies.Judge(true, reply, kOtherIp, now, &again) == Verdict::kInvalid);
  FUZZ_CHECK(cookies.Judge(true, reply, kIp, now + 3601, &again) == Verdict::kInvalid);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static common::SecureRandom rng;
  const std::span<const uint8_t> in(data, size);
  CheckAnswer(in, rng);
  CheckCase(in);
  CheckCookie(in);
  CheckServerCookie(in);
  return 0;
}
