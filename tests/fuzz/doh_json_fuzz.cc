// Fuzzes the JSON form of DoH answers (dns::doh::ToJson) and their HTTP
// freshness (MaxAge) over arbitrary bytes taken as an answer: ToJson never
// throws, and what it writes is valid JSON (it parses back with
// nlohmann::json), an object with an integer "Status" and, when the bytes
// parse as a message, the question.
#include <cstdint>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_check.h"
#include "weir/dns/doh.h"
#include "weir/dns/error.h"
#include "weir/dns/message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> answer(data, size);
  const std::string text = weir::dns::doh::ToJson(answer);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(!j.is_discarded());
  FUZZ_CHECK(j.is_object());
  FUZZ_CHECK(j.contains("Status") && j["Status"].is_number_unsigned());
  for (const unsigned char c : text) FUZZ_CHECK(c >= 0x20 && c < 0x7f);  // ASCII, nothing to replace

  weir::dns::Message m;
  const bool parses = m.Parse(answer, weir::dns::ParseOptions{}) == weir::dns::ParseError::kOk;
  if (parses) {
    FUZZ_CHECK(j["Status"] == m.rcode());
    FUZZ_CHECK(j["Question"].size() == 1 && j["Question"][0]["type"] == m.qtype());
    for (const char* section : {"Answer", "Authority", "Additional"}) {
      if (!j.contains(section)) continue;
      for (const auto& rr : j[section]) {
        FUZZ_CHECK(rr["name"].is_string() && !rr["name"].get<std::string>().empty());
        FUZZ_CHECK(rr["data"].is_string() && rr["TTL"].is_number_unsigned());
      }
    }
  }
  const uint32_t max_age = weir::dns::doh::MaxAge(answer);
  FUZZ_CHECK(max_age <= 0x7FFFFFFFu);
  FUZZ_CHECK(parses || max_age == 0);
  return 0;
}
