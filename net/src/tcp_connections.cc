#include "weir/net/tcp_connections.h"

#include <netinet/in.h>

#include <algorithm>
#include <cstring>

namespace weir::net {

std::string RefusalText(TcpCloseReason refused, std::string_view keys) {
  return refused == TcpCloseReason::kPerSourceLimit
             ? std::string(keys) + "max_connections_per_source reached"
             : std::string(keys) + "max_connections reached and none idle";
}

std::string_view TcpCloseReasonName(TcpCloseReason r) {
  switch (r) {
    case TcpCloseReason::kIdle:
      return "idle";
    case TcpCloseReason::kLifetime:
      return "lifetime";
    case TcpCloseReason::kPressure:
      return "pressure";
    case TcpCloseReason::kPerSourceLimit:
      return "per_source_limit";
    case TcpCloseReason::kMaxConnections:
      return "max_connections";
    case TcpCloseReason::kUnsent:
      return "unsent";
    case TcpCloseReason::kClient:
      return "client";
    case TcpCloseReason::kCount:
      break;
  }
  return "unknown";
}

TcpConnectionTable::SourceKey TcpConnectionTable::KeyOf(const common::SocketAddress& peer) const {
  SourceKey k;
  const uint8_t* a = peer.addr_bytes();
  int bits = 0;
  if (peer.family() == AF_INET) {
    k.family = 4;
    std::memcpy(k.bytes.data(), a, 4);
    bits = limits_.source_prefix_v4;
  } else if (peer.family() == AF_INET6) {
    static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(a, kMapped, sizeof(kMapped)) == 0) {  // ::ffff:a.b.c.d is an IPv4 client
      k.family = 4;
      std::memcpy(k.bytes.data(), a + 12, 4);
      bits = limits_.source_prefix_v4;
    } else {
      k.family = 6;
      std::memcpy(k.bytes.data(), a, 16);
      bits = limits_.source_prefix_v6;
    }
  } else {
    return k;  // not an IP peer (a test's socket pair): one source
  }
  const int len = k.family == 4 ? 4 : 16;
  for (int i = 0; i < len; ++i) {
    const int keep = bits - 8 * i;
    if (keep >= 8) continue;
    k.bytes[static_cast<size_t>(i)] &= keep <= 0 ? 0 : static_cast<uint8_t>(0xff << (8 - keep));
  }
  return k;
}

int TcpConnectionTable::SourceConnections(const common::SocketAddress& peer) const {
  auto it = per_source_.find(KeyOf(peer));
  return it == per_source_.end() ? 0 : it->second;
}

TcpConnectionTable::Admission TcpConnectionTable::Admit(const common::SocketAddress& peer,
                                                        Clock::time_point) {
  Bump(stats_.accepted);
  Admission a;
  auto refuse = [&](TcpCloseReason why) {
    Bump(stats_.closed[static_cast<size_t>(why)]);
    a.refused = why;
    return a;
  };
  // A source at its limit is refused before it can make anyone else room.
  if (limits_.max_per_source > 0 && SourceConnections(peer) >= limits_.max_per_source) {
    return refuse(TcpCloseReason::kPerSourceLimit);
  }
  const size_t max = static_cast<size_t>(limits_.max_connections);
  const size_t pressure = std::max<size_t>(1, max * static_cast<size_t>(limits_.pressure_percent) / 100);
  if (size_ >= pressure && idle_.head != kNone) {
    a.evict = entries_[idle_.head].id;
  } else if (size_ >= max) {
    return refuse(TcpCloseReason::kMaxConnections);
  }
  a.admitted = true;
  return a;
}

TcpConnectionTable::Handle TcpConnectionTable::Add(uint64_t id, const common::SocketAddress& peer,
                                                   Clock::time_point now) {
  Handle h;
  if (!free_.empty()) {
    h = free_.back();
    free_.pop_back();
  } else {
    h = static_cast<Handle>(entries_.size());
    entries_.emplace_back();
  }
  Entry& e = entries_[h];
  e = Entry{};
  e.id = id;
  e.source = KeyOf(peer);
  e.accepted = now;
  e.idle_since = now;
  e.in_use = true;
  PushBack(by_age_, &Entry::by_age, h);
  PushBack(idle_, &Entry::idle, h);
  ++per_source_[e.source];
  ++size_;
  Bump(stats_.open);
  return h;
}

void TcpConnectionTable::QueryRead(Handle h, Clock::time_point) {
  Entry& e = entries_[h];
  if (e.pending++ == 0) Unlink(idle_, &Entry::idle, h);
}

void TcpConnectionTable::QueryDone(Handle h, Clock::time_point now) {
  Entry& e = entries_[h];
  if (e.pending == 0 || --e.pending != 0) return;
  e.idle_since = now;
  PushBack(idle_, &Entry::idle, h);
}

void TcpConnectionTable::Remove(Handle h, TcpCloseReason why) {
  Entry& e = entries_[h];
  if (!e.in_use) return;
  Unlink(by_age_, &Entry::by_age, h);
  if (e.pending == 0) Unlink(idle_, &Entry::idle, h);
  auto it = per_source_.find(e.source);
  if (it != per_source_.end() && --it->second <= 0) per_source_.erase(it);
  e.in_use = false;
  free_.push_back(h);
  --size_;
  Bump(stats_.open, -1);
  if (why == TcpCloseReason::kCount) return;
  if (e.draining) why = TcpCloseReason::kLifetime;
  Bump(stats_.closed[static_cast<size_t>(why)]);
}

void TcpConnectionTable::Expired(Clock::time_point now, std::vector<Expiry>* out) {
  // Both lists are in time order: the walks stop at the first one not due.
  for (Handle h = by_age_.head; h != kNone && now - entries_[h].accepted >= limits_.lifetime;
       h = entries_[h].by_age.next) {
    Entry& e = entries_[h];
    if (!e.draining) {
      e.draining = true;
      out->push_back({e.id, TcpCloseReason::kLifetime, true});
    } else if (now - e.accepted >= limits_.lifetime + limits_.idle_timeout) {
      out->push_back({e.id, TcpCloseReason::kLifetime, false});  // its client does not read
    }
  }
  for (Handle h = idle_.head; h != kNone && now - entries_[h].idle_since >= limits_.idle_timeout;
       h = entries_[h].idle.next) {
    if (now - entries_[h].accepted >= limits_.lifetime) continue;  // listed above
    out->push_back({entries_[h].id, TcpCloseReason::kIdle});
  }
}

void TcpConnectionTable::PushBack(List& list, Link Entry::*link, Handle h) {
  Link& l = entries_[h].*link;
  l.prev = list.tail;
  l.next = kNone;
  if (list.tail != kNone) {
    (entries_[list.tail].*link).next = h;
  } else {
    list.head = h;
  }
  list.tail = h;
}

void TcpConnectionTable::Unlink(List& list, Link Entry::*link, Handle h) {
  Link& l = entries_[h].*link;
  if (l.prev != kNone) {
    (entries_[l.prev].*link).next = l.next;
  } else {
    list.head = l.next;
  }
  if (l.next != kNone) {
    (entries_[l.next].*link).prev = l.prev;
  } else {
    list.tail = l.prev;
  }
  l = Link{};
}

}  // namespace weir::net
