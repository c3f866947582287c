#include "weir/dns/message.h"
#include "weir/dns/writer.h"

namespace weir::dns {

bool PadToBlock(std::vector<uint8_t>& msg, size_t block, size_t max) {
  if (block == 0) return false;
  Message m;
  if (m.Parse(msg, ParseOptions{}) != ParseError::kOk) return false;
  const Edns& e = m.edns();
  if (!e.present || e.has_padding || size_t{e.rdata_offset} + e.rdata_len != msg.size()) return false;
  const size_t with_header = msg.size() + 4;
  const size_t pad = (block - with_header % block) % block;
  const size_t rdlen = size_t{e.rdata_len} + 4 + pad;
  if (with_header + pad > max || rdlen > 65535) return false;
  msg.push_back(static_cast<uint8_t>(option::kPadding >> 8));
  msg.push_back(static_cast<uint8_t>(option::kPadding & 0xff));
  msg.push_back(static_cast<uint8_t>(pad >> 8));
  msg.push_back(static_cast<uint8_t>(pad & 0xff));
  msg.insert(msg.end(), pad, 0);
  Store16(msg.data() + e.rdata_offset - 2, static_cast<uint16_t>(rdlen));
  return true;
}

}  // namespace weir::dns
