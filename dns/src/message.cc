#include "weir/dns/message.h"

#include <bit>
#include <cstddef>
#include <cstring>

namespace weir::dns {
namespace {

constexpr std::array<uint8_t, 256> MakeLowerTable() {
  std::array<uint8_t, 256> t{};
  for (int i = 0; i < 256; ++i) t[i] = static_cast<uint8_t>(i >= 'A' && i <= 'Z' ? i + 32 : i);
  return t;
}
constexpr std::array<uint8_t, 256> kLower = MakeLowerTable();

// Smallest possible RR: root owner (1) + type, class, ttl, rdlength (10).
constexpr size_t kMinRrSize = 11;

// A DNS message is at most 65535 octets (the TCP length prefix is 16 bits),
// and the views keep 16-bit offsets. Bytes past that cannot belong to the
// message, so they are ignored like any other trailing bytes; reading them
// would wrap the offsets and make views point at the wrong records.
constexpr size_t kMaxMessage = 0xFFFF;
std::span<const uint8_t> ClampMessage(std::span<const uint8_t> pkt) {
  return pkt.size() > kMaxMessage ? pkt.first(kMaxMessage) : pkt;
}

// Lower-cases 8 (or 4) ASCII letters at once: a byte is upper case when its
// low 7 bits are in 'A'..'Z' and its top bit is clear; adding 0x20 to those
// bytes is or-ing in bit 5. No carries cross bytes.
inline uint64_t Lower8(uint64_t x) {
  const uint64_t low7 = x & 0x7F7F7F7F7F7F7F7FULL;
  const uint64_t ge_a = low7 + 0x3F3F3F3F3F3F3F3FULL;  // top bit set iff >= 'A'
  const uint64_t gt_z = low7 + 0x2525252525252525ULL;  // top bit set iff > 'Z'
  const uint64_t upper = ge_a & ~gt_z & ~x & 0x8080808080808080ULL;
  return x | (upper >> 2);
}
inline uint32_t Lower4(uint32_t x) {
  const uint32_t low7 = x & 0x7F7F7F7FU;
  const uint32_t upper = (low7 + 0x3F3F3F3FU) & ~(low7 + 0x25252525U) & ~x & 0x80808080U;
  return x | (upper >> 2);
}

// Copies `n` octets of a name's wire form to its key, lower-cased. Length
// octets are at most 63, below 'A', so a run of labels is lower-cased as one
// block, whole words at a time; overlapping tail words are harmless because
// lower-casing is idempotent.
inline void LowerCopy(uint8_t* dst, const uint8_t* src, size_t n) {
  if (n >= 8) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, src + i, 8);
      w = Lower8(w);
      std::memcpy(dst + i, &w, 8);
    }
    if (i < n) {
      uint64_t w;
      std::memcpy(&w, src + n - 8, 8);
      w = Lower8(w);
      std::memcpy(dst + n - 8, &w, 8);
    }
  } else if (n >= 4) {
    uint32_t a, b;
    std::memcpy(&a, src, 4);
    std::memcpy(&b, src + n - 4, 4);
    a = Lower4(a);
    b = Lower4(b);
    std::memcpy(dst, &a, 4);
    std::memcpy(dst + n - 4, &b, 4);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = kLower[src[i]];
  }
}

// The query fast path for an uncompressed name, which is what clients send
// in a question. Returns false for anything else (a pointer, a bad label,
// truncation, too long); the general ReadName then decides.
inline bool ReadPlainName(const uint8_t* p, size_t n, size_t offset, NameKey* key, NameLabels* labels,
                          size_t* end) {
  size_t pos = offset;
  size_t count = 0;
  for (;;) {
    if (pos >= n) return false;
    const size_t len = p[pos];
    // (At most 128 starts: the length check below stops a 129th.)
    labels->offsets[count++] = static_cast<uint8_t>(pos - offset);
    if (len == 0) break;
    if (len > kMaxLabel) return false;
    pos += 1 + len;
    if (pos - offset + 1 > kMaxNameWire) return false;  // the root must still fit
  }
  const size_t total = pos + 1 - offset;
  LowerCopy(key->bytes.data(), p + offset, total);
  key->len = static_cast<uint8_t>(total);
  labels->count = static_cast<uint8_t>(count);
  *end = pos + 1;
  return true;
}

}  // namespace

ParseError ReadName(std::span<const uint8_t> msg, size_t offset, size_t* end, NameKey* key) {
  const uint8_t* p = msg.data();
  const size_t n = msg.size();
  size_t pos = offset;
  // Start of the contiguous run of labels being read. Every pointer must
  // land before it, and the run is copied to the key in one block when it
  // ends (at a pointer or the root).
  size_t run_start = offset;
  size_t out = 0;      // key octets so far
  size_t out_run = 0;  // key offset of run_start's octet
  size_t end_pos = 0;
  bool jumped = false;
  for (;;) {
    if (pos >= n) return ParseError::kTruncatedName;
    const uint8_t len = p[pos];
    if (len == 0) {
      ++out;
      if (!jumped) end_pos = pos + 1;
      if (key != nullptr) LowerCopy(key->bytes.data() + out_run, p + run_start, pos + 1 - run_start);
      break;
    }
    switch (len & 0xC0) {
      case 0x00:
        break;
      case 0xC0: {
        if (pos + 1 >= n) return ParseError::kTruncatedName;
        const size_t target = (static_cast<size_t>(len & 0x3F) << 8) | p[pos + 1];
        if (!jumped) {
          end_pos = pos + 2;
          jumped = true;
        }
        if (target > pos) return ParseError::kForwardPointer;
        if (target >= run_start || target == pos) return ParseError::kPointerLoop;
        if (key != nullptr) LowerCopy(key->bytes.data() + out_run, p + run_start, pos - run_start);
        out_run = out;
        run_start = target;
        pos = target;
        continue;
      }
      case 0x40:
        return ParseError::kLabelTooLong;  // 64..127: no label type 0x40 is in use
      default:
        return ParseError::kBadLabelType;
    }
    if (pos + 1 + len > n) return ParseError::kTruncatedName;
    // Room for this label and the root byte that must still follow.
    if (out + 1 + len + 1 > kMaxNameWire) return ParseError::kNameTooLong;
    out += 1 + len;
    pos += 1 + len;
  }
  if (key != nullptr) key->len = static_cast<uint8_t>(out);
  *end = end_pos;
  return ParseError::kOk;
}

bool NameKeyFromText(std::string_view text, NameKey* key) {
  size_t out = 0;
  if (text == ".") text = "";
  if (!text.empty() && text.back() == '.') text.remove_suffix(1);
  while (!text.empty()) {
    size_t dot = text.find('.');
    std::string_view label = text.substr(0, dot);
    if (label.empty() || label.size() > kMaxLabel) return false;
    if (out + 1 + label.size() + 1 > kMaxNameWire) return false;
    key->bytes[out++] = static_cast<uint8_t>(label.size());
    for (char c : label) key->bytes[out++] = kLower[static_cast<uint8_t>(c)];
    if (dot == std::string_view::npos) break;
    text.remove_prefix(dot + 1);
    if (text.empty()) return false;  // "a..b" or trailing double dot
  }
  key->bytes[out++] = 0;
  key->len = static_cast<uint8_t>(out);
  return true;
}

std::string NameKeyToText(std::span<const uint8_t> key) {
  if (key.empty() || key[0] == 0) return std::string(1, '.');
  std::string s;
  size_t i = 0;
  while (i < key.size() && key[i] != 0) {
    size_t len = key[i];
    for (size_t j = 1; j <= len && i + j < key.size(); ++j) {
      char c = static_cast<char>(key[i + j]);
      if (c == '.' || c == '\\') s.push_back('\\');
      s.push_back(c);
    }
    s.push_back('.');
    i += 1 + len;
  }
  return s;
}

namespace {
struct TypeName {
  uint16_t type;
  const char* name;
};
// Every type weir, gslb-sim and weir-bench name: the one table of them.
constexpr TypeName kTypeNames[] = {{1, "A"},      {2, "NS"},      {5, "CNAME"},  {6, "SOA"},   {12, "PTR"},
                                   {13, "HINFO"}, {15, "MX"},     {16, "TXT"},   {28, "AAAA"}, {33, "SRV"},
                                   {35, "NAPTR"}, {39, "DNAME"},  {41, "OPT"},   {43, "DS"},   {46, "RRSIG"},
                                   {47, "NSEC"},  {48, "DNSKEY"}, {50, "NSEC3"}, {64, "SVCB"}, {65, "HTTPS"},
                                   {99, "SPF"},   {255, "ANY"},   {257, "CAA"}};
bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if ((a[i] | 0x20) != (b[i] | 0x20)) return false;
  }
  return true;
}
}  // namespace

uint16_t TypeFromText(std::string_view text) {
  for (const TypeName& t : kTypeNames) {
    if (EqualsIgnoreCase(text, t.name)) return t.type;
  }
  if (text.size() > 4 && EqualsIgnoreCase(text.substr(0, 4), "TYPE")) {
    uint32_t v = 0;
    for (char c : text.substr(4)) {
      if (c < '0' || c > '9') return 0;
      v = v * 10 + static_cast<uint32_t>(c - '0');
      if (v > 65535) return 0;
    }
    return static_cast<uint16_t>(v);
  }
  return 0;
}

std::string TypeToText(uint16_t type) {
  for (const TypeName& t : kTypeNames) {
    if (t.type == type) return t.name;
  }
  return "TYPE" + std::to_string(type);
}

// ---------------------------------------------------------------- ECS

ParseError DecodeEcs(std::span<const uint8_t> data, bool in_query, ClientSubnet* out) {
  if (data.size() < 4) return ParseError::kEcsTruncated;
  const uint16_t family = Load16(data.data());
  const uint8_t source = data[2];
  const uint8_t scope = data[3];
  unsigned max_bits;
  if (family == kEcsFamilyIpv4) {
    max_bits = 32;
  } else if (family == kEcsFamilyIpv6) {
    max_bits = 128;
  } else {
    return ParseError::kEcsBadFamily;
  }
  if (source > max_bits) return ParseError::kEcsSourceTooLong;
  if (scope > max_bits) return ParseError::kEcsScopeTooLong;
  if (in_query && scope != 0) return ParseError::kEcsScopeInQuery;
  const size_t addr_len = data.size() - 4;
  if (addr_len != (source + 7u) / 8u) return ParseError::kEcsAddressLength;
  if (source % 8 != 0) {
    const uint8_t mask = static_cast<uint8_t>(0xFF >> (source % 8));
    if (data[4 + addr_len - 1] & mask) return ParseError::kEcsTrailingBits;
  }
  out->family = family;
  out->source_prefix = source;
  out->scope_prefix = scope;
  out->address.fill(0);
  std::memcpy(out->address.data(), data.data() + 4, addr_len);
  return ParseError::kOk;
}

bool MakeClientSubnet(std::span<const uint8_t> address, uint8_t source_prefix, ClientSubnet* out) {
  if (address.size() == 4) {
    if (source_prefix > 32) return false;
    out->family = kEcsFamilyIpv4;
  } else if (address.size() == 16) {
    if (source_prefix > 128) return false;
    out->family = kEcsFamilyIpv6;
  } else {
    return false;
  }
  out->source_prefix = source_prefix;
  out->scope_prefix = 0;
  out->address.fill(0);
  const size_t full = source_prefix / 8;
  std::memcpy(out->address.data(), address.data(), full);
  if (source_prefix % 8 != 0) {
    out->address[full] = address[full] & static_cast<uint8_t>(0xFF00 >> (source_prefix % 8));
  }
  return true;
}

size_t EncodeEcsOption(const ClientSubnet& s, uint8_t* out, size_t cap) {
  const unsigned max_bits = s.family == kEcsFamilyIpv4 ? 32 : s.family == kEcsFamilyIpv6 ? 128 : 0;
  if (max_bits == 0 || s.source_prefix > max_bits || s.scope_prefix > max_bits) return 0;
  const size_t addr_len = s.AddressBytes();
  const size_t total = 8 + addr_len;
  if (cap < total) return 0;
  Store16(out, option::kEcs);
  Store16(out + 2, static_cast<uint16_t>(4 + addr_len));
  Store16(out + 4, s.family);
  out[6] = s.source_prefix;
  out[7] = s.scope_prefix;
  std::memcpy(out + 8, s.address.data(), addr_len);
  if (s.source_prefix % 8 != 0) {
    out[8 + addr_len - 1] &= static_cast<uint8_t>(0xFF00 >> (s.source_prefix % 8));
  }
  return total;
}

// ---------------------------------------------------------------- weights

std::string_view WeightVerdictName(WeightVerdict v) {
  switch (v) {
    case WeightVerdict::kValid:
      return "valid";
    case WeightVerdict::kEmpty:
      return "empty";
    case WeightVerdict::kOddLength:
      return "odd_length";
    case WeightVerdict::kCountMismatch:
      return "count_mismatch";
    case WeightVerdict::kZeroWeight:
      return "zero_weight";
    case WeightVerdict::kHighByteSet:
      return "high_byte_set";
    case WeightVerdict::kTooMany:
      return "too_many";
  }
  return "unknown";
}

WeightSet DecodeWeights(std::span<const uint8_t> data, size_t address_records) {
  WeightSet w;
  const size_t n = address_records < kMaxWeightedAddresses ? address_records : kMaxWeightedAddresses;
  w.count = static_cast<uint8_t>(n);
  auto equal = [&](WeightVerdict v) {
    w.verdict = v;
    for (size_t i = 0; i < n; ++i) w.weights[i] = 1;
    return w;
  };
  if (address_records > kMaxWeightedAddresses) return equal(WeightVerdict::kTooMany);
  if (data.empty()) return equal(WeightVerdict::kEmpty);
  if (data.size() % 2 != 0) return equal(WeightVerdict::kOddLength);
  if (data.size() / 2 != n) return equal(WeightVerdict::kCountMismatch);
  for (size_t i = 0; i < n; ++i) {
    if (data[2 * i] != 0) return equal(WeightVerdict::kHighByteSet);
    if (data[2 * i + 1] == 0) return equal(WeightVerdict::kZeroWeight);
    w.weights[i] = data[2 * i + 1];
  }
  w.verdict = WeightVerdict::kValid;
  return w;
}

// ---------------------------------------------------------------- EDNS

ParseError OptionIterator::Next(uint16_t* code, std::span<const uint8_t>* data, bool* done) {
  if (pos_ == rdata_.size()) {
    *done = true;
    return ParseError::kOk;
  }
  *done = false;
  if (rdata_.size() - pos_ < 4) return ParseError::kTruncatedOption;
  *code = Load16(rdata_.data() + pos_);
  const size_t len = Load16(rdata_.data() + pos_ + 2);
  if (rdata_.size() - pos_ - 4 < len) return ParseError::kTruncatedOption;
  *data = rdata_.subspan(pos_ + 4, len);
  pos_ += 4 + len;
  return ParseError::kOk;
}

ParseError ReadRecord(std::span<const uint8_t> msg, size_t offset, Section section, RrView* rr, size_t* end) {
  msg = ClampMessage(msg);
  size_t after_name;
  ParseError e = ReadName(msg, offset, &after_name, nullptr);
  if (e != ParseError::kOk) return e;
  if (msg.size() - after_name < 10) return ParseError::kTruncatedRr;
  const uint8_t* p = msg.data() + after_name;
  rr->section = section;
  rr->name_offset = static_cast<uint16_t>(offset);
  rr->type = Load16(p);
  rr->klass = Load16(p + 2);
  rr->ttl = Load32(p + 4);
  rr->ttl_offset = static_cast<uint16_t>(after_name + 4);
  rr->rdlength = Load16(p + 8);
  rr->rdata_offset = static_cast<uint16_t>(after_name + 10);
  if (msg.size() - rr->rdata_offset < rr->rdlength) return ParseError::kRdataOverrun;
  *end = rr->rdata_offset + rr->rdlength;
  return ParseError::kOk;
}

namespace {

// Fills `edns` from an OPT RR found in the additional section.
ParseError ParseOpt(std::span<const uint8_t> msg, const RrView& rr, bool in_query, const ParseOptions& opts,
                    Edns* edns) {
  if (edns->present) return ParseError::kDuplicateOpt;
  if (msg[rr.name_offset] != 0) return ParseError::kOptOwnerNotRoot;
  edns->present = true;
  edns->opt_offset = rr.name_offset;
  edns->udp_size = rr.klass;
  edns->ext_rcode = static_cast<uint8_t>(rr.ttl >> 24);
  edns->version = static_cast<uint8_t>(rr.ttl >> 16);
  edns->do_bit = (rr.ttl & 0x8000) != 0;
  edns->rdata_offset = rr.rdata_offset;
  edns->rdata_len = rr.rdlength;
  if (edns->version != 0) return ParseError::kBadEdnsVersion;
  OptionIterator it(msg.subspan(rr.rdata_offset, rr.rdlength));
  for (;;) {
    uint16_t code = 0;
    std::span<const uint8_t> data;
    bool done = false;
    ParseError e = it.Next(&code, &data, &done);
    if (e != ParseError::kOk) return e;
    if (done) break;
    ++edns->option_count;
    const uint16_t data_off = static_cast<uint16_t>(data.data() - msg.data());
    if (code == option::kEcs) {
      if (edns->has_ecs) return ParseError::kDuplicateEcs;
      e = DecodeEcs(data, in_query, &edns->ecs);
      if (e != ParseError::kOk) return e;
      edns->has_ecs = true;
    } else if (code == opts.weight_option_code) {
      // A repeated weight option: the first one counts, as for unknown options.
      if (!edns->has_weight) {
        edns->has_weight = true;
        edns->weight_offset = data_off;
        edns->weight_len = static_cast<uint16_t>(data.size());
      }
    } else if (code == option::kNsid) {
      edns->has_nsid = true;
    } else if (code == option::kPadding) {
      edns->has_padding = true;
    } else if (code == option::kCookie) {
      edns->has_cookie = true;
      edns->cookie_offset = data_off;
      edns->cookie_len = static_cast<uint16_t>(data.size());
    }
    // Unknown options are ignored (RFC 6891 6.1.2).
  }
  return ParseError::kOk;
}

// Walks `count` records from *pos; OPT is legal only in the additional section.
ParseError WalkSection(std::span<const uint8_t> msg, Section s, uint16_t count, bool in_query,
                       const ParseOptions& opts, size_t* pos, Edns* edns) {
  for (uint16_t i = 0; i < count; ++i) {
    RrView rr;
    size_t end;
    ParseError e = ReadRecord(msg, *pos, s, &rr, &end);
    if (e != ParseError::kOk) return e;
    if (rr.type == type::kOpt) {
      if (s != Section::kAdditional) return ParseError::kOptNotInAdditional;
      e = ParseOpt(msg, rr, in_query, opts, edns);
      if (e != ParseError::kOk) return e;
    }
    *pos = end;
  }
  return ParseError::kOk;
}

ParseError CheckCounts(std::span<const uint8_t> msg, size_t pos, uint16_t an, uint16_t ns, uint16_t ar) {
  const size_t records = size_t{an} + ns + ar;
  if (records * kMinRrSize > msg.size() - pos) return ParseError::kTooManyRecords;
  return ParseError::kOk;
}

}  // namespace

// ---------------------------------------------------------------- query

ParseError ParseQueryFull(std::span<const uint8_t> pkt, const ParseOptions& opts, Query* out) {
  pkt = ClampMessage(pkt);
  if (pkt.size() < kHeaderSize) return ParseError::kTruncatedHeader;
  const uint8_t* p = pkt.data();
  out->id = Load16(p);
  out->flags = Load16(p + kOffFlags);
  out->edns = Edns{};
  if (out->flags & flag::kQr) return ParseError::kNotAQuery;
  const uint16_t qd = Load16(p + kOffQdcount);
  if (qd == 0) return ParseError::kNoQuestion;
  if (qd > 1) return ParseError::kMultipleQuestions;
  size_t pos;
  ParseError e;
  if (!ReadPlainName(p, pkt.size(), kHeaderSize, &out->qname, &out->qname_labels, &pos)) {
    // The general reader names the exact error, or finds a valid but
    // compressed name, which a question must not be (ReadPlainName reads
    // every valid uncompressed one).
    e = ReadName(pkt, kHeaderSize, &pos, &out->qname);
    return e != ParseError::kOk ? e : ParseError::kCompressedQuestion;
  }
  if (pkt.size() - pos < 4) return ParseError::kTruncatedQuestion;
  out->qtype = Load16(p + pos);
  out->qclass = Load16(p + pos + 2);
  pos += 4;
  out->question_end = static_cast<uint16_t>(pos);
  const uint16_t an = Load16(p + kOffAncount);
  const uint16_t ns = Load16(p + kOffNscount);
  const uint16_t ar = Load16(p + kOffArcount);
  // A query ends with its last counted record: anything after it is not
  // ours to ignore (unbound and Knot answer FORMERR too).
  if ((an | ns | ar) == 0) return pos == pkt.size() ? ParseError::kOk : ParseError::kTrailingBytes;
  if ((an | ns) == 0 && ar == 1 && pkt.size() - pos >= kMinRrSize && p[pos] == 0 &&
      Load16(p + pos + 1) == type::kOpt) {
    // Nearly every EDNS query: the OPT RR alone, owned by the root. Same
    // checks as the general walk below, without its per-record machinery.
    RrView rr;
    rr.section = Section::kAdditional;
    rr.name_offset = static_cast<uint16_t>(pos);
    rr.type = type::kOpt;
    rr.klass = Load16(p + pos + 3);
    rr.ttl = Load32(p + pos + 5);
    rr.ttl_offset = static_cast<uint16_t>(pos + 5);
    rr.rdlength = Load16(p + pos + 9);
    rr.rdata_offset = static_cast<uint16_t>(pos + kMinRrSize);
    if (pkt.size() - rr.rdata_offset < rr.rdlength) return ParseError::kRdataOverrun;
    e = ParseOpt(pkt, rr, true, opts, &out->edns);
    if (e != ParseError::kOk && e != ParseError::kBadEdnsVersion) return e;
    return pkt.size() - rr.rdata_offset == rr.rdlength ? e : ParseError::kTrailingBytes;
  }
  e = CheckCounts(pkt, pos, an, ns, ar);
  if (e != ParseError::kOk) return e;
  e = WalkSection(pkt, Section::kAnswer, an, true, opts, &pos, &out->edns);
  if (e != ParseError::kOk) return e;
  e = WalkSection(pkt, Section::kAuthority, ns, true, opts, &pos, &out->edns);
  if (e != ParseError::kOk) return e;
  e = WalkSection(pkt, Section::kAdditional, ar, true, opts, &pos, &out->edns);
  if (e != ParseError::kOk) return e;  // BADVERS stops the walk at the OPT
  return pos == pkt.size() ? ParseError::kOk : ParseError::kTrailingBytes;
}

namespace {

// Sixteen octets as one vector: GCC and clang lower it to SSE2 on x86-64 and
// to NEON on arm64 (and to scalar words elsewhere).
using Octets16 = uint8_t __attribute__((vector_size(16)));
using SignedOctets16 = int8_t __attribute__((vector_size(16)));

// Lower-cases 16 octets: adding 0x80 - 'A' moves 'A'..'Z' to -128..-103,
// the only octets then below -128 + 26 as signed values.
inline void Lower16(uint8_t* dst, const uint8_t* src) {
  Octets16 x;
  std::memcpy(&x, src, 16);
  const SignedOctets16 shifted = reinterpret_cast<SignedOctets16>(x + static_cast<uint8_t>(0x80 - 'A'));
  const Octets16 upper = reinterpret_cast<Octets16>(shifted < static_cast<int8_t>(-128 + 26));
  x |= upper & static_cast<uint8_t>(0x20);
  std::memcpy(dst, &x, 16);
}

// Copies a question's name (`n` octets at `src`) to its key, lower-cased,
// where ParseCommonQuery's blocks do not: a name longer than 32 octets, or
// one shorter than 16 that ends a packet too short for a whole block.
inline void LowerCopyLongName(uint8_t* dst, const uint8_t* src, size_t n) {
  if (n < 16) return LowerCopy(dst, src, n);
  size_t i = 0;
  for (; i + 16 < n; i += 16) Lower16(dst + i, src + i);
  Lower16(dst + n - 16, src + n - 16);  // may overlap the block before
}

// Eight octets as the native word a load of them gives, so that the fast
// path checks fixed fields of the wire format with one compare.
constexpr uint64_t NativeWord(std::array<uint8_t, 8> octets) {
  uint64_t w = 0;
  for (size_t i = 0; i < 8; ++i) {
    const size_t shift = std::endian::native == std::endian::little ? 8 * i : 8 * (7 - i);
    w |= uint64_t{octets[i]} << shift;
  }
  return w;
}
// Header octets 4..11 of the common query: QDCOUNT 1, ANCOUNT 0, NSCOUNT 0,
// ARCOUNT 0, but for the one bit of ARCOUNT an OPT sets.
constexpr uint64_t kCommonCounts = NativeWord({0, 1, 0, 0, 0, 0, 0, 0});
constexpr uint64_t kOneAdditional = NativeWord({0, 0, 0, 0, 0, 0, 0, 1});
// An OPT's first eight octets: root owner, TYPE 41, CLASS (the UDP size),
// extended RCODE, version 0, the flags' first octet (DO).
constexpr uint64_t kOptFixedMask = NativeWord({0xFF, 0xFF, 0xFF, 0, 0, 0, 0xFF, 0});
constexpr uint64_t kOptFixed = NativeWord({0, 0, type::kOpt, 0, 0, 0, 0, 0});

// Two adjacent 16-bit fields of a Query (the ID and the flags, QTYPE and
// QCLASS) from their four wire octets at `wire`, in one load and one store:
// each half turned to host order.
template <size_t kFirst, size_t kSecond>
inline void StoreFieldPair(Query* q, const uint8_t* wire) {
  static_assert(kSecond == kFirst + 2, "the fields are adjacent, as on the wire");
  uint32_t pair = Load32(wire);  // first field in the high half
  if constexpr (std::endian::native == std::endian::little) pair = std::rotl(pair, 16);
  std::memcpy(reinterpret_cast<uint8_t*>(q) + kFirst, &pair, 4);
}

// What the fast path does with a query it does not take: ParseQuery hands
// it to ParseQueryFull, ParseQueryFast says so. Either is the fast path's
// last call, a jump, so the common query pays for no saved registers.
using Decline = ParseError (*)(std::span<const uint8_t> pkt, const ParseOptions& opts, Query* out);
// ParseQueryFast's "not taken".
constexpr ParseError kNotCommon = ParseError::kCount;
ParseError NotCommon(std::span<const uint8_t>, const ParseOptions&, Query*) { return kNotCommon; }

// The options of a common query's OPT, which ends the packet, from `pos`
// on: ECS, the weight option and a cookie, each once and well formed,
// checked in the full parser's order (a weight option code configured as 8
// or 10 is ECS, or the weight option, as there). Anything else is declined.
// Out of line: most queries carry no option. An ECS option needs a call to
// DecodeEcs, and a call costs the loop saved registers: the instance without
// kDecodeEcs hands the walk to the one with it at the first ECS option, so
// that a query with a cookie alone does not pay for them.
template <Decline decline, bool kDecodeEcs>
[[gnu::noinline]] ParseError ParseCommonOptions(std::span<const uint8_t> pkt, const ParseOptions& opts,
                                                Query* out, size_t pos) {
  const uint8_t* p = pkt.data();
  const size_t end = pkt.size();
  Edns& edns = out->edns;
  do {
    if (end - pos < 4) return decline(pkt, opts, out);
    const uint16_t code = Load16(p + pos);
    const size_t len = Load16(p + pos + 2);
    const size_t data = pos + 4;
    if (end - data < len) return decline(pkt, opts, out);
    if (code == option::kEcs) {
      if constexpr (!kDecodeEcs) {
        return ParseCommonOptions<decline, true>(pkt, opts, out, pos);
      } else {
        if (edns.has_ecs || DecodeEcs({p + data, len}, true, &edns.ecs) != ParseError::kOk) {
          return decline(pkt, opts, out);
        }
        edns.has_ecs = true;
      }
    } else if (code == opts.weight_option_code) {
      if (edns.has_weight) return decline(pkt, opts, out);
      edns.has_weight = true;
      edns.weight_offset = static_cast<uint16_t>(data);
      edns.weight_len = static_cast<uint16_t>(len);
    } else if (code == option::kCookie) {
      if (edns.has_cookie) return decline(pkt, opts, out);
      edns.has_cookie = true;
      edns.cookie_offset = static_cast<uint16_t>(data);
      edns.cookie_len = static_cast<uint16_t>(len);
    } else {
      return decline(pkt, opts, out);  // NSID, padding, unknown: the full parser's
    }
    ++edns.option_count;
    pos = data + len;
  } while (pos < end);
  return ParseError::kOk;
}

// The common query past its name, whose key and label starts are written:
// the rest of the question, then no additional record or one OPT owned by
// the root, version 0, holding only the options ParseCommonOptions takes,
// ending the packet.
template <Decline decline>
[[gnu::always_inline]] inline ParseError ParseCommonQueryRest(std::span<const uint8_t> pkt,
                                                              const ParseOptions& opts, Query* out,
                                                              size_t name_len, size_t label_count) {
  const uint8_t* p = pkt.data();
  const size_t n = pkt.size();
  const size_t question_end = kHeaderSize + name_len + 4;
  out->qname.len = static_cast<uint8_t>(name_len);
  out->qname_labels.count = static_cast<uint8_t>(label_count);
  StoreFieldPair<offsetof(Query, id), offsetof(Query, flags)>(out, p + kOffId);
  StoreFieldPair<offsetof(Query, qtype), offsetof(Query, qclass)>(out, p + question_end - 4);
  out->question_end = static_cast<uint16_t>(question_end);

  Edns& edns = out->edns;
  edns = Edns{};
  if (p[kOffArcount + 1] == 0) return question_end == n ? ParseError::kOk : decline(pkt, opts, out);
  // The OPT, which ends the packet. Version 0 only: BADVERS is the full
  // parser's.
  const uint8_t* opt = p + question_end;
  const size_t rdata_offset = question_end + kMinRrSize;
  if (n < rdata_offset) return decline(pkt, opts, out);
  uint64_t opt_head;
  std::memcpy(&opt_head, opt, 8);
  const size_t rdlen = n - rdata_offset;
  if ((opt_head & kOptFixedMask) != kOptFixed || Load16(opt + 9) != rdlen) return decline(pkt, opts, out);
  edns.present = true;
  edns.udp_size = Load16(opt + 3);
  edns.ext_rcode = opt[5];
  edns.do_bit = (opt[7] & 0x80) != 0;
  edns.opt_offset = static_cast<uint16_t>(question_end);
  edns.rdata_offset = static_cast<uint16_t>(rdata_offset);
  edns.rdata_len = static_cast<uint16_t>(rdlen);
  if (rdlen != 0) return ParseCommonOptions<decline, false>(pkt, opts, out, rdata_offset);
  return ParseError::kOk;
}

// The common query with a name ParseCommonQuery's blocks do not copy. Out
// of line, so that its loops cost the common query no saved registers.
template <Decline decline>
[[gnu::noinline]] ParseError ParseCommonQueryLongName(std::span<const uint8_t> pkt, const ParseOptions& opts,
                                                      Query* out, size_t name_len, size_t label_count) {
  LowerCopyLongName(out->qname.bytes.data(), pkt.data() + kHeaderSize, name_len);
  return ParseCommonQueryRest<decline>(pkt, opts, out, name_len, label_count);
}

// The common query: QR clear, counts 1/0/0/0-or-1, an uncompressed
// question, and what ParseCommonQueryRest takes after it. Fills *out
// exactly as ParseQueryFull does for kOk and returns kOk; `decline`s
// anything else. Never reads outside `pkt`.
template <Decline decline>
[[gnu::always_inline]] inline ParseError ParseCommonQuery(std::span<const uint8_t> pkt,
                                                          const ParseOptions& opts, Query* out) {
  const uint8_t* p = pkt.data();
  const size_t n = pkt.size();
  // The smallest common query: header, root name, QTYPE and QCLASS.
  if (n < kHeaderSize + 5 || n > kMaxMessage) return decline(pkt, opts, out);
  uint64_t counts;
  std::memcpy(&counts, p + kOffQdcount, 8);
  if ((counts & ~kOneAdditional) != kCommonCounts || (p[kOffFlags] & 0x80) != 0) {
    return decline(pkt, opts, out);
  }

  // Hop over the labels, noting where each starts. A length octet is read
  // only below `room`: inside the packet, and where the root still fits in
  // kMaxNameWire.
  const size_t room = std::min(n - kHeaderSize, kMaxNameWire);
  uint8_t* starts = out->qname_labels.offsets.data();
  size_t pos = 0;
  size_t count = 0;
  for (;;) {
    if (pos >= room) return decline(pkt, opts, out);
    const size_t len = p[kHeaderSize + pos];
    starts[count++] = static_cast<uint8_t>(pos);
    if (len - 1 >= kMaxLabel) {  // the root; or a pointer, a bad label type, a label too long
      if (len != 0) return decline(pkt, opts, out);
      break;
    }
    pos += 1 + len;
  }
  const size_t name_len = pos + 1;
  if (kHeaderSize + name_len + 4 > n) return decline(pkt, opts, out);
  // Most names take one or two blocks: two that overlap for 16 to 32
  // octets, one past a shorter name's end while the packet holds it (octets
  // of the key past its length are not part of it).
  uint8_t* key = out->qname.bytes.data();
  const uint8_t* name = p + kHeaderSize;
  if (name_len > 32) return ParseCommonQueryLongName<decline>(pkt, opts, out, name_len, count);
  if (name_len >= 16) {
    Lower16(key, name);
    Lower16(key + name_len - 16, name + name_len - 16);
  } else if (n >= kHeaderSize + 16) {
    Lower16(key, name);
  } else {
    return ParseCommonQueryLongName<decline>(pkt, opts, out, name_len, count);
  }
  return ParseCommonQueryRest<decline>(pkt, opts, out, name_len, count);
}

}  // namespace

bool ParseQueryFast(std::span<const uint8_t> pkt, const ParseOptions& opts, Query* out) {
  return ParseCommonQuery<NotCommon>(pkt, opts, out) == ParseError::kOk;
}

ParseError ParseQuery(std::span<const uint8_t> pkt, const ParseOptions& opts, Query* out) {
  return ParseCommonQuery<ParseQueryFull>(pkt, opts, out);
}

// ---------------------------------------------------------------- response

ParseError Message::Parse(std::span<const uint8_t> pkt, const ParseOptions& opts) {
  pkt = ClampMessage(pkt);
  pkt_ = pkt;
  edns_ = Edns{};
  if (pkt.size() < kHeaderSize) return ParseError::kTruncatedHeader;
  const uint8_t* p = pkt.data();
  const uint16_t qd = Load16(p + kOffQdcount);
  if (qd == 0) return ParseError::kNoQuestion;
  if (qd > 1) return ParseError::kMultipleQuestions;
  size_t pos;
  ParseError e = ReadName(pkt, kHeaderSize, &pos, &qname_);
  if (e != ParseError::kOk) return e;
  if (pkt.size() - pos < 4) return ParseError::kTruncatedQuestion;
  qtype_ = Load16(p + pos);
  qclass_ = Load16(p + pos + 2);
  pos += 4;
  counts_[0] = Load16(p + kOffAncount);
  counts_[1] = Load16(p + kOffNscount);
  counts_[2] = Load16(p + kOffArcount);
  e = CheckCounts(pkt, pos, counts_[0], counts_[1], counts_[2]);
  if (e != ParseError::kOk) return e;
  for (int s = 0; s < 3; ++s) {
    section_start_[s] = static_cast<uint16_t>(pos);
    e = WalkSection(pkt, static_cast<Section>(s), counts_[s], false, opts, &pos, &edns_);
    if (e != ParseError::kOk) return e;
  }
  return ParseError::kOk;
}

Message::Iterator Message::Records(Section s) const {
  Iterator it;
  it.m_ = this;
  it.section_ = s;
  it.left_ = counts_[static_cast<int>(s)];
  it.pos_ = section_start_[static_cast<int>(s)];
  return it;
}

bool Message::Iterator::Next(RrView* rr) {
  if (left_ == 0) return false;
  size_t end;
  // The message was validated by Parse, so this cannot fail; stay defensive.
  if (ReadRecord(m_->pkt_, pos_, section_, rr, &end) != ParseError::kOk) {
    left_ = 0;
    return false;
  }
  pos_ = end;
  --left_;
  return true;
}

ParseError CopyRdataUncompressed(std::span<const uint8_t> msg, const RrView& rr, uint8_t* out, size_t cap,
                                 size_t* len) {
  const size_t rd_end = size_t{rr.rdata_offset} + rr.rdlength;
  if (rd_end > msg.size()) return ParseError::kRdataOverrun;
  size_t o = 0;
  size_t pos = rr.rdata_offset;
  // Names within RDATA may point anywhere earlier in the message, but their
  // own bytes must stay inside RDATA.
  auto put_name = [&]() -> ParseError {
    NameKey k;
    size_t end;
    ParseError e = ReadName(msg.first(rd_end), pos, &end, &k);
    if (e != ParseError::kOk) return e;
    if (o + k.len > cap) return ParseError::kBufferTooSmall;
    std::memcpy(out + o, k.bytes.data(), k.len);
    o += k.len;
    pos = end;
    return ParseError::kOk;
  };
  auto put_fixed = [&](size_t n) -> ParseError {
    if (rd_end - pos < n) return ParseError::kRdataOverrun;
    if (o + n > cap) return ParseError::kBufferTooSmall;
    std::memcpy(out + o, msg.data() + pos, n);
    o += n;
    pos += n;
    return ParseError::kOk;
  };
  ParseError e = ParseError::kOk;
  switch (rr.type) {
    case type::kNs:
    case type::kCname:
    case type::kPtr:
      e = put_name();
      break;
    case type::kMx:
      e = put_fixed(2);
      if (e == ParseError::kOk) e = put_name();
      break;
    case type::kSoa:
      e = put_name();
      if (e == ParseError::kOk) e = put_name();
      if (e == ParseError::kOk) e = put_fixed(20);
      break;
    default:
      e = put_fixed(rr.rdlength);
      break;
  }
  if (e != ParseError::kOk) return e;
  if (pos != rd_end) return ParseError::kRdataOverrun;
  *len = o;
  return ParseError::kOk;
}

}  // namespace weir::dns
