"""Black-box tests of weir-fastpath's stale answers (RFC 8767): when an
entry has expired and the upstream is slow, clients get the stale answer
after cache.stale_answer_after_ms instead of waiting for the upstream; the
resolution goes on and refreshes the cache. A stale answer carries
cache.stale_answer_ttl on every record, whatever the cached TTLs.

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


CHAINS = (zone("example.net.") +
          # A long CNAME before a short address RRset...
          record("mixed", "CNAME", "edge.example.net.", ttl=3600) +
          record("edge", "A", "192.0.2.8", ttl=60) +
          # ... and a chain whose TTLs are all below the stale TTL.
          record("short", "CNAME", "edge2.example.net.", ttl=20) +
          record("edge2", "A", "192.0.2.9", ttl=10) +
          record("edge2", "A", "192.0.2.10", ttl=10))


class StaleTtlTest(unittest.TestCase):
    def test_every_record_of_a_stale_answer_carries_the_stale_ttl(self):
        sim = weirtest.GslbSim(BUILD_DIR, config_text=CHAINS)
        self.addCleanup(sim.stop)
        conf = weirtest.fastpath_config([f"{sim.host}:{sim.port}"], upstream={"timeout_ms": 1000},
                                        cache={"stale_answer_after_ms": 300, "stale_window": 7200,
                                               "stale_answer_ttl": 30})
        fp = weirtest.Fastpath(BUILD_DIR, conf, test_clock=True)
        self.addCleanup(fp.stop)
        fresh = {}
        for name in ("mixed.example.net", "short.example.net"):
            r = fp.dig(name, timeout=5)
            self.assertEqual(r.status, "NOERROR", r.text)
            fresh[name] = r
        self.assertEqual([rr.ttl for rr in fresh["mixed.example.net"].answer], [3600, 60])
        self.assertEqual([rr.ttl for rr in fresh["short.example.net"].answer], [20, 10, 10])

        # Both expired (the short chain long ago, the mixed one's A record 3540 s ago) and the
        # upstream gone: the stale answers, every record at 30.
        sim.stop()
        fp.advance_clock(3601)
        for name, addresses in (("mixed.example.net", ["192.0.2.8"]),
                                ("short.example.net", ["192.0.2.10", "192.0.2.9"])):
            stale = fp.dig(name, timeout=5)
            self.assertEqual(stale.status, "NOERROR", stale.text)
            self.assertEqual(sorted(stale.addresses()), addresses)
            self.assertEqual([rr.ttl for rr in stale.answer], [30] * (1 + len(addresses)),
                             f"{name}: a stale answer carries stale_answer_ttl on every record:\n{stale.text}")
        self.assertEqual(fp.metrics().value("weir_stale_served_total"), 2)


if __name__ == "__main__":
    unittest.main()
