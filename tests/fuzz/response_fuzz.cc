// Fuzzes the upstream-response path as the recursor runs it: Message::Parse,
// every record of every section, CopyRdataUncompressed on each, the weight
// option, and a re-encode of the answer section (RecordEncoder +
// ResponseWriter) that must parse back to the same records.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>

#include "fuzz_check.h"
#include "weir/dns/error.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"
#include "weir/dns/writer.h"

namespace {

using namespace weir::dns;

// Decompressed RDATA is at most 65535 octets, or two names and 20 octets (SOA).
constexpr size_t kRdataCap = 65536 + 2 * kMaxNameWire + 20;

// One answer record, decompressed, kept for the re-encode check.
struct Answer {
  NameKey owner;
  uint16_t type, klass;
  uint32_t ttl;
  size_t rdata_off, rdata_len;  // in g_rdata
};
constexpr size_t kMaxAnswers = 64;
Answer g_answers[kMaxAnswers];
uint8_t g_rdata[kMaxAnswers * 1024];
uint8_t g_scratch[kRdataCap];
uint8_t g_blob[65536];
uint8_t g_out[65536];

// Re-encodes the decompressed answers for the same qname and checks that
// they read back identically.
void ReEncode(const Message& m, size_t n) {
  RecordEncoder enc(g_blob, sizeof g_blob, m.qname().span());
  uint16_t ttl_offsets[kMaxAnswers];
  for (size_t i = 0; i < n; ++i) {
    const Answer& a = g_answers[i];
    // Only well-formed names are fit for compression targets; the encoder
    // is fed canonical keys by contract.
    if (enc.Append(a.owner.span(), a.type, a.klass, a.ttl, {g_rdata + a.rdata_off, a.rdata_len},
                   &ttl_offsets[i]) != ParseError::kOk) {
      return;
    }
  }
  ResponseWriter w(g_out, sizeof g_out);
  FUZZ_CHECK(w.Begin(m.id(), m.flags(), m.qname().span(), m.qtype(), m.qclass()) == ParseError::kOk);
  if (w.AppendRecords(Section::kAnswer, enc.blob(), static_cast<uint16_t>(n), {ttl_offsets, n}, 1) !=
      ParseError::kOk) {
    return;
  }
  const size_t len = w.Finish(sizeof g_out);
  Message back;
  const ParseError e = back.Parse({g_out, len}, ParseOptions{});
  if (e != ParseError::kOk) {
    std::fprintf(stderr, "re-encoded answer does not parse: %s\n", std::string(ParseErrorName(e)).c_str());
    std::abort();
  }
  FUZZ_CHECK(back.qname() == m.qname());
  FUZZ_CHECK(back.count(Section::kAnswer) == n);
  Message::Iterator it = back.Records(Section::kAnswer);
  RrView rr;
  size_t i = 0;
  while (it.Next(&rr)) {
    const Answer& a = g_answers[i++];
    NameKey owner;
    size_t end;
    FUZZ_CHECK(ReadName(back.bytes(), rr.name_offset, &end, &owner) == ParseError::kOk);
    FUZZ_CHECK(owner == a.owner);
    FUZZ_CHECK(rr.type == a.type && rr.klass == a.klass);
    FUZZ_CHECK(rr.ttl == (a.ttl > 1 ? a.ttl - 1 : 0));
    size_t rlen = 0;
    FUZZ_CHECK(CopyRdataUncompressed(back.bytes(), rr, g_scratch, sizeof g_scratch, &rlen) ==
               ParseError::kOk);
    FUZZ_CHECK(rlen == a.rdata_len && std::memcmp(g_scratch, g_rdata + a.rdata_off, rlen) == 0);
  }
  FUZZ_CHECK(i == n);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> pkt(data, size);
  Message m;
  const ParseError e = m.Parse(pkt, ParseOptions{});
  FUZZ_CHECK(e < ParseError::kCount);
  if (e != ParseError::kOk) return 0;

  size_t addresses = 0;
  size_t answers = 0;
  size_t rdata_used = 0;
  bool reencode = true;
  for (Section s : {Section::kAnswer, Section::kAuthority, Section::kAdditional}) {
    Message::Iterator it = m.Records(s);
    RrView rr;
    size_t seen = 0;
    while (it.Next(&rr)) {
      ++seen;
      FUZZ_CHECK(rr.section == s);
      FUZZ_CHECK(size_t{rr.rdata_offset} + rr.rdlength <= m.bytes().size());
      NameKey owner;
      size_t end;
      FUZZ_CHECK(ReadName(m.bytes(), rr.name_offset, &end, &owner) == ParseError::kOk);
      FUZZ_CHECK(end + 10 == rr.rdata_offset);
      FUZZ_CHECK(s == Section::kAdditional || rr.type != type::kOpt);
      size_t len = 0;
      const ParseError ce = CopyRdataUncompressed(m.bytes(), rr, g_scratch, sizeof g_scratch, &len);
      FUZZ_CHECK(ce != ParseError::kBufferTooSmall);
      if (ce == ParseError::kOk) {
        FUZZ_CHECK(len <= sizeof g_scratch);
        // Without embedded names the copy is verbatim.
        if (rr.type != type::kNs && rr.type != type::kCname && rr.type != type::kPtr &&
            rr.type != type::kMx && rr.type != type::kSoa) {
          FUZZ_CHECK(len == rr.rdlength &&
                     std::memcmp(g_scratch, m.bytes().data() + rr.rdata_offset, len) == 0);
        }
      }
      if (s != Section::kAnswer) continue;
      addresses += rr.type == type::kA || rr.type == type::kAaaa;
      if (ce != ParseError::kOk || rr.type == type::kOpt || answers == kMaxAnswers ||
          rdata_used + len > sizeof g_rdata) {
        reencode = false;
        continue;
      }
      g_answers[answers] = {owner, rr.type, rr.klass, rr.ttl, rdata_used, len};
      std::memcpy(g_rdata + rdata_used, g_scratch, len);
      rdata_used += len;
      ++answers;
    }
    FUZZ_CHECK(seen == m.count(s));
  }

  const Edns& edns = m.edns();
  if (edns.present) {
    FUZZ_CHECK(m.count(Section::kAdditional) >= 1);
    FUZZ_CHECK(size_t{edns.rdata_offset} + edns.rdata_len <= size);
  }
  if (edns.has_weight) {
    FUZZ_CHECK(size_t{edns.weight_offset} + edns.weight_len <= size);
    const WeightSet w = DecodeWeights(m.bytes().subspan(edns.weight_offset, edns.weight_len), addresses);
    FUZZ_CHECK(w.count == (addresses < kMaxWeightedAddresses ? addresses : kMaxWeightedAddresses));
    for (size_t i = 0; i < w.count; ++i) {
      FUZZ_CHECK(w.weights[i] != 0);
      if (!w.valid()) FUZZ_CHECK(w.weights[i] == 1);
    }
  }
  if (reencode && answers > 0) ReEncode(m, answers);
  return 0;
}
