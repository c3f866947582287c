// The last hop of tagged names: one query to one authoritative server at a
// time per resolution, over UDP with the fallback to TCP on TC (RFC 7766).
// LastHopTransport is the seam: sockets in the daemon (socket_last_hop.h),
// a fake in unit tests. ServerHealth remembers servers that stopped
// answering.
//
// Threading: every call, and every Sink callback, on the owning loop's
// thread. Sink callbacks never run inside Send().
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "weir/common/socket_address.h"
#include "weir/dns/message.h"

namespace weir::recursor {

struct LastHopQuery {
  common::SocketAddress server;
  std::span<const uint8_t> message;  // the query in its UDP form; copied by Send()
  // What a genuine reply echoes (a transport may send its own random ID
  // instead of `id`, and the name in random case: it checks them itself).
  uint16_t id = 0;
  dns::NameKey qname;
  uint16_t qtype = 0;
  // The wait of each UDP try (0: the transport's [last_hop] timeout_ms).
  int timeout_ms = 0;
};

class LastHopTransport {
 public:
  enum class Failure : uint8_t {
    kTimeout,  // no answer within the timeout (UDP, or TCP after TC)
    kFailed,   // unreachable, reset, closed early, malformed, a mismatched TCP answer
  };
  // Receives the outcome of the query a token has in flight: exactly one
  // call per query sent, unless it is cancelled or replaced first.
  class Sink {
   public:
    virtual ~Sink() = default;
    // `reply` parsed, with the query's ID and question; valid during the call.
    virtual void OnReply(uint64_t token, const dns::Message& reply) = 0;
    virtual void OnFailure(uint64_t token, Failure why) = 0;
  };
  enum class SendResult : uint8_t {
    kSent,
    kNoSocket,    // no socket to the server could be opened: nothing was sent
    kSendFailed,  // the send itself failed: nothing is in flight
  };

  virtual ~LastHopTransport() = default;
  // Sends `q` for `token`, replacing (and dropping) any query the token has
  // in flight.
  virtual SendResult Send(uint64_t token, const LastHopQuery& q) = 0;
  // Drops the token's query in flight, if any; no Sink call follows.
  virtual void Cancel(uint64_t token) = 0;
};

// Two users of one transport (one set of sockets, cookies and case memory
// per server): the tagged resolver, whose tokens count up from 1, and the
// forwarder relay, whose tokens have the top bit set.
class SinkByToken final : public LastHopTransport::Sink {
 public:
  static constexpr uint64_t kHighBit = uint64_t{1} << 63;
  SinkByToken(Sink& low, Sink& high) : low_(low), high_(high) {}
  void OnReply(uint64_t token, const dns::Message& reply) override {
    (token & kHighBit ? high_ : low_).OnReply(token, reply);
  }
  void OnFailure(uint64_t token, LastHopTransport::Failure why) override {
    (token & kHighBit ? high_ : low_).OnFailure(token, why);
  }

 private:
  Sink& low_;
  Sink& high_;
};

// Last-hop servers that stopped answering: after a timeout a server is
// tried after the others for a while (doubling per timeout, up to 120 s); an
// answer clears it. Bounded: a full table forgets everything (it is a hint).
class ServerHealth {
 public:
  using Time = std::chrono::steady_clock::time_point;
  bool Avoid(const common::SocketAddress& a, Time now) const {
    auto it = servers_.find(Key(a));
    return it != servers_.end() && it->second.until > now;
  }
  void TimedOut(const common::SocketAddress& a, Time now) {
    if (servers_.size() >= kMaxServers) servers_.clear();
    Entry& e = servers_[Key(a)];
    e.backoff = std::min(e.backoff == std::chrono::seconds(0) ? std::chrono::seconds(5) : 2 * e.backoff,
                         std::chrono::seconds(120));
    e.until = now + e.backoff;
  }
  void Answered(const common::SocketAddress& a) { servers_.erase(Key(a)); }
  // fn(address bytes, port, backoff, until) for every server remembered.
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (const auto& [key, e] : servers_) {
      const auto* b = reinterpret_cast<const uint8_t*>(key.data());
      const uint16_t port = static_cast<uint16_t>((b[key.size() - 2] << 8) | b[key.size() - 1]);
      fn(std::span<const uint8_t>(b, key.size() - 2), port, e.backoff, e.until);
    }
  }

 private:
  static constexpr size_t kMaxServers = 100000;
  struct Entry {
    std::chrono::seconds backoff{0};
    Time until;
  };
  static std::string Key(const common::SocketAddress& a) {
    return std::string(reinterpret_cast<const char*>(a.addr_bytes()), a.addr_len()) +
           static_cast<char>(a.port() >> 8) + static_cast<char>(a.port() & 0xff);
  }
  absl::flat_hash_map<std::string, Entry> servers_;
};

}  // namespace weir::recursor
