// The authoritative side of gslb-sim: turns one query packet into a response
// (or a decision to drop it), independent of sockets so it can be unit tested.
//
// Behaviour (docs/gslb-sim.md): AA on authoritative answers, referrals with
// AA clear at delegations, REFUSED outside our zones, CNAME chains followed
// inside our zones, NXDOMAIN/NODATA with the SOA, RFC 7871 ECS echo with the
// view's scope, the weight option (docs/behaviour.md#the-weight-option), and injected faults.
//
// Single-threaded: all calls happen on the server loop.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config.h"
#include "query_record.h"

namespace weir::gslb_sim {

// Who asked, as seen on the socket.
struct Client {
  bool tcp = false;
  uint16_t family = 0;  // 1 = IPv4, 2 = IPv6
  std::array<uint8_t, 16> address{};
};

class Authority {
 public:
  Authority(ZoneSet zones, uint16_t weight_option_code, uint64_t seed);

  // Answers `query`. Returns the response length written to `out` (at most
  // `cap`), or 0 to send nothing. `rec` receives what the query carried and
  // what was done, including the latency to apply before sending.
  size_t Handle(std::span<const uint8_t> query, const Client& client, uint8_t* out, size_t cap,
                QueryRecord* rec);

  ZoneSet& zones() { return zones_; }
  void Replace(ZoneSet zones) { zones_ = std::move(zones); }

  // `set-weights`: replaces the weights of one view ("default" or its cidr)
  // of a GSLB name. Returns an empty string or the reason it failed.
  std::string SetWeights(std::string_view name, std::string_view view, std::string_view weights_csv);

  // Moves the segment model, if any, to change epoch `epoch`.
  void SetSegmentsEpoch(uint64_t epoch);

 private:
  struct Rec {
    std::string_view owner;
    uint16_t type;
    uint32_t ttl;
    std::string_view rdata;
  };
  // Outcome of the lookup, before it is written.
  struct Resolution {
    uint16_t rcode = 0;
    bool aa = false;
    uint8_t scope = 0;
    const NameSettings* final_settings = nullptr;  // the name whose addresses answered
    const View* view = nullptr;
    bool segment = false;  // `view` is the segment model's answer
    bool weighted = false;
  };

  void Resolve(const dns::Query& q, const Client& client, Resolution* res);
  bool Chance(double p);

  ZoneSet zones_;
  uint16_t weight_code_;
  std::mt19937_64 rng_;
  // Per-query scratch, kept to avoid allocating on every packet.
  std::vector<Rec> answer_, authority_, additional_;
  std::vector<uint16_t> weights_;
  // Names synthesized from DNAMEs for the current query; a deque so the
  // views into earlier ones stay valid.
  std::deque<std::string> synthesized_;
  // The segment model's answer for the current query.
  View segment_view_;
};

}  // namespace weir::gslb_sim
