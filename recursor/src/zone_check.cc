#include "zone_check.h"

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
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

// What the walks found, shared with their callbacks (which may outlive the
// request when it timed out).
struct Walks {
  std::mutex mu;
  std::condition_variable cv;
  size_t pending = 0;
  std::vector<bool> done;
  std::vector<std::optional<std::string>> zone;  // found: the cut's name
  std::vector<size_t> servers;

  void Found(size_t i, const ZoneCut* cut) {
    std::lock_guard<std::mutex> l(mu);
    if (done[i]) return;
    done[i] = true;
    if (cut != nullptr) {
      zone[i] = dns::NameKeyToText(cut->cut.span());
      servers[i] = cut->servers.size();
    }
    if (--pending == 0) cv.notify_all();
  }
};

}  // namespace

mgmt::ControlReply CheckZones(const mgmt::ControlRequest& r, ZoneCutFinder& finder,
                              net::LoopMailbox& mailbox) {
  std::vector<std::string> names;
  std::vector<dns::NameKey> keys;
  int timeout_ms = kDefaultTimeoutMs;
  for (const std::string& a : r.args) {
    const size_t eq = a.find('=');
    const std::string key = a.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (key == "name") {
      dns::NameKey k;
      if (!dns::NameKeyFromText(value, &k))
        return mgmt::ControlReply::Error(Cat("zone-check: bad name '", value, "'"));
      names.push_back(dns::NameKeyToText(k.span()));
      keys.push_back(k);
    } else if (key == "timeout_ms") {
      if (!absl::SimpleAtoi(value, &timeout_ms) || timeout_ms < 100 || timeout_ms > 10000)
        return mgmt::ControlReply::Error("zone-check: timeout_ms must be 100..10000");
    } else {
      return mgmt::ControlReply::Error(Cat("zone-check: unknown argument '", a, "'"));
    }
  }
  if (names.empty()) return mgmt::ControlReply::Error("zone-check: give name=NAME");
  if (names.size() > mgmt::kMaxZoneCheckNames)
    return mgmt::ControlReply::Error(Cat("zone-check: at most ", mgmt::kMaxZoneCheckNames, " names"));

  auto walks = std::make_shared<Walks>();
  walks->pending = names.size();
  walks->done.assign(names.size(), false);
  walks->zone.resize(names.size());
  walks->servers.assign(names.size(), 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  const bool started = mailbox.Call(
      [&] {
        for (size_t i = 0; i < keys.size(); ++i) {
          if (const ZoneCut* cut = finder.Cached(keys[i])) {
            walks->Found(i, cut);
          } else {
            finder.Find(keys[i], [walks, i](const ZoneCut* cut) { walks->Found(i, cut); });
          }
        }
      },
      std::chrono::milliseconds(timeout_ms));
  if (!started) {
    return mgmt::ControlReply::Error(
        Cat("weir-recursor's event loop did not take the zone check within ", timeout_ms, " ms"));
  }
  std::unique_lock<std::mutex> l(walks->mu);
  walks->cv.wait_until(l, deadline, [&] { return walks->pending == 0; });

  StructuredReply reply(Json{{"names", Json::array()}});
  for (size_t i = 0; i < names.size(); ++i) {
    Json n{{"name", names[i]}, {"checked", static_cast<bool>(walks->done[i])}};
    n["zone"] = walks->zone[i] ? Json(*walks->zone[i]) : Json(nullptr);
    if (walks->zone[i]) n["servers"] = walks->servers[i];
    reply.json()["names"].push_back(std::move(n));
  }
  reply.Block([timeout_ms](const Json& d) {
    std::string text;
    for (const Json& n : d["names"]) {
      const std::string name = n["name"].get<std::string>();
      if (!n["zone"].is_null()) {
        common::CatTo(text, name, ": zone ", n["zone"].get<std::string>(), " (", n["servers"].get<size_t>(),
                      " server addresses)\n");
      } else if (n["checked"].get<bool>()) {
        common::CatTo(text, name, ": no zone cut with server addresses found\n");
      } else {
        common::CatTo(text, name, ": not checked within ", timeout_ms, " ms\n");
      }
    }
    return text;
  });
  return reply.Render();
}

}  // namespace weir::recursor
