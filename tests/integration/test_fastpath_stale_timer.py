"""Black-box test of weir-fastpath's RFC 8767 client response timer: when an
entry has expired and the upstream is slow, clients get the stale answer
after cache.stale_answer_after_ms instead of waiting for the upstream; the
resolution goes on and refreshes the cache.

Run: python3 tests/integration/test_fastpath_stale_timer.py --build-dir build
"""

import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import gslb_name, record, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()

ZONES = (zone("example.com.") +
         gslb_name("slow", latency_ms=2500) +  # every answer for this name takes 2.5 s
         record("slow", "A", "192.0.2.7", ttl=60))


class StaleTimerTest(unittest.TestCase):
    def test_slow_upstream_gets_the_stale_answer_first(self):
        sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES)
        self.addCleanup(sim.stop)
        up = f"{sim.host}:{sim.port}"
        conf = weirtest.fastpath_config([up], upstream={"timeout_ms": 5000},
                                        cache={"stale_answer_after_ms": 800, "stale_window": 600})
        fp = weirtest.Fastpath(BUILD_DIR, conf, test_clock=True)
        self.addCleanup(fp.stop)

        first = fp.dig("slow.example.com", timeout=5)
        self.assertEqual(first.status, "NOERROR")
        self.assertEqual(first.addresses(), ["192.0.2.7"])

        fp.advance_clock(61)  # expired 1 s ago, inside the stale window
        t0 = time.monotonic()
        stale = fp.dig("slow.example.com", timeout=5)
        elapsed = time.monotonic() - t0
        self.assertEqual(stale.status, "NOERROR")
        self.assertEqual(stale.addresses(), ["192.0.2.7"])
        self.assertLessEqual(stale.answer[0].ttl, 30, "a stale answer carries the stale TTL")
        self.assertGreaterEqual(elapsed, 0.7, "the timer must give the upstream its chance first")
        self.assertLess(elapsed, 2.0, f"stale answer took {elapsed:.2f} s: it waited for the slow upstream")
        self.assertEqual(fp.metrics().value("weir_stale_served_total"), 1)

        # The refresh went on in the background: once the upstream has
        # answered, the entry is fresh again without another upstream query.
        deadline = time.monotonic() + 5
        while fp.metrics().value("weir_upstream_queries_total") < 2 or \
                sim.stats()["queries"] < 2:
            self.assertLess(time.monotonic(), deadline, "no refresh reached the upstream")
            time.sleep(0.1)
        time.sleep(2.0)  # the upstream's injected latency, not a TTL
        fresh = fp.dig("slow.example.com", timeout=5)
        self.assertEqual(fresh.addresses(), ["192.0.2.7"])
        self.assertGreater(fresh.answer[0].ttl, 30, "the refreshed entry is fresh")
        self.assertEqual(sim.stats()["queries"], 2)


if __name__ == "__main__":
    unittest.main()
