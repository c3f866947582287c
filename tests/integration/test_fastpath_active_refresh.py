"""Black-box tests of active refresh (tags with refresh=active, the
white-list): weir-fastpath asks the upstream again before a cached answer
expires, with no client waiting, as long as clients keep reading it; other
names are refreshed only by their clients. The TTL clock is the test's
(--test-clock): nothing here sleeps for a TTL.

Run: python3 tests/integration/test_fastpath_active_refresh.py --build-dir build
"""

import os
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import record, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()

ZONES = (zone("example.com.") +
         record("live.cdn", "A", "192.0.2.10", ttl=60) +
         record("www", "A", "192.0.2.20", ttl=60))


class ActiveRefreshTest(unittest.TestCase):
    def setUp(self):
        self.sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES)
        self.addCleanup(self.sim.stop)
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        tags = os.path.join(d.name, "tags.txt")
        with open(tags, "w") as f:
            # weight=on: its answers are counted per address, which the
            # metrics scrapes (polled below) read without marking the
            # answer as read.
            f.write("cdn.example.com refresh=active weight=on\n")
        up = f"{self.sim.host}:{self.sim.port}"
        conf = weirtest.fastpath_config([up], weighted=[up], tags=tags, cache={"prefetch_percent": 10})
        self.fp = weirtest.Fastpath(BUILD_DIR, conf, test_clock=True)
        self.addCleanup(self.fp.stop)

    def refreshes(self, result: str) -> int:
        return int(self.fp.metrics().value("weir_active_refresh_total", result=result))

    def wait_refreshes(self, result: str, want: int) -> None:
        """The forwarder checks its schedule every turn of its loop (at most
        50 ms apart): waits for it to act, not for a TTL."""
        deadline = time.monotonic() + 5
        while self.refreshes(result) < want and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(self.refreshes(result), want, result)

    def upstream_queries(self, name: str) -> int:
        return sum(1 for q in self.sim.log(1000) if q.get("qname", "").rstrip(".") == name)

    def test_white_listed_answer_is_refreshed_before_expiry_while_read(self):
        for name in ("live.cdn.example.com", "www.example.com"):
            r = self.fp.dig(name)
            self.assertEqual(r.status, "NOERROR", name)
        self.assertEqual(self.fp.metrics().value("weir_active_refresh_scheduled"), 1)

        # 90 % of the TTL gone: the white-listed answer is asked again with
        # no client waiting; the other one is not.
        self.fp.advance_clock(54)
        self.wait_refreshes("sent", 1)
        self.assertEqual(self.upstream_queries("live.cdn.example.com"), 2)
        self.assertEqual(self.upstream_queries("www.example.com"), 1)
        live = self.fp.dig("live.cdn.example.com")
        self.assertEqual(live.addresses(), ["192.0.2.10"])
        self.assertEqual(live.answer[0].ttl, 60, "answered from the refreshed copy")
        www = self.fp.dig("www.example.com")
        self.assertEqual(www.answer[0].ttl, 6, "the passive answer aged on")
        # That hit, in the last 10 % of the answer's life, is its client's
        # refresh (the passive kind): asked once more, and never again
        # without a client.
        deadline = time.monotonic() + 5
        while self.upstream_queries("www.example.com") < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(self.upstream_queries("www.example.com"), 2)

        # Read again, so refreshed again at its turn; then nobody reads it:
        # at the next turn it is left to its clients.
        self.fp.advance_clock(54)
        self.wait_refreshes("sent", 2)
        self.assertEqual(self.upstream_queries("live.cdn.example.com"), 3)
        self.fp.advance_clock(54)
        self.wait_refreshes("idle", 1)
        self.assertEqual(self.upstream_queries("live.cdn.example.com"), 3)
        self.assertEqual(self.fp.metrics().value("weir_active_refresh_scheduled"), 0)
        self.assertEqual(self.upstream_queries("www.example.com"), 2, "no client, no refresh")


class ActiveRefreshBehindTheRecursorTest(unittest.TestCase):
    """weir-fastpath -> weir-recursor -> the GSLB, both tags refresh=active,
    both TTL clocks moved together: the fastpath's refresh is answered from
    the recursor's copy near its end (and sets off the recursor's own
    prefetch); the fastpath asks again a second before that copy runs out
    and gets the fresh one. A subscriber never meets an expired answer."""

    def test_refresh_reaches_the_fresh_answer_through_the_recursor(self):
        sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES)
        self.addCleanup(sim.stop)
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        rtags = os.path.join(d.name, "recursor-tags.txt")
        with open(rtags, "w") as f:
            f.write(f"cdn.example.com refresh=active policy=forward:{sim.host}@{sim.port}\n")
        rec = weirtest.Recursor(BUILD_DIR, weirtest.recursor_config(forwarders=[f"{sim.host}:{sim.port}"],
                                                                    tags=rtags), test_clock=True)
        self.addCleanup(rec.stop)
        ftags = os.path.join(d.name, "fastpath-tags.txt")
        with open(ftags, "w") as f:
            f.write("cdn.example.com refresh=active\n")
        up = f"{rec.host}:{rec.port}"
        fp = weirtest.Fastpath(BUILD_DIR, weirtest.fastpath_config([up], weighted=[up], tags=ftags),
                               test_clock=True)
        self.addCleanup(fp.stop)
        name = "live.cdn.example.com"

        def advance(seconds):
            rec.advance_clock(seconds)
            fp.advance_clock(seconds)

        def wait(what, cond):
            deadline = time.monotonic() + 5
            while not cond() and time.monotonic() < deadline:
                time.sleep(0.02)
            self.assertTrue(cond(), what)

        def sent():
            return int(fp.metrics().value("weir_active_refresh_total", result="sent"))

        def asked():
            return sum(1 for q in sim.log(1000) if q.get("qname", "").rstrip(".") == name)

        first = fp.dig(name)
        self.assertEqual(first.answer[0].ttl, 60)
        self.assertEqual(asked(), 1)

        advance(54)  # 90 % of the TTL on both tiers
        wait("the fastpath's refresh", lambda: sent() == 1)
        wait("the recursor's prefetch, set off by it", lambda: asked() == 2)
        hit = fp.dig(name)
        self.assertEqual(hit.answer[0].ttl, 6, "the recursor's copy, 6 s left")

        advance(5)  # a second before that copy runs out: asked again
        wait("the second refresh", lambda: sent() == 2)
        wait("the fresh copy in the fastpath", lambda: fp.dig(name).answer[0].ttl > 50)
        self.assertEqual(asked(), 2, "the GSLB was asked once per refresh cycle")
        self.assertEqual(fp.metrics().value("weir_cache_misses_total"), 1, "only the very first query missed")


if __name__ == "__main__":
    unittest.main()
