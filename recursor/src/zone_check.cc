#include "zone_check.h"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "weir/common/text.h"
#include "weir/dns/message.h"
#include "weir/mgmt/structured_reply.h"

namespace weir::recursor {

using common::Cat;
using mgmt::Json;
using mgmt::StructuredReply;

namespace {

constexpr int kDefaultTimeoutMs = 2000;

// One check: what its walks found so far, until the last one or the
// timeout; then the reply, once. Shared with the walks' callbacks and the
// timer (all on the loop thread), which may outlive each other.
struct Check {
  std::vector<std::string> names;
  std::vector<bool> done;
  std::vector<std::optional<std::string>> zone;  // found: the cut's name
  std::vector<size_t> servers;
  size_t pending = 0;
  int timeout_ms = kDefaultTimeoutMs;
  net::EventLoop* loop = nullptr;
  net::EventLoop::TimerId timer = 0;
  std::function<void(mgmt::ControlReply)> reply;  // empty once replied

  void Found(size_t i, const ZoneCut* cut) {
    if (done[i]) return;
    done[i] = true;
    if (cut != nullptr) {
      zone[i] = dns::NameKeyToText(cut->cut.span());
      servers[i] = cut->servers.size();
    }
    if (--pending == 0) Finish();
  }

  void Finish() {
    if (!reply) return;
    if (timer != 0) loop->Cancel(timer);
    timer = 0;
    StructuredReply r(Json{{"names", Json::array()}});
    for (size_t i = 0; i < names.size(); ++i) {
      Json n{{"name", names[i]}, {"checked", static_cast<bool>(done[i])}};
      n["zone"] = zone[i] ? Json(*zone[i]) : Json(nullptr);
      if (zone[i]) n["servers"] = servers[i];
      r.json()["names"].push_back(std::move(n));
    }
    r.Block([ms = timeout_ms](const Json& d) {
      std::string text;
      for (const Json& n : d["names"]) {
        const std::string name = n["name"].get<std::string>();
        if (!n["zone"].is_null()) {
          common::CatTo(text, name, ": zone ", n["zone"].get<std::string>(), " (", n["servers"].get<size_t>(),
                        " server addresses)\n");
        } else if (n["checked"].get<bool>()) {
          common::CatTo(text, name, ": no zone cut with server addresses found\n");
        } else {
          common::CatTo(text, name, ": not checked within ", ms, " ms\n");
        }
      }
      return text;
    });
    auto fn = std::move(reply);
    reply = nullptr;
    fn(r.Render());
  }
};

}  // namespace

void StartZoneCheck(const mgmt::ControlRequest& r, ZoneCutFinder& finder, net::EventLoop& loop,
                    std::function<void(mgmt::ControlReply)> done) {
  auto check = std::make_shared<Check>();
  std::vector<dns::NameKey> keys;
  for (const std::string& a : r.args) {
    const size_t eq = a.find('=');
    const std::string key = a.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (key == "name") {
      dns::NameKey k;
      if (!dns::NameKeyFromText(value, &k))
        return done(mgmt::ControlReply::Error(Cat("zone-check: bad name '", value, "'")));
      check->names.push_back(dns::NameKeyToText(k.span()));
      keys.push_back(k);
    } else if (key == "timeout_ms") {
      if (!absl::SimpleAtoi(value, &check->timeout_ms) || check->timeout_ms < 100 ||
          check->timeout_ms > 10000)
        return done(mgmt::ControlReply::Error("zone-check: timeout_ms must be 100..10000"));
    } else {
      return done(mgmt::ControlReply::Error(Cat("zone-check: unknown argument '", a, "'")));
    }
  }
  if (keys.empty()) return done(mgmt::ControlReply::Error("zone-check: give name=NAME"));
  if (keys.size() > mgmt::kMaxZoneCheckNames)
    return done(mgmt::ControlReply::Error(Cat("zone-check: at most ", mgmt::kMaxZoneCheckNames, " names")));
  check->pending = keys.size();
  check->done.assign(keys.size(), false);
  check->zone.resize(keys.size());
  check->servers.assign(keys.size(), 0);
  check->loop = &loop;
  check->reply = std::move(done);
  check->timer = loop.After(std::chrono::milliseconds(check->timeout_ms), [check] {
    check->timer = 0;
    check->Finish();
  });
  for (size_t i = 0; i < keys.size(); ++i) {
    if (const ZoneCut* cut = finder.Cached(keys[i])) {
      check->Found(i, cut);
    } else {
      finder.Find(keys[i], [check, i](const ZoneCut* cut) { check->Found(i, cut); });
    }
  }
}

}  // namespace weir::recursor
