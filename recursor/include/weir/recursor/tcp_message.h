// Reads one DNS message over TCP (RFC 7766 8: a two-byte length, then the
// message) from an authoritative server, never taking more bytes off the
// socket than that message has: a server that keeps sending cannot grow the
// buffer past 2 + 65535 bytes.
//
// Use: while (!Complete()) { n = recv(fd, p, Want()); Append({p, n}); }
//
// Threading: a plain value, owned by the resolution that reads it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace weir::recursor {

class TcpMessageReader {
 public:
  static constexpr size_t kMaxBytes = 2 + 65535;

  // Bytes still missing: up to the length prefix first, then up to the end
  // of the message. 0 when complete.
  size_t Want() const {
    if (bytes_.size() < 2) return 2 - bytes_.size();
    return 2 + Length() - bytes_.size();
  }
  // Takes bytes just read; false (and nothing taken) when they are more
  // than Want(): the caller read past the message, which it must not do.
  bool Append(std::span<const uint8_t> data) {
    if (data.size() > Want()) return false;
    bytes_.insert(bytes_.end(), data.begin(), data.end());
    return true;
  }
  bool Complete() const { return bytes_.size() >= 2 && Want() == 0; }
  // The message without its length prefix; valid when Complete().
  std::span<const uint8_t> Message() const { return std::span<const uint8_t>(bytes_).subspan(2); }
  size_t buffered() const { return bytes_.size(); }
  void Clear() { bytes_.clear(); }

 private:
  size_t Length() const { return (size_t{bytes_[0]} << 8) | bytes_[1]; }

  std::vector<uint8_t> bytes_;
};

}  // namespace weir::recursor
