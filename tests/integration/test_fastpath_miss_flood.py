"""weir-fastpath under a miss flood (issue #16 item 2): unique names at the
load generator's full speed against a fast recursor (gslb-sim, NXDOMAIN for
every flood name), and at the same time a second client at a moderate rate
on cached names. The hits keep >= 99.9 % of their answers, the process's
descriptors stay at the pool's (queries share UDP sockets, none is opened
per query) and its memory stays bounded.

Timing depends on the machine: on a loaded 2-core runner the flood and the
hit client share the CPUs with weir and gslb-sim, which is the point.

Run: python3 tests/integration/test_fastpath_miss_flood.py --build-dir build
"""

import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import record, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
HIT_NAMES = 200
FLOOD_NAMES = 400000
POOL = 32


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class MissFloodTest(unittest.TestCase):
    def test_hits_answered_descriptors_and_memory_bounded_under_a_miss_flood(self):
        weirtest.require_tools("dnsperf")
        zones = zone("example.com.") + "".join(record(f"h{i}", "A", f"192.0.2.{i % 250 + 1}", ttl=3600)
                                               for i in range(HIT_NAMES))
        sim = weirtest.GslbSim(BUILD_DIR, config_text=zones)
        self.addCleanup(sim.stop)
        config = weirtest.fastpath_config([f"{sim.host}:{sim.port}"], workers=2,
                                          cache={"bytes": 64 << 20},
                                          upstream={"udp_sockets": POOL, "max_inflight": 2000,
                                                    "max_inflight_per_upstream": 2000})
        fp = weirtest.Fastpath(BUILD_DIR, config)
        self.addCleanup(fp.stop)

        hits = [f"h{i}.example.com A" for i in range(HIT_NAMES)]
        warm = weirtest.dnsperf(fp.host, fp.port, hits, ["-n", "1", "-c", "2", "-t", "3"])
        self.assertEqual(warm.completed, HIT_NAMES, warm.text)
        fds_before = fds(fp.pid)
        rss_before = rss_kib(fp.pid)
        misses_before = fp.metrics().value("weir_cache_misses_total")

        stop = threading.Event()
        samples = {"fds": [], "rss": []}

        def sample():
            while not stop.is_set():
                samples["fds"].append(fds(fp.pid))
                samples["rss"].append(rss_kib(fp.pid))
                time.sleep(0.1)

        flood_names = [f"m{i}.flood.example.com A" for i in range(FLOOD_NAMES)]
        result = {}

        def flood():
            result["flood"] = weirtest.dnsperf(fp.host, fp.port, flood_names,
                                               ["-l", "10", "-c", "4", "-q", "2000", "-t", "2"], timeout=60)

        sampler = threading.Thread(target=sample)
        flooder = threading.Thread(target=flood)
        sampler.start()
        flooder.start()
        time.sleep(1.5)  # the flood at full speed first
        hit = weirtest.dnsperf(fp.host, fp.port, hits, ["-l", "6", "-Q", "2000", "-c", "2", "-t", "2"],
                               timeout=60)
        flooder.join(timeout=90)
        stop.set()
        sampler.join()
        self.assertFalse(flooder.is_alive())
        flood_res = result["flood"]
        m = fp.metrics()
        misses = m.value("weir_cache_misses_total") - misses_before
        report = (f"flood: sent {flood_res.sent} completed {flood_res.completed} {flood_res.rcodes}; "
                  f"misses {misses}; hit client: sent {hit.sent} completed {hit.completed} lost {hit.lost}; "
                  f"fds {fds_before} -> max {max(samples['fds'])}; "
                  f"RSS {rss_before} -> max {max(samples['rss'])} KiB")
        print(report, file=sys.stderr)
        # The flood was one: tens of thousands of misses reached the forwarder.
        self.assertGreater(misses, 20000, report + "\n" + flood_res.text)
        self.assertGreater(hit.sent, 6 * 2000 * 0.9, report)
        self.assertGreaterEqual(hit.completed, hit.sent * 0.999, report + "\n" + hit.text)
        self.assertEqual(set(hit.rcodes), {"NOERROR"}, hit.text)
        # No socket per query: the descriptors are the pool's, opened at start.
        self.assertLessEqual(max(samples["fds"]), fds_before + 4, report)
        # The cache is 64 MiB and the flood's answers fill it; the rest
        # (questions in flight, the allocator's arenas of three threads) is
        # bounded by upstream.max_inflight: 100 MiB measured, 256 allowed.
        self.assertLess(max(samples["rss"]) - rss_before, 256 * 1024, report)
        self.assertTrue(fp.alive())


if __name__ == "__main__":
    unittest.main()
