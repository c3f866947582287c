// Fuzzes the HTTPDNS answer built from DNS answers (dns::httpdns::AddAnswer)
// and its JSON (RenderSingle, RenderBatch) over arbitrary bytes taken as the
// answer to both the A and the AAAA query. Whatever the bytes: the host has
// a documented code, "" exactly when it has addresses; each address is one
// of its family's; weights, when there are any, are one per address, 1..255;
// TTLs are at most 2^31-1; and the JSON parses back with nlohmann::json,
// holding the same addresses (a host of any bytes included).
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_check.h"
#include "weir/common/ip.h"
#include "weir/dns/httpdns.h"
#include "weir/dns/wire.h"

namespace {

using namespace weir;
using namespace weir::dns::httpdns;

bool DocumentedCode(std::string_view code) {
  return code.empty() || code == "nxdomain" || code == "no_ip" || code == "servfail" || code == "refused" ||
         code == "error";
}

void CheckFamily(const std::vector<std::string>& ips, const std::vector<uint16_t>& weights, uint8_t family) {
  for (const std::string& ip : ips) {
    common::IpAddress a;
    FUZZ_CHECK(common::ParseIp(ip, &a) && a.family == family);
  }
  FUZZ_CHECK(weights.empty() || weights.size() == ips.size());
  for (const uint16_t w : weights) FUZZ_CHECK(w >= 1 && w <= 255);
}

void CheckJson(const std::string& text, const HostAnswer& h, bool v6, bool batch) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(!j.is_discarded() && j.is_object());
  FUZZ_CHECK(j.contains("server_time") && j.contains("client_ip"));
  const nlohmann::json& host = batch ? j["dns"][0] : j;
  FUZZ_CHECK(host["host"].is_string());
  FUZZ_CHECK(host["ips"].size() == h.ips.size());
  FUZZ_CHECK(host.contains("ipsv6") == v6);
  if (v6) FUZZ_CHECK(host["ipsv6"].size() == h.ipsv6.size());
  FUZZ_CHECK(host["ttl"] == h.ttl && host["origin_ttl"] == h.origin_ttl);
  FUZZ_CHECK(host.contains("code") == !h.code.empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> answer(data, size);
  common::IpAddress client;
  client.family = 4;
  for (const bool weights : {false, true}) {
    HostAnswer h;
    // Any bytes as the host: a batch answers invalid hosts as sent.
    h.host.assign(reinterpret_cast<const char*>(data), size < 16 ? size : 16);
    AddAnswer(answer, dns::type::kA, dns::kDefaultWeightOptionCode, weights, weights ? 0 : 3600, weights, &h);
    AddAnswer(answer, dns::type::kAaaa, dns::kDefaultWeightOptionCode, weights, 0, false, &h);
    FUZZ_CHECK(h.has_answer);
    FUZZ_CHECK(DocumentedCode(h.code));
    FUZZ_CHECK(h.code.empty() == (!h.ips.empty() || !h.ipsv6.empty()));
    CheckFamily(h.ips, h.weights, 4);
    CheckFamily(h.ipsv6, h.weightsv6, 6);
    if (!weights) FUZZ_CHECK(h.weights.empty() && h.weightsv6.empty());
    FUZZ_CHECK(h.ttl <= 0x7FFFFFFFu);
    FUZZ_CHECK(h.stale == weights);
    for (const bool v6 : {false, true}) {
      CheckJson(RenderSingle(h, v6, client, weights, 1767225600), h, v6, false);
      const HostAnswer hosts[] = {h, HostAnswer{}};
      CheckJson(RenderBatch(hosts, v6, client, false, 1767225600), h, v6, true);
    }
  }
  return 0;
}
