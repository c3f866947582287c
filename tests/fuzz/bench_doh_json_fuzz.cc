// Fuzzes weir-bench's reader of JSON DoH answers (application/dns-json):
// any body either parses or gives an error, never a crash or a throw; and
// whatever weir-fastpath's writer (dns::doh::ToJson) makes of the same
// bytes read as a DNS answer, the reader takes, with the writer's Status.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "doh_client.h"
#include "fuzz_check.h"
#include "nlohmann/json.hpp"
#include "weir/dns/doh.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 65535) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  auto direct = weir::bench::ParseDnsJson(body);
  if (direct.ok()) FUZZ_CHECK(direct->addresses.size() <= size);

  const std::string json = weir::dns::doh::ToJson(std::span<const uint8_t>(data, size));
  auto back = weir::bench::ParseDnsJson(json);
  const auto doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(!doc.is_discarded());
  if (back.ok()) FUZZ_CHECK(doc.contains("Status") && doc["Status"].get<int>() == back->rcode);
  return 0;
}
