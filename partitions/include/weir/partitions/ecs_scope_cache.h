// The recursor's ECS-scope cache (RFC 7871 section 7.3, docs/behaviour.md#partitions-and-ecs).
//
// Per (qname, qtype): a small set of answers, each valid for the clients in
// address/scope. Lookup takes the longest scope that covers the client;
// scope 0 is global (any client, either family). An answer is never stored
// with a scope longer than the source prefix that was sent: a longer scope
// is stored at the source length (RFC 7871 7.3.1).
//
// At most `max_subnets` (default 100) scoped answers per name. When a name is
// full, an insert first drops expired answers, then the answer expiring
// soonest (ties: the most specific scope, which covers the fewest clients).
//
// Threading: not internally synchronised; owned by one thread (the
// recursor's resolving loop) or guarded by its owner. Values are copied in
// and handed out as const pointers valid until the next non-const call.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "weir/dns/message.h"

namespace weir::partitions {

template <typename V>
class EcsScopeCache {
 public:
  explicit EcsScopeCache(size_t max_subnets = 100) : max_subnets_(max_subnets == 0 ? 1 : max_subnets) {}

  // Stores `value` for the answer to a query that sent `sent` (its family,
  // source prefix and address) and came back with `scope`.
  void Insert(std::span<const uint8_t> qname, uint16_t qtype, const dns::ClientSubnet& sent, uint8_t scope,
              uint32_t now, uint32_t expires, V value) {
    Scoped s;
    s.scope = std::min(scope, sent.source_prefix);
    s.family = s.scope == 0 ? 0 : sent.family;
    s.address = Masked(sent.address, s.scope);
    s.expires = expires;
    s.value = std::move(value);
    std::vector<Scoped>& list = names_[Key(qname, qtype)];
    for (Scoped& x : list) {
      if (x.family == s.family && x.scope == s.scope && x.address == s.address) {
        x = std::move(s);
        return;
      }
    }
    if (list.size() >= max_subnets_) {
      std::erase_if(list, [&](const Scoped& x) { return x.expires <= now; });
    }
    if (list.size() >= max_subnets_) {
      auto victim = std::min_element(list.begin(), list.end(), [](const Scoped& a, const Scoped& b) {
        return a.expires != b.expires ? a.expires < b.expires : a.scope > b.scope;
      });
      list.erase(victim);
    }
    list.push_back(std::move(s));
  }

  // The unexpired answer with the longest scope covering `client` (whose
  // source_prefix bounds the usable scope), or nullptr. `*scope` receives
  // the matched scope.
  const V* Lookup(std::span<const uint8_t> qname, uint16_t qtype, const dns::ClientSubnet& client,
                  uint32_t now, uint8_t* scope = nullptr) const {
    if (qname.size() > dns::kMaxNameWire) return nullptr;
    const KeyBytes key(qname, qtype);
    auto it = names_.find(key.view());  // heterogeneous: a hit copies nothing
    if (it == names_.end()) return nullptr;
    const Scoped* best = nullptr;
    for (const Scoped& x : it->second) {
      if (x.expires <= now) continue;
      if (x.scope != 0) {
        if (x.family != client.family || x.scope > client.source_prefix) continue;
        if (Masked(client.address, x.scope) != x.address) continue;
      }
      if (best == nullptr || x.scope > best->scope) best = &x;
    }
    if (best != nullptr && scope != nullptr) *scope = best->scope;
    return best != nullptr ? &best->value : nullptr;
  }

  size_t SubnetCount(std::span<const uint8_t> qname, uint16_t qtype) const {
    auto it = names_.find(Key(qname, qtype));
    return it == names_.end() ? 0 : it->second.size();
  }
  size_t name_count() const { return names_.size(); }
  // Drops expired answers and names left empty.
  void Expire(uint32_t now) {
    for (auto it = names_.begin(); it != names_.end();) {
      std::erase_if(it->second, [&](const Scoped& x) { return x.expires <= now; });
      if (it->second.empty()) {
        names_.erase(it++);
      } else {
        ++it;
      }
    }
  }

  // One stored answer: valid for the clients in address/scope of `family`
  // (dns::kEcsFamilyIpv4/Ipv6; 0 with scope 0, any client).
  struct Scoped {
    uint16_t family = 0;  // 0 for scope 0
    uint8_t scope = 0;
    std::array<uint8_t, 16> address{};  // masked to `scope` bits
    uint32_t expires = 0;
    V value;
  };

  // fn(qname, qtype, const Scoped&) for every answer, in no particular
  // order. For the operator's dump; never per query.
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (const auto& [key, list] : names_) {
      for (const Scoped& x : list) fn(NameOf(key), TypeOf(key), x);
    }
  }
  // Drops every answer for which pred(qname, qtype, const Scoped&) is true,
  // and the names left empty; returns how many answers went.
  template <typename Pred>
  size_t EraseIf(Pred pred) {
    size_t n = 0;
    for (auto it = names_.begin(); it != names_.end();) {
      const auto qname = NameOf(it->first);
      const uint16_t qtype = TypeOf(it->first);
      n += std::erase_if(it->second, [&](const Scoped& x) { return pred(qname, qtype, x); });
      if (it->second.empty()) {
        names_.erase(it++);
      } else {
        ++it;
      }
    }
    return n;
  }
  size_t answer_count() const {
    size_t n = 0;
    for (const auto& [key, list] : names_) n += list.size();
    return n;
  }

 private:
  static std::span<const uint8_t> NameOf(const std::string& key) {
    return {reinterpret_cast<const uint8_t*>(key.data()), key.size() - 2};
  }
  static uint16_t TypeOf(const std::string& key) {
    return static_cast<uint16_t>((static_cast<uint8_t>(key[key.size() - 2]) << 8) |
                                 static_cast<uint8_t>(key[key.size() - 1]));
  }
  static std::array<uint8_t, 16> Masked(const std::array<uint8_t, 16>& a, uint8_t bits) {
    std::array<uint8_t, 16> out{};
    for (size_t i = 0; i < 16 && bits > 0; ++i) {
      const unsigned take = std::min<unsigned>(bits, 8);
      out[i] = static_cast<uint8_t>(a[i] & (0xff00u >> take));
      bits = static_cast<uint8_t>(bits - take);
    }
    return out;
  }
  static std::string Key(std::span<const uint8_t> qname, uint16_t qtype) {
    std::string k(reinterpret_cast<const char*>(qname.data()), qname.size());
    k.push_back(static_cast<char>(qtype >> 8));
    k.push_back(static_cast<char>(qtype));
    return k;
  }
  // Key() on the stack, for lookups (qname at most kMaxNameWire bytes).
  class KeyBytes {
   public:
    KeyBytes(std::span<const uint8_t> qname, uint16_t qtype) : len_(qname.size() + 2) {
      std::memcpy(bytes_.data(), qname.data(), qname.size());
      bytes_[qname.size()] = static_cast<char>(qtype >> 8);
      bytes_[qname.size() + 1] = static_cast<char>(qtype);
    }
    absl::string_view view() const { return {bytes_.data(), len_}; }

   private:
    std::array<char, dns::kMaxNameWire + 2> bytes_;
    size_t len_;
  };

  size_t max_subnets_;
  absl::flat_hash_map<std::string, std::vector<Scoped>> names_;
};

}  // namespace weir::partitions
