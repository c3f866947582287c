#include "weir/dns/case_randomization.h"

#include <cstring>

#include "weir/dns/wire.h"

namespace weir::dns {

bool SameSpelling(std::span<const uint8_t> answer, std::span<const uint8_t> sent_name) {
  return answer.size() >= kHeaderSize + sent_name.size() &&
         std::memcmp(answer.data() + kHeaderSize, sent_name.data(), sent_name.size()) == 0;
}

std::string ServerKey(const common::SocketAddress& server) {
  std::string key(reinterpret_cast<const char*>(server.addr_bytes()), server.addr_len());
  key.push_back(static_cast<char>(server.port() >> 8));
  key.push_back(static_cast<char>(server.port() & 0xff));
  return key;
}

bool CaseMemory::Preserves(const common::SocketAddress& server, Time now) const {
  auto it = until_.find(ServerKey(server));
  return it == until_.end() || it->second <= now;
}

void CaseMemory::NotPreserved(const common::SocketAddress& server, Time now) {
  if (until_.size() >= kMaxServers) until_.clear();
  until_[ServerKey(server)] = now + kHold;
}

}  // namespace weir::dns
