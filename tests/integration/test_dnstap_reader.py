"""A dnstap reader on the unix socket that accepts the connection and never
answers the Frame Streams handshake (docs/dnstap.md#a-reader-that-does-not-read):
weir-fastpath and weir-recursor stop within 2 s all the same, drop (and
count) what they would tap meanwhile, and once a working reader takes the
path over, messages reach it within a few seconds.

gslb-sim is the upstream of both daemons; the readers are Python peers on
a unix socket (weirtest/fstrm.py).

Run: python3 tests/integration/test_dnstap_reader.py --build-dir build
"""

import os
import shutil
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest import fstrm  # noqa: E402
from weirtest.zones import record, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
ZONES = zone("example.com.", ttl=600) + record("www", "A", "192.0.2.1", ttl=600)


def dnstap_table(**keys) -> str:
    return "\n" + weirtest.toml_tables([("dnstap", keys)])


class StuckReaderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig")
        cls.sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES, seed=1)

    @classmethod
    def tearDownClass(cls):
        cls.sim.stop()

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="weir-tap-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def start(self, kind: str, sock: str):
        upstream = f"{self.sim.host}:{self.sim.port}"
        if kind == "fastpath":
            return weirtest.Fastpath(BUILD_DIR, weirtest.fastpath_config([upstream]) + dnstap_table(socket=sock))
        return weirtest.Recursor(BUILD_DIR, weirtest.recursor_config(forwarders=[upstream], server={"max_inflight": 1000}) + dnstap_table(socket=sock))

    @staticmethod
    def counts(kind: str, d) -> tuple:
        """(sent, dropped) of the daemon's dnstap counters."""
        if kind == "fastpath":
            m = d.metrics()
            return (m.value("weir_dnstap_messages_total", result="sent"),
                    m.value("weir_dnstap_messages_total", result="dropped"))
        st = d.stats()
        return st["dnstap_sent"], st["dnstap_dropped"]

    def query(self, d, n: int = 1) -> None:
        for _ in range(n):
            r = d.dig("www.example.com", "A", norec=False)
            self.assertIsNotNone(r.status, r.text)

    def test_stop_within_two_seconds_with_a_stuck_reader(self):
        for kind in ("fastpath", "recursor"):
            with self.subTest(kind=kind):
                sock = os.path.join(self.dir, f"{kind}-stuck.sock")
                stuck = fstrm.StuckReader(sock)
                self.addCleanup(stuck.stop)
                d = self.start(kind, sock)
                try:
                    weirtest.wait_until(lambda: stuck.accepted >= 1, timeout=5)
                    self.query(d, 5)
                    sent, dropped = self.counts(kind, d)
                    # Nothing is handed to a reader that never took the stream:
                    # every message is dropped, and counted.
                    self.assertEqual(sent, 0)
                    self.assertGreaterEqual(dropped, 5)
                finally:
                    start = time.monotonic()
                    rc = d.stop()
                    elapsed = time.monotonic() - start
                self.assertEqual(rc, 0)
                self.assertLess(elapsed, 2.0, f"{kind} took {elapsed:.2f} s to stop with a stuck reader")

    def test_a_good_reader_takes_over_from_a_stuck_one(self):
        for kind in ("fastpath", "recursor"):
            with self.subTest(kind=kind):
                sock = os.path.join(self.dir, f"{kind}-tap.sock")
                stuck = fstrm.StuckReader(sock)
                d = self.start(kind, sock)
                reader = None
                try:
                    weirtest.wait_until(lambda: stuck.accepted >= 2, timeout=8)  # tried, timed out, tried again
                    self.query(d, 3)  # answers go on meanwhile
                    stuck.stop()
                    reader = fstrm.Reader(sock)

                    def tapped():
                        self.query(d)
                        return reader.count() > 0
                    start = time.monotonic()
                    weirtest.wait_until(tapped, timeout=10, interval=0.3)
                    took = time.monotonic() - start
                    # The back-off after a stuck reader is at most 4 s, plus a handshake.
                    self.assertLess(took, 7.0)
                    sent, _ = self.counts(kind, d)
                    self.assertGreater(sent, 0)
                finally:
                    self.assertEqual(d.stop(), 0)
                    stuck.stop()
                    if reader is not None:
                        reader.stop()
                self.assertEqual(reader.finished, 1)  # the stream was ended with STOP, FINISH
                self.assertGreaterEqual(reader.count(), 1)


if __name__ == "__main__":
    unittest.main()
