#include "authority.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "segments.h"
#include "weir/dns/writer.h"

namespace weir::gslb_sim {
namespace {

namespace type = weir::dns::type;
namespace flag = weir::dns::flag;

// RFC 6891 6.2.5 and DNS Flag Day 2020: the size we advertise over UDP.
constexpr uint16_t kOurUdpSize = 1232;
// Longest CNAME chain followed inside our zones before giving up.
constexpr int kMaxChain = 16;

constexpr uint16_t kRcodeNoError = 0;
constexpr uint16_t kRcodeFormErr = 1;
constexpr uint16_t kRcodeServFail = 2;
constexpr uint16_t kRcodeNxDomain = 3;
constexpr uint16_t kRcodeNotImp = 4;
constexpr uint16_t kRcodeRefused = 5;
constexpr uint16_t kRcodeYxDomain = 6;
constexpr uint16_t kRcodeBadVers = 16;

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string_view KeyView(const dns::NameKey& k) {
  return {reinterpret_cast<const char*>(k.bytes.data()), k.len};
}

void SetFlag(uint8_t* msg, uint16_t bits) {
  dns::Store16(msg + dns::kOffFlags, dns::Load16(msg + dns::kOffFlags) | bits);
}

bool IsAddressType(uint16_t t) { return t == type::kA || t == type::kAaaa; }

}  // namespace

Authority::Authority(ZoneSet zones, uint16_t weight_option_code, uint64_t seed)
    : zones_(std::move(zones)), weight_code_(weight_option_code), rng_(seed) {}

bool Authority::Chance(double p) {
  if (p <= 0) return false;
  if (p >= 1) return true;
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng_) < p;
}

void Authority::Resolve(const dns::Query& q, const Client& client, Resolution* res) {
  answer_.clear();
  authority_.clear();
  additional_.clear();
  weights_.clear();
  synthesized_.clear();
  std::string_view name = KeyView(q.qname);
  const Zone* zone = zones_.FindZone(name);
  if (zone == nullptr || zone->lame == Lame::kRefused) {
    res->rcode = kRcodeRefused;
    return;
  }
  // A lame server that copies a zone it is not authoritative for.
  res->aa = zone->lame != Lame::kNoAa;
  // RFC 4035 3.1.1: with DO, the RRSIGs of each RRset go beside it.
  std::vector<const std::string*> sigs;
  auto sign = [&](std::vector<Rec>* section, const Node* node, std::string_view owner, uint16_t covered) {
    if (!q.edns.do_bit || node == nullptr || covered == kTypeRrsig) return;
    sigs.clear();
    uint32_t ttl = 0;
    node->Signatures(covered, &sigs, &ttl);
    for (const std::string* rd : sigs) section->push_back({owner, kTypeRrsig, ttl, *rd});
  };
  auto apex_node = [](const Zone& z) -> const Node* {
    auto it = z.nodes.find(z.origin);
    return it == z.nodes.end() ? nullptr : &it->second;
  };
  auto add_soa = [&](const Zone& z) {
    authority_.push_back({z.origin, type::kSoa, z.soa.NegativeTtl(), z.soa_rdata});
    sign(&authority_, apex_node(z), z.origin, type::kSoa);
  };
  // A GSLB answer: the client's subnet picks the view. ECS source /0 means
  // "do not use my address" (RFC 7871 7.1.2), so only the default applies.
  uint16_t family = client.family;
  const uint8_t* addr = client.address.data();
  if (q.edns.has_ecs) {
    family = q.edns.ecs.source_prefix == 0 ? 0 : q.edns.ecs.family;
    addr = q.edns.ecs.address.data();
  }
  // The addresses of the asked type of view `v`, in the configured order.
  auto add_view = [&](const View* v, bool weighted) {
    res->scope = v->scope;
    res->weighted = weighted;
    for (const WeightedAddress& a : v->addresses) {
      const uint16_t t = a.family == 1 ? type::kA : type::kAaaa;
      if (q.qtype != t && q.qtype != type::kAny) continue;
      answer_.push_back(
          {name, t, v->ttl, {reinterpret_cast<const char*>(a.bytes.data()), a.family == 1 ? 4u : 16u}});
      weights_.push_back(a.weight);
    }
  };
  for (int hop = 0; hop < kMaxChain; ++hop) {
    // The delegation closest to the zone apex that covers `name`, if any, and
    // a DNAME owned by a proper ancestor of `name` (RFC 6672 2.3).
    const Delegation* cut = nullptr;
    std::string_view cut_name;
    const RRset* dname = nullptr;
    const Node* dname_node = nullptr;
    std::string_view dname_owner;
    for (size_t i = 1 + static_cast<uint8_t>(name[0]);
         name.size() > 1 && name.size() - i >= zone->origin.size(); i += 1 + static_cast<uint8_t>(name[i])) {
      const std::string_view ancestor = name.substr(i);
      if (ancestor.size() > zone->origin.size()) {
        auto it = zone->cuts.find(ancestor);
        if (it != zone->cuts.end()) {
          cut = &it->second;
          cut_name = it->first;
        }
      }
      auto nit = zone->nodes.find(ancestor);
      if (nit != zone->nodes.end() && nit->second.Find(kTypeDname) != nullptr) {
        dname = nit->second.Find(kTypeDname);
        dname_node = &nit->second;
        dname_owner = nit->first;
      }
      if (ancestor.size() <= 1) break;
    }
    if (auto it = zone->cuts.find(name); it != zone->cuts.end()) {
      if (cut == nullptr) {
        cut = &it->second;
        cut_name = it->first;
      }
    }
    if (cut != nullptr) {
      // Only the query name itself is referred; a CNAME leading into a
      // delegated zone ends the chain, as with other authoritative servers.
      if (hop == 0) {
        res->aa = false;
        for (const NameBytes& ns : cut->ns) authority_.push_back({cut_name, type::kNs, cut->ttl, ns});
        for (const Delegation::Glue& g : cut->glue)
          additional_.push_back({g.name, g.type, cut->ttl, g.rdata});
      }
      return;
    }
    if (dname != nullptr) {
      // RFC 6672 3.2: the DNAME, then a CNAME synthesized with its TTL from
      // the query name with the owner replaced by the target.
      answer_.push_back({dname_owner, kTypeDname, dname->ttl, dname->rdata[0]});
      sign(&answer_, dname_node, dname_owner, kTypeDname);
      const std::string_view prefix = name.substr(0, name.size() - dname_owner.size());
      if (prefix.size() + dname->rdata[0].size() > dns::kMaxNameWire) {
        res->rcode = kRcodeYxDomain;
        return;
      }
      synthesized_.push_back(std::string(prefix) + dname->rdata[0]);
      answer_.push_back({name, type::kCname, dname->ttl, synthesized_.back()});
      if (q.qtype == type::kCname || q.qtype == kTypeDname) return;
      name = synthesized_.back();
      zone = zones_.FindZone(name);
      if (zone == nullptr || zone->lame == Lame::kRefused) return;
      continue;
    }
    auto nit = zone->nodes.find(name);
    const Node* node = nit == zone->nodes.end() ? nullptr : &nit->second;
    if (node == nullptr && zone->existing.find(name) == zone->existing.end()) {
      // RFC 4592 3.3.1: a name that does not exist is answered from the
      // wildcard "*.<closest encloser>" when there is one.
      std::string_view encloser = name;
      while (encloser.size() > zone->origin.size() && zone->existing.find(encloser) == zone->existing.end()) {
        encloser = encloser.substr(1 + static_cast<uint8_t>(encloser[0]));
      }
      auto wit = zone->nodes.find(std::string("\x01*", 2) + std::string(encloser));
      if (wit != zone->nodes.end()) node = &wit->second;
    }
    const size_t before = answer_.size();
    if (name == zone->origin && (q.qtype == type::kSoa || q.qtype == type::kAny)) {
      answer_.push_back({zone->origin, type::kSoa, zone->soa.ttl, zone->soa_rdata});
      sign(&answer_, apex_node(*zone), zone->origin, type::kSoa);
    }
    const bool wants_address = IsAddressType(q.qtype) || q.qtype == type::kAny;
    if (node == nullptr && zones_.segments && zones_.segments->Covers(name, zone->origin)) {
      // A name of the segment model: answered from the client's segment
      // (IPv4 only; any other address gets the model's default answer).
      if (wants_address) {
        const SegmentModel& m = *zones_.segments;
        std::optional<uint32_t> seg;
        if (family == 1) seg = m.Find(dns::Load32(addr));
        m.Fill(m.GroupOf(name), seg, &segment_view_);
        res->segment = true;
        add_view(&segment_view_, m.config().weights);
        res->view = &segment_view_;
      }
      if (answer_.size() == before) add_soa(*zone);  // NODATA
      return;
    }
    if (node == nullptr) {
      if (answer_.size() == before) {
        if (zone->existing.find(name) == zone->existing.end()) res->rcode = kRcodeNxDomain;
        add_soa(*zone);
      }
      return;
    }
    res->final_settings = node->settings ? &*node->settings : nullptr;
    if (node->settings && node->settings->HasViews() && wants_address) {
      const View* v = node->settings->Select(family, addr);
      res->view = v;
      if (v != nullptr) {
        add_view(v, node->settings->weights);
        for (uint16_t t : {type::kA, type::kAaaa}) {
          if (q.qtype == t || q.qtype == type::kAny) sign(&answer_, node, name, t);
        }
      }
    }
    const RRset* cname = node->Find(type::kCname);
    if (cname != nullptr && q.qtype != type::kCname && q.qtype != type::kAny) {
      answer_.push_back({name, type::kCname, cname->ttl, cname->rdata[0]});
      sign(&answer_, node, name, type::kCname);
      name = cname->rdata[0];
      zone = zones_.FindZone(name);
      // Leaving our zones (or into one we are lame for): the resolver follows it.
      if (zone == nullptr || zone->lame == Lame::kRefused) return;
      continue;
    }
    for (const RRset& set : node->rrsets) {
      // View addresses replace static address records of the same name.
      if (res->view != nullptr && IsAddressType(set.type)) continue;
      if (set.type != q.qtype && q.qtype != type::kAny) continue;
      for (const std::string& rd : set.rdata) answer_.push_back({name, set.type, set.ttl, rd});
      sign(&answer_, node, name, set.type);
    }
    if (answer_.size() == before) add_soa(*zone);  // NODATA
    return;
  }
}

size_t Authority::Handle(std::span<const uint8_t> query, const Client& client, uint8_t* out, size_t cap,
                         QueryRecord* rec) {
  dns::Query q{};
  dns::ParseOptions opts;
  opts.weight_option_code = weight_code_;
  const dns::ParseError e = dns::ParseQuery(query, opts, &q);
  rec->tcp = client.tcp;
  rec->error = e;
  rec->answered = false;
  // Responses and runts are not answered (no reflection of garbage).
  if (e == dns::ParseError::kTruncatedHeader || e == dns::ParseError::kNotAQuery) return 0;
  const bool has_question = q.question_end != 0;
  rec->has_question = has_question;
  if (has_question) {
    rec->qname = q.qname;
    rec->qtype = q.qtype;
  }
  rec->edns = q.edns.present;
  rec->has_ecs = q.edns.has_ecs;
  rec->ecs = q.edns.ecs;
  rec->has_weight = q.edns.has_weight;
  rec->weight_len = q.edns.weight_len;

  dns::ResponseWriter w(out, cap);
  const size_t limit = client.tcp ? cap : q.udp_limit();
  auto done = [&](uint16_t rcode) {
    rec->answered = true;
    rec->rcode = rcode;
    return w.Finish(limit);
  };

  if (e == dns::ParseError::kBadEdnsVersion) {
    // RFC 6891 6.1.3: BADVERS (16) = low bits 0 in the header, 1 in the OPT.
    if (w.BeginResponse(query, q, dns::Rcode::kNoError, false) != dns::ParseError::kOk) return 0;
    w.BeginOpt(kOurUdpSize, false, 1, 0);
    return done(kRcodeBadVers);
  }
  if (e != dns::ParseError::kOk) {
    if (has_question) {
      if (w.BeginResponse(query, q, dns::Rcode::kFormErr, false) != dns::ParseError::kOk) return 0;
      return done(kRcodeFormErr);
    }
    // No usable question: a bare header with the ID, as RFC 1035 allows.
    if (cap < dns::kHeaderSize) return 0;
    std::memset(out, 0, dns::kHeaderSize);
    dns::Store16(out, q.id);
    dns::Store16(
        out + dns::kOffFlags,
        static_cast<uint16_t>(flag::kQr | (q.flags & (flag::kOpcodeMask | flag::kRd)) | kRcodeFormErr));
    rec->answered = true;
    rec->rcode = kRcodeFormErr;
    return dns::kHeaderSize;
  }

  uint16_t rcode = kRcodeNoError;
  Resolution res;
  bool truncate = false;
  if (q.opcode() != 0) {
    rcode = kRcodeNotImp;
  } else if (q.qclass != dns::klass::kIn) {
    rcode = kRcodeRefused;
  } else {
    // Faults of the query name (its [[zone.name]] entry) over the global ones.
    const std::string_view qkey = KeyView(q.qname);
    const Faults* name_faults = nullptr;
    if (const Zone* z = zones_.FindZone(qkey)) {
      auto it = z->nodes.find(qkey);
      if (it != z->nodes.end() && it->second.settings) name_faults = &it->second.settings->faults;
    }
    const EffectiveFaults f = ResolveFaults(name_faults ? *name_faults : Faults{}, zones_.global_faults);
    rec->delay_ms = f.latency_ms;
    if (!client.tcp && Chance(f.loss)) {
      rec->fault = Fault::kLoss;
      return 0;
    }
    if (Chance(f.servfail)) {
      rec->fault = Fault::kServfail;
      rcode = kRcodeServFail;
    } else {
      Resolve(q, client, &res);
      rcode = res.rcode;
      if (f.truncate && !client.tcp) {
        rec->fault = Fault::kTruncate;
        truncate = true;
      }
    }
  }
  if (res.view != nullptr) {
    const std::string label = res.segment ? "segment " + res.view->Label() : res.view->Label();
    std::snprintf(rec->view, sizeof(rec->view), "%s", label.c_str());
  }

  if (w.BeginResponse(query, q, static_cast<dns::Rcode>(rcode), false) != dns::ParseError::kOk) return 0;
  if (res.aa) SetFlag(out, flag::kAa);
  bool overflow = false;
  auto write = [&](dns::Section s, const std::vector<Rec>& recs) {
    for (const Rec& r : recs) {
      if (overflow) return;
      overflow = w.AppendRecord(s, Bytes(r.owner), r.type, dns::klass::kIn, r.ttl, Bytes(r.rdata)) !=
                 dns::ParseError::kOk;
    }
  };
  if (!truncate && rcode != kRcodeServFail && rcode != kRcodeNotImp) {
    write(dns::Section::kAnswer, answer_);
    write(dns::Section::kAuthority, authority_);
    write(dns::Section::kAdditional, additional_);
  }
  if (q.edns.present && !overflow) {
    w.BeginOpt(kOurUdpSize, q.edns.do_bit);
    if (q.edns.has_ecs) {
      // RFC 7871 7.2.1: echo family, source prefix and address; set our scope.
      dns::ClientSubnet ecs = q.edns.ecs;
      ecs.scope_prefix = res.scope;
      w.AddEcs(ecs);
    }
    if (q.edns.has_weight && !truncate && rcode != kRcodeServFail) {
      if (res.weighted && !weights_.empty()) {
        // Raw 16-bit values so configured invalid weights (0, >255) go out as
        // written; the codec's AddWeights only takes valid 1..255 bytes.
        uint8_t raw[2 * 256];
        const size_t n = std::min<size_t>(weights_.size(), 256);
        for (size_t i = 0; i < n; ++i) dns::Store16(raw + 2 * i, weights_[i]);
        w.AddOption(weight_code_, {raw, 2 * n});
      } else {
        const bool empty = res.final_settings && res.final_settings->empty_weight_option
                               ? *res.final_settings->empty_weight_option
                               : zones_.empty_weight_option;
        if (empty) w.AddWeights(weight_code_, {});
      }
    }
  }
  if (overflow || truncate) SetFlag(out, flag::kTc);
  return done(rcode);
}

std::string Authority::SetWeights(std::string_view name, std::string_view view,
                                  std::string_view weights_csv) {
  dns::NameKey key;
  if (!dns::NameKeyFromText(name, &key)) return "invalid name";
  const std::string_view k = KeyView(key);
  Zone* zone = zones_.FindZone(k);
  if (zone == nullptr) return "name outside every zone";
  auto it = zone->nodes.find(k);
  if (it == zone->nodes.end() || !it->second.settings || !it->second.settings->HasViews()) {
    return "name has no views";
  }
  NameSettings& s = *it->second.settings;
  View* target = nullptr;
  if (view == "default") {
    if (s.default_view) target = &*s.default_view;
  } else {
    for (View& v : s.views) {
      if (v.cidr->ToText() == view) target = &v;
    }
  }
  if (target == nullptr) return "no view '" + std::string(view) + "'";
  std::vector<uint16_t> ws;
  size_t pos = 0;
  while (pos <= weights_csv.size()) {
    size_t comma = weights_csv.find(',', pos);
    if (comma == std::string_view::npos) comma = weights_csv.size();
    const std::string item(weights_csv.substr(pos, comma - pos));
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > 65535) return "invalid weight '" + item + "'";
    ws.push_back(static_cast<uint16_t>(v));
    pos = comma + 1;
  }
  if (ws.size() != target->addresses.size()) {
    return std::to_string(ws.size()) + " weights for " + std::to_string(target->addresses.size()) +
           " addresses";
  }
  for (size_t i = 0; i < ws.size(); ++i) target->addresses[i].weight = ws[i];
  s.weights = true;
  return "";
}

void Authority::SetSegmentsEpoch(uint64_t epoch) {
  if (zones_.segments) zones_.segments->SetEpoch(epoch);
}

}  // namespace weir::gslb_sim
