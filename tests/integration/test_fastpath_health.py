"""Black-box test of weir-fastpath's recursor health checks: a recursor that
stops answering is marked down and gets no client queries; once it answers
again, a health probe brings it back.

Run: python3 tests/integration/test_fastpath_health.py --build-dir build
"""

import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import record, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()

ZONES = zone("example.com.") + "".join(record(f"n{i}", "A", f"192.0.2.{i % 250 + 1}", ttl=300) for i in range(60))


class HealthTest(unittest.TestCase):
    def wait_for(self, predicate, what, seconds=5.0):
        deadline = time.monotonic() + seconds
        while not predicate():
            self.assertLess(time.monotonic(), deadline, f"timed out waiting for: {what}")
            time.sleep(0.05)

    def test_down_recursor_is_probed_back(self):
        a = weirtest.GslbSim(BUILD_DIR, config_text=ZONES)
        self.addCleanup(a.stop)
        b = weirtest.GslbSim(BUILD_DIR, config_text=ZONES)
        b_addr = f"{b.host}:{b.port}"
        ups = [f"{a.host}:{a.port}", b_addr]
        conf = weirtest.fastpath_config(ups, upstream={"timeout_ms": 200, "attempts": 2, "health_failures": 1,
                                                       "health_interval_ms": 300})
        fp = weirtest.Fastpath(BUILD_DIR, conf)
        self.addCleanup(fp.stop)
        up = lambda name: fp.metrics().value("weir_upstream_up", group="ordinary", upstream=name)  # noqa: E731

        b.stop()
        # Misses until one lands on b, times out and marks it down; every
        # client still gets its answer from a (the retry goes there).
        for i in range(60):
            r = fp.dig(f"n{i}.example.com", timeout=3)
            self.assertEqual(r.status, "NOERROR", f"n{i}")
            if up(b_addr) == 0:
                break
        self.assertEqual(up(b_addr), 0, "b never marked down")
        self.assertEqual(up(ups[0]), 1)

        # While b is down, client queries go to a only: no more timeouts.
        before = fp.metrics().value("weir_upstream_timeouts_total", upstream=b_addr)
        t0 = time.monotonic()
        for i in range(60):
            fp.dig(f"n{i}.example.com", qtype="AAAA", timeout=3)
        self.assertLess(time.monotonic() - t0, 10)
        self.assertEqual(fp.metrics().value("weir_upstream_timeouts_total", upstream=b_addr), before,
                         "client queries were sent to a recursor marked down")

        # b answers again on the same address: a probe brings it back.
        b2 = weirtest.GslbSim(BUILD_DIR, config_text=ZONES, listen=(b_addr,))
        self.addCleanup(b2.stop)
        self.wait_for(lambda: up(b_addr) == 1, "b back up after a health probe")
        self.assertGreaterEqual(b2.stats()["queries"], 1, "b saw no probe")


if __name__ == "__main__":
    unittest.main()
