// Fuzzes the cache entry built from an upstream answer
// (partitions::EntryFromAnswer): CNAME chains of any length and shape,
// loops, malformed RDATA, weights, ECS, negative answers, tag learning.
//
// Input: 3 bytes of question, then the answer message.
//   byte 0: bit 0 tagged, bit 1 DNSSEC-aware (DO/CD), bit 2 the qtype is
//           bytes 1-2 (else the answer's), bit 3 look chains up in a fixed
//           tag table, bit 4 a city partition (else the common one), bits
//           5-6 the TTL limits (defaults, a low max_ttl, min_ttl above
//           max_ttl, max_ttl 0)
//   bytes 1-2: qtype, big-endian (with bit 2)
// The key's qname and qclass are the answer's question, as the forwarder's
// check of an answer guarantees.
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "fuzz_check.h"
#include "weir/dns/error.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"
#include "weir/dns/writer.h"
#include "weir/partitions/cache.h"
#include "weir/partitions/entry_from_answer.h"
#include "weir/partitions/partition.h"
#include "weir/partitions/tagtable.h"

namespace {

using namespace weir;
using partitions::CacheFill;
using Outcome = CacheFill::Outcome;

constexpr size_t kPrefix = 3;

const partitions::TagTable& Tags() {
  static const std::unique_ptr<const partitions::TagTable> tags = [] {
    auto t = partitions::TagTable::FromText(
        "cdn.example.net weight=on\n"
        "edge.example ecs=on\n"
        "sub.example.com level=subnet\n"
        "plain.example.org\n");
    FUZZ_CHECK(t.ok());
    return *std::move(t);
  }();
  return *tags;
}

partitions::CacheLimits Limits(unsigned variant) {
  partitions::CacheLimits l;
  switch (variant) {
    case 1:
      l.max_ttl = 60;
      l.negative_max_ttl = 30;
      break;
    case 2:
      l.min_ttl = 600;
      l.max_ttl = 60;
      break;
    case 3:
      l.max_ttl = 0;
      l.servfail_ttl = 0;
      break;
    default:
      break;
  }
  return l;
}

// The entry's records read back after its question: they parse, and there
// are as many as the entry counts.
void CheckRecordsParse(const partitions::CacheEntry& e) {
  static uint8_t out[65536 + 512];
  dns::ResponseWriter w(out, sizeof out);
  FUZZ_CHECK(w.Begin(1, dns::flag::kQr, e.qname(), e.qtype(), e.qclass()) == dns::ParseError::kOk);
  const uint16_t n = static_cast<uint16_t>(e.answer_count() + e.authority_count());
  FUZZ_CHECK(e.ttl_offsets().size() == n);
  FUZZ_CHECK(w.AppendRecords(dns::Section::kAnswer, e.records(), n, e.ttl_offsets(), 0) ==
             dns::ParseError::kOk);
  const size_t len = w.Finish(sizeof out);
  dns::Message back;
  FUZZ_CHECK(back.Parse({out, len}, dns::ParseOptions{}) == dns::ParseError::kOk);
  FUZZ_CHECK(back.count(dns::Section::kAnswer) == n);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kPrefix) return 0;
  const uint8_t control = data[0];
  dns::Message m;
  if (m.Parse({data + kPrefix, size - kPrefix}, dns::ParseOptions{}) != dns::ParseError::kOk) return 0;

  partitions::AnswerToCache in;
  in.key.partition = (control & 0x10) ? partitions::PartitionKey(partitions::CacheLevel::kCity, 42, {})
                                      : partitions::kCommonPartition;
  in.key.qname = m.qname().span();
  in.key.qtype = (control & 0x04) ? static_cast<uint16_t>(data[1] << 8 | data[2]) : m.qtype();
  in.key.qclass = m.qclass();
  in.tagged = control & 0x01;
  in.dnssec = control & 0x02;
  in.answer = &m;
  in.tags = (control & 0x08) ? &Tags() : nullptr;
  in.now = 1'000'000;
  in.limits = Limits((control >> 5) & 3);

  const CacheFill fill = partitions::EntryFromAnswer(in);
  const uint16_t rcode = m.rcode();
  FUZZ_CHECK(fill.servfail == (rcode == static_cast<uint16_t>(dns::Rcode::kServFail)));
  const bool cacheable_rcode = rcode == static_cast<uint16_t>(dns::Rcode::kNoError) ||
                               rcode == static_cast<uint16_t>(dns::Rcode::kServFail) ||
                               rcode == static_cast<uint16_t>(dns::Rcode::kNxDomain);
  if (!cacheable_rcode || (m.flags() & dns::flag::kTc) || in.dnssec) {
    FUZZ_CHECK(fill.outcome == Outcome::kNotCacheable);
  }

  switch (fill.outcome) {
    case Outcome::kNotCacheable:
      FUZZ_CHECK(fill.entry == nullptr && fill.learn_tag == nullptr);
      break;
    case Outcome::kLearn: {
      FUZZ_CHECK(fill.entry == nullptr);
      FUZZ_CHECK(!in.tagged && in.tags != nullptr && in.key.qtype != dns::type::kCname);
      const partitions::Tag* tag = fill.learn_tag;
      FUZZ_CHECK(tag != nullptr);
      FUZZ_CHECK(tag->weight || tag->ecs || tag->level != partitions::CacheLevel::kGlobal);
      FUZZ_CHECK(fill.learn_ttl >= 1 && fill.learn_ttl <= (in.limits.max_ttl > 1 ? in.limits.max_ttl : 1));
      break;
    }
    case Outcome::kEntry: {
      FUZZ_CHECK(fill.entry != nullptr && fill.learn_tag == nullptr);
      const partitions::CacheEntry& e = *fill.entry;
      FUZZ_CHECK(e.partition() == in.key.partition);
      FUZZ_CHECK(e.qtype() == in.key.qtype && e.qclass() == in.key.qclass);
      FUZZ_CHECK(e.qname().size() == in.key.qname.size() &&
                 std::memcmp(e.qname().data(), in.key.qname.data(), in.key.qname.size()) == 0);
      FUZZ_CHECK(e.insert_time() == in.now);
      if (fill.servfail) {
        FUZZ_CHECK(e.kind() == partitions::EntryKind::kServFail);
        FUZZ_CHECK(e.ttl() <= in.limits.servfail_ttl);
      } else if (rcode == static_cast<uint16_t>(dns::Rcode::kNxDomain)) {
        FUZZ_CHECK(e.kind() == partitions::EntryKind::kNxDomain);
      } else {
        FUZZ_CHECK(e.kind() == partitions::EntryKind::kPositive ||
                   e.kind() == partitions::EntryKind::kNoData);
      }
      if (e.kind() == partitions::EntryKind::kNxDomain || e.kind() == partitions::EntryKind::kNoData) {
        FUZZ_CHECK(e.authority_count() >= 1);
        FUZZ_CHECK(e.ttl() <= in.limits.negative_max_ttl);
      }
      // Every record of the entry is one the answer sent.
      FUZZ_CHECK(size_t{e.answer_count()} <= m.count(dns::Section::kAnswer));
      FUZZ_CHECK(size_t{e.authority_count()} <= m.count(dns::Section::kAuthority));
      FUZZ_CHECK(e.chain_count() <= e.answer_count());
      for (uint8_t w : e.weights()) FUZZ_CHECK(w != 0);
      if (e.has_weights()) FUZZ_CHECK(m.edns().has_weight);
      CheckRecordsParse(e);
      break;
    }
  }

  // Pure: the same answer gives the same entry.
  const CacheFill again = partitions::EntryFromAnswer(in);
  FUZZ_CHECK(again.outcome == fill.outcome && again.servfail == fill.servfail);
  FUZZ_CHECK(again.learn_tag == fill.learn_tag && again.learn_ttl == fill.learn_ttl);
  if (fill.entry != nullptr) {
    const auto a = fill.entry->records(), b = again.entry->records();
    FUZZ_CHECK(a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0);
    FUZZ_CHECK(fill.entry->fingerprint() == again.entry->fingerprint());
  }
  return 0;
}
