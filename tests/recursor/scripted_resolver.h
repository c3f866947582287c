// A scripted Resolver for the recursor's unit tests: answers by (name,
// type), delivered later from Deliver() as libunbound delivers them, and
// the helpers that build names and records for it.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cctype>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "weir/dns/message.h"
#include "weir/dns/writer.h"
#include "weir/recursor/resolver.h"

namespace weir::recursor::test_support {

inline dns::NameKey Key(const std::string& text) {
  dns::NameKey k;
  EXPECT_TRUE(dns::NameKeyFromText(text, &k)) << text;
  return k;
}

// An IPv4 address's 4 bytes from its text.
inline std::vector<uint8_t> V4(const std::string& text) {
  std::vector<uint8_t> a(4);
  EXPECT_EQ(inet_pton(AF_INET, text.c_str(), a.data()), 1) << text;
  return a;
}

struct Rr {
  std::string owner;
  uint16_t type;
  uint32_t ttl;
  std::vector<uint8_t> rdata;
};

// Appends the answer and authority records of a message being written.
inline void WriteRecords(dns::ResponseWriter& w, const std::vector<Rr>& answer,
                         const std::vector<Rr>& authority) {
  for (auto [section, list] :
       {std::pair{dns::Section::kAnswer, &answer}, std::pair{dns::Section::kAuthority, &authority}}) {
    for (const Rr& rr : *list) {
      const dns::NameKey o = Key(rr.owner);
      EXPECT_EQ(w.AppendRecord(section, o.span(), rr.type, dns::klass::kIn, rr.ttl, rr.rdata),
                dns::ParseError::kOk);
    }
  }
}

inline std::vector<uint8_t> NameRdata(const std::string& text) {
  const dns::NameKey k = Key(text);
  return {k.bytes.begin(), k.bytes.begin() + k.len};
}

inline std::vector<uint8_t> SoaRdata(const std::string& zone) {
  std::vector<uint8_t> r = NameRdata("ns1." + zone);
  const std::vector<uint8_t> h = NameRdata("hostmaster." + zone);
  r.insert(r.end(), h.begin(), h.end());
  for (uint32_t v : {1u, 3600u, 600u, 86400u, 60u}) {
    for (int sh = 24; sh >= 0; sh -= 8) r.push_back(static_cast<uint8_t>(v >> sh));
  }
  return r;
}

// Answers by (name, type); unscripted questions get SERVFAIL. Callbacks are
// delivered later, from Deliver(), as libunbound delivers them.
class ScriptedResolver : public Resolver {
 public:
  struct Reply {
    uint16_t rcode = 0;
    std::vector<Rr> answer, authority;
  };
  void Script(const std::string& name, uint16_t type, Reply r) {
    script_[{Lower(name), type}] = std::move(r);
  }
  // The zone `zone` with NS ns1.<zone> at the IPv4 `address`.
  void Zone(const std::string& zone, const std::string& address, uint32_t ns_ttl = 3600,
            uint32_t a_ttl = 3600) {
    Script(zone, dns::type::kNs, {0, {{zone, dns::type::kNs, ns_ttl, NameRdata("ns1." + zone)}}, {}});
    std::vector<uint8_t> a(4);
    EXPECT_EQ(inet_pton(AF_INET, address.c_str(), a.data()), 1);
    Script("ns1." + zone, dns::type::kA, {0, {{"ns1." + zone, dns::type::kA, a_ttl, a}}, {}});
  }
  bool Resolve(const std::string& name, uint16_t type, uint16_t, Callback cb) override {
    asked.emplace_back(Lower(name), type);
    pending_.emplace_back(Build(Lower(name), type), std::move(cb));
    return true;
  }
  // Delivers until nothing is pending; returns how many were delivered.
  size_t Deliver() {
    size_t n = 0;
    while (!pending_.empty()) {
      auto [pkt, cb] = std::move(pending_.front());
      pending_.pop_front();
      cb(ResolverResult{0, pkt, false, false});
      ++n;
    }
    return n;
  }
  std::vector<std::pair<std::string, uint16_t>> asked;

 private:
  static std::string Lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (s.empty() || s.back() != '.') s.push_back('.');
    return s;
  }
  std::vector<uint8_t> Build(const std::string& name, uint16_t type) {
    Reply r;
    auto it = script_.find({name, type});
    if (it != script_.end()) {
      r = it->second;
    } else {
      r.rcode = 2;
    }
    std::vector<uint8_t> buf(4096);
    dns::ResponseWriter w(buf.data(), buf.size());
    const dns::NameKey q = Key(name);
    EXPECT_EQ(w.Begin(1, static_cast<uint16_t>(dns::flag::kQr | dns::flag::kRa | r.rcode), q.span(), type,
                      dns::klass::kIn),
              dns::ParseError::kOk);
    WriteRecords(w, r.answer, r.authority);
    buf.resize(w.Finish(buf.size()));
    return buf;
  }
  std::map<std::pair<std::string, uint16_t>, Reply> script_;
  std::deque<std::pair<std::vector<uint8_t>, Callback>> pending_;
};

}  // namespace weir::recursor::test_support
