// The query handler: a function of (packet bytes, client address, worker
// state) -> answer bytes, or a miss handed to the upstream side. Both I/O
// backends (kernel sockets, DPDK) call it unchanged; it does no I/O, no
// allocation and takes no lock.
//
// Threading: one QueryHandler per worker; all calls happen on the owning
// worker thread (which must be an RCU reader, see partitions/rcu.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "weir/dns/message.h"
#include "weir/fastpath/config.h"
#include "weir/fastpath/metrics.h"
#include "weir/fastpath/net.h"
#include "weir/partitions/partition.h"

namespace weir::fastpath {

struct ClientInfo {
  partitions::IpAddress addr;
  bool tcp = false;
};

enum class Verdict : uint8_t {
  kReply,  // `out` holds the response
  kDrop,   // say nothing (the reason is counted)
  kMiss,   // `miss` describes what to ask upstream
};

// What the upstream side needs to resolve a miss and answer the client.
struct MissRequest {
  partitions::Partition partition = partitions::kCommonPartition;
  uint16_t qtype = 0;
  uint16_t qclass = 0;
  dns::NameKey qname;
  bool weighted = false;   // ask for weights (weight-tagged name)
  bool send_ecs = false;   // add `ecs` upstream (ecs-tagged name)
  dns::ClientSubnet ecs;
  bool do_bit = false;
  bool cd_bit = false;
};

// Per-source token buckets, hashed into a fixed table (no allocation). A
// collision shares a bucket, which errs on the side of limiting.
class RateLimiter {
 public:
  RateLimiter(uint32_t qps, uint32_t burst);
  // True when the source may send one more query at `now` (seconds).
  bool Allow(const partitions::IpAddress& src, uint32_t now);

 private:
  struct Bucket {
    uint32_t last = 0;
    uint32_t tokens = 0;
  };
  uint32_t qps_;
  uint32_t burst_;
  std::vector<Bucket> buckets_;
};

struct HandlerOptions {
  uint16_t weight_option_code = dns::kDefaultWeightOptionCode;
  std::vector<partitions::Cidr> allow;
  std::vector<partitions::Cidr> trusted_forwarders;
  uint32_t rate_limit_qps = 0;
  uint32_t rate_limit_burst = 0;
  uint16_t edns_udp_size = 1232;  // what weir advertises (DNS flag day 2020)
};

class QueryHandler {
 public:
  QueryHandler(const HandlerOptions& options, WorkerCounters* counters);

  // Handles one received message. `now` is the worker's per-burst clock
  // reading. On kReply, out[0, *out_len) is the response.
  Verdict Handle(const uint8_t* pkt, size_t len, const ClientInfo& client, uint32_t now, uint8_t* out,
                 size_t out_cap, size_t* out_len, MissRequest* miss);

  // Writes the error response for `rcode` to a query that parsed (question
  // echoed) or, with q == nullptr, a header-only one from the raw ID/opcode.
  size_t WriteError(const uint8_t* pkt, size_t len, const dns::Query* q, dns::Rcode rcode, uint8_t* out,
                    size_t out_cap);

 private:
  bool Allowed(const partitions::IpAddress& a) const;
  bool Trusted(const partitions::IpAddress& a) const;

  HandlerOptions options_;
  dns::ParseOptions parse_options_;
  WorkerCounters* counters_;
  RateLimiter limiter_;
  dns::Query query_;  // reused per packet: no allocation
};

}  // namespace weir::fastpath
