#include "query_record.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdio>

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

template <typename M>
void AppendCounts(std::string* out, const M& m) {
  *out += '{';
  bool first = true;
  for (const auto& [k, v] : m) {
    if (!first) *out += ',';
    first = false;
    *out += JsonString(k) + ':' + std::to_string(v);
  }
  *out += '}';
}

template <typename M>
void AppendNested(std::string* out, const M& m) {
  *out += '{';
  bool first = true;
  for (const auto& [k, inner] : m) {
    if (!first) *out += ',';
    first = false;
    *out += JsonString(k) + ':';
    AppendCounts(out, inner);
  }
  *out += '}';
}

}  // namespace

std::string JsonString(std::string_view s) {
  // Names are bytes, not UTF-8: escape everything outside printable ASCII.
  return common::JsonString(s, /*escape_non_ascii=*/true);
}

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
  char t[32];
  std::snprintf(t, sizeof(t), "%.6f", r.time);
  std::string o = "{\"time\":";
  o += t;
  o += ",\"transport\":";
  o += r.tcp ? "\"tcp\"" : "\"udp\"";
  o += ",\"source\":" + JsonString(SockaddrText(r.source));
  if (r.has_question) {
    o += ",\"qname\":" + JsonString(QnameText(r)) + ",\"qtype\":" + JsonString(dns::TypeToText(r.qtype));
  } else {
    o += ",\"qname\":null,\"qtype\":null";
  }
  o += ",\"edns\":";
  o += r.edns ? "true" : "false";
  o += ",\"ecs\":";
  if (r.has_ecs) {
    char a[INET6_ADDRSTRLEN];
    inet_ntop(r.ecs.family == 1 ? AF_INET : AF_INET6, r.ecs.address.data(), a, sizeof(a));
    o += "{\"family\":" + std::to_string(r.ecs.family) + ",\"address\":" + JsonString(a) +
         ",\"source\":" + std::to_string(r.ecs.source_prefix) + "}";
  } else {
    o += "null";
  }
  o += ",\"weight_option\":";
  o += r.has_weight ? "true" : "false";
  o += ",\"weight_option_len\":";
  o += r.has_weight ? std::to_string(r.weight_len) : "null";
  o += ",\"error\":";
  o += r.error == dns::ParseError::kOk ? "null" : JsonString(dns::ParseErrorName(r.error));
  o += ",\"answered\":";
  o += r.answered ? "true" : "false";
  o += ",\"rcode\":";
  o += r.answered ? JsonString(dns::RcodeName(r.rcode)) : "null";
  o += ",\"fault\":" + JsonString(FaultName(r.fault));
  o += ",\"view\":";
  o += r.view[0] ? JsonString(r.view) : "null";
  o += ",\"delay_ms\":" + std::to_string(r.delay_ms) + "}";
  return o;
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
  std::string o =
      "{\"queries\":" + std::to_string(queries_) + ",\"udp\":" + std::to_string(udp_) +
      ",\"tcp\":" + std::to_string(tcp_) + ",\"with_edns\":" + std::to_string(edns_) +
      ",\"with_ecs\":" + std::to_string(ecs_) + ",\"with_weight_option\":" + std::to_string(weight_) +
      ",\"dropped\":" + std::to_string(dropped_) + ",\"malformed\":" + std::to_string(malformed_) +
      ",\"other_names\":" + std::to_string(other_names_) + ",\"parse_errors\":";
  AppendCounts(&o, errors_);
  o += ",\"rcodes\":";
  AppendCounts(&o, rcodes_);
  o += ",\"faults\":";
  AppendCounts(&o, faults_);
  o += ",\"by_qname_qtype\":";
  AppendNested(&o, by_qtype_);
  o += ",\"by_qname_ecs\":";
  AppendNested(&o, by_ecs_);
  return o + "}";
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
