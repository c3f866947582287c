// Two DPDK worker lcores serving cache hits write no cache line in common.
//
// Two workers are set up as the DPDK backend sets up its lcores (one
// MissChannel, WorkerCore and DpdkWorker each, made in the product's order,
// over one SharedState: cache, tag table, city map; one mbuf pool with its
// per-lcore caches), each on its own EAL worker lcore and its own ring port
// (net_ring counts packets per queue in one array per port, which a NIC's
// queues do not share). After a warm-up (the cache entries' CLOCK bits set,
// SWRR states and answer counters made, the pool's lcore caches filled),
// worker A serves every query again on its lcore, then worker B on its
// own, and the program's writable memory is compared line by line before
// A, between and after B. A line that both changed is written by both
// lcores on the hit path: a shared counter, a cache entry touched per hit,
// a lock word, or two workers' objects side by side in one line. Neither
// may change a line of a cache entry. The per-worker objects must not share
// a line either (the address check; a store that leaves a line's bytes as
// they were is invisible to the comparison).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_pause.h>
#include <rte_ring.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dns/test_util.h"
#include "dpdk/port.h"
#include "dpdk/worker.h"
#include "frame_util.h"
#include "weir/common/rcu.h"
#include "weir/common/tsan.h"
#include "weir/dns/message.h"
#include "weir/dns/writer.h"
#include "weir/partitions/cache.h"
#include "weir/partitions/citymap.h"
#include "weir/partitions/tagtable.h"

#if defined(__SANITIZE_ADDRESS__)
#define WEIR_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WEIR_ASAN 1
#endif
#endif

namespace weir::fastpath::dpdk {
namespace {

constexpr size_t kLine = 64;
constexpr uint16_t kBurst = DpdkWorker::kBurst;
constexpr int kLanes = 2;

constexpr std::string_view kTags = "cdn.example weight=on ecs=on answer=single level=city\n";
constexpr std::string_view kCities =
    "198.18.0.0/16,alpha,198.18.0.0/24\n"
    "198.19.0.0/16,beta,198.19.0.0/24\n";

struct Range {
  uintptr_t begin = 0, end = 0;
  std::string path;  // what /proc/self/maps says is mapped there
  bool Overlaps(const Range& o) const { return begin < o.end && o.begin < end; }
};

// The writable memory of the process as /proc/self/maps lists it, less
// `skip` (the threads' stacks: each thread writes its own).
std::vector<Range> WritableMemory(const std::vector<Range>& skip) {
  std::vector<Range> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string span, perms, offset, dev, inode, path;
    in >> span >> perms >> offset >> dev >> inode >> path;
    if (perms.size() < 2 || perms[0] != 'r' || perms[1] != 'w') continue;
    if (path == "[stack]" || path == "[vvar]" || path == "[vsyscall]") continue;
    Range r;
    r.begin = std::stoull(span.substr(0, span.find('-')), nullptr, 16);
    r.end = std::stoull(span.substr(span.find('-') + 1), nullptr, 16);
    r.path = path.empty() ? "anonymous" : path;
    if (std::none_of(skip.begin(), skip.end(), [&](const Range& s) { return s.Overlaps(r); }))
      out.push_back(r);
  }
  return out;
}

// One 64-bit digest per line of `regions`, in a mapping of its own (outside
// the regions, so taking a snapshot writes none of them).
class Snapshot {
 public:
  explicit Snapshot(const std::vector<Range>& regions) : regions_(regions) {
    for (const Range& r : regions_) lines_ += (r.end - r.begin) / kLine;
    bytes_ = std::max<size_t>(lines_ * sizeof(uint64_t), 4096);
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    digests_ = p == MAP_FAILED ? nullptr : static_cast<uint64_t*>(p);
  }
  ~Snapshot() {
    if (digests_ != nullptr) munmap(digests_, bytes_);
  }
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;
  bool ok() const { return digests_ != nullptr; }

  void Take() {
    size_t i = 0;
    for (const Range& r : regions_) {
      for (uintptr_t a = r.begin; a < r.end; a += kLine) digests_[i++] = Digest(a);
    }
  }
  // The lines whose digest differs in `after`.
  std::set<uintptr_t> Changed(const Snapshot& after) const {
    std::set<uintptr_t> out;
    size_t i = 0;
    for (const Range& r : regions_) {
      for (uintptr_t a = r.begin; a < r.end; a += kLine, ++i) {
        if (digests_[i] != after.digests_[i]) out.insert(a);
      }
    }
    return out;
  }

 private:
  static uint64_t Digest(uintptr_t line) {
    const auto* w = reinterpret_cast<const volatile uint64_t*>(line);
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    for (size_t k = 0; k < kLine / 8; ++k) h = (h ^ w[k]) * 0xff51afd7ed558ccdULL + k;
    return h ^ (h >> 29);
  }

  std::vector<Range> regions_;
  size_t lines_ = 0;
  size_t bytes_ = 0;
  uint64_t* digests_ = nullptr;
};

// Where line `l` is, for a failure: its mapping and, in a library's data,
// the symbol.
std::string Where(const std::vector<Range>& regions, uintptr_t l) {
  std::string out = "unmapped";
  for (const Range& r : regions) {
    if (l >= r.begin && l < r.end) out = r.path;
  }
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(l), &info) != 0 && info.dli_sname != nullptr) {
    out += std::string(" ") + info.dli_sname;
  }
  return out;
}

std::set<uintptr_t> LinesOf(const void* p, size_t n) {
  std::set<uintptr_t> out;
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (uintptr_t l = a & ~(kLine - 1); l < a + n; l += kLine) out.insert(l);
  return out;
}

// One worker lcore's side: what it is told to do and what it reports.
struct alignas(64) Lane {
  // Set up by the test.
  WorkerCore* core = nullptr;
  DpdkWorker* worker = nullptr;
  rte_ring* rx = nullptr;
  rte_ring* tx = nullptr;
  rte_mempool* pool = nullptr;
  const std::vector<std::vector<uint8_t>>* frames = nullptr;
  // 1: serve every frame once; 2: stop. Back to 0 when done.
  std::atomic<int> command{0};
  // Reported by the lcore.
  std::atomic<bool> ready{false};
  Range stack;
  uint64_t sent = 0;
  uint64_t answered = 0;
};

void Serve(Lane& l, common::RcuThread& rcu) {
  const auto& frames = *l.frames;
  for (size_t base = 0; base < frames.size(); base += kBurst) {
    const unsigned n = static_cast<unsigned>(std::min<size_t>(kBurst, frames.size() - base));
    rte_mbuf* m[kBurst];
    if (rte_pktmbuf_alloc_bulk(l.pool, m, n) != 0) return;
    for (unsigned j = 0; j < n; ++j) {
      const auto& f = frames[base + j];
      std::memcpy(rte_pktmbuf_mtod(m[j], uint8_t*), f.data(), f.size());
      m[j]->data_len = static_cast<uint16_t>(f.size());
      m[j]->pkt_len = static_cast<uint32_t>(f.size());
    }
    if (rte_ring_enqueue_bulk(l.rx, reinterpret_cast<void* const*>(m), n, nullptr) != n) {
      rte_pktmbuf_free_bulk(m, n);
      return;
    }
    l.sent += n;
    l.core->Turn();  // as DpdkWorker::Run does
    l.worker->Poll();
    rcu.Quiescent();
    void* out[2 * kBurst];
    unsigned got;
    while ((got = rte_ring_dequeue_burst(l.tx, out, 2 * kBurst, nullptr)) > 0) {
      rte_pktmbuf_free_bulk(reinterpret_cast<rte_mbuf**>(out), got);
      l.answered += got;
    }
  }
}

// The lcore's loop: registered with RCU once, as DpdkWorker::Run is, then
// serving on command (sleeping between, writing nothing).
int LaneMain(void* arg) {
  auto& l = *static_cast<Lane*>(arg);
  common::RcuThread rcu;
  pthread_attr_t attr;
  void* stack = nullptr;
  size_t stack_size = 0;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    pthread_attr_getstack(&attr, &stack, &stack_size);
    pthread_attr_destroy(&attr);
  }
  // glibc's thread block and TLS are in the same mapping, above the stack.
  l.stack.begin = reinterpret_cast<uintptr_t>(stack);
  l.stack.end = l.stack.begin + stack_size;
  l.ready.store(true, std::memory_order_release);
  for (;;) {
    const int c = l.command.load(std::memory_order_acquire);
    if (c == 2) return 0;
    if (c == 1) {
      Serve(l, rcu);
      l.command.store(0, std::memory_order_release);
      continue;
    }
    usleep(200);
  }
}

void Command(Lane& l, int c) {
  l.command.store(c, std::memory_order_release);
  while (c != 2 && l.command.load(std::memory_order_acquire) != 0) usleep(100);
}

TEST(DpdkLcores, TwoWorkersServingHitsWriteNoLineInCommon) {
#if defined(WEIR_TSAN) || defined(WEIR_ASAN)
  GTEST_SKIP() << "the sanitizers' shadow memory is too large to compare";
#endif
  // Three EAL lcores (main and two workers) on the first CPU this process
  // may use: the workers take turns, so one CPU is enough.
  cpu_set_t cpus;
  ASSERT_EQ(sched_getaffinity(0, sizeof(cpus), &cpus), 0);
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &cpus)) ++cpu;
  const std::string c = std::to_string(cpu);
  const std::string prefix = "weir-unit-lcores-" + std::to_string(getpid());
  std::vector<std::string> args = {"dpdk_lcores_test",
                                   "--lcores=0@" + c + ",1@" + c + ",2@" + c,
                                   "--no-huge",
                                   "-m",
                                   "64",
                                   "--no-pci",
                                   "--no-shconf",
                                   "--no-telemetry",
                                   "--log-level=error",
                                   "--file-prefix=" + prefix};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  ASSERT_GE(rte_eal_init(static_cast<int>(argv.size()), argv.data()), 0) << rte_strerror(rte_errno);

  // One pool for both workers, as the backend makes it (per-lcore caches).
  rte_mempool* pool =
      rte_pktmbuf_pool_create("lcores_pool", 2047, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  ASSERT_NE(pool, nullptr) << rte_strerror(rte_errno);
  struct Ports {
    rte_ring* rx;
    rte_ring* tx;
    uint16_t port;
  };
  std::array<Ports, kLanes> ports{};
  for (int i = 0; i < kLanes; ++i) {
    const std::string n = std::to_string(i);
    ports[i].rx = rte_ring_create(("rx" + n).c_str(), 1024, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
    ports[i].tx = rte_ring_create(("tx" + n).c_str(), 1024, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
    ASSERT_NE(ports[i].rx, nullptr);
    ASSERT_NE(ports[i].tx, nullptr);
    const int id = rte_eth_from_rings(("wire" + n).c_str(), &ports[i].rx, 1, &ports[i].tx, 1, SOCKET_ID_ANY);
    ASSERT_GE(id, 0);
    ports[i].port = static_cast<uint16_t>(id);
    PortSetup setup;
    setup.pool = pool;
    setup.rx_descriptors = setup.tx_descriptors = 512;
    uint64_t offloads = 0;
    ASSERT_TRUE(StartPort("wire" + n, ports[i].port, setup, &offloads).ok());
  }

  // The shared state: tags, city map, a cache of plain names (common
  // partition) and weighted names in each city's partition.
  common::RcuThread rcu;
  const common::Clock& clock = common::SystemClock::Instance();
  SharedState shared;
  {
    auto tags = partitions::TagTable::FromText(kTags);
    ASSERT_TRUE(tags.ok());
    shared.tags.Publish(*std::move(tags));
    auto cm = partitions::CityMap::FromCsv(kCities);
    ASSERT_TRUE(cm.ok());
    shared.citymap.Publish(*std::move(cm));
  }
  partitions::CacheOptions co;
  co.byte_budget = size_t{16} << 20;
  shared.cache = std::make_unique<partitions::Cache>(co, clock);
  const uint32_t now = clock.NowSeconds();
  std::vector<std::vector<uint8_t>> frames;
  auto add = [&](partitions::Partition p, const std::string& name, std::array<uint8_t, 4> src, size_t n,
                 bool weighted) {
    const dns::NameKey q = dns::testing::Key(name);
    partitions::CacheEntryBuilder b({p, q.span(), dns::type::kA, dns::klass::kIn});
    std::vector<uint8_t> weights;
    for (size_t j = 0; j < n; ++j) {
      b.AddAddress(q.span(), std::array<uint8_t, 4>{203, 0, 113, static_cast<uint8_t>(j + 1)}, 3600);
      weights.push_back(static_cast<uint8_t>(j + 1));
    }
    if (weighted) b.SetWeights(weights);
    auto e = b.Build(partitions::EntryKind::kPositive, now);
    ASSERT_TRUE(e.ok());
    shared.cache->Insert(*std::move(e));
    frame::testing::FrameSpec s;
    s.src4 = src;
    s.sport = static_cast<uint16_t>(1024 + frames.size());
    s.payload = dns::testing::MakeQuery({.id = static_cast<uint16_t>(frames.size()), .qname = name});
    frames.push_back(frame::testing::Build(s));
  };
  for (int i = 0; i < 64; ++i) {
    add(partitions::kCommonPartition, "h" + std::to_string(i) + ".plain.example",
        {198, 18, 1, static_cast<uint8_t>(i + 1)}, 1 + i % 4, false);
  }
  for (int i = 0; i < 64; ++i) {
    const std::string q = "w" + std::to_string(i) + ".cdn.example";
    for (uint8_t city = 0; city < 2; ++city) {
      const std::array<uint8_t, 4> src = {198, static_cast<uint8_t>(18 + city), 1,
                                          static_cast<uint8_t>(i + 1)};
      const common::IpAddress who = common::IpAddress::V4(dns::Load32(src.data()));
      const partitions::Partition p =
          partitions::PartitionKey(partitions::CacheLevel::kCity, shared.citymap.Get()->Lookup(who), who);
      add(p, q, src, 2 + (i + city) % 3, true);
    }
  }

  // One weighted name asked again every eighth query: with 16 SWRR states
  // per worker (below) for 128 weighted RRsets, its picks find their state
  // and every other weighted pick evicts one (a carrier's hot set is larger
  // than the table): both ways through the SWRR table.
  const size_t entries_cached = frames.size();
  {
    const std::vector<uint8_t> hot = frames[64];  // w0.cdn.example from the first city
    std::vector<std::vector<uint8_t>> mixed;
    for (size_t i = 0; i < frames.size(); ++i) {
      if (i % 8 == 7) mixed.push_back(hot);
      mixed.push_back(frames[i]);
    }
    frames = std::move(mixed);
  }

  // The workers, in the product's order (Node::Prepare, Backend::OpenPorts).
  HandlerOptions options;
  common::Cidr allow;
  ASSERT_TRUE(common::ParseCidr("198.18.0.0/15", &allow).ok());
  options.allow = {allow};
  options.swrr_states = 16;
  std::vector<std::unique_ptr<MissChannel>> channels;
  std::vector<std::unique_ptr<WorkerCore>> cores;
  std::vector<std::unique_ptr<DpdkWorker>> workers;
  for (int i = 0; i < kLanes; ++i) channels.push_back(std::make_unique<MissChannel>());
  for (int i = 0; i < kLanes; ++i)
    cores.push_back(std::make_unique<WorkerCore>(i, options, &shared, channels[i].get(), [] {}));
  const frame::PortAddresses addresses = frame::testing::Port();
  for (int i = 0; i < kLanes; ++i) {
    WorkerPort wp;
    wp.port = ports[i].port;
    wp.addresses = &addresses;
    workers.push_back(
        std::make_unique<DpdkWorker>(*cores[i], clock, i, std::vector<WorkerPort>{wp}, pool, 0));
  }

  // The per-worker objects written on the hit path share no line.
  std::array<std::set<uintptr_t>, kLanes> own;
  for (int i = 0; i < kLanes; ++i) {
    for (const std::set<uintptr_t>& s :
         {LinesOf(cores[i].get(), sizeof(WorkerCore)), LinesOf(workers[i].get(), sizeof(DpdkWorker)),
          LinesOf(&workers[i]->counters(0), sizeof(PortCounters) * workers[i]->ports()),
          LinesOf(channels[i].get(), sizeof(MissChannel))}) {
      own[i].insert(s.begin(), s.end());
    }
  }
  for (uintptr_t l : own[0])
    EXPECT_EQ(own[1].count(l), 0u) << "worker 0 and worker 1 share line 0x" << std::hex << l;

  // The lcores, each with its frames (the same queries).
  std::array<Lane, kLanes> lanes;
  std::array<unsigned, kLanes> lcore{};
  unsigned next = rte_get_next_lcore(-1, 1, 0);
  for (int i = 0; i < kLanes; ++i, next = rte_get_next_lcore(next, 1, 0)) {
    ASSERT_LT(next, unsigned{RTE_MAX_LCORE});
    lcore[i] = next;
    lanes[i].core = cores[i].get();
    lanes[i].worker = workers[i].get();
    lanes[i].rx = ports[i].rx;
    lanes[i].tx = ports[i].tx;
    lanes[i].pool = pool;
    lanes[i].frames = &frames;
    ASSERT_EQ(rte_eal_remote_launch(LaneMain, &lanes[i], lcore[i]), 0);
  }
  for (Lane& l : lanes) {
    while (!l.ready.load(std::memory_order_acquire)) usleep(100);
  }
  // Warm-up: every entry's CLOCK bit set, the SWRR states and answer
  // counters made, the pool's lcore caches filled.
  for (int round = 0; round < 3; ++round) {
    for (Lane& l : lanes) Command(l, 1);
  }
  for (int i = 0; i < kLanes; ++i) {
    ASSERT_EQ(lanes[i].answered, lanes[i].sent) << "worker " << i << " left queries unanswered";
    ASSERT_EQ(cores[i]->counters().misses.Read(), 0u);
  }
  const uint64_t hits0 = cores[0]->counters().hits.Read();
  const uint64_t hits1 = cores[1]->counters().hits.Read();

  // The threads' own stacks and the main thread's are not compared.
  std::vector<Range> stacks;
  for (const Lane& l : lanes) stacks.push_back(l.stack);
  const std::vector<Range> regions = WritableMemory(stacks);
  Snapshot before(regions), between(regions), after(regions);
  ASSERT_TRUE(before.ok() && between.ok() && after.ok());
  before.Take();
  Command(lanes[0], 1);
  between.Take();
  Command(lanes[1], 1);
  after.Take();

  EXPECT_EQ(cores[0]->counters().hits.Read() - hits0, frames.size());
  EXPECT_EQ(cores[1]->counters().hits.Read() - hits1, frames.size());
  const std::set<uintptr_t> by0 = before.Changed(between);
  const std::set<uintptr_t> by1 = between.Changed(after);
  // The comparison sees each worker's own writes.
  EXPECT_EQ(by0.count(reinterpret_cast<uintptr_t>(&cores[0]->counters().hits) & ~(kLine - 1)), 1u);
  EXPECT_EQ(by1.count(reinterpret_cast<uintptr_t>(&cores[1]->counters().hits) & ~(kLine - 1)), 1u);
  size_t compared = 0;
  for (const Range& r : regions) compared += (r.end - r.begin) / kLine;
  std::printf("compared %zu lines in %zu regions: worker 0's hits changed %zu, worker 1's %zu\n", compared,
              regions.size(), by0.size(), by1.size());
  // WEIR_TEST_LIST_WRITES=1: what each worker's hits wrote, by mapping.
  if (std::getenv("WEIR_TEST_LIST_WRITES") != nullptr) {
    for (const auto* by : {&by0, &by1}) {
      std::map<std::string, size_t> where;
      for (uintptr_t l : *by) ++where[Where(regions, l)];
      std::printf("worker %d:\n", by == &by0 ? 0 : 1);
      for (const auto& [w, n] : where) std::printf("  %5zu lines  %s\n", n, w.c_str());
    }
  }
  std::vector<uintptr_t> both;
  std::set_intersection(by0.begin(), by0.end(), by1.begin(), by1.end(), std::back_inserter(both));
  for (uintptr_t l : both) {
    ADD_FAILURE() << "line 0x" << std::hex << l << " is written by both workers' hits, in "
                  << Where(regions, l) << (own[0].count(l) ? " (worker 0's objects)" : "")
                  << (own[1].count(l) ? " (worker 1's)" : "");
  }
  // No cache entry changed.
  size_t entries = 0;
  shared.cache->ForEach([&](const partitions::CacheEntry& e) {
    ++entries;
    for (uintptr_t l : LinesOf(&e, e.memory_bytes())) {
      EXPECT_TRUE(by0.count(l) == 0 && by1.count(l) == 0)
          << "a hit wrote cache entry line 0x" << std::hex << l;
    }
    return true;
  });
  EXPECT_EQ(entries, entries_cached);

  for (int i = 0; i < kLanes; ++i) Command(lanes[i], 2);
  for (int i = 0; i < kLanes; ++i) rte_eal_wait_lcore(lcore[i]);
  workers.clear();
  cores.clear();
  channels.clear();
  for (const Ports& p : ports) rte_eth_dev_stop(p.port);
  rte_eal_cleanup();
  std::error_code ec;
  for (const char* base : {"/var/run/dpdk/", "/tmp/dpdk/"}) std::filesystem::remove_all(base + prefix, ec);
}

}  // namespace
}  // namespace weir::fastpath::dpdk
