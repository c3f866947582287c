// Zero-copy views over received DNS messages (RFC 1035, RFC 6891, RFC 7871)
// and the DNS weight option (docs/behaviour.md#the-weight-option).
//
// Nothing here allocates. A view holds offsets into the caller's buffer, which
// must outlive it. All functions are reentrant; a view is owned by one thread.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "weir/dns/error.h"
#include "weir/dns/wire.h"

namespace weir::dns {

// ---------------------------------------------------------------- names

// Canonical key of a name: its uncompressed wire form in lower case
// ("\3www\7example\3com\0"). Equal keys mean equal names (RFC 4343).
struct NameKey {
  uint8_t len = 0;
  std::array<uint8_t, kMaxNameWire> bytes;
  std::span<const uint8_t> span() const { return {bytes.data(), len}; }
  friend bool operator==(const NameKey& a, const NameKey& b) {
    return a.len == b.len && std::equal(a.bytes.begin(), a.bytes.begin() + a.len, b.bytes.begin());
  }
};

// Reads the possibly compressed name at `offset`. On success *end is the
// offset just past the name's bytes at `offset` (after the first pointer, if
// any) and `key` (if not null) receives the canonical key. Pointers must go
// strictly backwards, each before the previous jump target, which rules out
// loops without a hop counter.
ParseError ReadName(std::span<const uint8_t> msg, size_t offset, size_t* end, NameKey* key);

// Converts a presentation name ("www.Example.com" or "www.example.com.") to a
// canonical key. Returns false for an invalid name. Control plane only.
bool NameKeyFromText(std::string_view text, NameKey* key);
// Presentation form of a key ("www.example.com."), for logs and tests.
std::string NameKeyToText(std::span<const uint8_t> key);

// "A", "aaaa", "TYPE65", ... (mnemonics of the common types, any case); 0
// when unknown. Control plane only.
uint16_t TypeFromText(std::string_view text);
// The mnemonic, or "TYPE<n>".
std::string TypeToText(uint16_t type);

// ---------------------------------------------------------------- ECS

// EDNS Client Subnet (RFC 7871). `address` always holds the full-width
// address with every bit beyond `source_prefix` zero.
struct ClientSubnet {
  uint16_t family = 0;  // 1 = IPv4, 2 = IPv6
  uint8_t source_prefix = 0;
  uint8_t scope_prefix = 0;
  std::array<uint8_t, 16> address{};

  size_t AddressBytes() const { return (source_prefix + 7u) / 8u; }
  friend bool operator==(const ClientSubnet&, const ClientSubnet&) = default;
};

inline constexpr uint16_t kEcsFamilyIpv4 = 1;
inline constexpr uint16_t kEcsFamilyIpv6 = 2;

// Decodes ECS option data (without the option code/length). `in_query`
// enforces SCOPE PREFIX-LENGTH = 0 as RFC 7871 6 requires of queries.
ParseError DecodeEcs(std::span<const uint8_t> data, bool in_query, ClientSubnet* out);

// Builds a ClientSubnet from a raw address (4 or 16 bytes), truncating it to
// `source_prefix` bits. Returns false for a bad family/prefix combination.
bool MakeClientSubnet(std::span<const uint8_t> address, uint8_t source_prefix, ClientSubnet* out);

// Size of the encoded option including its 4-byte option header.
inline size_t EcsOptionSize(const ClientSubnet& s) { return 4 + 4 + s.AddressBytes(); }

// Writes the full option (code 8, length, data). Returns bytes written, or 0
// when `cap` is too small or the subnet is invalid.
size_t EncodeEcsOption(const ClientSubnet& s, uint8_t* out, size_t cap);

// ---------------------------------------------------------------- weights

inline constexpr size_t kMaxWeightedAddresses = 64;

// Why a weight option was accepted or neutralised (docs/behaviour.md#the-weight-option).
enum class WeightVerdict : uint8_t {
  kValid,          // n weights, each 1..255
  kEmpty,          // length 0: "supported, not weighted" -> equal weights
  kOddLength,      // invalid -> equal weights
  kCountMismatch,  // n != number of address records -> equal weights
  kZeroWeight,     // a weight of 0 -> equal weights
  kHighByteSet,    // a weight > 255 -> equal weights
  kTooMany,        // more addresses than weir keeps weights for -> equal weights
};
std::string_view WeightVerdictName(WeightVerdict v);

struct WeightSet {
  WeightVerdict verdict = WeightVerdict::kEmpty;
  uint8_t count = 0;  // number of address records the weights apply to
  std::array<uint8_t, kMaxWeightedAddresses> weights{};
  // True when the upstream's weights were usable as sent.
  bool valid() const { return verdict == WeightVerdict::kValid; }
};

// Decodes weight option data for a response with `address_records` A/AAAA
// records in its answer. Never fails: an invalid option yields weight 1 for
// every address and the verdict says why.
WeightSet DecodeWeights(std::span<const uint8_t> data, size_t address_records);

// ---------------------------------------------------------------- EDNS

struct ParseOptions {
  uint16_t weight_option_code = kDefaultWeightOptionCode;
};

struct Edns {
  bool present = false;
  uint16_t udp_size = 0;
  uint8_t ext_rcode = 0;  // upper 8 bits of the 12-bit RCODE
  uint8_t version = 0;
  bool do_bit = false;
  uint16_t opt_offset = 0;    // start of the OPT RR (its owner name)
  uint16_t rdata_offset = 0;  // start of the options
  uint16_t rdata_len = 0;
  uint16_t option_count = 0;

  bool has_ecs = false;
  ClientSubnet ecs;
  bool has_weight = false;
  uint16_t weight_offset = 0;  // option data, relative to the message start
  uint16_t weight_len = 0;
  bool has_nsid = false;
  bool has_padding = false;  // RFC 7830: the client pads (answer it padded, RFC 8467)
  bool has_cookie = false;
  uint16_t cookie_offset = 0;
  uint16_t cookie_len = 0;
};

// Walks the options of an OPT RR's RDATA. Unknown options are skipped.
class OptionIterator {
 public:
  OptionIterator(std::span<const uint8_t> rdata) : rdata_(rdata) {}
  // Returns kOk and fills code/data, or kTruncatedOption; `*done` at the end.
  ParseError Next(uint16_t* code, std::span<const uint8_t>* data, bool* done);

 private:
  std::span<const uint8_t> rdata_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------- query

// A received query: one question and its EDNS. Fields are valid after
// ParseQuery returned kOk; after kBadEdnsVersion the header, question and
// edns.udp_size are valid so the caller can answer BADVERS.
// Where each label of a NameKey starts, left to right, the root byte's
// included (count = labels + 1): what a left-to-right walk of the key gives,
// kept by the parser so that suffix lookups need not walk it again.
struct NameLabels {
  uint8_t count = 0;
  std::array<uint8_t, kMaxNameWire / 2 + 1> offsets;
  std::span<const uint8_t> span() const { return {offsets.data(), count}; }
};

struct Query {
  uint16_t id = 0;
  uint16_t flags = 0;
  uint16_t qtype = 0;
  uint16_t qclass = 0;
  uint16_t question_end = 0;  // offset just past QTYPE/QCLASS
  NameKey qname;              // canonical key, computed while parsing
  NameLabels qname_labels;    // its label starts, found while parsing
  Edns edns;

  uint16_t opcode() const { return (flags & flag::kOpcodeMask) >> 11; }
  bool rd() const { return flags & flag::kRd; }
  bool cd() const { return flags & flag::kCd; }
  // The largest response the client accepts over UDP.
  uint16_t udp_limit() const {
    if (!edns.present) return kMaxUdpWithoutEdns;
    return edns.udp_size < kMaxUdpWithoutEdns ? kMaxUdpWithoutEdns : edns.udp_size;
  }
};

// The query must end with its last counted record (the question, or the
// OPT): bytes after it are kTrailingBytes (answered FORMERR), never ignored.
//
// ParseQuery is the fast path for the common query (ParseQueryFast) with
// ParseQueryFull behind it for everything else; its verdict and every field
// defined for that verdict are ParseQueryFull's (tests/dns/
// query_fast_path_test.cc and the query_fast_path fuzz target hold them to it).
ParseError ParseQuery(std::span<const uint8_t> pkt, const ParseOptions& opts, Query* out);

// The reference parser: every query shape, every error named.
ParseError ParseQueryFull(std::span<const uint8_t> pkt, const ParseOptions& opts, Query* out);

// The fast path alone, for the query nearly every client sends: QR clear,
// one question with an uncompressed name, no answer or authority records,
// and either no additional record or one OPT owned by the root, version 0,
// that ends the packet and holds no options but ECS, the weight option and
// a cookie, each once and well formed. Returns true with *out as
// ParseQueryFull leaves it for kOk; false for any other query (which may
// still be valid), with *out partly written.
bool ParseQueryFast(std::span<const uint8_t> pkt, const ParseOptions& opts, Query* out);

// ---------------------------------------------------------------- response

enum class Section : uint8_t { kAnswer = 0, kAuthority = 1, kAdditional = 2 };

struct RrView {
  Section section;
  uint16_t name_offset;
  uint16_t type;
  uint16_t klass;
  uint32_t ttl;
  uint16_t ttl_offset;
  uint16_t rdata_offset;
  uint16_t rdlength;
};

// A received response (or any message with one question), validated in full
// by Parse: every owner name, every RDATA bound, the OPT rules.
class Message {
 public:
  ParseError Parse(std::span<const uint8_t> pkt, const ParseOptions& opts);

  std::span<const uint8_t> bytes() const { return pkt_; }
  uint16_t id() const { return Load16(pkt_.data()); }
  uint16_t flags() const { return Load16(pkt_.data() + 2); }
  // Full 12-bit RCODE when EDNS is present.
  uint16_t rcode() const { return static_cast<uint16_t>((edns_.ext_rcode << 4) | (flags() & 0xf)); }
  uint16_t count(Section s) const { return counts_[static_cast<int>(s)]; }
  uint16_t qtype() const { return qtype_; }
  uint16_t qclass() const { return qclass_; }
  const NameKey& qname() const { return qname_; }
  const Edns& edns() const { return edns_; }

  // Iterates the records of one section (the OPT RR included in additional).
  class Iterator {
   public:
    bool Next(RrView* rr);

   private:
    friend class Message;
    const Message* m_ = nullptr;
    Section section_{};
    uint16_t left_ = 0;
    size_t pos_ = 0;
  };
  Iterator Records(Section s) const;

 private:
  std::span<const uint8_t> pkt_;
  uint16_t counts_[3] = {0, 0, 0};
  uint16_t section_start_[3] = {0, 0, 0};
  uint16_t qtype_ = 0;
  uint16_t qclass_ = 0;
  NameKey qname_;
  Edns edns_;
};

// Writes the RDATA of `rr` with every embedded name decompressed (NS, CNAME,
// PTR, MX, SOA), so it can be stored and re-encoded elsewhere. Other types are
// copied verbatim (RFC 3597 forbids compressing them).
ParseError CopyRdataUncompressed(std::span<const uint8_t> msg, const RrView& rr, uint8_t* out, size_t cap,
                                 size_t* len);

// Reads one RR header at `offset`; shared by the query and response parsers.
ParseError ReadRecord(std::span<const uint8_t> msg, size_t offset, Section section, RrView* rr, size_t* end);

}  // namespace weir::dns
