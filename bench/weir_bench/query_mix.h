// The queries weir-bench sends: a list of distinct questions (from a
// dnsperf-format file, or generated ordinary and tagged names) and the
// random choices of each query (which name, Zipf popularity, a unique miss
// name, TCP, EDNS, ECS, weight option), drawn from a seeded generator so a
// run can be repeated.
//
// Threading: a QueryMix is immutable after Build and shared by the sender
// threads; each thread draws with its own QueryDraw.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "options.h"
#include "subscriber_ecs.h"
#include "weir/dns/message.h"
#include "weir/dns/wire.h"

namespace weir::bench {

struct Question {
  dns::NameKey qname;  // canonical wire form
  uint16_t qtype = 1;
  bool tagged = false;  // a weighted name: its answers go into the shares
  std::string text;     // presentation form, for reports
};

using dns::RcodeName;
using dns::TypeFromText;
using dns::TypeToText;

// Parses a dnsperf-format query file: one "name [type]" per line, '#'
// comments and blank lines skipped. Errors name the line.
absl::StatusOr<std::vector<Question>> ParseQueryFile(std::string_view text, std::string_view file_name);

// One query to send.
struct Draw {
  uint32_t question = 0;  // index into QueryMix::questions(); kMiss for a unique name
  bool tcp = false;
  bool edns = false;
  bool ecs = false;
  bool weight = false;
  // --subscriber-ecs: the query carries the ECS of subscriber /24 `subnet`
  // (host order).
  bool subscriber = false;
  uint32_t subnet = 0;
};
inline constexpr uint32_t kMiss = 0xffffffffu;

class QueryMix {
 public:
  // The questions from the options' file or generators; fails with a clear
  // message (unreadable file, bad line, bad type, no names at all).
  static absl::StatusOr<QueryMix> Build(const Options& o);

  const std::vector<Question>& questions() const { return questions_; }
  bool has_tagged() const { return first_tagged_ < questions_.size(); }
  // Presentation form of the zone unique miss names are generated under.
  // The --subscriber-ecs subnets (null without it).
  const SubscriberSubnets* subscribers() const { return subscribers_ ? &*subscribers_ : nullptr; }
  const dns::NameKey& miss_zone() const { return miss_zone_; }
  uint16_t miss_qtype() const { return miss_qtype_; }

  // Draws the next query. `cursor` is the thread's position in a query
  // file (which is read in order, cyclically, as dnsperf does).
  Draw Next(std::mt19937_64& rng, uint64_t* cursor) const;

 private:
  // Walker's alias table: O(1) draws from any discrete distribution.
  struct Alias {
    std::vector<double> prob;
    std::vector<uint32_t> alias;
    void Build(std::span<const double> weights);
    uint32_t Draw(std::mt19937_64& rng) const;
  };

  std::vector<Question> questions_;  // ordinary names first, then tagged
  size_t first_tagged_ = 0;
  bool from_file_ = false;
  std::vector<uint32_t> file_order_;  // the query file's lines, as question indices
  Alias ordinary_;                    // over [0, first_tagged_)
  double tagged_fraction_ = 0;
  double miss_fraction_ = 0;
  double tcp_fraction_ = 0, edns_fraction_ = 0, ecs_fraction_ = 0, weight_fraction_ = 0;
  std::optional<SubscriberSubnets> subscribers_;
  dns::NameKey miss_zone_;
  uint16_t miss_qtype_ = 1;
};

// Writes query `id` for `qname`/`qtype` into `out` (RD set; EDNS with the
// given options when `edns`). Returns its length, 0 if it does not fit.
struct QueryOptions {
  bool edns = false;
  uint16_t edns_size = 1232;
  const dns::ClientSubnet* ecs = nullptr;
  bool weight = false;
  uint16_t weight_option_code = 65001;
};
size_t WriteQuery(uint16_t id, std::span<const uint8_t> qname, uint16_t qtype, const QueryOptions& qo,
                  uint8_t* out, size_t cap);

}  // namespace weir::bench
