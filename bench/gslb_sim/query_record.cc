#include "query_record.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "config.h"
#include "weir/common/text.h"

namespace weir::gslb_sim {
namespace {

const char* FaultName(Fault f) {
  switch (f) {
    case Fault::kNone:
      return "none";
    case Fault::kLoss:
      return "loss";
    case Fault::kServfail:
      return "servfail";
    case Fault::kTruncate:
      return "truncate";
  }
  return "none";
}

std::string QnameText(const QueryRecord& r) { return dns::NameKeyToText(r.qname.span()); }

using Json = nlohmann::ordered_json;

// Names are bytes, not UTF-8: each byte from 0x80 up becomes the code point
// of the same number, which the record's ASCII-only dump writes \u00XX.
std::string ByteText(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const unsigned char c : s) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      out += static_cast<char>(0xc0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3f));
    }
  }
  return out;
}

// Every byte outside printable ASCII escaped.
std::string Dump(const Json& doc) { return doc.dump(-1, ' ', /*ensure_ascii=*/true); }

template <typename M>
Json Counts(const M& m) {
  Json out = Json::object();
  for (const auto& [k, v] : m) out[ByteText(k)] = v;
  return out;
}

template <typename M>
Json Nested(const M& m) {
  Json out = Json::object();
  for (const auto& [k, inner] : m) out[ByteText(k)] = Counts(inner);
  return out;
}

}  // namespace

std::string EcsText(const dns::ClientSubnet& s) {
  Prefix p;
  p.family = s.family;
  p.length = s.source_prefix;
  p.address = s.address;
  return p.ToText();
}

std::string SockaddrText(const sockaddr_storage& sa) {
  char buf[INET6_ADDRSTRLEN];
  if (sa.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&sa);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    return std::string(buf) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (sa.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
    return "[" + std::string(buf) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "unknown";
}

std::string ToJson(const QueryRecord& r) {
  // Microseconds, as the clock gives them.
  char t[32];
  std::snprintf(t, sizeof(t), "%.6f", r.time);
  Json o{{"time", std::strtod(t, nullptr)},
         {"transport", r.tcp ? "tcp" : "udp"},
         {"source", SockaddrText(r.source)}};
  if (r.has_question) {
    o["qname"] = ByteText(QnameText(r));
    o["qtype"] = dns::TypeToText(r.qtype);
  } else {
    o["qname"] = nullptr;
    o["qtype"] = nullptr;
  }
  o["edns"] = r.edns;
  if (r.has_ecs) {
    char a[INET6_ADDRSTRLEN];
    inet_ntop(r.ecs.family == 1 ? AF_INET : AF_INET6, r.ecs.address.data(), a, sizeof(a));
    o["ecs"] = Json{{"family", r.ecs.family}, {"address", a}, {"source", r.ecs.source_prefix}};
  } else {
    o["ecs"] = nullptr;
  }
  o["weight_option"] = r.has_weight;
  o["weight_option_len"] = r.has_weight ? Json(r.weight_len) : Json(nullptr);
  o["error"] = r.error == dns::ParseError::kOk ? Json(nullptr) : Json(dns::ParseErrorName(r.error));
  o["answered"] = r.answered;
  o["rcode"] = r.answered ? Json(dns::RcodeName(r.rcode)) : Json(nullptr);
  o["fault"] = FaultName(r.fault);
  o["view"] = r.view[0] ? Json(ByteText(r.view)) : Json(nullptr);
  o["delay_ms"] = r.delay_ms;
  return Dump(o);
}

void QueryStats::Count(const QueryRecord& r) {
  ++queries_;
  ++(r.tcp ? tcp_ : udp_);
  if (r.edns) ++edns_;
  if (r.has_ecs) ++ecs_;
  if (r.has_weight) ++weight_;
  if (!r.answered) ++dropped_;
  if (r.error != dns::ParseError::kOk) {
    ++malformed_;
    ++errors_[std::string(dns::ParseErrorName(r.error))];
  }
  if (r.answered) ++rcodes_[dns::RcodeName(r.rcode)];
  if (r.fault != Fault::kNone) ++faults_[FaultName(r.fault)];
  if (r.has_question) {
    std::string q = QnameText(r);
    if (by_qtype_.size() >= max_names_ && !by_qtype_.contains(q)) {
      q = kOtherNames;
      ++other_names_;
    }
    ++by_qtype_[q][dns::TypeToText(r.qtype)];
    auto& subnets = by_ecs_[q];
    std::string subnet = r.has_ecs ? EcsText(r.ecs) : "none";
    if (subnets.size() >= max_subnets_ && !subnets.contains(subnet)) subnet = kOtherSubnets;
    ++subnets[subnet];
  }
}

std::string QueryStats::ToJson() const {
  const Json o{{"queries", queries_},
               {"udp", udp_},
               {"tcp", tcp_},
               {"with_edns", edns_},
               {"with_ecs", ecs_},
               {"with_weight_option", weight_},
               {"dropped", dropped_},
               {"malformed", malformed_},
               {"other_names", other_names_},
               {"parse_errors", Counts(errors_)},
               {"rcodes", Counts(rcodes_)},
               {"faults", Counts(faults_)},
               {"by_qname_qtype", Nested(by_qtype_)},
               {"by_qname_ecs", Nested(by_ecs_)}};
  return Dump(o);
}

void QueryRing::Add(const QueryRecord& r) {
  ring_[next_] = r;
  next_ = (next_ + 1) % ring_.size();
  if (size_ < ring_.size()) ++size_;
}

std::string QueryRing::LastJsonLines(size_t n) const {
  if (n > size_) n = size_;
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    const size_t idx = (next_ + ring_.size() - n + i) % ring_.size();
    out += ToJson(ring_[idx]);
    out += '\n';
  }
  return out;
}

}  // namespace weir::gslb_sim
