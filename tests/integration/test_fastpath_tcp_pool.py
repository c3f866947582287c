"""weir-fastpath's TCP connections to the recursors (docs/behaviour.md#the-front-cache, "Truncated answers"):
a burst of truncated answers rides a few persistent pipelined connections
per recursor instead of one connection per question.

The chain is real: gslb-sim gives every name under big.example 100
addresses (a wildcard; about 1,650 bytes), weir-recursor resolves them
(libunbound over TCP to gslb-sim) and, over UDP, answers weir-fastpath with TC (weir-recursor's UDP answers
stop at 1232 bytes); weir-fastpath asks again over TCP. 5,000 distinct
names at once are 5,000 TCP questions to one recursor whose per-source TCP
limit is its default, 256 connections: with a connection per question
most would be refused, each refusal a failure against the recursor's
health, and the recursor marked down.

Run: python3 tests/integration/test_fastpath_tcp_pool.py --build-dir build
"""

import os
import random
import re
import select
import socket
import struct
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest import build_response, rdata_a  # noqa: E402
from weirtest.zones import record, zone  # noqa: E402

import dns.flags  # noqa: E402
import dns.message  # noqa: E402
import dns.query  # noqa: E402
import dns.rcode  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
BURST = 5000
POOL = 4
ADDRESSES = 100


ZONES = zone("big.example.") + "".join(record("*", "A", f"192.0.2.{i}", ttl=300) for i in range(1, ADDRESSES + 1))


def handler(q):
    answer = [(q.name.to_text(), "A", 300, rdata_a(f"192.0.2.{i}")) for i in range(1, ADDRESSES + 1)]
    return build_response(q, answer=answer, options=[])


def query_wire(qid: int, name: str) -> bytes:
    m = dns.message.make_query(name, "A", use_edns=0, payload=1232)
    m.id = qid
    return m.to_wire()


def established(port: int) -> int:
    """TCP connections established to 127.0.0.1:`port` now (ss, the kernel's view)."""
    out = subprocess.run(["ss", "-Htn", "state", "established", f"( dport = :{port} )"], capture_output=True,
                         text=True, check=True).stdout
    return sum(1 for line in out.splitlines() if line.strip())


class TcpPoolTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("ss")
        cls.auth = weirtest.GslbSim(BUILD_DIR, config_text=ZONES)
        cls.addClassCleanup(cls.auth.stop)
        # Deadlines far above what resolving the burst takes on a loaded
        # machine: the test is about the fastpath's connections, not speed.
        cfg = weirtest.recursor_config(forwarders=[f"127.0.0.1:{cls.auth.port}"],
                                       server={"metrics_listen": "127.0.0.1:0", "answer_deadline_ms": 30000})
        cls.rec = weirtest.Recursor(BUILD_DIR, cfg)
        cls.addClassCleanup(cls.rec.stop)
        config = weirtest.fastpath_config([f"{cls.rec.host}:{cls.rec.port}"], allow=["127.0.0.0/8"],
                                          cache={"prefetch_percent": 0},
                                          upstream={"tcp_connections": POOL, "timeout_ms": 20000,
                                                    "answer_deadline_ms": 40000, "tcp_idle_timeout_ms": 2000})
        cls.fp = weirtest.Fastpath(BUILD_DIR, config)
        cls.addClassCleanup(cls.fp.stop)

    def test_burst_of_truncated_answers_shares_the_pool(self):
        # The most connections to the recursor seen while the burst runs.
        peak = [0]
        done = threading.Event()

        def watch():
            while not done.is_set():
                peak[0] = max(peak[0], established(self.rec.port))
                time.sleep(0.02)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        # Every question from its own client port and ID: the fastpath
        # answers each over UDP (with TC: 100 addresses do not fit 1232
        # bytes), after its own TCP question to the recursor.
        names = [f"n{i}-{random.randrange(1 << 30)}.big.example." for i in range(BURST)]
        socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(50)]
        waiting = {}
        try:
            for s in socks:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 21)
                s.setblocking(False)
            for i, name in enumerate(names):
                s = socks[i % len(socks)]
                qid = random.randrange(65536)
                while (s.fileno(), qid) in waiting:
                    qid = random.randrange(65536)
                waiting[(s.fileno(), qid)] = name
                s.sendto(query_wire(qid, name), (self.fp.host, self.fp.port))
                if i % 500 == 499:
                    time.sleep(0.01)  # within the socket buffers
            rcodes, truncated = {}, 0
            deadline = time.monotonic() + 90
            while waiting and time.monotonic() < deadline:
                ready, _, _ = select.select(socks, [], [], 1.0)
                for s in ready:
                    while True:
                        try:
                            wire = s.recv(65535)
                        except BlockingIOError:
                            break
                        qid, flags = struct.unpack("!HH", wire[:4])
                        name = waiting.pop((s.fileno(), qid), None)
                        if name is None:
                            continue
                        rcode = flags & 0xF
                        rcodes[rcode] = rcodes.get(rcode, 0) + 1
                        truncated += bool(flags & dns.flags.TC)
        finally:
            done.set()
            watcher.join()
            for s in socks:
                s.close()
        self.assertFalse(waiting, f"{len(waiting)} of {BURST} clients got no answer")
        self.assertEqual(rcodes, {0: BURST}, f"rcodes of the burst's answers: {rcodes}")
        self.assertEqual(truncated, BURST, "each UDP answer of 100 addresses is truncated to the client")

        m = self.fp.metrics()
        self.assertGreaterEqual(m.value("weir_upstream_truncated_total"), BURST)
        self.assertLessEqual(m.value("weir_upstream_tcp_connections_opened_total"), 3 * POOL,
                             "the burst opened connections beyond the pool (and a few replaced ones)")
        self.assertLessEqual(peak[0], POOL, f"{peak[0]} connections to the recursor at once")
        self.assertGreaterEqual(peak[0], 1, "the watcher never saw a connection")
        self.assertEqual(m.value("weir_upstream_up", group="ordinary", upstream=f"{self.rec.host}:{self.rec.port}"),
                         1)
        self.assertNotIn("marked down", self.fp.process.stderr_text())
        self.assertEqual(m.value("weir_upstream_timeouts_total", group="ordinary",
                                 upstream=f"{self.rec.host}:{self.rec.port}"), 0)
        # The recursor refused nobody.
        rm = self.rec.metrics()
        for reason in ("per_source_limit", "max_connections", "pressure"):
            self.assertEqual(rm.value("weir_recursor_tcp_connections_closed_total", reason=reason), 0, reason)
        self.assertLessEqual(rm.value("weir_recursor_tcp_connections_accepted_total"), 3 * POOL)

        # What a stub does next: the same name over TCP, whole, from the cache.
        r = dns.query.tcp(dns.message.make_query(names[7], "A"), self.fp.host, port=self.fp.port, timeout=5)
        self.assertEqual(sum(len(rrset) for rrset in r.answer), ADDRESSES)

        # Idle connections close (tcp_idle_timeout_ms 2000, checked each second).
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and established(self.rec.port) > 0:
            time.sleep(0.2)
        self.assertEqual(established(self.rec.port), 0, "idle pool connections left open")
        self.assertEqual(self.fp.metrics().value("weir_upstream_tcp_connections"), 0)



class RecursorClosesFirstTest(unittest.TestCase):
    """A recursor whose idle timeout is shorter than the pool's: it closes
    the pooled connection, and the next truncated question still gets its
    answer on a new one, nothing counted against the recursor."""

    def setUp(self):
        weirtest.require_tools("ss")
        self.auth = weirtest.ScriptedAuthority(handler)
        self.addCleanup(self.auth.stop)
        cfg = weirtest.recursor_config(forwarders=[f"127.0.0.1:{self.auth.port}"],
                                       server={"tcp_idle_timeout_ms": 300, "metrics_listen": "127.0.0.1:0"})
        self.rec = weirtest.Recursor(BUILD_DIR, cfg)
        self.addCleanup(self.rec.stop)
        config = weirtest.fastpath_config([f"{self.rec.host}:{self.rec.port}"], allow=["127.0.0.0/8"],
                                          cache={"prefetch_percent": 0},
                                          upstream={"tcp_connections": POOL, "tcp_idle_timeout_ms": 60000})
        self.fp = weirtest.Fastpath(BUILD_DIR, config)
        self.addCleanup(self.fp.stop)

    def ask(self, name):
        r = dns.query.udp(dns.message.make_query(name, "A", use_edns=0, payload=1232), self.fp.host,
                          port=self.fp.port, timeout=8)
        self.assertEqual(r.rcode(), dns.rcode.NOERROR)
        self.assertTrue(r.flags & dns.flags.TC)
        r = dns.query.tcp(dns.message.make_query(name, "A"), self.fp.host, port=self.fp.port, timeout=5)
        self.assertEqual(sum(len(rrset) for rrset in r.answer), ADDRESSES)

    def test_next_question_after_the_recursor_closed(self):
        self.ask("first.big.example.")
        self.assertEqual(self.fp.metrics().value("weir_upstream_tcp_connections"), 1)
        # The recursor closes it after 300 ms idle; the pool sees the close.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.fp.metrics().value("weir_upstream_tcp_connections") > 0:
            time.sleep(0.1)
        self.assertEqual(self.fp.metrics().value("weir_upstream_tcp_connections"), 0)
        self.ask("second.big.example.")
        m = self.fp.metrics()
        self.assertEqual(m.value("weir_upstream_tcp_connections_opened_total"), 2)
        up = f"{self.rec.host}:{self.rec.port}"
        self.assertEqual(m.value("weir_upstream_timeouts_total", group="ordinary", upstream=up), 0)
        self.assertEqual(m.value("weir_upstream_up", group="ordinary", upstream=up), 1)
        self.assertEqual(self.rec.metrics().value("weir_recursor_tcp_connections_closed_total", reason="idle"), 1)


if __name__ == "__main__":
    unittest.main()
