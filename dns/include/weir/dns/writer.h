// Writing DNS messages into caller-provided buffers. No allocation, no
// exceptions: every call returns kOk or kBufferTooSmall and leaves the buffer
// consistent up to the last successful call.
//
// Answers come from pre-encoded record blobs (see RecordEncoder): the
// question always sits at offset 12, so a blob built for a qname can carry
// compression pointers to it and to its own earlier names, and is copied
// verbatim with only its TTLs rewritten.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "weir/dns/error.h"
#include "weir/dns/message.h"
#include "weir/dns/ttl.h"
#include "weir/dns/wire.h"

namespace weir::dns {

// Offset at which the first answer record starts for a question whose qname
// key has `qname_len` bytes.
inline constexpr size_t AnswerOffset(size_t qname_len) { return kHeaderSize + qname_len + 4; }

// Copies `len` bytes of pre-encoded records to `dst` and rewrites the TTL at
// each of `ttl_offsets` (relative to the blob) to max(ttl - age, 0).
inline void CopyRecordsAged(uint8_t* dst, const uint8_t* blob, size_t len,
                            std::span<const uint16_t> ttl_offsets, uint32_t age) {
  std::memcpy(dst, blob, len);
  RewriteTtls(dst, ttl_offsets, 0, [age](uint32_t t) { return AgedTtl(t, age); });
}

// Rewrites TTLs in place (the fast path's answer already in the buffer).
inline void AgeTtlsInPlace(uint8_t* records, std::span<const uint16_t> ttl_offsets, uint32_t age) {
  RewriteTtls(records, ttl_offsets, 0, [age](uint32_t t) { return AgedTtl(t, age); });
}

inline void SetId(uint8_t* msg, uint16_t id) { Store16(msg + kOffId, id); }

// Writes `qname_wire` over the question name of `msg`: another spelling of
// the same name (0x20), so of the same length. False, `msg` unchanged, when
// `msg` is too short to hold it.
inline bool SetQuestionSpelling(std::span<uint8_t> msg, std::span<const uint8_t> qname_wire) {
  if (msg.size() < kHeaderSize + qname_wire.size()) return false;
  std::memcpy(msg.data() + kHeaderSize, qname_wire.data(), qname_wire.size());
  return true;
}

// RFC 6840 5.7/5.8: a response carries AD only to a client that set DO or
// AD in its query. Both tiers, cached and relayed answers alike.
inline bool AdAllowed(const Query& q) { return q.edns.do_bit || (q.flags & flag::kAd) != 0; }

// An OPT RR without options: the root owner, TYPE OPT, CLASS the UDP size,
// TTL the extended RCODE, version and DO, RDLENGTH 0.
inline constexpr size_t kBareOptSize = 11;
inline void WriteBareOpt(uint8_t* o, uint16_t udp_size, bool do_bit, uint8_t ext_rcode = 0,
                         uint8_t version = 0) {
  o[0] = 0;
  Store16(o + 1, type::kOpt);
  Store16(o + 3, udp_size);
  Store32(o + 5, (uint32_t{ext_rcode} << 24) | (uint32_t{version} << 16) | (do_bit ? 0x8000u : 0u));
  Store16(o + 9, 0);
}

// The response to a message whose question could not be read: its header
// only, with its ID, opcode and RD, QR set, RA when `ra`, and `rcode`.
// Returns kHeaderSize, or 0 when `query` is shorter than the ID and flags
// or `cap` than a header.
size_t WriteHeaderOnly(std::span<const uint8_t> query, Rcode rcode, bool ra, uint8_t* out, size_t cap);

// One record, owner and RDATA uncompressed, at `out`. Returns its size, or 0
// when it does not fit `cap` or the RDATA is longer than 65535 bytes.
size_t EncodeRecord(std::span<const uint8_t> owner_wire, uint16_t type, uint16_t klass, uint32_t ttl,
                    std::span<const uint8_t> rdata, uint8_t* out, size_t cap);

// For a query whose OPT record is the message's last record: writes the
// EDNS option `code` with `data` at the OPT's end, replacing the one
// written by the previous call. `opt_rdlen_at` is the offset of the OPT's
// RDLENGTH; `*option_at` the offset of the option written before (0: none)
// and then of this one. A retry with a new cookie calls it again.
void SetTrailingOption(std::vector<uint8_t>& msg, size_t opt_rdlen_at, size_t* option_at, uint16_t code,
                       std::span<const uint8_t> data);

// RFC 7830 padding with RFC 8467's block-length policy: appends a Padding
// option to `msg`'s OPT record, which must be its last record, so that the
// message is a multiple of `block` bytes long (468 for a response). False,
// and `msg` unchanged, when it has no OPT at its end, is already padded,
// does not parse, or would grow past `max`.
bool PadToBlock(std::vector<uint8_t>& msg, size_t block, size_t max = 65535);
// The block RFC 8467 section 4.1 recommends for responses.
inline constexpr size_t kResponsePaddingBlock = 468;

class ResponseWriter {
 public:
  ResponseWriter(uint8_t* buf, size_t cap) : buf_(buf), cap_(cap) {}

  // Header + question. `qname_wire` is an uncompressed name; the client's
  // spelling is kept so 0x20-randomising clients see their own case.
  ParseError Begin(uint16_t id, uint16_t flags, std::span<const uint8_t> qname_wire, uint16_t qtype,
                   uint16_t qclass);
  // Begins the response to a parsed query: ID, opcode, RD and CD copied, QR
  // and RA set, RCODE's low 4 bits set, question copied from the query bytes.
  ParseError BeginResponse(std::span<const uint8_t> query_pkt, const Query& q, Rcode rcode, bool ra = true) {
    const uint16_t flags = static_cast<uint16_t>(flag::kQr | (ra ? flag::kRa : 0) |
                                                 (q.flags & (flag::kOpcodeMask | flag::kRd | flag::kCd)) |
                                                 (static_cast<uint16_t>(rcode) & flag::kRcodeMask));
    return Begin(q.id, flags, query_pkt.subspan(kHeaderSize, q.qname.len), q.qtype, q.qclass);
  }
  // Sets `flags` (e.g. flag::kAd) in the header written by Begin.
  void AddFlags(uint16_t flags) { Store16(buf_ + kOffFlags, Load16(buf_ + kOffFlags) | flags); }

  // Appends `count` pre-encoded records to `section` (sections in order).
  ParseError AppendRecords(Section section, std::span<const uint8_t> blob, uint16_t count,
                           std::span<const uint16_t> ttl_offsets, uint32_t age);
  // Appends one record from parts; `owner_wire` is an uncompressed name.
  ParseError AppendRecord(Section section, std::span<const uint8_t> owner_wire, uint16_t type, uint16_t klass,
                          uint32_t ttl, std::span<const uint8_t> rdata);

  // OPT pseudo-RR, last in the additional section. `ext_rcode` is the upper
  // 8 bits of a 12-bit RCODE (1 for BADVERS).
  ParseError BeginOpt(uint16_t udp_size, bool do_bit, uint8_t ext_rcode = 0, uint8_t version = 0);
  ParseError AddOption(uint16_t code, std::span<const uint8_t> data);
  ParseError AddEcs(const ClientSubnet& ecs);
  // One 16-bit weight per address; an empty span writes the length-0 option.
  ParseError AddWeights(uint16_t code, std::span<const uint8_t> weights);

  // Ends the message. When it exceeds `limit` (the client's UDP limit) it is
  // cut to header + question + OPT with TC set, as RFC 2181 9 asks of
  // servers that cannot fit whole RRsets. Returns the final length.
  size_t Finish(size_t limit);

  size_t size() const { return len_; }
  uint8_t* data() { return buf_; }
  // For code that writes records itself (the fast path's cached answers):
  // where the next byte goes, how much room is left, and the commit of
  // `bytes` written there as `count` records of `section`.
  uint8_t* tail() { return buf_ + len_; }
  size_t room() const { return cap_ - len_; }
  void Commit(Section section, size_t bytes, uint16_t count) {
    len_ += bytes;
    Bump(section == Section::kAnswer      ? kOffAncount
         : section == Section::kAuthority ? kOffNscount
                                          : kOffArcount,
         count);
    section_ = static_cast<int>(section);
  }

 private:
  ParseError Reserve(size_t n) const {
    return len_ + n <= cap_ ? ParseError::kOk : ParseError::kBufferTooSmall;
  }
  void Bump(size_t count_offset, uint16_t n) {
    Store16(buf_ + count_offset, Load16(buf_ + count_offset) + n);
  }

  uint8_t* buf_;
  size_t cap_;
  size_t len_ = 0;
  size_t question_end_ = 0;
  size_t opt_start_ = 0;  // 0: no OPT
  int section_ = 0;
};

// Builds pre-encoded record blobs for the cache: records as they will sit in
// a response right after the question of `qname`, with owner names and
// CNAME/NS/PTR targets compressed against the qname and earlier names.
// Control-plane speed (it runs on cache fills, not on hits).
class RecordEncoder {
 public:
  RecordEncoder(uint8_t* buf, size_t cap, std::span<const uint8_t> qname_key);

  // `owner` and names inside RDATA are canonical keys. For CNAME, NS, PTR the
  // RDATA is the target's key and is compressed; other RDATA is copied.
  // *ttl_offset receives the TTL's offset within the blob.
  ParseError Append(std::span<const uint8_t> owner, uint16_t type, uint16_t klass, uint32_t ttl,
                    std::span<const uint8_t> rdata, uint16_t* ttl_offset);

  size_t size() const { return len_; }
  std::span<const uint8_t> blob() const { return {buf_, len_}; }

 private:
  ParseError PutName(std::span<const uint8_t> key);

  struct Known {
    uint16_t msg_offset;  // where the name starts in the final message
    uint16_t key_off;     // where its key is stored in keys_
    uint8_t key_len;
  };
  uint8_t* buf_;
  size_t cap_;
  size_t len_ = 0;
  size_t base_;  // message offset of the blob's first byte
  static constexpr int kMaxKnown = 16;
  Known known_[kMaxKnown];
  int nknown_ = 0;
  uint8_t keys_[kMaxKnown * kMaxNameWire];
  size_t keys_len_ = 0;
};

}  // namespace weir::dns
