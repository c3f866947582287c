#include "weir/common/text.h"
#include "weir/dnstap/dnstap.h"

namespace weir::dnstap {

using common::Cat;

void ParseConfig(common::TomlChecker& c, const toml::table& root, Options* out) {
  const toml::table* t = common::SubTable(c, root, "dnstap");
  if (t == nullptr) return;
  const size_t errors_before = c.error_count();
  c.OnlyKeys(
      *t, "dnstap",
      {"enabled", "socket", "file", "sample", "queue_size", "identity", "version", "client", "upstream"});
  c.Bool(*t, "enabled", &out->tapping);
  c.String(*t, "socket", &out->socket_path);
  c.String(*t, "file", &out->file_path);
  c.Int(*t, "sample", &out->sample, 1, 1000000);
  c.Int(*t, "queue_size", &out->queue_size, 2, 16384);
  c.String(*t, "identity", &out->identity);
  c.String(*t, "version", &out->version);
  c.Bool(*t, "client", &out->client);
  c.Bool(*t, "upstream", &out->upstream);
  if (c.error_count() != errors_before) return;  // the rules below would repeat those errors
  if (out->socket_path.empty() == out->file_path.empty()) {
    return c.Fail(t->source(), "[dnstap] needs exactly one of 'socket' (a unix socket path) or 'file'");
  }
  const uint32_t q = out->queue_size;
  if ((q & (q - 1)) != 0) {
    return c.Fail(t->get("queue_size")->source(),
                  Cat("'queue_size' must be a power of two (fstrm's queues are), not ", q));
  }
  if (!out->client && !out->upstream) {
    return c.Fail(t->source(),
                  "[dnstap] with client = false and upstream = false taps nothing: remove the table");
  }
}

}  // namespace weir::dnstap

namespace weir::dnstap {

absl::StatusOr<LiveChange> PlanReload(const Options* running, const Options* next) {
  LiveChange live;
  if (running == nullptr) {
    if (next == nullptr) return live;
    // No writer and no producers on the workers: those are set up at start.
    return absl::FailedPreconditionError(
        Cat("[dnstap] added: needs a restart (the daemon was started without it)"));
  }
  live.tapping = running->tapping;
  live.sample = running->sample;
  if (next == nullptr) {
    // The output stays open (its destination is a restart's business).
    live.tapping = false;
    if (running->tapping) live.described.emplace_back("dnstap off ([dnstap] removed)");
    return live;
  }
  std::vector<std::string> restart;
  auto same = [&](std::string_view key, const auto& was, const auto& now) {
    if (was != now) restart.push_back(Cat("[dnstap] ", key, " changed: needs a restart (kept ", was, ")"));
  };
  auto text = [](const std::string& s) { return s.empty() ? std::string("none") : s; };
  same("socket", text(running->socket_path), text(next->socket_path));
  same("file", text(running->file_path), text(next->file_path));
  same("queue_size", running->queue_size, next->queue_size);
  same("identity", text(running->identity), text(next->identity));
  same("version", text(running->version), text(next->version));
  same("client", std::string(running->client ? "true" : "false"),
       std::string(next->client ? "true" : "false"));
  same("upstream", std::string(running->upstream ? "true" : "false"),
       std::string(next->upstream ? "true" : "false"));
  if (!restart.empty()) {
    std::string msg;
    for (const std::string& r : restart) msg += (msg.empty() ? "" : "; ") + r;
    return absl::FailedPreconditionError(msg);
  }
  live.tapping = next->tapping;
  live.sample = next->sample;
  if (live.tapping != running->tapping)
    live.described.emplace_back(live.tapping ? "dnstap on" : "dnstap off");
  if (live.sample != running->sample) live.described.push_back(Cat("dnstap sample ", live.sample));
  return live;
}

}  // namespace weir::dnstap
