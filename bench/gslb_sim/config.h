// gslb-sim's zone model and its TOML loader (format: docs/gslb-sim.md).
//
// Names are held as canonical keys (lower-case uncompressed wire form, see
// weir::dns::NameKey) in std::string, so they compare bytewise and can be
// written into responses as they are. A ZoneSet is built once by LoadConfig
// and then owned by the server's single thread; `set-weights` edits it there.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace weir::gslb_sim {

// Canonical key of a name, as bytes (see weir::dns::NameKey).
using NameBytes = std::string;

// DNAME (RFC 6672); weir::dns has no constant for it because nothing else
// in weir writes one.
inline constexpr uint16_t kTypeDname = 39;
// RRSIG (RFC 4034): answered beside the RRset it covers when the query has DO.
inline constexpr uint16_t kTypeRrsig = 46;

// One IPv4 or IPv6 prefix, as used by views and parsed from "a.b.c.d/n".
struct Prefix {
  uint16_t family = 0;  // 1 = IPv4, 2 = IPv6 (ECS numbering)
  uint8_t length = 0;
  std::array<uint8_t, 16> address{};
  // True when `addr` (same family, full width) lies inside this prefix.
  bool Contains(uint16_t addr_family, const uint8_t* addr) const;
  std::string ToText() const;  // "198.51.100.0/24"
};

// Injected faults. Unset fields fall back to the global [faults] table.
struct Faults {
  std::optional<uint32_t> latency_ms;
  std::optional<double> loss;      // probability of not answering a UDP query
  std::optional<double> servfail;  // probability of answering SERVFAIL (1 = always)
  std::optional<bool> truncate;    // answer TC=1 over UDP
};

// The faults in force for one query: per-name values over global ones.
struct EffectiveFaults {
  uint32_t latency_ms = 0;
  double loss = 0;
  double servfail = 0;
  bool truncate = false;
};
EffectiveFaults ResolveFaults(const Faults& name, const Faults& global);

struct WeightedAddress {
  uint16_t family = 0;  // 1 = A, 2 = AAAA
  std::array<uint8_t, 16> bytes{};
  // 1..255 is valid (docs/behaviour.md#the-weight-option); 0 or >255 are accepted so tests can send
  // invalid weights on purpose.
  uint16_t weight = 1;
};

// One answer set of a GSLB name: chosen when the client subnet (ECS, or the
// packet source) lies in `cidr`; the default view has no cidr.
struct View {
  std::optional<Prefix> cidr;
  uint8_t scope = 0;  // SCOPE PREFIX-LENGTH returned with this answer
  uint32_t ttl = 0;
  std::vector<WeightedAddress> addresses;
  std::string Label() const { return cidr ? cidr->ToText() : "default"; }
};

// Per-name settings ([[zone.name]]): views, weight behaviour, faults.
struct NameSettings {
  std::vector<View> views;  // longest matching cidr wins
  std::optional<View> default_view;
  bool weights = false;  // send the view's weights in the weight option
  std::optional<bool> empty_weight_option;
  Faults faults;
  bool HasViews() const { return !views.empty() || default_view.has_value(); }
  // The view for a client address; null when none applies.
  const View* Select(uint16_t family, const uint8_t* addr) const;
};

struct RRset {
  uint16_t type = 0;
  uint32_t ttl = 0;
  // Uncompressed RDATA; names inside it are canonical keys.
  std::vector<std::string> rdata;
};

struct Node {
  std::vector<RRset> rrsets;
  std::optional<NameSettings> settings;
  const RRset* Find(uint16_t type) const;
  RRset* Find(uint16_t type);
  // The RRSIG records of this name that cover `type` (RDATA), appended to `out`.
  void Signatures(uint16_t type, std::vector<const std::string*>* out, uint32_t* ttl) const;
};

struct Soa {
  NameBytes mname;
  NameBytes rname;
  uint32_t serial = 1, refresh = 3600, retry = 600, expire = 86400, minimum = 60;
  uint32_t ttl = 3600;
  std::string Rdata() const;
  // RFC 2308 5: the negative TTL is min(SOA TTL, SOA MINIMUM).
  uint32_t NegativeTtl() const { return ttl < minimum ? ttl : minimum; }
};

struct Delegation {
  uint32_t ttl = 3600;
  std::vector<NameBytes> ns;
  // Glue: address records for the NS names (type, owner, rdata).
  struct Glue {
    NameBytes name;
    uint16_t type;
    std::string rdata;
  };
  std::vector<Glue> glue;
};

// How a server that is delegated a zone misbehaves for it ("lame").
enum class Lame : uint8_t {
  kNone,     // authoritative: AA set on answers
  kRefused,  // every query in the zone gets REFUSED, no records
  kNoAa,     // answers as usual but with AA clear
};

struct Zone {
  NameBytes origin;
  Lame lame = Lame::kNone;
  Soa soa;
  std::string soa_rdata;  // soa.Rdata(), built once at load
  std::map<NameBytes, Node, std::less<>> nodes;
  std::map<NameBytes, Delegation, std::less<>> cuts;
  // Every name in the zone that has data, or has data below it (empty
  // non-terminals answer NODATA, not NXDOMAIN).
  std::set<NameBytes, std::less<>> existing;
};

class SegmentModel;  // segments.h

struct ZoneSet {
  std::vector<Zone> zones;
  // [segments], if configured; shared by copies of the set (its epoch too).
  std::shared_ptr<SegmentModel> segments;
  Faults global_faults;
  bool empty_weight_option = false;  // default for names without the setting
  std::string source_path;

  // The zone with the longest origin that is a suffix of `name`; null when
  // the name is outside every zone (REFUSED).
  const Zone* FindZone(std::string_view name) const;
  Zone* FindZone(std::string_view name);
};

// Parses and validates a config file. A rejected file's status holds every
// error, one per line in file order, as the daemons' configs report them
// (common::TomlChecker): "file:line:column: reason".
absl::StatusOr<ZoneSet> LoadConfig(const std::string& path);
// Same, from text (`display_path` names it in errors); for unit tests.
absl::StatusOr<ZoneSet> LoadConfigFromString(std::string_view text, const std::string& display_path);

// True when `name` equals `suffix` or ends with it at a label boundary.
bool IsSubdomain(std::string_view name, std::string_view suffix);
// Presentation form of a key, for logs and JSON ("www.example.com.").
std::string NameText(std::string_view key);
// Parses "1.2.3.4" or "2001:db8::1" into family (1/2) and bytes.
bool ParseAddress(std::string_view text, uint16_t* family, std::array<uint8_t, 16>* bytes);
// Parses "198.51.100.0/24" or "2001:db8::/32"; bits past the length must be zero.
bool ParsePrefix(std::string_view text, Prefix* out, std::string* why);

}  // namespace weir::gslb_sim
