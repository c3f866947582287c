// Who may hold a server's DNS-over-TCP connections, and for how long: the
// one policy every daemon's TCP listener applies (weir-fastpath's TCP server,
// weir-recursor's front), so it cannot drift between them.
//
//  * Per source: a source is the peer's address cut to a prefix (/32 for
//    IPv4, /56 for IPv6 by default: one subscriber's delegation). A source
//    holding max_per_source connections has its next one refused at accept.
//  * In all: at most max_connections. From pressure_percent of it on, a new
//    connection is admitted by closing the connection idle the longest (as
//    unbound does under connection pressure); full with nothing idle, the
//    new connection is refused.
//  * Idle: a connection that owes no answer is idle from its last answer
//    (or from accept). Only whole messages count: a client trickling the
//    bytes of a query it never completes stays idle, and is closed
//    idle_timeout after it went idle.
//  * Lifetime: whatever it does, a connection is ended lifetime after it
//    was accepted, so a client that completes a query every few seconds
//    cannot keep its slot forever (RFC 7766 6.2.3 lets a server close any
//    connection; the client reconnects). It is drained first: nothing more
//    is read, the answers it is owed are sent, then it is closed; one still
//    open idle_timeout later is closed regardless.
//
// The table decides and counts; its owner holds the sockets: it asks
// Admit() at accept, Add()s what was admitted, reports every whole query
// read (QueryRead) and every query answered or dropped (QueryDone), drains
// or closes what Expired() lists, and Remove()s each connection once, with
// the reason it closed. Time is passed in (the owner's steady clock, or a test's).
//
// Threading: one owner thread makes every call. stats() may be read from
// any thread (relaxed atomics, each written by the owner only).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "weir/common/socket_address.h"

namespace weir::net {

struct TcpConnectionLimits {
  int max_connections = 1024;
  int max_per_source = 64;  // 0: no per-source limit
  int source_prefix_v4 = 32;
  int source_prefix_v6 = 56;
  std::chrono::milliseconds idle_timeout{10000};
  std::chrono::milliseconds lifetime{120000};
  // From this share of max_connections on, a new connection closes the
  // connection idle the longest.
  int pressure_percent = 90;
};

// Why a connection was closed or refused; the label of
// *_tcp_connections_closed_total{reason}.
enum class TcpCloseReason : uint8_t {
  kIdle,            // no answer owed and no whole query for idle_timeout
  kLifetime,        // open for lifetime
  kPressure,        // the table was nearly full: closed to admit a new one
  kPerSourceLimit,  // refused at accept: its source held max_per_source
  kMaxConnections,  // refused at accept: the table was full, nothing idle
  kUnsent,          // did not read its answers (DnsTcpStream's unsent bound)
  kClient,          // the client closed (after its answers) or reset, or the socket failed
  kCount,
};
std::string_view TcpCloseReasonName(TcpCloseReason r);
// Why Admit() refused a connection, for the log, naming the limit as the
// owner's config does: `keys` is its prefix ("server.tcp_", "tls.").
std::string RefusalText(TcpCloseReason refused, std::string_view keys);

class TcpConnectionTable {
 public:
  using Clock = std::chrono::steady_clock;
  // A connection's place in the table, from Add() until Remove().
  using Handle = uint32_t;

  struct Admission {
    // False: close the new socket at once; it is counted under `refused`.
    bool admitted = false;
    TcpCloseReason refused = TcpCloseReason::kCount;
    // Set when admitted under pressure: close this connection (the owner's
    // id, Remove() with kPressure) before Add()ing the new one.
    std::optional<uint64_t> evict;
  };
  struct Expiry {
    uint64_t id;
    TcpCloseReason reason;  // kIdle or kLifetime
    // kLifetime the first time: stop reading (DnsTcpStream::StopReading)
    // and close it once it is done. Otherwise: close it now.
    bool drain = false;
  };
  struct Stats {
    std::atomic<uint64_t> accepted{0};  // every socket accepted, refused ones too
    std::array<std::atomic<uint64_t>, static_cast<size_t>(TcpCloseReason::kCount)> closed{};
    std::atomic<uint64_t> open{0};
    std::atomic<uint64_t> accept_paused{0};  // accept failed for want of descriptors
  };

  explicit TcpConnectionTable(const TcpConnectionLimits& limits) : limits_(limits) {}
  TcpConnectionTable(const TcpConnectionTable&) = delete;
  TcpConnectionTable& operator=(const TcpConnectionTable&) = delete;

  // A socket was accepted from `peer`: may it stay?
  Admission Admit(const common::SocketAddress& peer, Clock::time_point now);
  // Enters an admitted connection (idle from `now`). `id` is the owner's
  // name for it (Admission::evict, Expiry::id).
  Handle Add(uint64_t id, const common::SocketAddress& peer, Clock::time_point now);
  // A whole query was read: the connection owes an answer, it is not idle.
  void QueryRead(Handle h, Clock::time_point now);
  // A query was answered (or dropped); with none owed, idle from `now`.
  void QueryDone(Handle h, Clock::time_point now);
  // The connection is closed, for `why` (kCount: not counted, the daemon
  // stops). One being drained at its lifetime counts as kLifetime whatever
  // closed it.
  void Remove(Handle h, TcpCloseReason why);
  // Appends the connections past their lifetime or idle timeout to `out`
  // (each once, lifetime first): those to drain (listed once, then again
  // when still open idle_timeout later) and those to close now, which the
  // owner closes and Remove()s.
  void Expired(Clock::time_point now, std::vector<Expiry>* out);
  // Accept failed with EMFILE/ENFILE/ENOBUFS/ENOMEM: counted.
  void AcceptPaused() { Bump(stats_.accept_paused); }

  size_t size() const { return size_; }
  // Connections open from the source `peer` is in.
  int SourceConnections(const common::SocketAddress& peer) const;
  const TcpConnectionLimits& limits() const { return limits_; }
  const Stats& stats() const { return stats_; }

 private:
  static constexpr Handle kNone = UINT32_MAX;
  // The peer's address cut to its source prefix (IPv4-mapped IPv6 as IPv4).
  struct SourceKey {
    uint8_t family = 0;
    std::array<uint8_t, 16> bytes{};
    bool operator==(const SourceKey&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const SourceKey& k) {
      return H::combine(std::move(h), k.family, k.bytes);
    }
  };
  struct Link {
    Handle prev = kNone, next = kNone;
  };
  struct List {
    Handle head = kNone, tail = kNone;
  };
  struct Entry {
    uint64_t id = 0;
    SourceKey source;
    Clock::time_point accepted;
    Clock::time_point idle_since;
    uint32_t pending = 0;
    bool in_use = false;
    bool draining = false;  // past its lifetime, its last answers going out
    Link by_age;            // in accept order
    Link idle;              // in `idle_` while nothing is owed, oldest idle first
  };

  SourceKey KeyOf(const common::SocketAddress& peer) const;
  void PushBack(List& list, Link Entry::*link, Handle h);
  void Unlink(List& list, Link Entry::*link, Handle h);
  static void Bump(std::atomic<uint64_t>& c, int64_t by = 1) {
    c.store(c.load(std::memory_order_relaxed) + static_cast<uint64_t>(by), std::memory_order_relaxed);
  }

  TcpConnectionLimits limits_;
  std::vector<Entry> entries_;
  std::vector<Handle> free_;
  absl::flat_hash_map<SourceKey, int> per_source_;
  List by_age_;
  List idle_;
  size_t size_ = 0;
  Stats stats_;
};

}  // namespace weir::net
