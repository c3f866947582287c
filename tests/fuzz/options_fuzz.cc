// Fuzzes EDNS option handling: OptionIterator over arbitrary RDATA, DecodeEcs
// in query and response mode (every accepted ECS must re-encode to the same
// bytes), and DecodeWeights with the address count taken from the first byte.
#include <cstdint>
#include <cstring>
#include <span>

#include "fuzz_check.h"
#include "weir/dns/error.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"

namespace {

using namespace weir::dns;

// ECS option data: decode both ways; what decodes must re-encode exactly.
void CheckEcs(std::span<const uint8_t> d) {
  for (bool in_query : {true, false}) {
    ClientSubnet s;
    const ParseError e = DecodeEcs(d, in_query, &s);
    FUZZ_CHECK(e < ParseError::kCount);
    if (e != ParseError::kOk) continue;
    FUZZ_CHECK(s.family == kEcsFamilyIpv4 || s.family == kEcsFamilyIpv6);
    FUZZ_CHECK(!in_query || s.scope_prefix == 0);
    uint8_t buf[4 + 4 + 16];
    const size_t n = EncodeEcsOption(s, buf, sizeof buf);
    FUZZ_CHECK(n == EcsOptionSize(s) && n == 4 + d.size());
    FUZZ_CHECK(Load16(buf) == option::kEcs && Load16(buf + 2) == d.size());
    FUZZ_CHECK(std::memcmp(buf + 4, d.data(), d.size()) == 0);
    // The address is already masked: MakeClientSubnet changes nothing.
    ClientSubnet made;
    FUZZ_CHECK(
        MakeClientSubnet({s.address.data(), s.family == kEcsFamilyIpv4 ? 4u : 16u}, s.source_prefix, &made));
    made.scope_prefix = s.scope_prefix;
    FUZZ_CHECK(made == s);
  }
}

void CheckWeights(std::span<const uint8_t> d, size_t addresses) {
  const WeightSet w = DecodeWeights(d, addresses);
  FUZZ_CHECK(w.count == (addresses < kMaxWeightedAddresses ? addresses : kMaxWeightedAddresses));
  FUZZ_CHECK(!WeightVerdictName(w.verdict).empty());
  for (size_t i = 0; i < w.count; ++i) {
    if (w.valid()) {
      FUZZ_CHECK(d[2 * i] == 0 && d[2 * i + 1] == w.weights[i] && w.weights[i] != 0);
    } else {
      FUZZ_CHECK(w.weights[i] == 1);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> in(data, size);

  // The input as OPT RDATA.
  OptionIterator it(in);
  size_t consumed = 0;
  for (;;) {
    uint16_t code = 0;
    std::span<const uint8_t> d;
    bool done = false;
    const ParseError e = it.Next(&code, &d, &done);
    if (e != ParseError::kOk) {
      FUZZ_CHECK(e == ParseError::kTruncatedOption);
      break;
    }
    if (done) {
      FUZZ_CHECK(consumed == size);
      break;
    }
    FUZZ_CHECK(d.data() == data + consumed + 4 && d.size() <= size - consumed - 4);
    consumed += 4 + d.size();
    if (code == option::kEcs) CheckEcs(d);
    if (code == kDefaultWeightOptionCode) CheckWeights(d, d.size() / 2);
  }

  // The input as ECS option data, and as a weight option whose address
  // count is the first byte.
  CheckEcs(in);
  if (size > 0) CheckWeights(in.subspan(1), data[0]);
  return 0;
}
