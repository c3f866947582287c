// libunbound's forwarders, through weir's own last hop
// (docs/behaviour.md#what-protects-ordinary-names-against-forged-answers).
// With [resolver] forwarders and forwarder_transport = "weir" (the
// default), libunbound forwards to one
// relay socket per forwarder on 127.0.0.1, and each relay asks its
// forwarder through the LastHopTransport of the tagged names: a fresh port
// and ID per try, 0x20 without a lower-case fallback over UDP, DNS cookies,
// the unwanted-reply reaction and TCP. libunbound keeps everything else
// (its cache, DNSSEC validation, local zones, the choice of forwarder); the
// hop between it and the relay never leaves the host, and no one off the
// host can send a datagram from 127.0.0.1.
//
// The relay answers libunbound with the forwarder's answer under
// libunbound's own ID and question spelling, SERVFAIL when the forwarder
// fails or stays silent for answer_deadline_ms (each UDP try waits
// timeout_ms, then twice as long, ...), and drops what is not a query.
// libunbound asking again for a question in flight waits on the same try.
//
// Threading: every call on the loop's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "weir/common/log.h"
#include "weir/common/socket_address.h"
#include "weir/net/event_loop.h"
#include "weir/recursor/config.h"
#include "weir/recursor/last_hop.h"

namespace weir::recursor {

class ForwarderRelay final : public LastHopTransport::Sink {
 public:
  // Tokens of the relay's queries on the shared transport: the top bit set
  // (the tagged resolver's count up from 1).
  static constexpr uint64_t kTokenBit = SinkByToken::kHighBit;

  struct Stats {
    uint64_t queries = 0;    // queries from libunbound
    uint64_t coalesced = 0;  // of them, a question already in flight
    uint64_t answered = 0;   // answers relayed to libunbound
    uint64_t servfail = 0;   // SERVFAIL written: the forwarder failed or timed out
    uint64_t dropped = 0;    // datagrams that were not a query, or over the limits
    uint64_t retries = 0;    // UDP tries after a timeout
  };

  ForwarderRelay(const RecursorConfig& cfg, net::EventLoop& loop, LastHopTransport& transport);
  ~ForwarderRelay() override;
  ForwarderRelay(const ForwarderRelay&) = delete;
  ForwarderRelay& operator=(const ForwarderRelay&) = delete;

  // One socket per configured forwarder on 127.0.0.1 (a port the kernel
  // picks); before libunbound starts, which is given addresses().
  absl::Status Bind();
  const std::vector<common::SocketAddress>& addresses() const { return addresses_; }
  // Starts reading the sockets (the loop is initialised).
  void Attach();
  void CloseAll();

  void OnReply(uint64_t token, const dns::Message& reply) override;
  void OnFailure(uint64_t token, LastHopTransport::Failure why) override;

  size_t in_flight() const { return pending_.size(); }
  const Stats& stats() const { return stats_; }

 private:
  // libunbound's query as it asked it: where to, its ID, its spelling.
  struct Asker {
    common::SocketAddress from;
    uint16_t id = 0;
    uint16_t flags = 0;
    std::vector<uint8_t> qname_wire;  // the question name as libunbound wrote it
  };
  struct Pending {
    std::string key;
    size_t forwarder = 0;
    std::vector<uint8_t> message;  // the query sent upstream (libunbound's bytes)
    dns::NameKey qname;
    uint16_t qtype = 0;
    uint16_t qclass = 0;
    std::vector<Asker> askers;
    int tries = 0;
    int timeout_ms = 0;  // the wait of the try in flight
    int waited_ms = 0;   // the waits of the tries that timed out
  };

  void OnReadable(size_t forwarder);
  void OnQuery(size_t forwarder, std::span<const uint8_t> wire, const common::SocketAddress& from);
  bool Send(uint64_t token, Pending& p);
  void ServFail(uint64_t token);
  void SendTo(size_t forwarder, const common::SocketAddress& to, std::span<const uint8_t> msg);

  const RecursorConfig& cfg_;
  net::EventLoop& loop_;
  LastHopTransport& transport_;
  dns::ParseOptions parse_options_;
  std::vector<int> fds_;
  std::vector<common::SocketAddress> addresses_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Pending>> pending_;
  absl::flat_hash_map<std::string, uint64_t> by_key_;
  uint64_t next_token_ = 1;
  Stats stats_;
  common::RateLimitedLog log_{{.component = "forward"}};
  uint8_t buf_[65536];
};

}  // namespace weir::recursor
