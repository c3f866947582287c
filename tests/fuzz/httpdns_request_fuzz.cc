// Fuzzes HTTPDNS requests (dns::httpdns::ParseRequest) and their checks
// (Authenticate, IsHttpDnsTarget). The input is "method\ntarget" (missing
// parts are empty; the target is the rest of the input). Whatever the
// request:
//   * a refused one has a one-line reason and a JSON error body;
//   * an accepted one asks 1..max_batch hosts, one flag per host, one host
//     for the single API, at least one family, and a string to sign that
//     starts with its path; each valid host makes a query that parses,
//     each invalid one none (but the "a." of "a..", which BuildQuery reads
//     as "a" and its trailing dot);
//   * parsing it again gives the same request;
//   * IsHttpDnsTarget takes exactly the paths ParseRequest does not call
//     NotFound;
//   * Authenticate against an account with two secrets and the legacy form
//     on answers with a documented code and never shows a secret, and
//     accepts the request once it carries the signature the account gives.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fuzz_check.h"
#include "weir/dns/httpdns.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"

namespace {

using namespace weir::dns;
using namespace weir::dns::httpdns;

constexpr uint64_t kNow = 1767225600;

std::string_view NextLine(std::string_view* in) {
  const size_t nl = in->find('\n');
  const std::string_view line = in->substr(0, nl);
  *in = nl == std::string_view::npos ? std::string_view() : in->substr(nl + 1);
  return line;
}

bool Same(const Request& a, const Request& b) {
  return a.error == b.error && a.message == b.message && a.api == b.api && a.account == b.account &&
         a.sign_path == b.sign_path && a.hosts == b.hosts && a.host_valid == b.host_valid && a.v4 == b.v4 &&
         a.v6 == b.v6 && a.ip == b.ip && a.weights == b.weights && a.signature == b.signature &&
         a.exp == b.exp && a.t == b.t && a.host_param == b.host_param && a.string_to_sign == b.string_to_sign;
}

const Account& TheAccount() {
  static const Account a = [] {
    Account acc;
    acc.name = "acme";
    acc.secrets = {"0123456789abcdef0123", "Second+Secret=With/Chars#9"};
    acc.allow_legacy_md5 = true;
    return acc;
  }();
  return a;
}

void CheckAuth(const AuthResult& r, const Account& account) {
  FUZZ_CHECK(r.error == ErrorCode::kNone || ErrorStatus(r.error) == 400 || ErrorStatus(r.error) == 403 ||
             ErrorStatus(r.error) == 404 || ErrorStatus(r.error) == 405);
  FUZZ_CHECK(r.error == ErrorCode::kNone || !r.message.empty());
  for (const std::string& secret : account.secrets) FUZZ_CHECK(r.message.find(secret) == std::string::npos);
}

void Check(std::string_view method, std::string_view target, size_t max_batch) {
  const Request r = ParseRequest(method, target, max_batch);
  const std::string_view path = target.substr(0, target.find('?'));
  FUZZ_CHECK(IsHttpDnsTarget(target, "/dns-json") == (r.error != ErrorCode::kNotFound));
  if (IsHttpDnsTarget(target, "/resolve")) FUZZ_CHECK(r.error != ErrorCode::kNotFound);
  FUZZ_CHECK(Same(r, ParseRequest(method, target, max_batch)));

  const Account& account = TheAccount();
  CheckAuth(Authenticate(r, &account, kNow), account);
  CheckAuth(Authenticate(r, nullptr, kNow), account);

  if (r.error != ErrorCode::kNone) {
    FUZZ_CHECK(r.error != ErrorCode::kCount);
    FUZZ_CHECK(!r.message.empty() && r.message.find('\n') == std::string::npos);
    FUZZ_CHECK(!ErrorCodeName(r.error).empty());
    const nlohmann::json j = nlohmann::json::parse(RenderError(r.error, r.message, kNow), nullptr, false);
    FUZZ_CHECK(j.is_object() && j["code"] == ErrorCodeName(r.error));
    return;
  }
  const size_t limit = std::clamp<size_t>(max_batch, 1, kMaxBatch);
  FUZZ_CHECK(!r.hosts.empty() && r.hosts.size() <= limit);
  FUZZ_CHECK(r.hosts.size() == r.host_valid.size());
  if (r.api == Api::kSingle) FUZZ_CHECK(r.hosts.size() == 1 && r.host_valid[0]);
  FUZZ_CHECK(r.v4 || r.v6);
  FUZZ_CHECK(std::string_view(r.string_to_sign).starts_with(std::string(path) + "?"));
  for (size_t i = 0; i < r.hosts.size(); ++i) {
    const std::vector<uint8_t> q = BuildQuery(r.hosts[i], type::kAaaa, r.weights, kDefaultWeightOptionCode);
    // BuildQuery takes a trailing dot too: "a.." is no host, its "a." is.
    if (r.host_valid[i] || !r.hosts[i].ends_with('.')) FUZZ_CHECK(q.empty() != r.host_valid[i]);
    if (q.empty()) continue;
    Query parsed;
    FUZZ_CHECK(ParseQuery(q, ParseOptions{}, &parsed) == ParseError::kOk);
    FUZZ_CHECK(parsed.qtype == type::kAaaa && parsed.rd() && parsed.edns.has_weight == r.weights);
  }
  // Signed with either secret, and not expired: accepted.
  Request hmac = r;
  hmac.signature = HmacSignature(account.secrets[1], r.string_to_sign);
  hmac.exp = kNow + 1;
  const AuthResult ok = Authenticate(hmac, &account, kNow);
  FUZZ_CHECK(ok.error == ErrorCode::kNone && ok.form == SignatureForm::kHmac);
  Request legacy = r;
  legacy.exp.reset();
  legacy.t = kNow + kMaxExpiryAhead;
  legacy.signature = LegacySignature(r.host_param, account.secrets[0], *legacy.t);
  const AuthResult legacy_ok = Authenticate(legacy, &account, kNow);
  FUZZ_CHECK(legacy_ok.error == ErrorCode::kNone && legacy_ok.form == SignatureForm::kLegacyMd5);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const std::string_view method = NextLine(&in);
  const std::string_view target = in;
  Check(method, target, 3);
  Check(method, target, kMaxBatch);
  return 0;
}
