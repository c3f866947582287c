// The DPDK worker loop in one process, on one or two lcores, against
// HandleBurst alone. Figures and commands are in bench/RESULTS.md ("DPDK
// worker loop in one process", "Two lcores (#33)").
//
// A plain program, not a Google Benchmark: the phases share one EAL, one
// cache and one worker and are compared with each other. The cache is
// filled up front with plain names (common partition) and weighted tagged
// names in two city partitions; prebuilt Ethernet/IPv4/UDP query frames mix
// them, with sources from both cities. Every query is a cache hit: a first
// pass checks that each one is answered, and the program stops otherwise.
//
// Phases, each on bursts of 32 (DpdkWorker::kBurst):
//   loop     32 mbufs allocated and the prebuilt frames copied in, put on the
//            wire port's RX ring (net_ring); DpdkWorker::Poll() and the RCU
//            quiescent state, as DpdkWorker::Run does; the answers taken off
//            the TX ring and freed.
//   feed     the same without Poll: the mbufs taken back off the RX ring and
//            freed. loop - feed is the worker's own cost per answer.
//   core     WorkerCore::HandleBurst on the same DNS payloads (what the
//            worker calls; the kernel backend calls it the same way).
//   handler  QueryHandler::HandleBurst on them.
//
// --lcores 2: the loop phase on one lcore and then on two in each round.
// Each lcore is set up as the product sets up a worker lcore, with what
// the product shares between lcores (the cache, tag table, city map, the
// RCU domain) shared and the rest its own: WorkerCore (its QueryHandler,
// SWRR table, counters), MissChannel, DpdkWorker, RCU reader registration.
// It also has its own mbuf pool, its own copy of the frames and its own
// pair of net_ring ports (wire and exception): net_ring keeps its
// per-queue packet counts in one array per port, so two queues of one
// ring port would write one cache line from both lcores, which a NIC's
// queues do not. The main lcore runs lcore 0's loop, an EAL worker lcore
// (rte_eal_remote_launch) lcore 1's. Each round: lcore 0 alone, lcore 1
// alone, then both started together, each for S seconds of wall time;
// answers/s by wall time, the two's total over lcore 0 alone, and each
// lcore with two running over itself alone (a guest's two CPUs need not be
// equally fast; --swap-cpus puts lcore 0 on CPU 1 and lcore 1 on CPU 0).
//
// --seconds S: each phase for S seconds per round (--repeat rounds, phases
// interleaved), medians printed. --iterations N: each phase for N bursts
// once, for callgrind: the counts are zeroed before and dumped after each
// phase (CALLGRIND_ZERO_STATS / CALLGRIND_DUMP_STATS_AT), so under
//   valgrind --tool=callgrind --instr-atstart=no dpdk_loop_bench --iterations N
// each phase's dump holds its instructions alone (EAL start and the cache
// fill are not counted); divide by the answers printed.
//
// --dnstap-sample N: dnstap on as in the product (a producer per worker,
// one query and its response in N tapped, the I/O thread writing a file):
// the hit path's cost with the tap hook on. Metrics counters have no off
// switch; they are always in the figures.
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_pause.h>
#include <rte_ring.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_ZERO_STATS
#define CALLGRIND_DUMP_STATS_AT(name)
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#endif

#include "dpdk/port.h"
#include "dpdk/worker.h"
#include "fastpath/frame_util.h"
#include "weir/common/clock.h"
#include "weir/common/rcu.h"
#include "weir/dns/message.h"
#include "weir/dns/writer.h"
#include "weir/dnstap/dnstap.h"
#include "weir/partitions/cache.h"
#include "weir/partitions/citymap.h"
#include "weir/partitions/tagtable.h"

namespace weir::fastpath::dpdk {
namespace {

constexpr uint16_t kBurst = DpdkWorker::kBurst;
constexpr size_t kFrameSlot = 128;  // bytes per prebuilt frame (each fits)
constexpr uint32_t kTtl = 3600;     // no entry ages into its prefetch window during a run

constexpr std::string_view kTags = "cdn.example weight=on ecs=on answer=single level=city\n";
constexpr std::string_view kCities =
    "198.18.0.0/16,alpha,198.18.0.0/24\n"
    "198.19.0.0/16,beta,198.19.0.0/24\n";
// A source address in each city (the last octet varies per query).
constexpr std::array<uint8_t, 4> kCitySource[2] = {{198, 18, 1, 0}, {198, 19, 1, 0}};

enum Phase { kLoop, kFeed, kCore, kHandler, kPhases };
constexpr const char* kPhaseName[kPhases] = {"loop", "feed", "core", "handler"};

struct Options {
  double seconds = 2;
  int repeat = 3;
  uint64_t iterations = 0;  // > 0: the fixed-count (callgrind) mode
  size_t plain = 1000;
  size_t weighted = 1000;
  int only = -1;               // one phase only (for a profiler), or all
  int lcores = 1;              // 2: the loop phase on one lcore, then on two
  bool swap_cpus = false;      // lcore 0 on CPU 1, lcore 1 on CPU 0
  bool rate_limit = false;     // per-source limits on, set so high that nothing is limited
  uint32_t dnstap_sample = 0;  // > 0: every worker taps one query (and response) in N to a file
  // The answers' checksums: "software" (what the worker does on net_ring,
  // which offers no offloads), "offload" (as on a NIC with IPv4 and UDP
  // TX checksum offload: the worker writes the pseudo-header sum only),
  // "off" (udp_checksum_v4 = false: no UDP checksum over IPv4).
  std::string checksums = "software";
};

// A CLI11 check of a number above 0 (CLI11 2.1's PositiveNumber names a
// range up to DBL_MAX in its message).
std::string Positive(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() && *end == '\0' && v > 0) return "";
  return "must be a number above 0, not '" + text + "'";
}

// The command line. --help exits 0; a bad option or value exits 2 with
// CLI11's reason.
Options ParseArgs(int argc, char** argv) {
  Options o;
  CLI::App app{
      "dpdk_loop_bench: the DPDK worker loop against HandleBurst, in one process on one or two lcores "
      "(figures and commands: bench/RESULTS.md)",
      "dpdk_loop_bench"};
  app.add_option("--seconds", o.seconds, "time per phase per round (default 2)")
      ->type_name("S")
      ->check(Positive);
  app.add_option("--repeat", o.repeat, "rounds, phases interleaved; medians printed (default 3)")
      ->type_name("R")
      ->check(Positive);
  app.add_option("--iterations", o.iterations,
                 "run each phase for N bursts of 32 once (callgrind mode); 0: timed by --seconds (default)")
      ->type_name("N");
  app.add_option("--plain", o.plain, "plain names, common partition (default 1000)")->type_name("N");
  app.add_option("--weighted", o.weighted, "weighted tagged names, each in 2 city partitions (default 1000)")
      ->type_name("N");
  std::string only;
  app.add_option("--only", only, "run one phase only, e.g. under perf")
      ->type_name("PHASE")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(kPhaseName), std::end(kPhaseName))));
  app.add_option("--lcores", o.lcores,
                 "2: each round runs the loop phase on lcore 0 alone, lcore 1 alone, then both (EAL -l 0,1), "
                 "each with its own ports, pool, frames and worker; the other phases stay on one (default 1)")
      ->type_name("N")
      ->check(CLI::IsMember({1, 2}));
  app.add_flag(
      "--swap-cpus", o.swap_cpus,
      "lcore 0 (the main lcore, the one-lcore run) on CPU 1 and lcore 1 on CPU 0, to tell an lcore's "
      "cost from its CPU's");
  std::string rate_limit = "off";
  app.add_option("--rate-limit", rate_limit,
                 "on: per-source query and byte limits on, set so high that none is reached, to measure "
                 "their cost (default off)")
      ->type_name("SWITCH")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--dnstap-sample", o.dnstap_sample,
                 "N > 0: dnstap on, as in the product: each worker taps one client query and its response in "
                 "N, written by the dnstap I/O thread to a file in the temporary directory, removed at exit "
                 "(default 0: off)")
      ->type_name("N");
  app.add_option("--checksums", o.checksums,
                 "software (default: net_ring has no offloads), offload (as a NIC with IPv4/UDP TX checksum "
                 "offload), off (no IPv4 UDP checksum)")
      ->type_name("MODE")
      ->check(CLI::IsMember({"software", "offload", "off"}));
  try {
    app.parse(argc, argv);
    if (o.plain + o.weighted == 0) throw CLI::ValidationError("--plain, --weighted", "no names to query");
    if (o.lcores > 1 && o.iterations > 0)
      throw CLI::ValidationError("--lcores, --iterations", "the fixed-count (callgrind) mode runs one lcore");
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }
  for (int ph = 0; ph < kPhases; ++ph) {
    if (only == kPhaseName[ph]) o.only = ph;
  }
  o.rate_limit = rate_limit == "on";
  return o;
}

// ---------------------------------------------------------------- EAL

// One lcore's own DPDK objects: its mbuf pool, and its wire port and
// exception port made of rings.
struct Lane {
  rte_mempool* pool = nullptr;
  rte_ring* wire_rx = nullptr;  // the bench enqueues queries here
  rte_ring* wire_tx = nullptr;  // the worker's answers
  rte_ring* kernel_rx = nullptr;
  rte_ring* kernel_tx = nullptr;
  int wire = -1;
  int kernel = -1;
  bool started = false;
};

struct Dpdk {
  std::string prefix;
  bool eal = false;
  std::vector<Lane> lanes;  // [0] on the main lcore, [1] on the EAL worker lcore
  unsigned worker_lcore = 0;
};
Dpdk g_dpdk;

void Cleanup() {
  for (Lane& l : g_dpdk.lanes) {
    if (!l.started) continue;
    rte_eth_dev_stop(static_cast<uint16_t>(l.wire));
    rte_eth_dev_stop(static_cast<uint16_t>(l.kernel));
    l.started = false;
  }
  if (g_dpdk.eal) {
    rte_eal_cleanup();
    g_dpdk.eal = false;
  }
  std::error_code ec;
  for (const char* base : {"/var/run/dpdk/", "/tmp/dpdk/"})
    std::filesystem::remove_all(base + g_dpdk.prefix, ec);
}

[[noreturn]] void Fail(const std::string& why) {
  std::fprintf(stderr, "dpdk_loop_bench: %s\n", why.c_str());
  Cleanup();
  std::exit(1);
}

// EAL as the unit test starts it, no hugepages, no PCI: main lcore 0 on
// CPU 0, and lcore 1 on CPU 1 as a worker lcore for --lcores 2 (the other
// way round with --swap-cpus). Each lane gets its pool and its wire and
// exception ports made of rings.
void StartDpdk(const char* argv0, int lcores, bool swap_cpus) {
  g_dpdk.prefix = "weir-bench-" + std::to_string(getpid());
  std::vector<std::string> args = {
      argv0,
      swap_cpus ? "--lcores" : "-l",
      swap_cpus ? (lcores == 1 ? "0@1" : "0@1,1@0") : (lcores == 1 ? "0" : "0,1"),
      "--no-huge",
      "-m",
      "256",
      "--no-pci",
      "--no-shconf",
      "--no-telemetry",
      "--log-level=error",
      "--file-prefix=" + g_dpdk.prefix};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  if (rte_eal_init(static_cast<int>(argv.size()), argv.data()) < 0)
    Fail(std::string("rte_eal_init: ") + rte_strerror(rte_errno));
  g_dpdk.eal = true;
  if (lcores > 1) {
    g_dpdk.worker_lcore = rte_get_next_lcore(rte_get_main_lcore(), /*skip_main=*/1, /*wrap=*/0);
    if (g_dpdk.worker_lcore >= RTE_MAX_LCORE) Fail("the EAL has no worker lcore");
  }
  g_dpdk.lanes.resize(static_cast<size_t>(lcores));
  for (int i = 0; i < lcores; ++i) {
    Lane& l = g_dpdk.lanes[static_cast<size_t>(i)];
    const std::string n = std::to_string(i);
    l.pool = rte_pktmbuf_pool_create(("bench_pool" + n).c_str(), 4095, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
                                     SOCKET_ID_ANY);
    if (l.pool == nullptr) Fail(std::string("mbuf pool: ") + rte_strerror(rte_errno));
    auto ring = [&](const char* name) {
      const std::string rn = name + n;
      rte_ring* r = rte_ring_create(rn.c_str(), 1024, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
      if (r == nullptr) Fail("ring " + rn + ": " + rte_strerror(rte_errno));
      return r;
    };
    l.wire_rx = ring("wire_rx");
    l.wire_tx = ring("wire_tx");
    l.kernel_rx = ring("kernel_rx");
    l.kernel_tx = ring("kernel_tx");
    l.wire = rte_eth_from_rings(("wire" + n).c_str(), &l.wire_rx, 1, &l.wire_tx, 1, SOCKET_ID_ANY);
    l.kernel = rte_eth_from_rings(("kernel" + n).c_str(), &l.kernel_rx, 1, &l.kernel_tx, 1, SOCKET_ID_ANY);
    if (l.wire < 0 || l.kernel < 0) Fail("rte_eth_from_rings failed");
    PortSetup setup;
    setup.pool = l.pool;
    setup.rx_descriptors = setup.tx_descriptors = 512;
    uint64_t offloads = 0;
    for (auto [name, id] : {std::pair{"wire", l.wire}, std::pair{"kernel", l.kernel}}) {
      if (absl::Status st = StartPort(name + n, static_cast<uint16_t>(id), setup, &offloads); !st.ok())
        Fail(std::string(st.message()));
    }
    l.started = true;
  }
}

// ---------------------------------------------------------------- data

dns::NameKey Key(const std::string& text) {
  dns::NameKey k;
  if (!dns::NameKeyFromText(text, &k)) Fail("bad name " + text);
  return k;
}

// A query as a stub resolver sends it: RD, EDNS 1232.
std::vector<uint8_t> Query(uint16_t id, const dns::NameKey& k) {
  std::vector<uint8_t> q(512);
  dns::ResponseWriter w(q.data(), q.size());
  w.Begin(id, dns::flag::kRd, k.span(), dns::type::kA, dns::klass::kIn);
  w.BeginOpt(1232, false);
  q.resize(w.Finish(q.size()));
  return q;
}

void Insert(partitions::Cache& cache, partitions::Partition p, const dns::NameKey& q,
            const std::vector<std::array<uint8_t, 4>>& addrs, const std::vector<uint8_t>& weights,
            uint32_t now) {
  partitions::CacheEntryBuilder b({p, q.span(), dns::type::kA, dns::klass::kIn});
  for (const auto& a : addrs) b.AddAddress(q.span(), a, kTtl);
  if (!weights.empty()) b.SetWeights(weights);
  auto e = b.Build(partitions::EntryKind::kPositive, now);
  if (!e.ok()) Fail("cache entry: " + std::string(e.status().message()));
  cache.Insert(*std::move(e));
}

// The prebuilt query frames, kFrameSlot bytes apart.
struct Frames {
  std::vector<uint8_t> bytes;
  std::vector<uint16_t> len;
  size_t count() const { return len.size(); }
  const uint8_t* frame(size_t i) const { return bytes.data() + i * kFrameSlot; }
};

// Fills the cache and builds the mixed query set: each plain name once
// (from either city) and each weighted name once from each city, shuffled.
Frames Populate(partitions::Cache& cache, const partitions::CityMap& map, uint32_t now, const Options& o) {
  std::mt19937_64 rng(42);
  struct Q {
    dns::NameKey name;
    std::array<uint8_t, 4> src;
  };
  std::vector<Q> queries;
  auto source = [&](int city) {
    std::array<uint8_t, 4> a = kCitySource[city];
    a[3] = static_cast<uint8_t>(1 + rng() % 250);
    return a;
  };
  for (size_t i = 0; i < o.plain; ++i) {
    const dns::NameKey q = Key("h" + std::to_string(i) + ".plain.example");
    std::vector<std::array<uint8_t, 4>> addrs;
    for (size_t j = 0; j <= i % 4; ++j)
      addrs.push_back({203, 0, 113, static_cast<uint8_t>((i + j) % 250 + 1)});
    Insert(cache, partitions::kCommonPartition, q, addrs, {}, now);
    queries.push_back({q, source(static_cast<int>(i % 2))});
  }
  for (size_t i = 0; i < o.weighted; ++i) {
    const dns::NameKey q = Key("w" + std::to_string(i) + ".cdn.example");
    for (int city = 0; city < 2; ++city) {
      const std::array<uint8_t, 4> src = source(city);
      const common::IpAddress who = common::IpAddress::V4(dns::Load32(src.data()));
      const partitions::Partition p =
          partitions::PartitionKey(partitions::CacheLevel::kCity, map.Lookup(who), who);
      if (partitions::LevelOf(p) != partitions::CacheLevel::kCity) Fail("the city partition is not a city's");
      const size_t n = 2 + (i + city) % 3;  // 2-4 addresses
      std::vector<std::array<uint8_t, 4>> addrs;
      std::vector<uint8_t> weights;
      for (size_t j = 0; j < n; ++j) {
        addrs.push_back({static_cast<uint8_t>(city == 0 ? 192 : 198),
                         static_cast<uint8_t>(city == 0 ? 0 : 51), static_cast<uint8_t>(city == 0 ? 2 : 100),
                         static_cast<uint8_t>((i * 4 + j) % 250 + 1)});
        weights.push_back(static_cast<uint8_t>(1 + (i + j) % 4));
      }
      Insert(cache, p, q, addrs, weights, now);
      queries.push_back({q, src});
    }
  }
  std::shuffle(queries.begin(), queries.end(), rng);

  Frames f;
  f.bytes.resize(queries.size() * kFrameSlot);
  for (size_t i = 0; i < queries.size(); ++i) {
    frame::testing::FrameSpec s;
    s.src4 = queries[i].src;
    s.sport = static_cast<uint16_t>(1024 + rng() % 64000);
    s.payload = Query(static_cast<uint16_t>(rng()), queries[i].name);
    const std::vector<uint8_t> b = frame::testing::Build(s);
    if (b.size() > kFrameSlot) Fail("a query frame is longer than its slot");
    std::memcpy(f.bytes.data() + i * kFrameSlot, b.data(), b.size());
    f.len.push_back(static_cast<uint16_t>(b.size()));
  }
  return f;
}

// ---------------------------------------------------------------- phases

// Hits never ask the backend for a route; anything else is a setup error.
class NullIo final : public WorkerIo {
 public:
  ClientRoute HoldRoute(size_t) override {
    ++calls;
    return {};
  }
  void SendHeld(const ClientRoute&, std::span<const uint8_t>) override { ++calls; }
  uint64_t calls = 0;
};

// One lane's phases. Alone in its cache lines: on two lcores each writes
// its own.
struct alignas(64) Bench {
  const Lane* lane = nullptr;
  const Frames* frames = nullptr;
  size_t next = 0;  // the next frame to feed
  DpdkWorker* worker = nullptr;
  WorkerCore* core = nullptr;
  common::RcuThread* rcu = nullptr;
  const common::Clock* clock = nullptr;
  NullIo io;
  // The handler phases' view of the same frames.
  std::vector<QueryHandler::BurstPacket> packets;
  std::unique_ptr<MissRequest[]> misses{new MissRequest[kBurst]};
  std::unique_ptr<uint8_t[]> outs{new uint8_t[size_t{kBurst} * 1500]};

  // 32 mbufs with the next frames, on the wire port's RX ring.
  void Refill() {
    rte_mbuf* m[kBurst];
    if (rte_pktmbuf_alloc_bulk(lane->pool, m, kBurst) != 0) Fail("the mbuf pool ran dry");
    const size_t n = frames->count();
    for (uint16_t j = 0; j < kBurst; ++j) {
      const uint16_t len = frames->len[next];
      std::memcpy(rte_pktmbuf_mtod(m[j], uint8_t*), frames->frame(next), len);
      m[j]->data_len = len;
      m[j]->pkt_len = len;
      if (++next == n) next = 0;
    }
    if (rte_ring_enqueue_bulk(lane->wire_rx, reinterpret_cast<void* const*>(m), kBurst, nullptr) != kBurst)
      Fail("the RX ring is full");
  }
  // Frees what is on `ring`; returns how many.
  static size_t Drain(rte_ring* ring) {
    void* objs[2 * kBurst];
    size_t total = 0;
    unsigned n;
    while ((n = rte_ring_dequeue_burst(ring, objs, 2 * kBurst, nullptr)) > 0) {
      rte_pktmbuf_free_bulk(reinterpret_cast<rte_mbuf**>(objs), n);
      total += n;
    }
    return total;
  }

  // Each returns the answers (or frames, for the feed) of `bursts` bursts.
  uint64_t Loop(uint64_t bursts) {
    uint64_t answers = 0;
    for (uint64_t i = 0; i < bursts; ++i) {
      Refill();
      worker->Poll();
      rcu->Quiescent();
      answers += Drain(lane->wire_tx);
    }
    return answers;
  }
  uint64_t Feed(uint64_t bursts) {
    uint64_t frames_fed = 0;
    for (uint64_t i = 0; i < bursts; ++i) {
      Refill();
      frames_fed += Drain(lane->wire_rx);
    }
    return frames_fed;
  }
  // The next burst's packets, with this burst's answer buffers.
  QueryHandler::BurstPacket* NextPackets(QueryHandler::BurstPacket* p) {
    const size_t n = packets.size();
    for (uint16_t j = 0; j < kBurst; ++j) {
      p[j] = packets[next];
      p[j].out = outs.get() + size_t{j} * 1500;
      p[j].miss = &misses[j];
      if (++next == n) next = 0;
    }
    return p;
  }
  static uint64_t Replies(const QueryHandler::BurstPacket* p) {
    uint64_t r = 0;
    for (uint16_t j = 0; j < kBurst; ++j)
      r += p[j].verdict == Verdict::kReply || p[j].verdict == Verdict::kReplyAndPrefetch;
    return r;
  }
  uint64_t Core(uint64_t bursts) {
    uint64_t answers = 0;
    QueryHandler::BurstPacket p[kBurst];
    for (uint64_t i = 0; i < bursts; ++i) {
      core->HandleBurst(NextPackets(p), kBurst, clock->NowSeconds(), io);
      answers += Replies(p);
    }
    return answers;
  }
  uint64_t Handler(uint64_t bursts) {
    uint64_t answers = 0;
    QueryHandler::BurstPacket p[kBurst];
    for (uint64_t i = 0; i < bursts; ++i) {
      core->handler().HandleBurst(NextPackets(p), kBurst, clock->NowSeconds());
      answers += Replies(p);
    }
    return answers;
  }
};

uint64_t RunPhase(Bench& b, Phase ph, uint64_t bursts) {
  switch (ph) {
    case kLoop:
      return b.Loop(bursts);
    case kFeed:
      return b.Feed(bursts);
    case kCore:
      return b.Core(bursts);
    case kHandler:
      return b.Handler(bursts);
    case kPhases:
      break;
  }
  return 0;
}

double ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e9 + double(ts.tv_nsec);
}

struct Sample {
  uint64_t answers = 0;
  double wall_ns = 0;
  double cpu_ns = 0;
  double ns_per_answer() const { return answers ? cpu_ns / double(answers) : 0; }
  double per_second() const { return wall_ns > 0 ? double(answers) * 1e9 / wall_ns : 0; }
};

Sample Timed(Bench& b, Phase ph, double seconds, uint64_t fixed_bursts) {
  Sample s;
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = ThreadCpuNs();
  if (fixed_bursts > 0) {
    s.answers = RunPhase(b, ph, fixed_bursts);
  } else {
    const auto end = t0 + std::chrono::duration<double>(seconds);
    do {
      s.answers += RunPhase(b, ph, 256);
    } while (std::chrono::steady_clock::now() < end);
  }
  s.cpu_ns = ThreadCpuNs() - c0;
  s.wall_ns = double(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  return s;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The loop phase of lane 1 on the EAL worker lcore, started when the main
// lcore says so.
struct LaneRun {
  Bench* bench = nullptr;
  double seconds = 0;
  std::atomic<bool> ready{false};
  std::atomic<bool> go{false};
  Sample sample;
};

int RunOnWorkerLcore(void* arg) {
  auto* r = static_cast<LaneRun*>(arg);
  // This lcore's own RCU reader registration, as DpdkWorker::Run makes one.
  common::RcuThread rcu;
  common::RcuThread* const main_rcu = r->bench->rcu;
  r->bench->rcu = &rcu;
  r->ready.store(true, std::memory_order_release);
  while (!r->go.load(std::memory_order_acquire)) rte_pause();
  r->sample = Timed(*r->bench, kLoop, r->seconds, 0);
  r->bench->rcu = main_rcu;
  return 0;
}

// The loop phase on two lcores at once, each for `seconds` of wall time:
// lane `first` on the main lcore, lane `second` on the worker lcore; or,
// `first` null, lane `second` alone on the worker lcore.
std::array<Sample, 2> LoopOnLanes(Bench* first, Bench& second, double seconds) {
  LaneRun run;
  run.bench = &second;
  run.seconds = seconds;
  if (const int r = rte_eal_remote_launch(RunOnWorkerLcore, &run, g_dpdk.worker_lcore); r != 0)
    Fail(std::string("rte_eal_remote_launch: ") + rte_strerror(-r));
  while (!run.ready.load(std::memory_order_acquire)) rte_pause();
  run.go.store(true, std::memory_order_release);
  const Sample s = first != nullptr ? Timed(*first, kLoop, seconds, 0) : Sample{};
  rte_eal_wait_lcore(g_dpdk.worker_lcore);
  return {s, run.sample};
}

// One pass over every query through the worker: each one answered with
// NOERROR and at least one record, as a hit, and nothing left over.
void Verify(Bench& b) {
  const WorkerCounters& wc = b.core->counters();
  const uint64_t hits0 = wc.hits.Read(), misses0 = wc.misses.Read();
  const size_t bursts = (b.frames->count() + kBurst - 1) / kBurst;
  b.next = 0;
  uint64_t answered = 0, answer_bytes = 0, query_bytes = 0;
  for (size_t i = 0; i < b.frames->count(); ++i) query_bytes += b.frames->len[i];
  for (size_t i = 0; i < bursts; ++i) {
    b.Refill();
    b.worker->Poll();
    b.rcu->Quiescent();
    void* objs[2 * kBurst];
    unsigned n;
    while ((n = rte_ring_dequeue_burst(b.lane->wire_tx, objs, 2 * kBurst, nullptr)) > 0) {
      for (unsigned j = 0; j < n; ++j) {
        auto* m = static_cast<rte_mbuf*>(objs[j]);
        const uint8_t* d = rte_pktmbuf_mtod(m, const uint8_t*);
        constexpr size_t kDns = frame::kEthHeader + frame::kIpv4Header + frame::kUdpHeader;
        if (m->data_len < kDns + 12) Fail("a short answer frame");
        const uint8_t* h = d + kDns;
        const bool qr = (h[2] & 0x80) != 0;
        const int rcode = h[3] & 0x0f;
        const int ancount = (h[6] << 8) | h[7];
        answer_bytes += m->data_len;
        if (!qr || rcode != 0 || ancount < 1)
          Fail("an answer is not a NOERROR response with records (rcode " + std::to_string(rcode) + ")");
      }
      rte_pktmbuf_free_bulk(reinterpret_cast<rte_mbuf**>(objs), n);
      answered += n;
    }
  }
  const uint64_t sent = bursts * kBurst;
  const PortCounters& pc = b.worker->counters(0);
  uint64_t drops = 0;
  for (const auto& d : pc.drops) drops += d.Read();
  if (answered != sent || wc.hits.Read() - hits0 != sent || wc.misses.Read() != misses0 ||
      b.worker->held() != 0 || drops != 0 || pc.to_kernel.Read() != 0) {
    Fail("not every query was a cache hit answered by the worker: " + std::to_string(sent) + " sent, " +
         std::to_string(answered) + " answered, " + std::to_string(wc.hits.Read() - hits0) + " hits, " +
         std::to_string(wc.misses.Read() - misses0) + " misses, " + std::to_string(drops) + " drops, " +
         std::to_string(pc.to_kernel.Read()) + " to the kernel");
  }
  // And the handler phases' packets, once round.
  b.next = 0;
  const uint64_t handled = b.Core(bursts);
  if (handled != sent || b.io.calls != 0) Fail("WorkerCore::HandleBurst did not answer every query");
  b.next = 0;
  std::printf(
      "checked: %llu queries, all answered from the cache by the worker and by HandleBurst; "
      "frames of %.1f bytes (query) and %.1f bytes (answer) on average\n",
      static_cast<unsigned long long>(sent), double(query_bytes) / double(b.frames->count()),
      double(answer_bytes) / double(answered));
}

int Main(int argc, char** argv) {
  const Options o = ParseArgs(argc, argv);
  StartDpdk(argv[0], o.lcores, o.swap_cpus);

  const common::Clock& clock = common::SystemClock::Instance();
  SharedState shared;
  {
    auto tags = partitions::TagTable::FromText(kTags);
    if (!tags.ok()) Fail("tags: " + std::string(tags.status().message()));
    shared.tags.Publish(*std::move(tags));
    auto cm = partitions::CityMap::FromCsv(kCities);
    if (!cm.ok()) Fail("city map: " + std::string(cm.status().message()));
    shared.citymap.Publish(*std::move(cm));
  }
  shared.clock = &clock;
  shared.cache = std::make_unique<partitions::Cache>(partitions::CacheOptions{}, clock);
  auto rcu = std::make_unique<common::RcuThread>();
  const Frames frames = Populate(*shared.cache, *shared.citymap.Get(), clock.NowSeconds(), o);

  HandlerOptions options;
  common::Cidr allow;
  if (!common::ParseCidr("198.18.0.0/15", &allow).ok()) Fail("acl");
  options.allow = {allow};
  if (o.rate_limit) {
    options.rate_limit.qps = options.rate_limit.burst = 10000000;
    options.rate_limit.bytes_per_second = 1000000000;
  }
  // Per lcore, in the order the product makes them (Node::Prepare: the
  // channels, then the cores; Backend::OpenPorts: the workers), so that
  // what the allocator puts side by side here is what it does there.
  const size_t lanes = g_dpdk.lanes.size();
  std::vector<std::unique_ptr<MissChannel>> channels;
  std::vector<std::unique_ptr<WorkerCore>> cores;
  std::vector<std::unique_ptr<DpdkWorker>> workers;
  for (size_t i = 0; i < lanes; ++i) channels.push_back(std::make_unique<MissChannel>());
  for (size_t i = 0; i < lanes; ++i) {
    cores.push_back(
        std::make_unique<WorkerCore>(static_cast<int>(i), options, &shared, channels[i].get(), [] {}));
  }
  // dnstap as the product sets it up: one producer per worker, one I/O
  // thread writing Frame Streams (here to a file).
  struct TapFile {
    std::filesystem::path path;
    ~TapFile() {
      std::error_code ec;
      if (!path.empty()) std::filesystem::remove(path, ec);
    }
  } tap_file;
  std::unique_ptr<dnstap::Writer> tap;
  if (o.dnstap_sample > 0) {
    tap_file.path =
        std::filesystem::temp_directory_path() / ("dpdk_loop_bench." + std::to_string(getpid()) + ".dnstap");
    dnstap::Options to;
    to.file_path = tap_file.path.string();
    to.sample = o.dnstap_sample;
    to.queue_size = 16384;  // the largest the writer takes
    auto w = dnstap::Writer::Open(to, lanes);
    if (!w.ok()) Fail(std::string("dnstap: ") + std::string(w.status().message()));
    tap = std::move(*w);
    for (size_t i = 0; i < lanes; ++i) cores[i]->SetTap(&tap->producer(i));
  }
  const frame::PortAddresses port = frame::testing::Port();
  for (size_t i = 0; i < lanes; ++i) {
    WorkerPort wp;
    wp.port = static_cast<uint16_t>(g_dpdk.lanes[i].wire);
    wp.exception = g_dpdk.lanes[i].kernel;
    wp.addresses = &port;
    if (o.checksums == "offload") {  // what OpenPorts sets for a port with both offloads
      wp.reply.offload_ip_checksum = wp.reply.offload_udp_checksum = true;
      wp.tx_flags_v4 = RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM | RTE_MBUF_F_TX_UDP_CKSUM;
      wp.tx_flags_v6 = RTE_MBUF_F_TX_IPV6 | RTE_MBUF_F_TX_UDP_CKSUM;
    } else if (o.checksums == "off") {
      wp.reply.udp_checksum_v4 = false;
    }
    workers.push_back(std::make_unique<DpdkWorker>(*cores[i], clock, static_cast<int>(i),
                                                   std::vector<WorkerPort>{wp}, g_dpdk.lanes[i].pool, 0));
  }
  // Lane 0 reads the frames Populate built, each other lane its own copy.
  std::vector<std::unique_ptr<Frames>> lane_frames;
  for (size_t i = 1; i < lanes; ++i) lane_frames.push_back(std::make_unique<Frames>(frames));
  std::vector<std::unique_ptr<Bench>> benches;
  for (size_t i = 0; i < lanes; ++i) {
    auto lb = std::make_unique<Bench>();
    lb->lane = &g_dpdk.lanes[i];
    lb->frames = i == 0 ? &frames : lane_frames[i - 1].get();
    lb->worker = workers[i].get();
    lb->core = cores[i].get();
    lb->rcu = rcu.get();  // the worker lcore registers its own while it runs (LoopOnLanes)
    lb->clock = &clock;
    const Frames& fr = *lb->frames;
    for (size_t j = 0; j < fr.count(); ++j) {
      const uint8_t* f = fr.frame(j);
      const frame::Parsed p = frame::Classify(f, fr.len[j], port);
      if (p.cls != frame::FrameClass::kQuery) Fail("a prebuilt frame is not a query");
      QueryHandler::BurstPacket q;
      q.pkt = f + p.dns_offset();
      q.len = p.dns_len;
      q.client = ClientInfo{frame::ClientOf(f, p), false};
      q.out_cap = 1500;
      lb->packets.push_back(q);
    }
    benches.push_back(std::move(lb));
  }
  Bench& b = *benches[0];
  WorkerCore& core = *cores[0];

  std::printf(
      "dpdk_loop_bench: %zu plain names + %zu weighted names x 2 cities = %zu queries, bursts of %u, "
      "%s, %s checksums, dnstap %s\n",
      o.plain, o.weighted, frames.count(), unsigned{kBurst},
      lanes == 1 ? "one lcore" : "the loop phase on one lcore, then on two", o.checksums.c_str(),
      o.dnstap_sample > 0 ? ("one in " + std::to_string(o.dnstap_sample)).c_str() : "off");
  for (size_t i = 0; i < lanes; ++i) {
    Verify(*benches[i]);
    if (PendingClient pc; channels[i]->misses.Pop(&pc))
      Fail("the verification pass handed a query upstream (a prefetch?)");
  }

  const char* what[kPhases] = {
      "loop     (refill RX ring, Poll, drain TX ring)",
      "feed     (refill RX ring, drain it; no Poll)",
      "core     (WorkerCore::HandleBurst alone)",
      "handler  (QueryHandler::HandleBurst alone)",
  };
  double ns[kPhases] = {};
  if (o.iterations > 0) {
    // Callgrind mode: each phase once, its counts alone in its own dump.
    CALLGRIND_START_INSTRUMENTATION;
    for (int ph = 0; ph < kPhases; ++ph) {
      if (o.only >= 0 && ph != o.only) continue;
      b.next = 0;
      CALLGRIND_ZERO_STATS;
      const Sample s = Timed(b, static_cast<Phase>(ph), 0, o.iterations);
      CALLGRIND_DUMP_STATS_AT(kPhaseName[ph]);
      ns[ph] = s.ns_per_answer();
      std::printf("%s: %llu answers in %llu bursts, %.1f ns/answer\n", what[ph],
                  static_cast<unsigned long long>(s.answers), static_cast<unsigned long long>(o.iterations),
                  ns[ph]);
    }
    CALLGRIND_STOP_INSTRUMENTATION;
  } else {
    std::vector<double> per[kPhases];
    // --lcores 2: answers/s (wall time) of the loop on one lcore, of each
    // lcore when two run, their total and its ratio to the one.
    // And each one's thread CPU time per answer: with a CPU to itself, an
    // lcore that no other lcore slows (no line both write) answers in the
    // same CPU time as alone; the sum over the lcores of their answers per
    // CPU-second with two running over the same lcore's alone is the ratio
    // they would reach on CPUs of their own.
    std::vector<double> one, lane0, lane1, total, ratio;
    std::vector<double> one_ns, lane0_ns, lane1_ns, cpu_ratio;
    // Lane 1 alone on the worker lcore, and the sum of each lcore's
    // answers/s with two running over its answers/s alone.
    std::vector<double> one1, own;
    const bool two = lanes > 1 && (o.only < 0 || o.only == kLoop);
    for (int r = 0; r < o.repeat; ++r) {
      std::printf("round %d:", r + 1);
      for (int ph = 0; ph < kPhases; ++ph) {
        if (o.only >= 0 && ph != o.only) continue;
        const Sample s = Timed(b, static_cast<Phase>(ph), o.seconds, 0);
        per[ph].push_back(s.ns_per_answer());
        std::printf("  %s %.1f ns (cpu/wall %.2f)", kPhaseName[ph], s.ns_per_answer(), s.cpu_ns / s.wall_ns);
        if (ph != kLoop || !two) continue;
        // Lane 1 alone on its own lcore too: the two CPUs of a guest need
        // not be equally fast, and each lcore is compared with its own.
        const Sample alone1 = LoopOnLanes(nullptr, *benches[1], o.seconds)[1];
        const std::array<Sample, 2> both = LoopOnLanes(benches[0].get(), *benches[1], o.seconds);
        one1.push_back(alone1.per_second());
        own.push_back(both[0].per_second() / s.per_second() + both[1].per_second() / alone1.per_second());
        one.push_back(s.per_second());
        lane0.push_back(both[0].per_second());
        lane1.push_back(both[1].per_second());
        total.push_back(lane0.back() + lane1.back());
        ratio.push_back(total.back() / one.back());
        one_ns.push_back(s.ns_per_answer());
        lane0_ns.push_back(both[0].ns_per_answer());
        lane1_ns.push_back(both[1].ns_per_answer());
        cpu_ratio.push_back(one_ns.back() / lane0_ns.back() + alone1.ns_per_answer() / lane1_ns.back());
        std::printf(
            "  [1 lcore %.2f M/s (lcore 1 alone %.2f); 2 lcores %.2f + %.2f = %.2f M/s (cpu/wall %.2f, "
            "%.2f), "
            "x%.2f, each against itself alone x%.2f; cpu %.1f / %.1f ns, x%.2f]",
            one.back() / 1e6, one1.back() / 1e6, lane0.back() / 1e6, lane1.back() / 1e6, total.back() / 1e6,
            both[0].cpu_ns / both[0].wall_ns, both[1].cpu_ns / both[1].wall_ns, ratio.back(), own.back(),
            lane0_ns.back(), lane1_ns.back(), cpu_ratio.back());
      }
      std::printf("\n");
      std::fflush(stdout);
    }
    for (int ph = 0; ph < kPhases; ++ph) ns[ph] = per[ph].empty() ? 0 : Median(per[ph]);
    std::printf("medians of %d rounds of %.1f s per phase, thread CPU time:\n", o.repeat, o.seconds);
    if (two) {
      std::printf(
          "loop phase, answers/s by wall time, medians of %d rounds:\n"
          "  1 lcore:                %6.2f M/s\n"
          "  2 lcores, lcore %u:      %6.2f M/s\n"
          "  2 lcores, lcore %u:      %6.2f M/s\n"
          "  2 lcores, total:        %6.2f M/s\n"
          "  2 lcores / 1 lcore:     %6.2f x (median of the rounds' ratios; of the medians %.2f x)\n"
          "  lcore %u alone:          %6.2f M/s\n"
          "  each lcore with two running over itself alone, summed: %.2f x\n",
          o.repeat, Median(one) / 1e6, rte_get_main_lcore(), Median(lane0) / 1e6, g_dpdk.worker_lcore,
          Median(lane1) / 1e6, Median(total) / 1e6, Median(ratio), Median(total) / Median(one),
          g_dpdk.worker_lcore, Median(one1) / 1e6, Median(own));
      std::printf(
          "loop phase, thread CPU time per answer, medians:\n"
          "  1 lcore %.1f ns; 2 lcores %.1f ns (lcore %u), %.1f ns (lcore %u)\n"
          "  answers per CPU-second, each lcore with two running over itself alone, summed: %.2f x (the "
          "ratio with a CPU per lcore and nothing else running)\n",
          Median(one_ns), Median(lane0_ns), rte_get_main_lcore(), Median(lane1_ns), g_dpdk.worker_lcore,
          Median(cpu_ratio));
    }
  }
  for (size_t i = 0; i < lanes; ++i) {
    if (PendingClient pc;
        cores[i]->counters().misses.Read() != 0 || benches[i]->io.calls != 0 || channels[i]->misses.Pop(&pc))
      Fail("a measured query missed the cache or was handed upstream");
  }

  {
    // The per-(name, partition, address) answer counters the handler keeps:
    // once they are full, each further key probes the table and counts overflow.
    const AnswerCounters& ac = core.handler().answer_counters();
    size_t used = 0;
    for (size_t i = 0; i < AnswerCounters::kSlots; ++i)
      used += ac.slots()[i].key.load(std::memory_order_relaxed) != 0;
    std::printf("answer counters: %zu of %zu slots used, %llu answers counted as overflow\n", used,
                AnswerCounters::kSlots, static_cast<unsigned long long>(ac.overflow()));
  }
  if (tap != nullptr) {
    const dnstap::Writer::Totals t = tap->totals();
    std::printf(
        "dnstap (one in %u): %llu messages handed to the writer, %llu dropped, %llu queries sampled out\n",
        o.dnstap_sample, static_cast<unsigned long long>(t.sent), static_cast<unsigned long long>(t.dropped),
        static_cast<unsigned long long>(t.sampled_out));
  }
  if (o.only >= 0) {
    std::printf("  %s: %.1f ns/answer  %.2f M answers/s\n", what[o.only], ns[o.only], 1e3 / ns[o.only]);
    workers.clear();
    rcu.reset();
    Cleanup();
    return 0;
  }
  const double loop = ns[kLoop], feed = ns[kFeed], hb = ns[kCore], qh = ns[kHandler];
  const double worker_ns = loop - feed;
  auto mps = [](double n) { return n > 0 ? 1e3 / n : 0; };
  for (int ph = 0; ph < kPhases; ++ph)
    std::printf("  (%c) %-50s %7.1f ns/answer  %6.2f M answers/s\n", 'a' + ph, what[ph], ns[ph], mps(ns[ph]));
  std::printf("  answers/s per core, full loop (a):                 %6.2f M/s\n", mps(loop));
  std::printf("  worker loop per answer (a) - (b):                  %7.1f ns  = %6.2f M answers/s per core\n",
              worker_ns, mps(worker_ns));
  std::printf("  WorkerCore::HandleBurst per answer (c):            %7.1f ns\n", hb);
  std::printf(
      "  the loop's cost over HandleBurst (a) - (b) - (c):  %7.1f ns  (%.0f %% of the worker's cost)\n",
      worker_ns - hb, worker_ns > 0 ? 100 * (worker_ns - hb) / worker_ns : 0);
  std::printf("  WorkerCore over QueryHandler::HandleBurst (c) - (d): %5.1f ns\n", hb - qh);

  workers.clear();
  rcu.reset();
  Cleanup();
  return 0;
}

}  // namespace
}  // namespace weir::fastpath::dpdk

int main(int argc, char** argv) { return weir::fastpath::dpdk::Main(argc, argv); }
