// mgmt-fleet-sim: a fleet of weir nodes in one process, to measure how fast
// weir-mgmt's pushes reach them (bench/fleet_push.py drives it; figures and
// commands in bench/RESULTS.md, "The fleet").
//
// Each simulated node is a real weir::mgmt::NodeClient (its own thread and
// TCP session, node ids sim-0000, sim-0001, ...), so weir-mgmt sees what a
// fleet of that size looks like on the wire. With --apply parse a node builds
// the parts of each snapshot that `changed` names with the parsers a real node
// uses (TagTable::FromText, CityMap::FromCsv); with --apply none it accepts at
// once. With several --mgmt addresses node i starts on address i mod M (the
// others are its failover list), so the fleet is split across the instances.
//
// Once every node runs the store's version, the program makes --pushes
// changes itself, one every --interval-ms, each a REQUEST frame as weirctl
// sends it (`tag-add "simN.example ecs=on"`) to the --push-to instance. Per
// push it records when the reply arrived (when weirctl would return) and, per
// node, when the node's apply function finished with that version or a newer
// one (weir-mgmt sends only the newest version to a node still busy with the
// one before, so a node may skip a version; it then runs that change from the
// newer one on). Latencies are counted from the reply; weir-mgmt queues the
// snapshots before it replies, so a node can apply before the reply arrives
// and a latency can be negative.
//
// --mgmt-pid: each weir-mgmt's CPU time (utime+stime, /proc/PID/stat) over the
// pushes, and its RSS (VmRSS before/after, VmHWM; the peak is reset through
// /proc/PID/clear_refs before the pushes when that is allowed, and VmRSS is
// also sampled every 10 ms).
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "weir/common/log.h"
#include "weir/common/socket_address.h"
#include "weir/mgmt/node_client.h"
#include "weir/mgmt/protocol.h"
#include "weir/mgmt/snapshot.h"
#include "weir/net/socket.h"
#include "weir/partitions/citymap.h"
#include "weir/partitions/tagtable.h"

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;
using weir::mgmt::Message;
using weir::mgmt::MsgType;

double MsBetween(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// One simulated node. The apply function runs on the client's thread; the
// record of what it applied when is read by the main thread (mu).
struct SimNode {
  std::string id;
  std::unique_ptr<weir::mgmt::NodeClient> client;
  // What a real node keeps between pushes (the client's thread's).
  std::unique_ptr<const weir::partitions::TagTable> tags;
  std::unique_ptr<const weir::partitions::CityMap> citymap;
  std::mutex mu;
  std::vector<std::pair<uint64_t, Clock::time_point>> applied;  // guarded by mu

  // When the node first ran `version` or a newer one; nullopt: not yet.
  std::optional<Clock::time_point> AppliedAt(uint64_t version) {
    std::lock_guard<std::mutex> l(mu);
    for (const auto& [v, t] : applied) {
      if (v >= version) return t;
    }
    return std::nullopt;
  }
};

// One REQUEST to weir-mgmt and its REPLY (as weirctl sends it); the reply's
// fields ("ok"|"error"|"conflict", text, json).
absl::StatusOr<std::vector<std::string>> Request(const weir::common::SocketAddress& mgmt,
                                                 const std::string& token, const std::string& verb,
                                                 const std::vector<std::string>& args, int timeout_ms) {
  const int fd = socket(mgmt.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(std::string("socket: ") + std::strerror(errno));
  if (const int err = weir::net::ConnectWithin(fd, mgmt.sa(), mgmt.len, timeout_ms); err != 0) {
    close(fd);
    return absl::UnavailableError(mgmt.ToString() + ": " + std::strerror(err));
  }
  Message req{MsgType::kRequest, {std::string(weir::mgmt::kProtocol), token, "mgmt-fleet-sim", verb}};
  req.fields.insert(req.fields.end(), args.begin(), args.end());
  const std::string out = weir::mgmt::Encode(req);
  size_t off = 0;
  while (off < out.size()) {
    const ssize_t n = send(fd, out.data() + off, out.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      return absl::UnavailableError(std::string("send: ") + std::strerror(errno));
    }
    off += static_cast<size_t>(n);
  }
  weir::mgmt::FrameReader reader;
  std::vector<char> buf(65536);
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) {
      close(fd);
      return absl::DeadlineExceededError("no reply within " + std::to_string(timeout_ms) + " ms");
    }
    const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      return absl::UnavailableError("connection closed without a reply");
    }
    reader.Feed(std::string_view(buf.data(), static_cast<size_t>(n)));
    auto m = reader.Next();
    if (!m.ok()) {
      close(fd);
      return m.status();
    }
    if (!m->has_value()) continue;
    close(fd);
    Message& r = **m;
    if (r.type == MsgType::kError) {
      return absl::PermissionDeniedError("refused: " + (r.fields.empty() ? "" : r.fields[0]));
    }
    if (r.type != MsgType::kReply || r.fields.size() != 3) return absl::DataLossError("unexpected reply");
    return std::move(r.fields);
  }
}

// The version the store holds, from `status`.
absl::StatusOr<uint64_t> StoreVersion(const weir::common::SocketAddress& mgmt, const std::string& token,
                                      int timeout_ms) {
  auto r = Request(mgmt, token, "status", {}, timeout_ms);
  if (!r.ok()) return r.status();
  if ((*r)[0] != "ok") return absl::FailedPreconditionError("status: " + (*r)[1]);
  const Json j = Json::parse((*r)[2], nullptr, false);
  if (!j.is_object() || !j.contains("version")) return absl::DataLossError("status: no version");
  return j["version"].get<uint64_t>();
}

// A weir-mgmt process's CPU time and memory (/proc).
struct ProcSample {
  double cpu_s = -1;
  long rss_kb = -1;
  long hwm_kb = -1;
};

ProcSample SampleProc(int pid) {
  ProcSample s;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (std::getline(stat, line)) {
    // Fields after the command's closing parenthesis: state is the 3rd
    // field, utime the 14th, stime the 15th (proc(5)).
    const size_t close_paren = line.rfind(')');
    if (close_paren != std::string::npos) {
      std::istringstream in(line.substr(close_paren + 2));
      std::vector<std::string> f;
      for (std::string w; in >> w;) f.push_back(w);
      if (f.size() > 12) {
        s.cpu_s = static_cast<double>(std::stoull(f[11]) + std::stoull(f[12])) /
                  static_cast<double>(sysconf(_SC_CLK_TCK));
      }
    }
  }
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) s.rss_kb = std::atol(line.c_str() + 6);
    if (line.rfind("VmHWM:", 0) == 0) s.hwm_kb = std::atol(line.c_str() + 6);
  }
  return s;
}

// Resets VmHWM to the current RSS (proc(5), clear_refs "5"); false when not
// allowed.
bool ResetPeakRss(int pid) {
  std::ofstream f("/proc/" + std::to_string(pid) + "/clear_refs");
  if (!f) return false;
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

// Nearest-rank percentile of sorted `v` (q in 0..1); NaN when empty.
double Percentile(const std::vector<double>& v, double q) {
  if (v.empty()) return std::nan("");
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

Json Round(double x) {
  if (std::isnan(x)) return nullptr;
  return std::round(x * 1000.0) / 1000.0;
}

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

struct Options {
  std::string mgmt_text;
  std::string token_file;
  int nodes = 100;
  std::string kind = "fastpath";
  std::string apply = "parse";
  int pushes = 20;
  int interval_ms = 200;
  int timeout_ms = 10000;
  int push_to = 0;
  int ramp_ms = 0;
  int connect_wait_ms = 120000;
  std::string mgmt_pid_text;
  bool json = false;
  std::string log_level = "warning";
};

// Raises RLIMIT_NOFILE's soft limit to the hard one when `need` descriptors
// would not fit; false when the hard limit is too low too.
bool EnoughDescriptors(size_t need) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return false;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) return false;
  }
  return rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need;
}

int Run(const Options& o) {
  std::vector<weir::common::SocketAddress> mgmt;
  for (const std::string& a : SplitCommas(o.mgmt_text)) {
    auto parsed = weir::common::SocketAddress::Parse(a, 8054);
    if (!parsed.ok()) {
      std::fprintf(stderr, "mgmt-fleet-sim: --mgmt %s: %s\n", a.c_str(),
                   std::string(parsed.status().message()).c_str());
      return 2;
    }
    mgmt.push_back(*parsed);
  }
  if (mgmt.empty() || o.push_to < 0 || static_cast<size_t>(o.push_to) >= mgmt.size()) {
    std::fprintf(stderr, "mgmt-fleet-sim: --mgmt needs an address, --push-to an index into it\n");
    return 2;
  }
  std::vector<int> mgmt_pids;
  for (const std::string& p : SplitCommas(o.mgmt_pid_text)) mgmt_pids.push_back(std::atoi(p.c_str()));
  auto token = weir::mgmt::ReadTokenFile(o.token_file);
  if (!token.ok()) {
    std::fprintf(stderr, "mgmt-fleet-sim: %s\n", std::string(token.status().message()).c_str());
    return 2;
  }
  // Per node: its session, its event loop's epoll and wake descriptors; and
  // some to spare for the requests and /proc.
  if (!EnoughDescriptors(static_cast<size_t>(o.nodes) * 4 + 64)) {
    std::fprintf(stderr, "mgmt-fleet-sim: RLIMIT_NOFILE too low for %d nodes\n", o.nodes);
    return 2;
  }
  auto level = weir::common::ParseLogLevel(o.log_level);
  if (level.ok()) weir::common::DefaultLogger().set_level(*level);
  const weir::common::SocketAddress& push_to = mgmt[static_cast<size_t>(o.push_to)];
  const bool parse = o.apply == "parse";

  // The store's version before the fleet connects (a weir-mgmt busy with
  // a thousand HELLOs answers late).
  auto initial = StoreVersion(push_to, *token, o.timeout_ms);
  if (!initial.ok()) {
    std::fprintf(stderr, "mgmt-fleet-sim: %s: %s\n", push_to.ToString().c_str(),
                 std::string(initial.status().message()).c_str());
    return 2;
  }
  // The fleet: node i starts at i * ramp / N (0: every node at once, as
  // after a weir-mgmt restart).
  std::vector<std::unique_ptr<SimNode>> fleet;
  fleet.reserve(static_cast<size_t>(o.nodes));
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < o.nodes; ++i) {
    auto node = std::make_unique<SimNode>();
    char id[32];
    std::snprintf(id, sizeof(id), "sim-%04d", i);
    node->id = id;
    weir::mgmt::NodeClientOptions opt;
    for (size_t k = 0; k < mgmt.size(); ++k)
      opt.mgmt.push_back(mgmt[(static_cast<size_t>(i) + k) % mgmt.size()]);
    opt.token = *token;
    opt.node_id = node->id;
    opt.kind = o.kind == "mixed" ? (i % 2 == 0 ? "fastpath" : "recursor") : o.kind;
    SimNode* n = node.get();
    node->client = std::make_unique<weir::mgmt::NodeClient>(
        std::move(opt),
        [n, parse](const weir::mgmt::Snapshot& s, const weir::mgmt::SnapshotParts& changed) -> absl::Status {
          if (parse && changed.tags) {
            auto t = weir::partitions::TagTable::FromText(s.tags);
            if (!t.ok()) return t.status();
            n->tags = *std::move(t);
          }
          if (parse && changed.citymap) {
            auto c = weir::partitions::CityMap::FromCsv(s.citymap);
            if (!c.ok()) return c.status();
            n->citymap = *std::move(c);
          }
          const Clock::time_point now = Clock::now();
          std::lock_guard<std::mutex> l(n->mu);
          n->applied.emplace_back(s.version, now);
          return absl::OkStatus();
        });
    std::this_thread::sleep_until(start + std::chrono::microseconds(int64_t{o.ramp_ms} * 1000 * i / o.nodes));
    if (absl::Status st = node->client->Start(0, ""); !st.ok()) {
      std::fprintf(stderr, "mgmt-fleet-sim: node %s: %s\n", id, std::string(st.message()).c_str());
      return 2;
    }
    fleet.push_back(std::move(node));
  }
  auto stop_all = [&] {
    for (auto& n : fleet) n->client->Stop();
  };

  // Every node on the store's version before the first push.
  const Clock::time_point connect_deadline = start + std::chrono::milliseconds(o.ramp_ms + o.connect_wait_ms);
  size_t behind = fleet.size();
  while (Clock::now() < connect_deadline) {
    behind = 0;
    for (auto& n : fleet) behind += n->client->applied_version() < *initial;
    if (behind == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const double converge_ms = MsBetween(start, Clock::now());
  if (behind != 0) {
    std::fprintf(stderr, "mgmt-fleet-sim: %zu of %d nodes not at version %llu after %.0f ms\n", behind,
                 o.nodes, static_cast<unsigned long long>(*initial), converge_ms);
    stop_all();
    return 1;
  }
  std::map<std::string, int> per_mgmt;
  for (auto& n : fleet) ++per_mgmt[n->client->current_mgmt()];

  // The pushes, with weir-mgmt's CPU and memory around them.
  std::vector<ProcSample> before;
  std::vector<bool> peak_reset;
  for (int pid : mgmt_pids) {
    peak_reset.push_back(ResetPeakRss(pid));
    before.push_back(SampleProc(pid));
  }
  std::vector<long> sampled_peak(mgmt_pids.size(), 0);
  std::atomic<bool> sampling{true};
  std::thread sampler([&] {
    while (sampling.load()) {
      for (size_t i = 0; i < mgmt_pids.size(); ++i) {
        sampled_peak[i] = std::max(sampled_peak[i], SampleProc(mgmt_pids[i]).rss_kb);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  struct Push {
    uint64_t version = 0;
    Clock::time_point sent, replied;
    std::string error;
  };
  std::vector<Push> pushes;
  const long long nonce = static_cast<long long>(std::time(nullptr) % 100000000) * 10000;
  for (int k = 0; k < o.pushes; ++k) {
    Push p;
    p.sent = Clock::now();
    const std::string line = "sim" + std::to_string(nonce + k) + ".example ecs=on";
    auto r = Request(push_to, *token, "tag-add", {line}, o.timeout_ms);
    p.replied = Clock::now();
    if (!r.ok()) {
      p.error = std::string(r.status().message());
    } else if ((*r)[0] != "ok") {
      p.error = (*r)[0] + ": " + (*r)[1];
    } else {
      const Json j = Json::parse((*r)[2], nullptr, false);
      if (j.is_object() && j.contains("version")) p.version = j["version"].get<uint64_t>();
      if (p.version == 0) p.error = "reply without a version";
    }
    pushes.push_back(p);
    std::this_thread::sleep_until(p.sent + std::chrono::milliseconds(o.interval_ms));
  }
  // The last push: every node, or the timeout from its reply.
  uint64_t last_version = 0;
  Clock::time_point last_reply = Clock::now();
  for (const Push& p : pushes) {
    if (p.version != 0) {
      last_version = std::max(last_version, p.version);
      last_reply = p.replied;
    }
  }
  while (Clock::now() < last_reply + std::chrono::milliseconds(o.timeout_ms)) {
    size_t missing = 0;
    for (auto& n : fleet) missing += n->client->applied_version() < last_version;
    if (missing == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  sampling.store(false);
  sampler.join();
  std::vector<ProcSample> after;
  for (int pid : mgmt_pids) after.push_back(SampleProc(pid));

  // Figures.
  Json out;
  out["nodes"] = o.nodes;
  out["kind"] = o.kind;
  out["apply"] = o.apply;
  out["mgmt"] = Json::array();
  for (const auto& a : mgmt) out["mgmt"].push_back(a.ToString());
  out["push_to"] = push_to.ToString();
  out["nodes_per_mgmt"] = Json::object();
  for (const auto& [addr, count] : per_mgmt) out["nodes_per_mgmt"][addr.empty() ? "none" : addr] = count;
  out["initial_version"] = *initial;
  out["ramp_ms"] = o.ramp_ms;
  out["fleet_connect_ms"] = Round(converge_ms);
  out["interval_ms"] = o.interval_ms;
  out["timeout_ms"] = o.timeout_ms;
  std::vector<double> latencies, convergence;
  size_t never_pairs = 0, failed_pushes = 0;
  std::map<std::string, int> never_nodes;
  out["pushes"] = Json::array();
  for (size_t k = 0; k < pushes.size(); ++k) {
    const Push& p = pushes[k];
    Json row{{"push", k + 1}, {"version", p.version}, {"request_ms", Round(MsBetween(p.sent, p.replied))}};
    if (!p.error.empty()) {
      ++failed_pushes;
      row["error"] = p.error;
      out["pushes"].push_back(row);
      continue;
    }
    double first = std::nan(""), last = std::nan("");
    size_t applied = 0;
    for (auto& n : fleet) {
      auto t = n->AppliedAt(p.version);
      const double ms = t ? MsBetween(p.replied, *t) : std::nan("");
      if (!t || ms > o.timeout_ms) {
        ++never_pairs;
        ++never_nodes[n->id];
        continue;
      }
      ++applied;
      latencies.push_back(ms);
      first = std::isnan(first) ? ms : std::min(first, ms);
      last = std::isnan(last) ? ms : std::max(last, ms);
    }
    row["applied"] = applied;
    row["first_ms"] = Round(first);
    row["last_ms"] = Round(last);
    if (applied == fleet.size()) convergence.push_back(last);
    out["pushes"].push_back(row);
  }
  // The same latencies by the instance each node was connected to at the
  // end (with etcd: the instance the pushes were committed through, and the
  // one that learnt them from its watch).
  out["latency_ms_by_mgmt"] = Json::object();
  {
    std::map<std::string, std::vector<double>> by;
    for (auto& n : fleet) {
      std::vector<double>& v = by[n->client->current_mgmt()];
      for (const Push& p : pushes) {
        if (!p.error.empty()) continue;
        auto t = n->AppliedAt(p.version);
        if (t && MsBetween(p.replied, *t) <= o.timeout_ms) v.push_back(MsBetween(p.replied, *t));
      }
    }
    for (auto& [addr, v] : by) {
      std::sort(v.begin(), v.end());
      out["latency_ms_by_mgmt"][addr.empty() ? "none" : addr] =
          Json{{"samples", v.size()},
               {"p50", Round(Percentile(v, 0.50))},
               {"p99", Round(Percentile(v, 0.99))},
               {"max", Round(v.empty() ? std::nan("") : v.back())}};
    }
  }
  std::sort(latencies.begin(), latencies.end());
  std::sort(convergence.begin(), convergence.end());
  out["failed_pushes"] = failed_pushes;
  out["latency_ms"] = Json{{"samples", latencies.size()},
                           {"p50", Round(Percentile(latencies, 0.50))},
                           {"p90", Round(Percentile(latencies, 0.90))},
                           {"p99", Round(Percentile(latencies, 0.99))},
                           {"max", Round(latencies.empty() ? std::nan("") : latencies.back())}};
  out["convergence_ms"] = Json{{"pushes", convergence.size()},
                               {"p50", Round(Percentile(convergence, 0.50))},
                               {"p99", Round(Percentile(convergence, 0.99))},
                               {"max", Round(convergence.empty() ? std::nan("") : convergence.back())}};
  out["never_applied"] = Json{{"pairs", never_pairs}, {"nodes", never_nodes.size()}, {"ids", Json::array()}};
  for (const auto& [id, count] : never_nodes) {
    if (out["never_applied"]["ids"].size() < 20) out["never_applied"]["ids"].push_back(id);
  }
  out["mgmt_processes"] = Json::array();
  for (size_t i = 0; i < mgmt_pids.size(); ++i) {
    out["mgmt_processes"].push_back(Json{{"pid", mgmt_pids[i]},
                                         {"cpu_s", Round(after[i].cpu_s - before[i].cpu_s)},
                                         {"rss_before_kb", before[i].rss_kb},
                                         {"rss_after_kb", after[i].rss_kb},
                                         {"rss_peak_sampled_kb", sampled_peak[i]},
                                         {"vmhwm_kb", after[i].hwm_kb},
                                         {"vmhwm_reset_before_pushes", peak_reset[i]}});
  }
  const ProcSample self = SampleProc(getpid());
  out["sim_cpu_s"] = Round(self.cpu_s);
  stop_all();

  if (o.json) {
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("mgmt-fleet-sim: %d %s nodes (apply %s), %zu weir-mgmt, pushes to %s\n", o.nodes,
              o.kind.c_str(), o.apply.c_str(), mgmt.size(), push_to.ToString().c_str());
  std::printf("fleet at version %llu in %.0f ms;", static_cast<unsigned long long>(*initial), converge_ms);
  for (const auto& [addr, count] : per_mgmt) std::printf(" %s: %d nodes", addr.c_str(), count);
  std::printf("\n\n%5s %8s %10s %9s %9s %8s\n", "push", "version", "request", "first", "last", "applied");
  for (const Json& row : out["pushes"]) {
    if (row.contains("error")) {
      std::printf("%5d  error: %s\n", row["push"].get<int>(), row["error"].get<std::string>().c_str());
      continue;
    }
    std::printf(
        "%5d %8llu %8.2fms %7.2fms %7.2fms %8zu\n", row["push"].get<int>(),
        static_cast<unsigned long long>(row["version"].get<uint64_t>()), row["request_ms"].get<double>(),
        row["first_ms"].is_null() ? std::nan("") : row["first_ms"].get<double>(),
        row["last_ms"].is_null() ? std::nan("") : row["last_ms"].get<double>(), row["applied"].get<size_t>());
  }
  auto fig = [](const Json& v) { return v.is_null() ? std::nan("") : v.get<double>(); };
  const Json& l = out["latency_ms"];
  std::printf(
      "\npush -> applied after the reply (%zu samples): p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms\n",
      l["samples"].get<size_t>(), fig(l["p50"]), fig(l["p90"]), fig(l["p99"]), fig(l["max"]));
  for (const auto& [addr, v] : out["latency_ms_by_mgmt"].items()) {
    std::printf("  nodes on %s%s: p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", addr.c_str(),
                addr == push_to.ToString() ? " (pushed through)" : "", fig(v["p50"]), fig(v["p99"]),
                fig(v["max"]));
  }
  const Json& c = out["convergence_ms"];
  std::printf("fleet convergence, reply -> last node (%zu pushes): p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
              c["pushes"].get<size_t>(), fig(c["p50"]), fig(c["p99"]), fig(c["max"]));
  std::printf("never applied within %d ms: %zu node x push pairs, %zu nodes; failed pushes: %zu\n",
              o.timeout_ms, never_pairs, never_nodes.size(), failed_pushes);
  for (const Json& m : out["mgmt_processes"]) {
    std::printf(
        "weir-mgmt pid %d: %.2f CPU s over the pushes, RSS %ld -> %ld kB, peak %ld kB (VmHWM %ld kB%s)\n",
        m["pid"].get<int>(), fig(m["cpu_s"]), m["rss_before_kb"].get<long>(), m["rss_after_kb"].get<long>(),
        m["rss_peak_sampled_kb"].get<long>(), m["vmhwm_kb"].get<long>(),
        m["vmhwm_reset_before_pushes"].get<bool>() ? ", reset before the pushes" : ", process lifetime");
  }
  std::printf("simulator CPU: %.2f s\n", fig(out["sim_cpu_s"]));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "mgmt-fleet-sim: N simulated weir nodes (real NodeClients) and timed pushes through weir-mgmt"};
  Options o;
  app.add_option("--mgmt", o.mgmt_text, "weir-mgmt instances ADDRESS[:PORT][,...]; node i starts on i mod M")
      ->required();
  app.add_option("--token-file", o.token_file, "the mgmt token file")->required();
  app.add_option("--nodes", o.nodes, "simulated nodes")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--kind", o.kind, "the nodes' kind (mixed: alternating)")
      ->check(CLI::IsMember({"fastpath", "recursor", "mixed"}))
      ->capture_default_str();
  app.add_option("--apply", o.apply, "parse: build the changed parts as a node does; none: accept at once")
      ->check(CLI::IsMember({"parse", "none"}))
      ->capture_default_str();
  app.add_option("--pushes", o.pushes, "changes made (tag-add)")
      ->check(CLI::Range(0, 9999))
      ->capture_default_str();
  app.add_option("--interval-ms", o.interval_ms, "from one push's request to the next")
      ->check(CLI::Range(0, 600000))
      ->capture_default_str();
  app.add_option("--timeout-ms", o.timeout_ms,
                 "a node that has not applied a push this long after its reply "
                 "never did")
      ->check(CLI::Range(100, 600000))
      ->capture_default_str();
  app.add_option("--push-to", o.push_to, "index into --mgmt of the instance the pushes are committed through")
      ->capture_default_str();
  app.add_option("--ramp-ms", o.ramp_ms, "spread the nodes' starts over this time")
      ->check(CLI::Range(0, 600000))
      ->capture_default_str();
  app.add_option("--connect-wait-ms", o.connect_wait_ms,
                 "after the ramp, how long every node may take to run the store's version")
      ->check(CLI::Range(100, 3600000))
      ->capture_default_str();
  app.add_option("--mgmt-pid", o.mgmt_pid_text, "PID[,PID]: weir-mgmt processes whose CPU and RSS to sample");
  app.add_flag("--json", o.json, "print one JSON object");
  app.add_option("--log-level", o.log_level, "the node clients' log level")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return Run(o);
}
