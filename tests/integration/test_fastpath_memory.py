"""weir-fastpath's resident memory under a minute of load beyond its
capacity (issue #26 item 3): unique names at the load generator's full
speed (misses, NXDOMAIN from gslb-sim at once) and, at the same time, a
flood of one slow name (TTL 0: never cached, so its clients pile up as
waiters until upstream.max_waiting_clients). The process's RSS stays under
weir_memory_budget_bytes (the bounds of the large allocations as
configured) times 1.25 plus the fixed overhead docs/fastpath-config.md#memory
documents, and the waiting clients never pass their bound.

Run: python3 tests/integration/test_fastpath_memory.py --build-dir build
(WEIR_FLOOD_SECONDS shortens the minute.)
"""

import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import gslb_name, record, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
FLOOD_SECONDS = int(os.environ.get("WEIR_FLOOD_SECONDS", "60"))
FIXED_OVERHEAD = 64 << 20  # docs/fastpath-config.md#memory
MAX_WAITING = 20000


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class MemoryBoundTest(unittest.TestCase):
    def test_rss_within_the_budget_under_a_minute_of_floods(self):
        zones = (zone("example.com.") + record("www", "A", "192.0.2.1") +
                 gslb_name("slow", default={"addresses": ["192.0.2.9"]}, latency_ms=2500, ttl=0))
        sim = weirtest.GslbSim(BUILD_DIR, config_text=zones)
        self.addCleanup(sim.stop)
        config = weirtest.fastpath_config([f"{sim.host}:{sim.port}"], workers=2,
                                          cache={"bytes": 16 << 20, "swrr_states": 4096},
                                          upstream={"max_waiting_clients": MAX_WAITING, "timeout_ms": 3000,
                                                    "answer_deadline_ms": 4000})
        fp = weirtest.Fastpath(BUILD_DIR, config)
        self.addCleanup(fp.stop)
        m = fp.metrics()
        budget = int(sum(m.value("weir_memory_budget_bytes", part=p)
                         for p in ("cache", "swrr", "rate_limit", "in_flight", "waiting")))
        self.assertGreater(budget, 16 << 20)
        rss_start = rss_bytes(fp.pid)

        stop = threading.Event()
        samples = {"rss": [], "waiting": []}

        def sample():
            while not stop.is_set():
                samples["rss"].append(rss_bytes(fp.pid))
                try:
                    samples["waiting"].append(fp.metrics().value("weir_upstream_waiting_clients"))
                except Exception:
                    pass
                time.sleep(0.5)

        slow_file = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
        slow_file.write("slow.example.com A\n")
        slow_file.close()
        self.addCleanup(os.unlink, slow_file.name)
        bench = weirtest.binary(BUILD_DIR, "bench/weir_bench/weir-bench")
        common = ["-s", f"{fp.host}:{fp.port}", "-l", str(FLOOD_SECONDS), "--progress", "never", "-t", "500"]
        # The slow name's flood starts first and runs until its clients hit
        # the cap (on a loaded 2-core machine the miss flood alone can starve
        # it below the cap); then the miss flood runs beside it for the minute.
        slow_flood = subprocess.Popen([bench, "-s", f"{fp.host}:{fp.port}", "-l", str(FLOOD_SECONDS + 15),
                                       "--progress", "never", "-t", "5000", "-d", slow_file.name, "-Q", "50000"],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.addCleanup(lambda: slow_flood.poll() is None and slow_flood.kill())
        sampler = threading.Thread(target=sample)
        sampler.start()
        deadline = time.monotonic() + 15
        while fp.metrics().value("weir_upstream_waiting_limited_total") == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        floods = [
            subprocess.Popen([bench, *common, "--names", "10", "--zone", "example.com.", "--miss-fraction", "1",
                              "-Q", "400000"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
            slow_flood,
        ]
        outs = [p.communicate(timeout=FLOOD_SECONDS + 75)[0] for p in floods]
        stop.set()
        sampler.join()
        m = fp.metrics()
        peak = max(samples["rss"])
        report = (f"RSS {rss_start >> 20} -> peak {peak >> 20} MiB; budget {budget >> 20} MiB "
                  f"(cache {m.value('weir_cache_memory_bytes') / 2**20:.1f} MiB held); waiting peak "
                  f"{max(samples['waiting'] or [0]):.0f}; misses {m.value('weir_cache_misses_total'):.0f}; "
                  f"waiting-limited {m.value('weir_upstream_waiting_limited_total'):.0f}")
        print(report, file=sys.stderr)
        for o in outs:
            print(o[-700:], file=sys.stderr)
        self.assertTrue(fp.alive())
        self.assertGreater(m.value("weir_cache_misses_total"), 100000, report)
        self.assertGreater(m.value("weir_upstream_waiting_limited_total"), 0, "the slow name's clients hit the cap")
        self.assertLessEqual(max(samples["waiting"]), MAX_WAITING, report)
        self.assertLessEqual(peak, budget * 5 // 4 + FIXED_OVERHEAD, report)
        # Still answering.
        self.assertEqual(fp.dig("www.example.com").addresses(), ["192.0.2.1"])


if __name__ == "__main__":
    unittest.main()
