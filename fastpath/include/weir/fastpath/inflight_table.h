// The forwarder's questions in flight: one Pending per distinct question
// (partition, type, DO/CD, weighted, name), every client that asked it
// waiting on it (coalescing), and the caps that bound both
// (upstream.max_inflight distinct questions, upstream.max_waiting_clients
// clients): a question past a cap is answered at once (stale or SERVFAIL)
// instead of waiting.
//
// Threading: the forwarder's thread; the counts are published for the
// metrics thread by the caller.
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "weir/dnstap/dnstap.h"
#include "weir/fastpath/miss_channel.h"

namespace weir::fastpath {

// One question in flight upstream, its current try and every client
// waiting for it.
struct Pending {
  using Clock = std::chrono::steady_clock;
  std::string key;
  MissRequest miss;
  std::vector<PendingClient> waiters;
  bool weighted_group = false;
  int upstream = -1;
  uint64_t tried = 0;  // a bit per upstream of the group already asked
  int attempts = 0;
  // The UDP try in flight, if any: a pool socket (shared, not owned), the
  // upstream's endpoint and the ID; the three name it among the tries.
  bool udp_live = false;
  int udp_socket = -1;
  int endpoint = -1;
  uint16_t id = 0;
  bool case_randomized = false;  // the query's qname went out in 0x20 case
  // The TCP try follows a UDP answer in another case than our 0x20 one: if
  // the server cannot be asked over TCP, that answer was its own.
  bool case_suspect = false;
  // The query was sent again over UDP after a BADCOOKIE (RFC 7873 5.3).
  bool badcookie_retried = false;
  // Answers carrying this question that matched no try (a forger's ID
  // guesses); at upstream.unwanted_reply_threshold the UDP try is
  // abandoned and the question asked over TCP.
  uint32_t unwanted = 0;
  int tcp = -1;  // the TCP try in flight (a transport handle), if any
  bool over_tcp = false;
  Clock::time_point sent;
  uint64_t generation = 0;  // names the current try to its timer
  uint64_t try_timer = 0;
  bool answer_timer = false;   // an answer deadline timer is armed for the waiters
  std::vector<uint8_t> query;  // as sent upstream
  // dnstap: when this try was sent (zero: not tapped) and from where.
  timespec tapped_at{};
  dnstap::Endpoint tap_local;
};

class InflightTable {
 public:
  InflightTable(size_t max_inflight, size_t max_waiting)
      : max_inflight_(max_inflight), max_waiting_(max_waiting) {}

  // The coalescing key: everything that makes two answers differ.
  static std::string Key(const MissRequest& m) {
    std::string key;
    key.reserve(16 + m.qname.len);
    key.append(reinterpret_cast<const char*>(&m.partition), sizeof(m.partition));
    key.append(reinterpret_cast<const char*>(&m.qtype), 2);
    key.push_back(static_cast<char>((m.do_bit ? 1 : 0) | (m.cd_bit ? 2 : 0) | (m.weighted ? 4 : 0) |
                                    (m.adaptive ? 8 : 0)));
    key.append(reinterpret_cast<const char*>(m.qname.bytes.data()), m.qname.len);
    return key;
  }

  Pending* Find(const std::string& key) const {
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : it->second.get();
  }
  // As many clients wait as are kept: the next one is answered at once.
  bool WaitingFull() const { return waiting_ >= max_waiting_; }
  // As many distinct questions are in flight as allowed.
  bool InflightFull() const { return map_.size() >= max_inflight_; }

  // A new question with its first client.
  Pending* Start(std::string key, PendingClient&& first) {
    auto p = std::make_unique<Pending>();
    p->key = key;
    p->miss = first.miss;
    p->weighted_group = first.miss.weighted || first.miss.send_ecs;
    p->waiters.push_back(std::move(first));
    ++waiting_;
    Pending* raw = p.get();
    map_.emplace(std::move(key), std::move(p));
    return raw;
  }
  void Join(Pending* p, PendingClient&& c) {
    p->waiters.push_back(std::move(c));
    ++waiting_;
  }
  // `n` waiters of a question left it (answered early).
  void Left(size_t n) { waiting_ -= n; }
  // The question is over: frees it.
  void Erase(Pending* p) {
    waiting_ -= p->waiters.size();
    map_.erase(p->key);
  }

  size_t size() const { return map_.size(); }
  size_t waiting() const { return waiting_; }

 private:
  size_t max_inflight_;
  size_t max_waiting_;
  size_t waiting_ = 0;
  absl::flat_hash_map<std::string, std::unique_ptr<Pending>> map_;
};

}  // namespace weir::fastpath
