#include "weir/dns/writer.h"

#include <cstring>

namespace weir::dns {
namespace {

constexpr size_t kOptFixedSize = kBareOptSize;

size_t CountOffset(Section s) {
  switch (s) {
    case Section::kAnswer:
      return kOffAncount;
    case Section::kAuthority:
      return kOffNscount;
    case Section::kAdditional:
      return kOffArcount;
  }
  return kOffArcount;
}

}  // namespace

ParseError ResponseWriter::Begin(uint16_t id, uint16_t flags, std::span<const uint8_t> qname_wire,
                                 uint16_t qtype, uint16_t qclass) {
  len_ = 0;
  opt_start_ = 0;
  section_ = 0;
  if (cap_ < kHeaderSize + qname_wire.size() + 4) return ParseError::kBufferTooSmall;
  Store16(buf_ + kOffId, id);
  Store16(buf_ + kOffFlags, flags);
  Store16(buf_ + kOffQdcount, 1);
  Store16(buf_ + kOffAncount, 0);
  Store16(buf_ + kOffNscount, 0);
  Store16(buf_ + kOffArcount, 0);
  std::memcpy(buf_ + kHeaderSize, qname_wire.data(), qname_wire.size());
  uint8_t* q = buf_ + kHeaderSize + qname_wire.size();
  Store16(q, qtype);
  Store16(q + 2, qclass);
  len_ = question_end_ = kHeaderSize + qname_wire.size() + 4;
  return ParseError::kOk;
}

size_t WriteHeaderOnly(std::span<const uint8_t> query, Rcode rcode, bool ra, uint8_t* out, size_t cap) {
  if (query.size() < kOffFlags + 2 || cap < kHeaderSize) return 0;
  const uint16_t flags =
      static_cast<uint16_t>(flag::kQr | (ra ? flag::kRa : 0) |
                            (Load16(query.data() + kOffFlags) & (flag::kOpcodeMask | flag::kRd)) |
                            (static_cast<uint16_t>(rcode) & flag::kRcodeMask));
  std::memset(out, 0, kHeaderSize);
  SetId(out, Load16(query.data() + kOffId));
  Store16(out + kOffFlags, flags);
  return kHeaderSize;
}

size_t EncodeRecord(std::span<const uint8_t> owner_wire, uint16_t type, uint16_t klass, uint32_t ttl,
                    std::span<const uint8_t> rdata, uint8_t* out, size_t cap) {
  const size_t n = owner_wire.size() + 10 + rdata.size();
  if (n > cap || rdata.size() > 0xFFFF) return 0;
  std::memcpy(out, owner_wire.data(), owner_wire.size());
  out += owner_wire.size();
  Store16(out, type);
  Store16(out + 2, klass);
  Store32(out + 4, ttl);
  Store16(out + 8, static_cast<uint16_t>(rdata.size()));
  if (!rdata.empty()) std::memcpy(out + 10, rdata.data(), rdata.size());
  return n;
}

void SetTrailingOption(std::vector<uint8_t>& msg, size_t opt_rdlen_at, size_t* option_at, uint16_t code,
                       std::span<const uint8_t> data) {
  uint16_t rdlen = Load16(msg.data() + opt_rdlen_at);
  if (*option_at != 0) {
    rdlen = static_cast<uint16_t>(rdlen - (msg.size() - *option_at));
    msg.resize(*option_at);
  }
  const size_t at = msg.size();
  msg.resize(at + 4 + data.size());
  Store16(msg.data() + at, code);
  Store16(msg.data() + at + 2, static_cast<uint16_t>(data.size()));
  if (!data.empty()) std::memcpy(msg.data() + at + 4, data.data(), data.size());
  Store16(msg.data() + opt_rdlen_at, static_cast<uint16_t>(rdlen + 4 + data.size()));
  *option_at = at;
}

ParseError ResponseWriter::AppendRecords(Section section, std::span<const uint8_t> blob, uint16_t count,
                                         std::span<const uint16_t> ttl_offsets, uint32_t age) {
  if (Reserve(blob.size()) != ParseError::kOk) return ParseError::kBufferTooSmall;
  CopyRecordsAged(buf_ + len_, blob.data(), blob.size(), ttl_offsets, age);
  len_ += blob.size();
  Bump(CountOffset(section), count);
  section_ = static_cast<int>(section);
  return ParseError::kOk;
}

ParseError ResponseWriter::AppendRecord(Section section, std::span<const uint8_t> owner_wire, uint16_t type,
                                        uint16_t klass, uint32_t ttl, std::span<const uint8_t> rdata) {
  const size_t n = EncodeRecord(owner_wire, type, klass, ttl, rdata, buf_ + len_, cap_ - len_);
  if (n == 0) return ParseError::kBufferTooSmall;
  len_ += n;
  Bump(CountOffset(section), 1);
  section_ = static_cast<int>(section);
  return ParseError::kOk;
}

ParseError ResponseWriter::BeginOpt(uint16_t udp_size, bool do_bit, uint8_t ext_rcode, uint8_t version) {
  if (Reserve(kOptFixedSize) != ParseError::kOk) return ParseError::kBufferTooSmall;
  WriteBareOpt(buf_ + len_, udp_size, do_bit, ext_rcode, version);
  opt_start_ = len_;
  len_ += kOptFixedSize;
  Bump(kOffArcount, 1);
  return ParseError::kOk;
}

ParseError ResponseWriter::AddOption(uint16_t code, std::span<const uint8_t> data) {
  if (opt_start_ == 0 || Reserve(4 + data.size()) != ParseError::kOk) return ParseError::kBufferTooSmall;
  uint8_t* o = buf_ + len_;
  Store16(o, code);
  Store16(o + 2, static_cast<uint16_t>(data.size()));
  if (!data.empty()) std::memcpy(o + 4, data.data(), data.size());
  len_ += 4 + data.size();
  Store16(buf_ + opt_start_ + 9, static_cast<uint16_t>(len_ - opt_start_ - kOptFixedSize));
  return ParseError::kOk;
}

ParseError ResponseWriter::AddEcs(const ClientSubnet& ecs) {
  if (opt_start_ == 0) return ParseError::kBufferTooSmall;
  const size_t n = EncodeEcsOption(ecs, buf_ + len_, cap_ - len_);
  if (n == 0) return ParseError::kBufferTooSmall;
  len_ += n;
  Store16(buf_ + opt_start_ + 9, static_cast<uint16_t>(len_ - opt_start_ - kOptFixedSize));
  return ParseError::kOk;
}

ParseError ResponseWriter::AddWeights(uint16_t code, std::span<const uint8_t> weights) {
  const size_t n = 4 + 2 * weights.size();
  if (opt_start_ == 0 || Reserve(n) != ParseError::kOk) return ParseError::kBufferTooSmall;
  uint8_t* o = buf_ + len_;
  Store16(o, code);
  Store16(o + 2, static_cast<uint16_t>(2 * weights.size()));
  for (size_t i = 0; i < weights.size(); ++i) {
    o[4 + 2 * i] = 0;
    o[5 + 2 * i] = weights[i];
  }
  len_ += n;
  Store16(buf_ + opt_start_ + 9, static_cast<uint16_t>(len_ - opt_start_ - kOptFixedSize));
  return ParseError::kOk;
}

size_t ResponseWriter::Finish(size_t limit) {
  if (len_ <= limit) return len_;
  // Keep header, question and the OPT RR (the client still learns our EDNS
  // buffer size and options); drop every other record and set TC.
  size_t opt_len = 0;
  if (opt_start_ != 0) {
    opt_len = len_ - opt_start_;
    std::memmove(buf_ + question_end_, buf_ + opt_start_, opt_len);
    opt_start_ = question_end_;
  }
  len_ = question_end_ + opt_len;
  Store16(buf_ + kOffFlags, Load16(buf_ + kOffFlags) | flag::kTc);
  Store16(buf_ + kOffAncount, 0);
  Store16(buf_ + kOffNscount, 0);
  Store16(buf_ + kOffArcount, opt_len != 0 ? 1 : 0);
  if (len_ > limit && opt_len != 0) {
    // Even the OPT does not fit (a tiny limit): keep only the fixed OPT part.
    Store16(buf_ + opt_start_ + 9, 0);
    len_ = question_end_ + kOptFixedSize;
  }
  return len_;
}

// ---------------------------------------------------------------- encoder

RecordEncoder::RecordEncoder(uint8_t* buf, size_t cap, std::span<const uint8_t> qname_key)
    : buf_(buf), cap_(cap), base_(AnswerOffset(qname_key.size())) {
  // The question's name sits at offset 12, uncompressed: every label start
  // in it is a compression target.
  std::memcpy(keys_, qname_key.data(), qname_key.size());
  keys_len_ = qname_key.size();
  size_t j = 0;
  while (j < qname_key.size() && qname_key[j] != 0 && nknown_ < kMaxKnown) {
    known_[nknown_++] = {static_cast<uint16_t>(kHeaderSize + j), static_cast<uint16_t>(j),
                         static_cast<uint8_t>(qname_key.size() - j)};
    j += 1 + qname_key[j];
  }
}

ParseError RecordEncoder::PutName(std::span<const uint8_t> key) {
  // Find the longest suffix of `key` already in the message.
  size_t j = 0;
  int match = -1;
  while (j < key.size() && key[j] != 0) {
    const size_t slen = key.size() - j;
    for (int k = 0; k < nknown_; ++k) {
      if (known_[k].key_len == slen && std::memcmp(keys_ + known_[k].key_off, key.data() + j, slen) == 0) {
        match = k;
        break;
      }
    }
    if (match >= 0) break;
    j += 1 + key[j];
  }
  const size_t literal = match >= 0 ? j : key.size();
  const size_t need = literal + (match >= 0 ? 2 : 0);
  if (len_ + need > cap_) return ParseError::kBufferTooSmall;
  const size_t name_msg_off = base_ + len_;
  std::memcpy(buf_ + len_, key.data(), literal);
  len_ += literal;
  if (match >= 0) {
    Store16(buf_ + len_, static_cast<uint16_t>(0xC000 | known_[match].msg_offset));
    len_ += 2;
  }
  // Remember the literal labels as targets for later names.
  if (literal > 0 && keys_len_ + key.size() <= sizeof(keys_)) {
    const size_t stored = keys_len_;
    std::memcpy(keys_ + stored, key.data(), key.size());
    keys_len_ += key.size();
    size_t i = 0;
    while (i < literal && key[i] != 0 && nknown_ < kMaxKnown && name_msg_off + i < 0x3FFF) {
      known_[nknown_++] = {static_cast<uint16_t>(name_msg_off + i), static_cast<uint16_t>(stored + i),
                           static_cast<uint8_t>(key.size() - i)};
      i += 1 + key[i];
    }
  }
  return ParseError::kOk;
}

ParseError RecordEncoder::Append(std::span<const uint8_t> owner, uint16_t type, uint16_t klass, uint32_t ttl,
                                 std::span<const uint8_t> rdata, uint16_t* ttl_offset) {
  // A failed record must leave no trace: neither bytes nor compression
  // targets, which would otherwise point at bytes the next record overwrites.
  const size_t start = len_;
  const int known_before = nknown_;
  const size_t keys_before = keys_len_;
  auto fail = [&](ParseError err) {
    len_ = start;
    nknown_ = known_before;
    keys_len_ = keys_before;
    return err;
  };
  ParseError e = PutName(owner);
  if (e != ParseError::kOk) return fail(e);
  if (len_ + 10 > cap_) return fail(ParseError::kBufferTooSmall);
  uint8_t* o = buf_ + len_;
  Store16(o, type);
  Store16(o + 2, klass);
  Store32(o + 4, ttl);
  if (ttl_offset != nullptr) *ttl_offset = static_cast<uint16_t>(len_ + 4);
  const size_t rdlen_pos = len_ + 8;
  len_ += 10;
  if (type == type::kCname || type == type::kNs || type == type::kPtr) {
    e = PutName(rdata);
  } else if (len_ + rdata.size() > cap_ || rdata.size() > 0xFFFF) {
    e = ParseError::kBufferTooSmall;
  } else {
    std::memcpy(buf_ + len_, rdata.data(), rdata.size());
    len_ += rdata.size();
  }
  if (e != ParseError::kOk) return fail(e);
  Store16(buf_ + rdlen_pos, static_cast<uint16_t>(len_ - rdlen_pos - 2));
  return ParseError::kOk;
}

}  // namespace weir::dns
