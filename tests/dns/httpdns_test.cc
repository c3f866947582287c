// HTTPDNS as the resolver sees it: which targets are the API's, what a
// request asks, the signature forms (vectors computed with the openssl
// command line, as an SDK author would check them), the accounts' text
// form, the DNS queries a request takes and the JSON it is answered with.
#include "weir/dns/httpdns.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "dns/test_util.h"
#include "weir/common/ip.h"
#include "weir/dns/error.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"
#include "weir/dns/writer.h"

namespace weir::dns::httpdns {
namespace {

using Bytes = std::vector<uint8_t>;
using nlohmann::json;
using testing::Key;
using testing::WireName;

constexpr size_t kBatch = 5;

Request Get(std::string_view target, size_t max_batch = kBatch) {
  return ParseRequest("GET", target, max_batch);
}

// What a refused request shows: its code and a one-line reason.
void ExpectRefused(const Request& r, ErrorCode code) {
  EXPECT_EQ(r.error, code) << r.message;
  EXPECT_FALSE(r.message.empty());
  EXPECT_EQ(r.message.find('\n'), std::string::npos);
}

// ---------------------------------------------------------------- IsHttpDnsTarget

TEST(HttpDnsTarget, ThePathsWithAndWithoutAnAccount) {
  for (const std::string_view api : {"/d", "/resolve", "/sign_d", "/sign_resolve"}) {
    const std::string a(api);
    EXPECT_TRUE(IsHttpDnsTarget(a + "?host=a.com", "/dns-json")) << a;
    EXPECT_TRUE(IsHttpDnsTarget(a, "/dns-json")) << a;
    EXPECT_TRUE(IsHttpDnsTarget("/acme" + a + "?host=a.com", "/dns-json")) << a;
    EXPECT_TRUE(IsHttpDnsTarget("/Ac-m_e.9" + a, "/dns-json")) << a;
  }
  for (const std::string_view t : {"",
                                   "d",
                                   "/",
                                   "/D",
                                   "/d/",
                                   "/dd",
                                   "/resolv",
                                   "/sign_",
                                   "/sign",
                                   "/dns-query",
                                   "//d",
                                   "/a/b/d",
                                   "/d/d/x",
                                   "/acme/",
                                   "/acme/x",
                                   "/ac%2Dme/d",
                                   "/ac me/d",
                                   "/ac+me/d",
                                   "/ac@me/d",
                                   "/%64",
                                   "/acme/resolve/",
                                   "/acme/sign_resolve/x",
                                   "/acme/d#x"}) {
    EXPECT_FALSE(IsHttpDnsTarget(t, "/dns-json")) << t;
  }
}

TEST(HttpDnsTarget, ResolveSharedWithTheDohJsonApiNeedsAHost) {
  // The DoH JSON API on /resolve names the name `name`.
  EXPECT_FALSE(IsHttpDnsTarget("/resolve?name=a.com&type=A", "/resolve"));
  EXPECT_FALSE(IsHttpDnsTarget("/resolve", "/resolve"));
  EXPECT_FALSE(IsHttpDnsTarget("/resolve?", "/resolve"));
  EXPECT_TRUE(IsHttpDnsTarget("/resolve?dn=a.com", "/resolve"));  // vivo's and Tencent's name for host
  EXPECT_FALSE(IsHttpDnsTarget("/resolve?hostx=a.com&xhost=b", "/resolve"));
  EXPECT_TRUE(IsHttpDnsTarget("/resolve?host=a.com", "/resolve"));
  EXPECT_TRUE(IsHttpDnsTarget("/resolve?name=x&host=a.com,b.com", "/resolve"));
  EXPECT_TRUE(IsHttpDnsTarget("/resolve?host", "/resolve"));
  EXPECT_TRUE(IsHttpDnsTarget("/resolve?h%6Fst=a.com", "/resolve"));  // the name decoded
  EXPECT_TRUE(IsHttpDnsTarget("/resolve?host=%zz", "/resolve"));      // HTTPDNS's to refuse
  // The other paths are HTTPDNS's whatever their parameters.
  EXPECT_TRUE(IsHttpDnsTarget("/acme/resolve?name=a.com", "/resolve"));
  EXPECT_TRUE(IsHttpDnsTarget("/sign_resolve?name=a.com", "/resolve"));
  EXPECT_TRUE(IsHttpDnsTarget("/d?name=a.com", "/resolve"));
  // DoH JSON elsewhere: /resolve is HTTPDNS's alone.
  EXPECT_TRUE(IsHttpDnsTarget("/resolve?name=a.com", "/dns-json"));
  EXPECT_TRUE(IsHttpDnsTarget("/resolve", "/dns-json"));
}

TEST(HttpDnsTarget, TheQueryStringIsNotThePath) {
  EXPECT_TRUE(IsHttpDnsTarget("/d?", "/resolve"));
  EXPECT_TRUE(IsHttpDnsTarget("/d?host=a.com?x=/y", "/resolve"));
  EXPECT_TRUE(IsHttpDnsTarget("/d?%zz", "/resolve"));  // not decoded here
  EXPECT_FALSE(IsHttpDnsTarget("/x?/d", "/resolve"));
}

// ---------------------------------------------------------------- ParseRequest

TEST(HttpDnsRequest, SingleHost) {
  const Request r = Get("/d?host=www.example.com");
  ASSERT_EQ(r.error, ErrorCode::kNone) << r.message;
  EXPECT_EQ(r.api, Api::kSingle);
  EXPECT_FALSE(r.sign_path);
  EXPECT_EQ(r.account, "");
  EXPECT_EQ(r.hosts, std::vector<std::string>{"www.example.com"});
  EXPECT_EQ(r.host_valid, std::vector<bool>{true});
  EXPECT_EQ(r.host_param, "www.example.com");
  EXPECT_TRUE(r.v4);
  EXPECT_FALSE(r.v6);
  EXPECT_FALSE(r.ip.has_value());
  EXPECT_FALSE(r.weights);
  EXPECT_TRUE(r.signature.empty());
  EXPECT_FALSE(r.exp.has_value());
  EXPECT_FALSE(r.t.has_value());
  EXPECT_EQ(ApiName(r.api), "d");
}

TEST(HttpDnsRequest, TrailingDotAliasAndEncoding) {
  Request r = Get("/d?host=www.example.com.");
  ASSERT_EQ(r.error, ErrorCode::kNone) << r.message;
  EXPECT_EQ(r.hosts, std::vector<std::string>{"www.example.com"});
  EXPECT_EQ(r.host_param, "www.example.com.");  // as sent: the legacy form signs it

  r = Get("/d?dn=www.example.com");
  ASSERT_EQ(r.error, ErrorCode::kNone) << r.message;
  EXPECT_EQ(r.hosts, std::vector<std::string>{"www.example.com"});
  EXPECT_EQ(r.host_param, "www.example.com");

  // A parameter the API reads, given twice, is refused: the signature sorts
  // what the reader takes in order, so a signed request could be reordered.
  for (const char* target :
       {"/d?dn=b.example.com&host=a.example.com", "/d?host=a.example.com&host=b.example.com",
        "/d?host=a.com&ip=192.0.2.1&ip=192.0.2.2", "/d?host=a.com&exp=1&exp=2",
        "/d?host=a.com&query=4&query=6", "/d?host=a.com&s=1&s=2"}) {
    r = Get(target);
    EXPECT_EQ(r.error, ErrorCode::kInvalidArgument) << target;
    EXPECT_NE(r.message.find("more than once"), std::string::npos) << r.message;
  }

  r = Get("/d?h%6Fst=www%2Eexample%2ecom&unknown=1");
  ASSERT_EQ(r.error, ErrorCode::kNone) << r.message;
  EXPECT_EQ(r.hosts, std::vector<std::string>{"www.example.com"});

  r = Get("/d?host=_sip._udp.Ex-ample.COM");
  ASSERT_EQ(r.error, ErrorCode::kNone) << r.message;
  EXPECT_EQ(r.hosts, std::vector<std::string>{"_sip._udp.Ex-ample.COM"});  // case kept
}

TEST(HttpDnsRequest, SingleHostMustBeAName) {
  const std::string label63(63, 'a');
  const std::string label64(64, 'a');
  // 253 octets: 3 labels of 63, one of 61, and their dots.
  const std::string longest = label63 + "." + label63 + "." + label63 + "." + std::string(61, 'b');
  ASSERT_EQ(longest.size(), 253u);
  EXPECT_EQ(Get("/d?host=" + label63 + ".com").error, ErrorCode::kNone);
  EXPECT_EQ(Get("/d?host=" + longest).error, ErrorCode::kNone);
  EXPECT_EQ(Get("/d?host=" + longest + ".").error, ErrorCode::kNone);
  ExpectRefused(Get("/d?host=" + longest + "b"), ErrorCode::kInvalidHost);
  ExpectRefused(Get("/d?host=" + label64 + ".com"), ErrorCode::kInvalidHost);
  for (const std::string_view bad : {"a..b", ".a.com", "a.com..", ".", "a%20b.com", "a,b.com", "a%5C.com",
                                     "a%2Fb", "a*.com", "%C3%A9.com", "a%00.com", "a.com%0A"}) {
    const Request r = Get("/d?host=" + std::string(bad));
    ExpectRefused(r, ErrorCode::kInvalidHost);
  }
  ExpectRefused(Get("/d?host="), ErrorCode::kMissingArgument);
  ExpectRefused(Get("/d"), ErrorCode::kMissingArgument);
  ExpectRefused(Get("/d?query=4&name=a.com"), ErrorCode::kMissingArgument);
}

TEST(HttpDnsRequest, Batch) {
  Request r = Get("/resolve?host=a.example.com,b.example.com.,,c.example.com,");
  ASSERT_EQ(r.error, ErrorCode::kNone) << r.message;
  EXPECT_EQ(r.api, Api::kBatch);
  EXPECT_EQ(ApiName(r.api), "resolve");
  EXPECT_EQ(r.hosts, (std::vector<std::string>{"a.example.com", "b.example.com", "c.example.com"}));
  EXPECT_EQ(r.host_valid, (std::vector<bool>{true, true, true}));

  // An invalid name is answered "invalid_host"; the others are resolved.
  r = Get("/resolve?host=a.example.com,bad..name,c%20d,e.example.com");
  ASSERT_EQ(r.error, ErrorCode::kNone) << r.message;
  EXPECT_EQ(r.hosts, (std::vector<std::string>{"a.example.com", "bad..name", "c d", "e.example.com"}));
  EXPECT_EQ(r.host_valid, (std::vector<bool>{true, false, false, true}));

  r = Get("/resolve?dn=a.example.com%2Cb.example.com");
  ASSERT_EQ(r.error, ErrorCode::kNone) << r.message;
  EXPECT_EQ(r.hosts.size(), 2u);

  ExpectRefused(Get("/resolve?host=,,,"), ErrorCode::kMissingArgument);
  ExpectRefused(Get("/resolve?host="), ErrorCode::kMissingArgument);
  ExpectRefused(Get("/resolve"), ErrorCode::kMissingArgument);
}

TEST(HttpDnsRequest, BatchLimit) {
  EXPECT_EQ(Get("/resolve?host=a.com,b.com", 2).error, ErrorCode::kNone);
  EXPECT_EQ(Get("/resolve?host=a.com,,b.com,", 2).error, ErrorCode::kNone);  // empty items do not count
  ExpectRefused(Get("/resolve?host=a.com,b.com,c.com", 2), ErrorCode::kTooManyHosts);
  // The limit is 1..kMaxBatch whatever is configured.
  ExpectRefused(Get("/resolve?host=a.com,b.com", 0), ErrorCode::kTooManyHosts);
  EXPECT_EQ(Get("/resolve?host=a.com", 0).error, ErrorCode::kNone);
  std::string hosts;
  for (size_t i = 0; i < kMaxBatch; ++i) hosts += "h" + std::to_string(i) + ".com,";
  EXPECT_EQ(Get("/resolve?host=" + hosts, 1000).hosts.size(), kMaxBatch);
  ExpectRefused(Get("/resolve?host=" + hosts + "x.com", 1000), ErrorCode::kTooManyHosts);
  // The single API takes one name: a list is not one.
  ExpectRefused(Get("/d?host=a.com,b.com"), ErrorCode::kInvalidHost);
}

TEST(HttpDnsRequest, Families) {
  struct Case {
    std::string_view query;
    bool v4, v6;
  };
  for (const Case& c :
       {Case{"", true, false}, Case{"&query=4", true, false}, Case{"&query=6", false, true},
        Case{"&query=4,6", true, true}, Case{"&query=6,4", true, true}, Case{"&query=4%2C6", true, true}}) {
    const Request r = Get("/d?host=a.com" + std::string(c.query));
    ASSERT_EQ(r.error, ErrorCode::kNone) << c.query;
    EXPECT_EQ(r.v4, c.v4) << c.query;
    EXPECT_EQ(r.v6, c.v6) << c.query;
  }
  for (const std::string_view bad : {"", "bad", "4,", "4,4", "46", "4;6", "A", "ipv4", " 4"}) {
    ExpectRefused(Get("/d?host=a.com&query=" + std::string(bad)), ErrorCode::kInvalidArgument);
  }
}

TEST(HttpDnsRequest, ClientIp) {
  Request r = Get("/d?host=a.com&ip=192.0.2.1");
  ASSERT_EQ(r.error, ErrorCode::kNone) << r.message;
  ASSERT_TRUE(r.ip.has_value());
  EXPECT_EQ(common::IpToString(*r.ip), "192.0.2.1");
  r = Get("/d?host=a.com&ip=2001%3Adb8%3A%3A1");
  ASSERT_EQ(r.error, ErrorCode::kNone) << r.message;
  ASSERT_TRUE(r.ip.has_value());
  EXPECT_EQ(r.ip->family, 6);
  EXPECT_EQ(common::IpToString(*r.ip), "2001:db8::1");
  for (const std::string_view bad :
       {"", "1.2.3", "256.1.1.1", "192.0.2.1/24", "a.com", "::g", "192.0.2.1%20"}) {
    ExpectRefused(Get("/d?host=a.com&ip=" + std::string(bad)), ErrorCode::kInvalidIp);
  }
}

TEST(HttpDnsRequest, Weights) {
  for (const std::string_view on : {"1", "true", "TRUE", "True"}) {
    const Request r = Get("/d?host=a.com&weights=" + std::string(on));
    ASSERT_EQ(r.error, ErrorCode::kNone) << on;
    EXPECT_TRUE(r.weights) << on;
  }
  for (const std::string_view off : {"0", "false", ""}) {
    const Request r = Get("/d?host=a.com&weights=" + std::string(off));
    ASSERT_EQ(r.error, ErrorCode::kNone) << off;
    EXPECT_FALSE(r.weights) << off;
  }
  for (const std::string_view bad : {"2", "yes", "on", "01"}) {
    ExpectRefused(Get("/d?host=a.com&weights=" + std::string(bad)), ErrorCode::kInvalidArgument);
  }
}

TEST(HttpDnsRequest, Account) {
  EXPECT_EQ(Get("/acme/d?host=a.com").account, "acme");
  EXPECT_EQ(Get("/d?host=a.com&account=acme").account, "acme");
  EXPECT_EQ(Get("/d?host=a.com&account=ac%6De").account, "acme");
  EXPECT_EQ(Get("/acme/d?host=a.com&account=other").account, "acme");  // the path names it
  EXPECT_EQ(Get("/d?host=a.com").account, "");
  const Request r = Get("/acme/sign_resolve?host=a.com");
  EXPECT_EQ(r.account, "acme");
  EXPECT_TRUE(r.sign_path);
  EXPECT_EQ(r.api, Api::kBatch);
  const Request d = Get("/sign_d?host=a.com");
  EXPECT_TRUE(d.sign_path);
  EXPECT_EQ(d.api, Api::kSingle);
}

TEST(HttpDnsRequest, SignatureMaterial) {
  Request r = Get("/d?host=a.com&s=ABCdef&exp=1767225600");
  ASSERT_EQ(r.error, ErrorCode::kNone) << r.message;
  EXPECT_EQ(r.signature, "ABCdef");  // as sent
  EXPECT_EQ(r.exp, 1767225600u);
  EXPECT_FALSE(r.t.has_value());
  r = Get("/d?host=a.com&s=00&t=1534316400");
  ASSERT_EQ(r.error, ErrorCode::kNone) << r.message;
  EXPECT_EQ(r.t, 1534316400u);
  EXPECT_FALSE(r.exp.has_value());
  r = Get("/d?host=a.com&exp=18446744073709551615");
  ASSERT_EQ(r.error, ErrorCode::kNone) << r.message;
  EXPECT_EQ(r.exp, UINT64_MAX);
  for (const std::string_view bad : {"exp=", "exp=abc", "exp=-1", "exp=%2B1", "exp=1.5",
                                     "exp=18446744073709551616", "t=", "t=0x10", "t=1e9", "s="}) {
    ExpectRefused(Get("/d?host=a.com&" + std::string(bad)), ErrorCode::kInvalidArgument);
  }
}

TEST(HttpDnsRequest, BadPercentEncoding) {
  for (const std::string_view t : {"/d?host=a.com&x=%zz", "/d?host=a.com%", "/d?host=a.com%4",
                                   "/d?%g1=1&host=a.com", "/d?host=a%2.com", "/resolve?host=a.com,%"}) {
    ExpectRefused(Get(t), ErrorCode::kInvalidArgument);
  }
}

TEST(HttpDnsRequest, MethodsAndPaths) {
  EXPECT_EQ(ParseRequest("HEAD", "/d?host=a.com", kBatch).error, ErrorCode::kNone);
  for (const std::string_view m : {"POST", "PUT", "DELETE", "get", ""}) {
    ExpectRefused(ParseRequest(m, "/d?host=a.com", kBatch), ErrorCode::kMethodNotAllowed);
  }
  ExpectRefused(Get("/dns-query?host=a.com"), ErrorCode::kNotFound);
  ExpectRefused(Get("/a/b/d?host=a.com"), ErrorCode::kNotFound);
  ExpectRefused(ParseRequest("POST", "/nothing", kBatch), ErrorCode::kNotFound);
}

TEST(HttpDnsRequest, ErrorNamesAndStatuses) {
  struct Case {
    ErrorCode code;
    std::string_view name;
    int status;
  };
  for (const Case& c : {
           Case{ErrorCode::kNone, "", 200},
           Case{ErrorCode::kMissingArgument, "MissingArgument", 400},
           Case{ErrorCode::kInvalidHost, "InvalidHost", 400},
           Case{ErrorCode::kInvalidIp, "InvalidIp", 400},
           Case{ErrorCode::kInvalidArgument, "InvalidArgument", 400},
           Case{ErrorCode::kTooManyHosts, "TooManyHosts", 400},
           Case{ErrorCode::kInvalidAccount, "InvalidAccount", 403},
           Case{ErrorCode::kInvalidSignature, "InvalidSignature", 403},
           Case{ErrorCode::kSignatureExpired, "SignatureExpired", 403},
           Case{ErrorCode::kUnsignedInterfaceDisabled, "UnsignedInterfaceDisabled", 403},
           Case{ErrorCode::kQuotaExceeded, "QuotaExceeded", 429},
           Case{ErrorCode::kMethodNotAllowed, "MethodNotAllowed", 405},
           Case{ErrorCode::kNotFound, "NotFound", 404},
       }) {
    EXPECT_EQ(ErrorCodeName(c.code), c.name);
    EXPECT_EQ(ErrorStatus(c.code), c.status) << c.name;
  }
}

// ---------------------------------------------------------------- string to sign

TEST(HttpDnsStringToSign, SortedDecodedWithoutS) {
  const Request r =
      Get("/acme/sign_resolve?zz=%41&query=4,6&s=bcb09a37&host=a.example.com%2Cb.example.com&ip=192.0.2.1&"
          "exp=1767225600");
  ASSERT_EQ(r.error, ErrorCode::kNone) << r.message;
  EXPECT_EQ(r.string_to_sign,
            "/acme/sign_resolve?exp=1767225600&host=a.example.com,b.example.com&ip=192.0.2.1&query=4,6&zz=A");
}

TEST(HttpDnsStringToSign, RepeatedEmptyAndBareParameters) {
  // Every parameter but s, the repeated ones too (by value), bare ones as
  // "name="; empty pairs are none.
  const Request r = Get("/d?host=x.com&b=2&&b=1&a&s=1&B=0");
  ASSERT_EQ(r.error, ErrorCode::kNone) << r.message;
  EXPECT_EQ(r.string_to_sign, "/d?B=0&a=&b=1&b=2&host=x.com");  // bytewise: 'B' < 'a'
  EXPECT_EQ(Get("/d?host=x.com&s=abc").string_to_sign, "/d?host=x.com");
}

TEST(HttpDnsStringToSign, EncodedSeparatorsCannotPoseAsParameters) {
  // A decoded '&', '=' or '%' is written %26, %3D, %25: "host=a%26ip%3D1.2.3.4"
  // and "host=a&ip=1.2.3.4" sign differently.
  EXPECT_EQ(Get("/d?host=x.com&k=a%26ip%3D1.2.3.4").string_to_sign, "/d?host=x.com&k=a%26ip%3D1.2.3.4");
  EXPECT_EQ(Get("/d?host=x.com&k=a&ip=1.2.3.4").string_to_sign, "/d?host=x.com&ip=1.2.3.4&k=a");
  EXPECT_EQ(Get("/d?host=x.com&k%3Dv=1%25").string_to_sign, "/d?host=x.com&k%3Dv=1%25");
}

TEST(HttpDnsStringToSign, PathAsSent) {
  EXPECT_EQ(Get("/acme/d?host=x.com").string_to_sign, "/acme/d?host=x.com");
  EXPECT_EQ(Get("/d?account=acme&host=x.com").string_to_sign, "/d?account=acme&host=x.com");
  EXPECT_EQ(Get("/Acme/sign_d?host=x.com").string_to_sign, "/Acme/sign_d?host=x.com");
  // '+' stays '+'; "%2B" is '+' too.
  EXPECT_EQ(Get("/d?host=x.com&k=a+b%2Bc").string_to_sign, "/d?host=x.com&k=a+b+c");
}

// ---------------------------------------------------------------- signatures

constexpr std::string_view kSecret1 = "0123456789abcdef0123";
constexpr std::string_view kSecret2 = "Second+Secret=With/Chars#9";
constexpr uint64_t kExp = 1767225600;

// printf '%s' '/acme/d?exp=1767225600&host=www.example.com' |
//   openssl dgst -sha256 -hmac 0123456789abcdef0123
constexpr std::string_view kDocHmac = "02d95a5299d7fbeb8d7f6c717582739bc13ebcfb5a43b5dc4f099c83abb5185f";
// The same for the batch request below, under each secret.
constexpr std::string_view kBatchTarget =
    "/acme/sign_resolve?zz=%41&query=4,6&host=a.example.com%2Cb.example.com&ip=192.0.2.1&exp=1767225600";
constexpr std::string_view kBatchHmac1 = "bcb09a37e8b5bf8277c332bd60f0677aff44c035f609a268ab7803a1068ae7c8";
constexpr std::string_view kBatchHmac2 = "bfff6e3cec57da39eecd201cace5ac96f17704dd716654dba4c8d079228c2bf0";
// printf '%s' '/d?account=acme&exp=1767225600&host=www.example.com' | openssl dgst -sha256 -hmac "$S1"
constexpr std::string_view kAccountParamHmac =
    "54653be0a69f9373f9ef2476e5597bff7f9827e19a593d7eb18241ec46047d30";

Account Acme() {
  Account a;
  a.name = "acme";
  a.secrets = {std::string(kSecret1), std::string(kSecret2)};
  return a;
}

Request Signed(std::string_view target, std::string_view s) {
  return Get(std::string(target) + "&s=" + std::string(s));
}

void ExpectDenied(const AuthResult& r, ErrorCode code, const Account& account) {
  EXPECT_EQ(r.error, code) << r.message;
  EXPECT_FALSE(r.message.empty());
  for (const std::string& secret : account.secrets) EXPECT_EQ(r.message.find(secret), std::string::npos);
}

TEST(HttpDnsSignature, MatchesOpenssl) {
  EXPECT_EQ(HmacSignature(kSecret1, "/acme/d?exp=1767225600&host=www.example.com"), kDocHmac);
  // printf '%s' 'www.aliyun.com-IAmASecret-1534316400' | openssl dgst -md5
  EXPECT_EQ(LegacySignature("www.aliyun.com", "IAmASecret", 1534316400), "60c71e98b6d7fcbb366243e224eab457");
}

TEST(HttpDnsAuthenticate, NoAccount) {
  const Request r = Get("/nobody/d?host=a.com");
  ExpectDenied(Authenticate(r, nullptr, 0), ErrorCode::kInvalidAccount, Account{});
}

TEST(HttpDnsAuthenticate, Unsigned) {
  Account a = Acme();
  const Request r = Get("/acme/d?host=a.com");
  ExpectDenied(Authenticate(r, &a, kExp), ErrorCode::kUnsignedInterfaceDisabled, a);
  a.allow_unsigned = true;
  const AuthResult ok = Authenticate(r, &a, kExp);
  EXPECT_EQ(ok.error, ErrorCode::kNone) << ok.message;
  EXPECT_EQ(ok.form, SignatureForm::kUnsigned);
  // A sign_ path needs a signature whatever the account allows.
  ExpectDenied(Authenticate(Get("/acme/sign_d?host=a.com"), &a, kExp), ErrorCode::kUnsignedInterfaceDisabled,
               a);
  ExpectDenied(Authenticate(Get("/acme/sign_d?host=a.com&exp=1767225600"), &a, kExp - 10),
               ErrorCode::kUnsignedInterfaceDisabled, a);
}

TEST(HttpDnsAuthenticate, HmacWithEitherSecret) {
  const Account a = Acme();
  const uint64_t now = kExp - 60;
  for (const std::string_view s : {kBatchHmac1, kBatchHmac2}) {
    const Request r = Signed(kBatchTarget, s);
    ASSERT_EQ(r.error, ErrorCode::kNone) << r.message;
    const AuthResult res = Authenticate(r, &a, now);
    EXPECT_EQ(res.error, ErrorCode::kNone) << res.message;
    EXPECT_EQ(res.form, SignatureForm::kHmac);
  }
  // Any case of hex.
  std::string upper(kBatchHmac2);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_EQ(Authenticate(Signed(kBatchTarget, upper), &a, now).error, ErrorCode::kNone);
  // The signature in the path's account form and in the parameter's.
  EXPECT_EQ(Authenticate(Signed("/acme/d?exp=1767225600&host=www.example.com", kDocHmac), &a, now).error,
            ErrorCode::kNone);
  EXPECT_EQ(
      Authenticate(Signed("/d?host=www.example.com&account=acme&exp=1767225600", kAccountParamHmac), &a, now)
          .error,
      ErrorCode::kNone);
  // A secret the account no longer has.
  Account rotated = a;
  rotated.secrets = {"a-brand-new-secret-0001"};
  ExpectDenied(Authenticate(Signed(kBatchTarget, kBatchHmac1), &rotated, now), ErrorCode::kInvalidSignature,
               rotated);
  Account none = a;
  none.secrets.clear();
  ExpectDenied(Authenticate(Signed(kBatchTarget, kBatchHmac1), &none, now), ErrorCode::kInvalidSignature,
               none);
}

TEST(HttpDnsAuthenticate, HmacCoversEveryParameterAndThePath) {
  const Account a = Acme();
  const uint64_t now = kExp - 60;
  const std::string target(kBatchTarget);
  for (const char* changed : {
           "/acme/"
           "sign_resolve?zz=%41&query=4,6&host=a.example.com%2Cb.example.com&ip=192.0.2.2&exp=1767225600",
           "/acme/sign_resolve?zz=%41&query=4&host=a.example.com%2Cb.example.com&ip=192.0.2.1&exp=1767225600",
           "/acme/sign_resolve?zz=%41&query=4,6&host=a.example.com&ip=192.0.2.1&exp=1767225600",
           "/acme/"
           "sign_resolve?zz=%41&query=4,6&host=a.example.com%2Cb.example.com&ip=192.0.2.1&exp=1767225601",
           "/acme/sign_resolve?query=4,6&host=a.example.com%2Cb.example.com&ip=192.0.2.1&exp=1767225600",
           "/acme/"
           "sign_resolve?zz=%41&query=4,6&host=a.example.com%2Cb.example.com&ip=192.0.2.1&exp=1767225600&x=1",
           "/acme/resolve?zz=%41&query=4,6&host=a.example.com%2Cb.example.com&ip=192.0.2.1&exp=1767225600",
       }) {
    ExpectDenied(Authenticate(Signed(changed, kBatchHmac1), &a, now), ErrorCode::kInvalidSignature, a);
  }
  // What is decoded the same signs the same: the order and the encoding are free.
  EXPECT_EQ(Authenticate(Signed("/acme/sign_resolve?exp=1767225600&ip=192.0.2.1&zz=A&query=4%2C6&"
                                "host=a.example.com,b.example.com",
                                kBatchHmac1),
                         &a, now)
                .error,
            ErrorCode::kNone);
  // Not hex, too short, too long.
  for (const std::string_view bad :
       {"zz", "bcb09a37", "bcb09a37e8b5bf8277c332bd60f0677aff44c035f609a268ab7803a1068ae7c800"}) {
    ExpectDenied(Authenticate(Signed(target, bad), &a, now), ErrorCode::kInvalidSignature, a);
  }
}

TEST(HttpDnsAuthenticate, ExpiryBoundaries) {
  const Account a = Acme();
  const Request r = Signed(kBatchTarget, kBatchHmac1);
  EXPECT_EQ(Authenticate(r, &a, kExp - 1).error, ErrorCode::kNone);
  EXPECT_EQ(Authenticate(r, &a, kExp - kMaxExpiryAhead).error, ErrorCode::kNone);  // exp = now + 86400
  ExpectDenied(Authenticate(r, &a, kExp), ErrorCode::kSignatureExpired, a);        // exp = now
  ExpectDenied(Authenticate(r, &a, kExp + 1), ErrorCode::kSignatureExpired, a);
  ExpectDenied(Authenticate(r, &a, kExp - kMaxExpiryAhead - 1), ErrorCode::kInvalidSignature,
               a);  // now + 86401
  ExpectDenied(Authenticate(r, &a, 0), ErrorCode::kInvalidSignature, a);
  // Expiry is checked before the signature: a wrong one expires the same.
  ExpectDenied(Authenticate(Signed(kBatchTarget, "00"), &a, kExp), ErrorCode::kSignatureExpired, a);
}

TEST(HttpDnsAuthenticate, Legacy) {
  Account a;
  a.name = "aliyun";
  a.secrets = {"IAmASecret"};
  constexpr uint64_t kT = 1534316400;
  const Request r = Get("/aliyun/d?host=www.aliyun.com&t=1534316400&s=60c71e98b6d7fcbb366243e224eab457");
  ASSERT_EQ(r.error, ErrorCode::kNone) << r.message;
  ExpectDenied(Authenticate(r, &a, kT - 10), ErrorCode::kInvalidSignature, a);  // off
  a.allow_legacy_md5 = true;
  AuthResult ok = Authenticate(r, &a, kT - 10);
  EXPECT_EQ(ok.error, ErrorCode::kNone) << ok.message;
  EXPECT_EQ(ok.form, SignatureForm::kLegacyMd5);
  EXPECT_EQ(Authenticate(r, &a, kT - kMaxExpiryAhead).error, ErrorCode::kNone);
  ExpectDenied(Authenticate(r, &a, kT), ErrorCode::kSignatureExpired, a);
  ExpectDenied(Authenticate(r, &a, kT - kMaxExpiryAhead - 1), ErrorCode::kInvalidSignature, a);
  // Uppercase, and the second of two secrets.
  a.secrets = {"NewSecretNewSecret", "IAmASecret"};
  EXPECT_EQ(Authenticate(Get("/aliyun/d?host=www.aliyun.com&t=1534316400&s=60C71E98B6D7FCBB366243E224EAB457"),
                         &a, kT - 10)
                .error,
            ErrorCode::kNone);
  // The host is signed; ip is not.
  ExpectDenied(
      Authenticate(Get("/aliyun/d?host=www.aliyun.co&t=1534316400&s=60c71e98b6d7fcbb366243e224eab457"), &a,
                   kT - 10),
      ErrorCode::kInvalidSignature, a);
  EXPECT_EQ(Authenticate(Get("/aliyun/d?host=www.aliyun.com&t=1534316400&ip=192.0.2.1&"
                             "s=60c71e98b6d7fcbb366243e224eab457"),
                         &a, kT - 10)
                .error,
            ErrorCode::kNone);
  // As generated, against the library's own signer.
  EXPECT_EQ(LegacySignature("www.aliyun.com", "IAmASecret", kT), "60c71e98b6d7fcbb366243e224eab457");
}

TEST(HttpDnsAuthenticate, FormOfTheSignature) {
  Account a = Acme();
  a.allow_legacy_md5 = true;
  a.allow_unsigned = true;
  // s alone: neither form.
  ExpectDenied(Authenticate(Get("/acme/d?host=a.com&s=00"), &a, kExp - 60), ErrorCode::kInvalidArgument, a);
  // exp and t: the HMAC form.
  const Request both = Get("/acme/d?exp=1767225600&host=www.example.com&t=1&s=" + std::string(kDocHmac));
  const AuthResult r = Authenticate(both, &a, kExp - 60);
  EXPECT_EQ(r.form, SignatureForm::kHmac);
  EXPECT_EQ(r.error, ErrorCode::kInvalidSignature);  // t is signed too, and the vector has none
  const std::string s = HmacSignature(kSecret1, both.string_to_sign);
  EXPECT_EQ(Authenticate(Get("/acme/d?exp=1767225600&host=www.example.com&t=1&s=" + s), &a, kExp - 60).form,
            SignatureForm::kHmac);
  EXPECT_EQ(Authenticate(Get("/acme/d?exp=1767225600&host=www.example.com&t=1&s=" + s), &a, kExp - 60).error,
            ErrorCode::kNone);
  // A refused request stays refused.
  const Request bad = Get("/acme/d?host=a..b");
  EXPECT_EQ(Authenticate(bad, &a, kExp).error, ErrorCode::kInvalidHost);
}

// ---------------------------------------------------------------- accounts

TEST(HttpDnsAccounts, ParseAndFormatRoundTrip) {
  const std::string text =
      "# accounts pushed by weir-mgmt\n"
      "\n"
      "acme secret=0123456789abcdef0123\n"
      "  globex  unsigned=on\tlegacy_md5=on rps=500 secret=Second+Secret=With/Chars#9 "
      "secret=0123456789abcdef0123  \r\n"
      "   # indented comment\n"
      "A.b-c_9 rps=0 legacy_md5=off unsigned=off secret=" +
      std::string(128, 'x') + "\n" +
      "last rps=4294967295 secret=" + std::string(16, '!');  // no final newline
  const absl::StatusOr<std::vector<Account>> parsed = ParseAccounts(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 4u);
  const Account& acme = (*parsed)[0];
  EXPECT_EQ(acme.name, "acme");
  EXPECT_EQ(acme.secrets, std::vector<std::string>{"0123456789abcdef0123"});
  EXPECT_FALSE(acme.allow_unsigned);
  EXPECT_FALSE(acme.allow_legacy_md5);
  EXPECT_EQ(acme.rps, 0u);
  const Account& globex = (*parsed)[1];
  EXPECT_EQ(globex.name, "globex");
  EXPECT_TRUE(globex.allow_unsigned);
  EXPECT_TRUE(globex.allow_legacy_md5);
  EXPECT_EQ(globex.rps, 500u);
  EXPECT_EQ(globex.secrets, (std::vector<std::string>{"Second+Secret=With/Chars#9", "0123456789abcdef0123"}));
  EXPECT_EQ((*parsed)[2].name, "A.b-c_9");
  EXPECT_EQ((*parsed)[2].secrets[0].size(), 128u);
  EXPECT_EQ((*parsed)[3].rps, 4294967295u);

  const std::string formatted = FormatAccounts(*parsed);
  EXPECT_EQ(formatted.substr(0, formatted.find('\n')),
            "acme unsigned=off legacy_md5=off rps=0 secret=0123456789abcdef0123");
  const absl::StatusOr<std::vector<Account>> again = ParseAccounts(formatted);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *parsed);
  EXPECT_EQ(FormatAccounts(*again), formatted);

  EXPECT_TRUE(ParseAccounts("").value().empty());
  EXPECT_TRUE(ParseAccounts("# nothing\n\n  \n").value().empty());
  EXPECT_EQ(FormatAccounts({}), "");
}

TEST(HttpDnsAccounts, ErrorsNameTheLineAndNeverTheSecret) {
  constexpr std::string_view kMarker = "SeCrEt-MaRkEr-0123456789";  // 24 octets
  const std::string ok = "acme secret=0123456789abcdef0123\n";
  struct Case {
    std::string line;
    std::string_view says;
  };
  const std::string m(kMarker);
  for (const Case& c : {
           Case{"acme secret=" + m, "already on line 1"},
           Case{"bad/name secret=" + m, "name"},
           Case{std::string(65, 'a') + " secret=" + m, "name"},
           Case{m + "=x secret=" + m, "name"},
           Case{"b secret=" + m.substr(0, 15), "not 16..128"},
           Case{"b secret=" + m + std::string(105, 'x'), "not 16..128"},
           Case{"b secret=" + m + "\x01" + "x", "printable"},
           Case{"b secret=" + m + "\x80" + "x", "printable"},
           Case{"b secret=" + m + " secret=" + m + "1 secret=" + m + "2", "two secrets"},
           Case{"b foo=bar secret=" + m, "unknown key"},
           Case{"b secrt=" + m, "unknown key"},
           Case{"b " + m, "not key=value"},
           Case{"b " + m + "=1 secret=" + m, "unknown key"},
           Case{"b rps=x secret=" + m, "rps"},
           Case{"b rps=-1 secret=" + m, "rps"},
           Case{"b rps=4294967296 secret=" + m, "rps"},
           Case{"b rps= secret=" + m, "rps"},
           Case{"b unsigned=yes secret=" + m, "unsigned"},
           Case{"b legacy_md5=1 secret=" + m, "legacy_md5"},
           Case{"b unsigned=on unsigned=off secret=" + m, "twice"},
           Case{"b rps=1 rps=1 secret=" + m, "twice"},
           Case{"b unsigned=on", "no secret"},
           Case{"b", "no secret"},
       }) {
    const absl::StatusOr<std::vector<Account>> r = ParseAccounts(ok + "\n# comment\n" + c.line + "\n");
    ASSERT_FALSE(r.ok()) << c.line;
    const std::string msg(r.status().message());
    EXPECT_TRUE(msg.starts_with("line 4: ")) << msg;
    EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
    EXPECT_EQ(msg.find(kMarker.substr(0, 12)), std::string::npos) << msg;
  }
}

TEST(HttpDnsAccounts, SecretBoundsAndCharacters) {
  EXPECT_TRUE(ParseAccounts("a secret=" + std::string(16, 'k')).ok());
  EXPECT_TRUE(ParseAccounts("a secret=" + std::string(128, 'k')).ok());
  EXPECT_FALSE(ParseAccounts("a secret=" + std::string(15, 'k')).ok());
  EXPECT_FALSE(ParseAccounts("a secret=" + std::string(129, 'k')).ok());
  const auto r = ParseAccounts("a secret=#==~!@$%^&*()[]{}<>?");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].secrets[0], "#==~!@$%^&*()[]{}<>?");  // '#' and '=' inside a secret
}

TEST(HttpDnsAccounts, ValidNames) {
  for (const std::string_view ok : {"a", "acme", "A.b-c_9", "...", "--", "0"})
    EXPECT_TRUE(IsValidAccountName(ok)) << ok;
  EXPECT_TRUE(IsValidAccountName(std::string(64, 'z')));
  EXPECT_FALSE(IsValidAccountName(std::string(65, 'z')));
  // "-" is the anonymous requests' label; "." and ".." are no path segment an account has.
  for (const std::string_view bad :
       {"", "a/b", "a b", "a%b", "a+b", "é", "a\n", "a=b", "a:b", "-", ".", ".."}) {
    EXPECT_FALSE(IsValidAccountName(bad)) << bad;
  }
}

// ---------------------------------------------------------------- BuildQuery

TEST(HttpDnsQuery, AQueryWithOpt) {
  const Bytes q = BuildQuery("WWW.Example.com", type::kA, false, kDefaultWeightOptionCode);
  Query parsed;
  ASSERT_EQ(ParseQuery(q, ParseOptions{}, &parsed), ParseError::kOk);
  EXPECT_EQ(parsed.id, 0);
  EXPECT_TRUE(parsed.rd());
  EXPECT_EQ(parsed.opcode(), 0);
  EXPECT_EQ(parsed.qtype, type::kA);
  EXPECT_EQ(parsed.qclass, klass::kIn);
  EXPECT_EQ(parsed.qname, Key("www.example.com"));
  // The spelling is kept on the wire.
  EXPECT_EQ(Bytes(q.begin() + kHeaderSize, q.begin() + kHeaderSize + 17), WireName("WWW.Example.com"));
  EXPECT_TRUE(parsed.edns.present);
  EXPECT_EQ(parsed.edns.udp_size, 1232);
  EXPECT_FALSE(parsed.edns.do_bit);
  EXPECT_FALSE(parsed.edns.has_weight);
  EXPECT_FALSE(parsed.edns.has_ecs);
}

TEST(HttpDnsQuery, AaaaWithTheWeightOption) {
  ParseOptions opts;
  opts.weight_option_code = 65100;
  const Bytes q = BuildQuery("a.example.com.", type::kAaaa, true, 65100);
  Query parsed;
  ASSERT_EQ(ParseQuery(q, opts, &parsed), ParseError::kOk);
  EXPECT_EQ(parsed.qtype, type::kAaaa);
  EXPECT_EQ(parsed.qname, Key("a.example.com"));
  EXPECT_TRUE(parsed.edns.has_weight);
  EXPECT_EQ(parsed.edns.weight_len, 0);
  // Under another code it is some other option.
  ASSERT_EQ(ParseQuery(q, ParseOptions{}, &parsed), ParseError::kOk);
  EXPECT_FALSE(parsed.edns.has_weight);
}

TEST(HttpDnsQuery, OnlyValidHosts) {
  const std::string longest = std::string(63, 'a') + "." + std::string(63, 'b') + "." + std::string(63, 'c') +
                              "." + std::string(61, 'd');
  Query parsed;
  ASSERT_EQ(
      ParseQuery(BuildQuery(longest, type::kA, true, kDefaultWeightOptionCode), ParseOptions{}, &parsed),
      ParseError::kOk);
  EXPECT_EQ(parsed.qname.len, 255);
  for (const std::string& bad :
       std::vector<std::string>{"", ".", "a..b", "a b", "a\\.b", longest + "d", "a.com.."}) {
    EXPECT_TRUE(BuildQuery(bad, type::kA, false, kDefaultWeightOptionCode).empty()) << bad;
  }
}

// ---------------------------------------------------------------- AddAnswer

struct Rr {
  std::string owner;
  uint16_t type;
  uint32_t ttl;
  Bytes rdata;
};

Bytes A(uint8_t last) { return {192, 0, 2, last}; }
Bytes Aaaa(uint8_t last) { return {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, last}; }
// An SOA's RDATA with root names and `minimum`.
Bytes Soa(uint32_t minimum) {
  Bytes r = {0, 0, 0, 0, 0, 1, 0, 0, 0x0e, 0x10, 0, 0, 0x02, 0x58, 0, 0x09, 0x3a, 0x80};
  for (int shift = 24; shift >= 0; shift -= 8) r.push_back(static_cast<uint8_t>(minimum >> shift));
  return r;
}

// A response as a resolver sends it; `weight_option` is the raw data of
// the weight option (none when absent).
Bytes Response(std::string_view qname, uint16_t qtype, Rcode rcode, const std::vector<Rr>& answers,
               const std::vector<Rr>& authority = {}, std::optional<Bytes> weight_option = std::nullopt,
               uint16_t weight_code = kDefaultWeightOptionCode) {
  uint8_t buf[4096];
  ResponseWriter w(buf, sizeof buf);
  const auto flags = static_cast<uint16_t>(flag::kQr | flag::kRd | flag::kRa | static_cast<uint16_t>(rcode));
  EXPECT_EQ(w.Begin(0, flags, WireName(qname), qtype, klass::kIn), ParseError::kOk);
  for (const Rr& rr : answers) {
    EXPECT_EQ(w.AppendRecord(Section::kAnswer, WireName(rr.owner), rr.type, klass::kIn, rr.ttl, rr.rdata),
              ParseError::kOk);
  }
  for (const Rr& rr : authority) {
    EXPECT_EQ(w.AppendRecord(Section::kAuthority, WireName(rr.owner), rr.type, klass::kIn, rr.ttl, rr.rdata),
              ParseError::kOk);
  }
  EXPECT_EQ(w.BeginOpt(1232, false), ParseError::kOk);
  if (weight_option) {
    EXPECT_EQ(w.AddOption(weight_code, *weight_option), ParseError::kOk);
  }
  const size_t len = w.Finish(sizeof buf);
  return Bytes(buf, buf + len);
}

HostAnswer Add(const Bytes& answer, uint16_t qtype, bool want_weights = false, uint32_t origin_ttl = 0,
               HostAnswer start = {}) {
  AddAnswer(answer, qtype, kDefaultWeightOptionCode, want_weights, origin_ttl, false, &start);
  return start;
}

using Strings = std::vector<std::string>;
using Weights = std::vector<uint16_t>;

TEST(HttpDnsAnswer, ARecords) {
  const HostAnswer h =
      Add(Response("www.example.com", type::kA, Rcode::kNoError,
                   {{"www.example.com", type::kA, 300, A(1)}, {"www.example.com", type::kA, 120, A(2)}}),
          type::kA);
  EXPECT_EQ(h.code, "");
  EXPECT_TRUE(h.has_answer);
  EXPECT_EQ(h.ips, (Strings{"192.0.2.1", "192.0.2.2"}));  // in the answer's order
  EXPECT_TRUE(h.ipsv6.empty());
  EXPECT_EQ(h.ttl, 120u);
  EXPECT_EQ(h.origin_ttl, 120u);  // 0 given: the TTL
  EXPECT_FALSE(h.stale);
  EXPECT_TRUE(h.weights.empty());
}

TEST(HttpDnsAnswer, OriginTtlAndStale) {
  HostAnswer h;
  AddAnswer(Response("a.com", type::kA, Rcode::kNoError, {{"a.com", type::kA, 30, A(1)}}), type::kA,
            kDefaultWeightOptionCode, false, 600, true, &h);
  EXPECT_EQ(h.ttl, 30u);
  EXPECT_EQ(h.origin_ttl, 600u);
  EXPECT_TRUE(h.stale);
}

TEST(HttpDnsAnswer, Aaaa) {
  const HostAnswer h = Add(
      Response("a.com", type::kAaaa, Rcode::kNoError, {{"a.com", type::kAaaa, 60, Aaaa(1)}}), type::kAaaa);
  EXPECT_EQ(h.code, "");
  EXPECT_TRUE(h.ips.empty());
  EXPECT_EQ(h.ipsv6, Strings{"2001:db8::1"});
  EXPECT_EQ(h.ttl, 60u);
}

TEST(HttpDnsAnswer, CnameChainThenA) {
  const HostAnswer h = Add(Response("www.example.com", type::kA, Rcode::kNoError,
                                    {
                                        {"www.example.com", type::kCname, 30, WireName("a.CDN.net")},
                                        {"other.net", type::kA, 5, A(9)},  // not on the chain
                                        {"A.cdn.NET", type::kCname, 40, WireName("b.cdn.net")},
                                        {"b.cdn.net", type::kA, 200, A(1)},
                                        {"b.cdn.net", type::kAaaa, 1, Aaaa(1)},  // not the type asked
                                        {"b.cdn.net", type::kA, 100, A(2)},
                                    }),
                           type::kA);
  EXPECT_EQ(h.code, "");
  EXPECT_EQ(h.ips, (Strings{"192.0.2.1", "192.0.2.2"}));
  EXPECT_EQ(h.ttl, 30u);  // the chain's and the address records' smallest (not other.net's 5)
}

TEST(HttpDnsAnswer, CnameLoopIsAnErrorDanglingIsNoIp) {
  HostAnswer h = Add(Response("a.com", type::kA, Rcode::kNoError,
                              {{"a.com", type::kCname, 30, WireName("b.com")},
                               {"b.com", type::kCname, 30, WireName("a.com")},
                               {"a.com", type::kA, 30, A(1)}}),
                     type::kA);
  EXPECT_EQ(h.code, "error");
  EXPECT_TRUE(h.ips.empty());
  h = Add(Response("a.com", type::kA, Rcode::kNoError,
                   {{"a.com", type::kCname, 30, WireName("A.com")}, {"a.com", type::kA, 30, A(1)}}),
          type::kA);
  EXPECT_EQ(h.code, "error");  // a name its own alias
  // A long chain, its records in reverse order.
  std::vector<Rr> chain = {{"c40.net", type::kA, 30, A(7)}};
  for (int i = 39; i >= 0; --i) {
    chain.push_back({i == 0 ? "a.com" : "c" + std::to_string(i) + ".net", type::kCname, 30,
                     WireName("c" + std::to_string(i + 1) + ".net")});
  }
  h = Add(Response("a.com", type::kA, Rcode::kNoError, chain), type::kA);
  EXPECT_EQ(h.code, "");
  EXPECT_EQ(h.ips, Strings{"192.0.2.7"});
  // A chain as long as the answer is no loop.
  h = Add(Response("a.com", type::kA, Rcode::kNoError,
                   {{"a.com", type::kCname, 30, WireName("b.com")},
                    {"b.com", type::kCname, 30, WireName("c.com")}}),
          type::kA);
  EXPECT_EQ(h.code, "no_ip");
  h = Add(Response("a.com", type::kA, Rcode::kNoError, {{"a.com", type::kCname, 30, WireName("b.com")}},
                   {{"com", type::kSoa, 900, Soa(60)}}),
          type::kA);
  EXPECT_EQ(h.code, "no_ip");
  EXPECT_EQ(h.ttl, 60u);
}

TEST(HttpDnsAnswer, NxdomainTakesTheNegativeTtl) {
  HostAnswer h = Add(Response("nx.example.com", type::kA, Rcode::kNxDomain, {},
                              {{"example.com", type::kSoa, 3600, Soa(300)}}),
                     type::kA);
  EXPECT_EQ(h.code, "nxdomain");
  EXPECT_TRUE(h.ips.empty());
  EXPECT_EQ(h.ttl, 300u);  // min(SOA TTL, MINIMUM)
  EXPECT_EQ(h.origin_ttl, 300u);
  h = Add(
      Response("nx.example.com", type::kA, Rcode::kNxDomain, {}, {{"example.com", type::kSoa, 60, Soa(300)}}),
      type::kA);
  EXPECT_EQ(h.ttl, 60u);
  h = Add(Response("nx.example.com", type::kA, Rcode::kNxDomain, {}), type::kA);
  EXPECT_EQ(h.code, "nxdomain");
  EXPECT_EQ(h.ttl, 0u);  // no SOA: nothing to keep it for
}

TEST(HttpDnsAnswer, NodataIsNoIp) {
  const HostAnswer h = Add(Response("a.example.com", type::kAaaa, Rcode::kNoError, {},
                                    {{"example.com", type::kSoa, 3600, Soa(120)}}),
                           type::kAaaa);
  EXPECT_EQ(h.code, "no_ip");
  EXPECT_EQ(h.ttl, 120u);
  EXPECT_TRUE(h.ipsv6.empty());
}

TEST(HttpDnsAnswer, Errors) {
  EXPECT_EQ(Add(Response("a.com", type::kA, Rcode::kServFail, {}), type::kA).code, "servfail");
  EXPECT_EQ(Add(Response("a.com", type::kA, Rcode::kRefused, {}), type::kA).code, "refused");
  EXPECT_EQ(Add(Response("a.com", type::kA, Rcode::kFormErr, {}), type::kA).code, "error");
  EXPECT_EQ(Add(Bytes{1, 2, 3}, type::kA).code, "error");
  const HostAnswer dropped = Add(Bytes{}, type::kA);
  EXPECT_EQ(dropped.code, "refused");
  EXPECT_TRUE(dropped.has_answer);
  EXPECT_EQ(dropped.ttl, 0u);
}

TEST(HttpDnsAnswer, Weights) {
  const Bytes weighted =
      Response("a.com", type::kA, Rcode::kNoError,
               {{"a.com", type::kA, 60, A(1)}, {"a.com", type::kA, 60, A(2)}}, {}, Bytes{0, 5, 0, 200});
  EXPECT_EQ(Add(weighted, type::kA, true).weights, (Weights{5, 200}));
  EXPECT_TRUE(Add(weighted, type::kA, false).weights.empty());
  // Under another code, the option is not the weights.
  HostAnswer other;
  AddAnswer(weighted, type::kA, 65002, true, 0, false, &other);
  EXPECT_TRUE(other.weights.empty());
  EXPECT_EQ(other.ips.size(), 2u);
  const HostAnswer v6 = Add(
      Response("a.com", type::kAaaa, Rcode::kNoError, {{"a.com", type::kAaaa, 60, Aaaa(1)}}, {}, Bytes{0, 7}),
      type::kAaaa, true);
  EXPECT_EQ(v6.weightsv6, Weights{7});
  EXPECT_TRUE(v6.weights.empty());
  // Invalid weights are no weights; the addresses are answered.
  for (const Bytes& bad : {Bytes{}, Bytes{0, 5}, Bytes{0, 5, 0}, Bytes{0, 5, 0, 0}, Bytes{1, 5, 0, 5},
                           Bytes{0, 1, 0, 2, 0, 3}}) {
    const HostAnswer h =
        Add(Response("a.com", type::kA, Rcode::kNoError,
                     {{"a.com", type::kA, 60, A(1)}, {"a.com", type::kA, 60, A(2)}}, {}, bad),
            type::kA, true);
    EXPECT_TRUE(h.weights.empty()) << bad.size();
    EXPECT_EQ(h.ips.size(), 2u);
  }
}

TEST(HttpDnsAnswer, TwoFamiliesTakeTheBestCodeAndTheSmallestTtl) {
  const Bytes a = Response("a.com", type::kA, Rcode::kNoError, {{"a.com", type::kA, 300, A(1)}});
  const Bytes aaaa = Response("a.com", type::kAaaa, Rcode::kNoError, {{"a.com", type::kAaaa, 200, Aaaa(1)}});
  const Bytes nodata6 =
      Response("a.com", type::kAaaa, Rcode::kNoError, {}, {{"com", type::kSoa, 900, Soa(60)}});
  const Bytes nx4 = Response("a.com", type::kA, Rcode::kNxDomain, {}, {{"com", type::kSoa, 900, Soa(90)}});
  const Bytes nx6 = Response("a.com", type::kAaaa, Rcode::kNxDomain, {}, {{"com", type::kSoa, 900, Soa(80)}});
  const Bytes servfail6 = Response("a.com", type::kAaaa, Rcode::kServFail, {});
  const Bytes servfail4 = Response("a.com", type::kA, Rcode::kServFail, {});

  HostAnswer h = Add(aaaa, type::kAaaa, false, 0, Add(a, type::kA));
  EXPECT_EQ(h.code, "");
  EXPECT_EQ(h.ips, Strings{"192.0.2.1"});
  EXPECT_EQ(h.ipsv6, Strings{"2001:db8::1"});
  EXPECT_EQ(h.ttl, 200u);
  EXPECT_EQ(h.origin_ttl, 200u);

  h = Add(nodata6, type::kAaaa, false, 0, Add(a, type::kA));  // addresses beat no_ip
  EXPECT_EQ(h.code, "");
  EXPECT_EQ(h.ttl, 60u);

  h = Add(a, type::kA, false, 0, Add(nodata6, type::kAaaa));  // whichever comes first
  EXPECT_EQ(h.code, "");
  EXPECT_EQ(h.ttl, 60u);

  h = Add(servfail6, type::kAaaa, false, 0, Add(a, type::kA));  // an error has no TTL to give
  EXPECT_EQ(h.code, "");
  EXPECT_EQ(h.ttl, 300u);

  h = Add(aaaa, type::kAaaa, false, 0, Add(servfail4, type::kA));
  EXPECT_EQ(h.code, "");
  EXPECT_EQ(h.ttl, 200u);

  h = Add(nx6, type::kAaaa, false, 0, Add(nx4, type::kA));
  EXPECT_EQ(h.code, "nxdomain");
  EXPECT_EQ(h.ttl, 80u);

  h = Add(nx6, type::kAaaa, false, 0, Add(nodata6, type::kA));  // no_ip beats nxdomain
  EXPECT_EQ(h.code, "no_ip");

  h = Add(servfail6, type::kAaaa, false, 0, Add(nx4, type::kA));  // nxdomain beats the errors
  EXPECT_EQ(h.code, "nxdomain");
  EXPECT_EQ(h.ttl, 90u);

  h = Add(nx4, type::kA, false, 0, Add(Bytes{}, type::kAaaa));
  EXPECT_EQ(h.code, "nxdomain");
  EXPECT_EQ(h.ttl, 90u);
}

// ---------------------------------------------------------------- JSON

common::IpAddress Ip(std::string_view text) {
  common::IpAddress ip;
  EXPECT_TRUE(common::ParseIp(text, &ip)) << text;
  return ip;
}

TEST(HttpDnsJson, SingleMinimal) {
  HostAnswer h;
  h.host = "www.example.com";
  h.ips = {"192.0.2.1", "192.0.2.2"};
  h.ttl = 60;
  h.origin_ttl = 300;
  h.has_answer = true;
  const json j = json::parse(RenderSingle(h, false, Ip("198.51.100.7"), false, 1767225600));
  EXPECT_EQ(j["host"], "www.example.com");
  EXPECT_EQ(j["client_ip"], "198.51.100.7");
  EXPECT_EQ(j["ips"], json::array({"192.0.2.1", "192.0.2.2"}));
  EXPECT_EQ(j["ttl"], 60);
  EXPECT_EQ(j["origin_ttl"], 300);
  EXPECT_EQ(j["server_time"], 1767225600);
  for (const char* absent : {"ipsv6", "stale", "weights", "weightsv6", "code", "ip_ignored", "dns"}) {
    EXPECT_FALSE(j.contains(absent)) << absent;
  }
  EXPECT_EQ(j.size(), 6u);
}

TEST(HttpDnsJson, SingleEverything) {
  HostAnswer h;
  h.host = "a.com";
  h.ips = {"192.0.2.1"};
  h.ipsv6 = {"2001:db8::1", "2001:db8::2"};
  h.weights = {10};
  h.weightsv6 = {1, 255};
  h.stale = true;
  h.code = "";
  const std::string text = RenderSingle(h, true, Ip("2001:db8::99"), true, 5);
  const json j = json::parse(text);
  EXPECT_EQ(j["ipsv6"], json::array({"2001:db8::1", "2001:db8::2"}));
  EXPECT_EQ(j["weights"], json::array({10}));
  EXPECT_EQ(j["weightsv6"], json::array({1, 255}));
  EXPECT_EQ(j["stale"], true);
  EXPECT_EQ(j["ip_ignored"], true);
  EXPECT_EQ(j["client_ip"], "2001:db8::99");
  EXPECT_FALSE(j.contains("code"));
  // The members in the documented order.
  EXPECT_LT(text.find("\"host\""), text.find("\"client_ip\""));
  EXPECT_LT(text.find("\"client_ip\""), text.find("\"ips\""));
  EXPECT_LT(text.find("\"ttl\""), text.find("\"server_time\""));

  HostAnswer no;
  no.host = "nx.com";
  no.code = "nxdomain";
  const json n = json::parse(RenderSingle(no, true, Ip("192.0.2.9"), false, 5));
  EXPECT_EQ(n["code"], "nxdomain");
  EXPECT_EQ(n["ips"], json::array());
  EXPECT_EQ(n["ipsv6"], json::array());
}

TEST(HttpDnsJson, Batch) {
  HostAnswer a;
  a.host = "a.com";
  a.ips = {"192.0.2.1"};
  a.ipsv6 = {"2001:db8::1"};
  a.ttl = 30;
  a.origin_ttl = 60;
  HostAnswer bad;
  bad.host = "b\xff\xfe..";  // as sent: not UTF-8
  bad.code = "invalid_host";
  const std::vector<HostAnswer> answers = {a, bad};
  json j = json::parse(RenderBatch(answers, false, Ip("192.0.2.200"), false, 77));
  ASSERT_TRUE(j["dns"].is_array());
  ASSERT_EQ(j["dns"].size(), 2u);
  EXPECT_EQ(j["dns"][0]["host"], "a.com");
  EXPECT_EQ(j["dns"][0]["ips"], json::array({"192.0.2.1"}));
  EXPECT_FALSE(j["dns"][0].contains("ipsv6"));  // not asked
  EXPECT_FALSE(j["dns"][0].contains("client_ip"));
  EXPECT_FALSE(j["dns"][0].contains("code"));
  EXPECT_EQ(j["dns"][0]["ttl"], 30);
  EXPECT_EQ(j["dns"][0]["origin_ttl"], 60);
  EXPECT_EQ(j["dns"][1]["code"], "invalid_host");
  EXPECT_TRUE(j["dns"][1]["host"].is_string());
  EXPECT_EQ(j["client_ip"], "192.0.2.200");
  EXPECT_EQ(j["server_time"], 77);
  EXPECT_FALSE(j.contains("ip_ignored"));
  EXPECT_FALSE(j.contains("host"));

  j = json::parse(RenderBatch(answers, true, Ip("192.0.2.200"), true, 77));
  EXPECT_EQ(j["dns"][0]["ipsv6"], json::array({"2001:db8::1"}));
  EXPECT_EQ(j["dns"][1]["ipsv6"], json::array());
  EXPECT_EQ(j["ip_ignored"], true);

  j = json::parse(RenderBatch({}, false, Ip("192.0.2.200"), false, 1));
  EXPECT_EQ(j["dns"], json::array());
}

TEST(HttpDnsJson, Error) {
  const json j = json::parse(RenderError(ErrorCode::kInvalidSignature, "s does not \"match\"\n", 9));
  EXPECT_EQ(j["code"], "InvalidSignature");
  EXPECT_EQ(j["message"], "s does not \"match\"\n");
  EXPECT_EQ(j["server_time"], 9);
  EXPECT_EQ(j.size(), 3u);
}

TEST(HttpDnsJson, EndToEnd) {
  // A request, its queries, their answers, the document.
  const Request r = Get("/resolve?host=a.com,bad..host&query=4,6&weights=1");
  ASSERT_EQ(r.error, ErrorCode::kNone) << r.message;
  std::vector<HostAnswer> answers;
  for (size_t i = 0; i < r.hosts.size(); ++i) {
    HostAnswer h;
    h.host = r.hosts[i];
    if (!r.host_valid[i]) {
      EXPECT_TRUE(BuildQuery(r.hosts[i], type::kA, r.weights, kDefaultWeightOptionCode).empty());
      h.code = "invalid_host";
      answers.push_back(h);
      continue;
    }
    EXPECT_FALSE(BuildQuery(r.hosts[i], type::kA, r.weights, kDefaultWeightOptionCode).empty());
    AddAnswer(Response(h.host, type::kA, Rcode::kNoError, {{h.host, type::kA, 60, A(1)}}, {}, Bytes{0, 9}),
              type::kA, kDefaultWeightOptionCode, r.weights, 0, false, &h);
    AddAnswer(Response(h.host, type::kAaaa, Rcode::kNoError, {}, {{"com", type::kSoa, 900, Soa(30)}}),
              type::kAaaa, kDefaultWeightOptionCode, r.weights, 0, false, &h);
    answers.push_back(h);
  }
  const json j = json::parse(RenderBatch(answers, r.v6, Ip("192.0.2.1"), false, 1));
  EXPECT_EQ(j["dns"][0]["ips"], json::array({"192.0.2.1"}));
  EXPECT_EQ(j["dns"][0]["weights"], json::array({9}));
  EXPECT_EQ(j["dns"][0]["ipsv6"], json::array());
  EXPECT_EQ(j["dns"][0]["ttl"], 30);
  EXPECT_FALSE(j["dns"][0].contains("code"));
  EXPECT_EQ(j["dns"][1]["code"], "invalid_host");
}

}  // namespace
}  // namespace weir::dns::httpdns
