// What gslb-sim saw and did for each query: the record kept in the ring log,
// written to --query-log, and folded into the counters that `stats` reports.
// Tests use these to prove what the front actually sent (ECS, weight option).
// Single-threaded: owned by the server loop.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "weir/dns/error.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"

namespace weir::gslb_sim {

enum class Fault : uint8_t { kNone, kLoss, kServfail, kTruncate };

struct QueryRecord {
  double time = 0;  // wall clock, seconds since the epoch
  bool tcp = false;
  sockaddr_storage source{};
  dns::ParseError error = dns::ParseError::kOk;
  bool has_question = false;  // qname/qtype valid
  dns::NameKey qname;
  uint16_t qtype = 0;
  bool edns = false;
  bool has_ecs = false;
  dns::ClientSubnet ecs;
  bool has_weight = false;
  uint16_t weight_len = 0;
  bool answered = false;  // false: dropped (loss, or garbage)
  uint16_t rcode = 0;
  Fault fault = Fault::kNone;
  char view[48] = {0};  // label of the GSLB view that answered, "" if none
  uint32_t delay_ms = 0;
};

// One JSON object, no trailing newline (format: docs/gslb-sim.md).
std::string ToJson(const QueryRecord& r);

// The counters of `stats`. The per-name maps are bounded, so a soak or a
// flood of distinct names measures the server under test, not this one:
// names past `max_names` are counted under kOtherNames, ECS subnets past
// `max_subnets_per_name` (for one name) under kOtherSubnets.
class QueryStats {
 public:
  static constexpr const char* kOtherNames = "(other names)";
  static constexpr const char* kOtherSubnets = "(other subnets)";
  explicit QueryStats(size_t max_names = 10000, size_t max_subnets_per_name = 256)
      : max_names_(max_names), max_subnets_(max_subnets_per_name) {}
  void Count(const QueryRecord& r);
  void Reset() { *this = QueryStats(max_names_, max_subnets_); }
  std::string ToJson() const;

 private:
  size_t max_names_;
  size_t max_subnets_;
  uint64_t other_names_ = 0;  // queries counted under kOtherNames
  uint64_t queries_ = 0, udp_ = 0, tcp_ = 0, edns_ = 0, ecs_ = 0, weight_ = 0, dropped_ = 0;
  uint64_t malformed_ = 0;
  std::map<std::string, uint64_t> errors_;  // parse error name -> count
  std::map<std::string, uint64_t> rcodes_;
  std::map<std::string, uint64_t> faults_;
  // qname text -> qtype text -> count
  std::map<std::string, std::map<std::string, uint64_t>> by_qtype_;
  // qname text -> "198.51.100.0/24" or "none" -> count
  std::map<std::string, std::map<std::string, uint64_t>> by_ecs_;
};

// The last `capacity` records, oldest first on output.
class QueryRing {
 public:
  explicit QueryRing(size_t capacity) : ring_(capacity ? capacity : 1) {}
  void Add(const QueryRecord& r);
  // The last `n` records as JSON lines, oldest first.
  std::string LastJsonLines(size_t n) const;
  void Reset() {
    next_ = 0;
    size_ = 0;
  }

 private:
  std::vector<QueryRecord> ring_;
  size_t next_ = 0;
  size_t size_ = 0;
};

std::string EcsText(const dns::ClientSubnet& s);       // "198.51.100.0/24"
std::string SockaddrText(const sockaddr_storage& sa);  // "127.0.0.1:5300", "[::1]:5300"

}  // namespace weir::gslb_sim
