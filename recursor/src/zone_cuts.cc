#include "weir/recursor/zone_cuts.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "weir/common/text.h"
#include "weir/recursor/answer.h"
#include "weir/recursor/last_hop_policy.h"

namespace weir::recursor {

using common::Cat;
using common::SocketAddress;

namespace {

constexpr int kMaxRounds = 40;   // NS lookups walking up from one name
constexpr int kMaxNsNames = 6;   // NS names whose addresses are looked up
constexpr int kMaxServers = 16;  // addresses kept per zone cut

std::string KeyOf(const dns::NameKey& name) {
  return std::string(reinterpret_cast<const char*>(name.bytes.data()), name.len);
}

SocketAddress FromRdata(uint16_t type, std::span<const uint8_t> rdata) {
  SocketAddress s;
  if (type == dns::type::kA) {
    auto* in = reinterpret_cast<sockaddr_in*>(&s.storage);
    in->sin_family = AF_INET;
    std::memcpy(&in->sin_addr, rdata.data(), 4);
    s.len = sizeof(sockaddr_in);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&s.storage);
    in6->sin6_family = AF_INET6;
    std::memcpy(&in6->sin6_addr, rdata.data(), 16);
    s.len = sizeof(sockaddr_in6);
  }
  s.set_port(53);
  return s;
}

bool ParseResult(const ResolverResult& r, dns::Message* m) {
  return r.err == 0 && !r.packet.empty() && m->Parse(r.packet, {}) == dns::ParseError::kOk;
}

}  // namespace

struct ZoneCutFinder::Lookup {
  dns::NameKey name;
  dns::NameKey candidate;
  std::vector<Done> waiting;
  int rounds = 0;
  dns::NameKey cut;
  int outstanding = 0;
  std::vector<SocketAddress> servers;
  uint32_t min_ttl = UINT32_MAX;
};

ZoneCutFinder::ZoneCutFinder(Resolver& resolver, const common::Clock& clock, Options options, Log log)
    : resolver_(resolver),
      clock_(clock),
      options_(options),
      log_(std::move(log)),
      cuts_(options.max_entries, std::random_device{}()) {}

ZoneCutFinder::~ZoneCutFinder() = default;

const ZoneCut* ZoneCutFinder::Cached(const dns::NameKey& name) {
  // Canonical keys are uncompressed wire names, so each suffix that starts
  // at a label boundary is the key of an enclosing zone; the first found is
  // the deepest.
  const uint32_t now = clock_.NowSeconds();
  const std::string key = KeyOf(name);
  size_t off = 0;
  while (off < key.size()) {
    const std::string suffix = key.substr(off);
    if (const auto* e = cuts_.Find(suffix); e != nullptr && e->expires > now) {
      ++stats_.cache_hits;
      return &e->value;
    }
    const uint8_t label = static_cast<uint8_t>(key[off]);
    if (label == 0) break;
    off += 1 + label;
  }
  return nullptr;
}

void ZoneCutFinder::Find(const dns::NameKey& name, Done done) {
  const std::string key = KeyOf(name);
  if (auto it = lookups_.find(key); it != lookups_.end()) {
    it->second->waiting.push_back(std::move(done));
    return;
  }
  ++stats_.lookups;
  auto l = std::make_unique<Lookup>();
  l->name = name;
  l->candidate = name;
  l->waiting.push_back(std::move(done));
  lookups_.emplace(key, std::move(l));
  QueryNs(key);
}

void ZoneCutFinder::QueryNs(const std::string& key) {
  Lookup& l = *lookups_[key];
  ++stats_.resolver_queries;
  if (!resolver_.Resolve(dns::NameKeyToText(l.candidate.span()), dns::type::kNs, dns::klass::kIn,
                         [this, key](const ResolverResult& r) { OnNs(key, r); })) {
    Finish(key, false);
  }
}

void ZoneCutFinder::OnNs(const std::string& key, const ResolverResult& result) {
  auto it = lookups_.find(key);
  if (it == lookups_.end()) return;
  Lookup& l = *it->second;
  if (result.err != 0) return Finish(key, false);  // the resolver itself failed
  // No answer or SERVFAIL for the NS of a name (a CNAME loop at it, a broken
  // server below the cut) says nothing about the zones above it: look one
  // label up.
  dns::Message m;
  const bool usable = ParseResult(result, &m) && (m.rcode() == 0 || m.rcode() == 3);
  std::vector<dns::NameKey> ns_names;
  bool cname = !usable;
  dns::RrView rr;
  auto ans = m.Records(dns::Section::kAnswer);
  while (usable && ans.Next(&rr)) {
    CachedRecord rec;
    if (!ReadCachedRecord(m, rr, &rec)) continue;
    const bool at_candidate = rec.owner.size() == l.candidate.len &&
                              std::equal(rec.owner.begin(), rec.owner.end(), l.candidate.bytes.begin());
    if (!at_candidate) continue;
    if (rr.type == dns::type::kCname) cname = true;
    if (rr.type == dns::type::kNs) {
      dns::NameKey target;
      size_t end = 0;
      if (dns::ReadName(rec.rdata, 0, &end, &target) == dns::ParseError::kOk &&
          static_cast<int>(ns_names.size()) < kMaxNsNames) {
        ns_names.push_back(target);
        l.min_ttl = std::min(l.min_ttl, rr.ttl);
      }
    }
  }
  if (!ns_names.empty()) {
    l.cut = l.candidate;
    l.outstanding = 0;
    for (const dns::NameKey& ns : ns_names) {
      for (uint16_t type : {dns::type::kA, dns::type::kAaaa}) {
        if (type == dns::type::kAaaa && !options_.do_ip6) continue;
        ++l.outstanding;
        ++stats_.resolver_queries;
        if (!resolver_.Resolve(dns::NameKeyToText(ns.span()), type, dns::klass::kIn,
                               [this, key](const ResolverResult& r) { OnAddress(key, r); })) {
          --l.outstanding;
        }
      }
    }
    if (l.outstanding == 0) Finish(key, false);
    return;
  }
  if (++l.rounds > kMaxRounds) return Finish(key, false);
  if (!cname) {
    auto auth = m.Records(dns::Section::kAuthority);
    while (auth.Next(&rr)) {
      if (rr.type != dns::type::kSoa) continue;
      dns::NameKey owner;
      size_t end = 0;
      if (dns::ReadName(m.bytes(), rr.name_offset, &end, &owner) != dns::ParseError::kOk) continue;
      if (IsAtOrBelow(l.candidate.span(), owner.span()) && !(owner == l.candidate)) {
        l.candidate = owner;  // the zone that holds the name: ask for its NS
        return QueryNs(key);
      }
    }
  }
  if (l.candidate.len <= 1) return Finish(key, false);  // the root without NS: give up
  dns::NameKey parent;
  const uint8_t skip = static_cast<uint8_t>(1 + l.candidate.bytes[0]);
  parent.len = static_cast<uint8_t>(l.candidate.len - skip);
  std::copy(l.candidate.bytes.begin() + skip, l.candidate.bytes.begin() + l.candidate.len,
            parent.bytes.begin());
  l.candidate = parent;
  QueryNs(key);
}

void ZoneCutFinder::OnAddress(const std::string& key, const ResolverResult& result) {
  auto it = lookups_.find(key);
  if (it == lookups_.end()) return;
  Lookup& l = *it->second;
  dns::Message m;
  if (ParseResult(result, &m)) {
    dns::RrView rr;
    auto ans = m.Records(dns::Section::kAnswer);
    while (ans.Next(&rr)) {
      const bool a = rr.type == dns::type::kA && rr.rdlength == 4;
      const bool aaaa = rr.type == dns::type::kAaaa && rr.rdlength == 16;
      if ((!a && !aaaa) || static_cast<int>(l.servers.size()) >= kMaxServers) continue;
      l.servers.push_back(FromRdata(rr.type, m.bytes().subspan(rr.rdata_offset, rr.rdlength)));
      l.min_ttl = std::min(l.min_ttl, rr.ttl);
    }
  }
  if (--l.outstanding == 0) Finish(key, !l.servers.empty());
}

void ZoneCutFinder::Finish(const std::string& key, bool ok) {
  auto it = lookups_.find(key);
  if (it == lookups_.end()) return;
  std::unique_ptr<Lookup> l = std::move(it->second);
  lookups_.erase(it);
  const ZoneCut* found = nullptr;
  if (ok) {
    const uint32_t ttl = std::clamp<uint32_t>(l->min_ttl, 1, options_.max_ttl);
    const uint32_t expires = clock_.NowSeconds() + ttl;
    const std::string zone = KeyOf(l->cut);
    found = &cuts_.Put(zone, ZoneCut{l->cut, l->servers, expires}, expires).value;
  } else {
    ++stats_.failures;
    if (log_) {
      log_(Cat(dns::NameKeyToText(l->name.span()),
               ": no zone cut with server addresses found (NS lookups through libunbound): tagged queries "
               "get SERVFAIL"));
    }
  }
  // A copy per waiter: a callback may start another lookup that evicts it.
  const ZoneCut copy = found != nullptr ? *found : ZoneCut{};
  for (Done& d : l->waiting) d(found != nullptr ? &copy : nullptr);
}

}  // namespace weir::recursor
