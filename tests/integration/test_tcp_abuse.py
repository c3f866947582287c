"""Black-box tests of who may hold DNS-over-TCP connections, on both
daemons' TCP listeners (weir-fastpath's TCP server, weir-recursor's front):
one source opening thousands of connections, connections held idle until
the table is full, clients trickling the bytes of a query they never
complete or completing one every few seconds forever, and running out of
descriptors at accept. Each must cost the abuser its connections, never
another source its TCP service, and each close is counted by reason in
*_tcp_connections_closed_total (docs/metrics.md).

Sources are loopback addresses (127.0.0.x): the client binds each socket to
the one it plays. gslb-sim answers the names (the fastpath's upstream, the
recursor's forwarder).

Run: python3 tests/integration/test_tcp_abuse.py --build-dir build
"""

import os
import resource
import socket
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest import split_tcp_frames, tcp_frame  # noqa: E402
from weirtest.zones import record, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()

ZONES = zone("example.com.") + record("www", "A", "192.0.2.1", ttl=300)
QNAME = "www.example.com"

# The abusive source and the bystanders, all on loopback.
ABUSER = "127.0.0.1"
OTHER = "127.0.0.2"


def raise_descriptor_limit(want):
    """The soft RLIMIT_NOFILE of this process up to `want` (within the hard
    limit); the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def connect_from(source, host, port, timeout=5.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.settimeout(timeout)
    s.connect((host, port))
    return s


def query(qid):
    return tcp_frame(weirtest.make_query(QNAME, 1, qid=qid))


def ask(s, qid, timeout=5.0):
    """One query over `s` and its answer (None when the server closed)."""
    s.settimeout(timeout)
    s.sendall(query(qid))
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return None
        data += chunk
        msgs, data = split_tcp_frames(data)
        if msgs:
            return msgs[0]


def served(s, qid):
    """True when a query over `s` is answered; False when the server
    closed or reset the connection instead."""
    try:
        return ask(s, qid) is not None
    except OSError:
        return False


def closed_by_server(s):
    """True once the server closed `s` (EOF or reset), without blocking."""
    s.setblocking(False)
    try:
        return s.recv(65536) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        s.setblocking(True)


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


class _TcpAbuse:
    """The tests, for one daemon: subclasses start it (`start(**server)`)
    and name its metric families (PREFIX)."""

    PREFIX = ""

    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig")
        cls.sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES)
        cls.addClassCleanup(cls.sim.stop)

    def closed(self, d, reason):
        return d.metrics().value(f"{self.PREFIX}tcp_connections_closed_total", reason=reason)

    def open_connections(self, d):
        return d.metrics().value(f"{self.PREFIX}tcp_connections")

    def assert_tcp_answers(self, d, source):
        res = d.dig(QNAME, source=source, extra=["+tcp", "+tries=1", "+time=3"])
        self.assertEqual(res.status, "NOERROR", res.text)
        self.assertEqual(res.addresses(), ["192.0.2.1"], res.text)

    # ------------------------------------------------------------ per source

    def test_2000_connections_from_one_source_leave_tcp_to_another(self):
        n = 2000
        if raise_descriptor_limit(n + 256) < n + 64:
            self.skipTest("RLIMIT_NOFILE too low for 2000 client sockets")
        # The default per-source limit; idle connections are kept for the
        # whole test, so those held stay held.
        held = self.PER_SOURCE_DEFAULT
        d = self.start(tcp_idle_timeout_ms=120000)
        self.assert_tcp_answers(d, OTHER)  # the resolution cached
        socks = []
        try:
            # In bursts of 200, each accepted before the next: the test is
            # about connections held, not about SYNs dropped by a full
            # listen backlog.
            accepted = lambda: d.metrics().value(f"{self.PREFIX}tcp_connections_accepted_total")  # noqa: E731
            base = accepted()
            for burst in range(0, n, 200):
                for _ in range(200):
                    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    s.setblocking(False)
                    s.bind((ABUSER, 0))
                    s.connect_ex((d.host, d.port))
                    socks.append(s)
                wait_for(lambda: accepted() >= base + burst + 200, 30, f"connections {burst}..{burst + 199} accepted")
            # Every connection reached the daemon: `held` kept, the rest refused at accept.
            wait_for(lambda: self.closed(d, "per_source_limit") >= n - held, 60,
                     "the connections past the per-source limit to be refused")
            self.assertEqual(self.closed(d, "per_source_limit"), n - held)
            self.assertEqual(self.open_connections(d), held)
            # The source holding its limit of connections does not keep another out.
            for _ in range(3):
                self.assert_tcp_answers(d, OTHER)
            # Nor may it open more.
            s = connect_from(ABUSER, d.host, d.port)
            socks.append(s)
            self.assertFalse(served(s, 1), "a connection past the per-source limit was served")
            self.assertTrue(d.alive())
        finally:
            for s in socks:
                s.close()
        # Once the clients are gone: every connection accepted was closed
        # once, for one reason.
        wait_for(lambda: self.open_connections(d) == 0, 20, "the clients' connections to be closed")
        m = d.metrics()
        accepted = m.value(f"{self.PREFIX}tcp_connections_accepted_total")
        self.assertGreaterEqual(accepted, n + 4)
        self.assertEqual(accepted, m.value(f"{self.PREFIX}tcp_connections_closed_total"))
        refused = m.value(f"{self.PREFIX}tcp_connections_closed_total", reason="per_source_limit")
        self.assertEqual(refused, n - held + 1)  # and the one tried past the limit
        self.assertEqual(m.value(f"{self.PREFIX}tcp_connections_closed_total", reason="client"), accepted - refused)

    # ------------------------------------------------------------ pressure

    def test_a_full_table_closes_the_longest_idle_to_admit_a_new_source(self):
        # 16 slots, 8 per source: two sources fill the table with connections
        # that ask nothing. From 90% on, each new connection closes the one
        # idle the longest, so a third source still gets in.
        d = self.start(tcp_max_connections=16, tcp_max_connections_per_source=8, tcp_idle_timeout_ms=120000)
        socks = []
        try:
            for source in ("127.0.0.11", "127.0.0.12"):
                for _ in range(8):
                    socks.append(connect_from(source, d.host, d.port))
                    time.sleep(0.01)  # an order the daemon sees
            wait_for(lambda: self.open_connections(d) >= 14, 10, "the idle connections to be accepted")
            self.assert_tcp_answers(d, "127.0.0.13")
            # The first ones to go are the oldest: those of the first source.
            wait_for(lambda: closed_by_server(socks[0]), 5, "the longest-idle connection to be closed")
            self.assertGreaterEqual(self.closed(d, "pressure"), 3)
            self.assertFalse(closed_by_server(socks[-1]), "the newest idle connection was closed first")
            self.assertLessEqual(self.open_connections(d), 16)
            # A busy connection of the second source keeps its slot and is answered.
            self.assertTrue(served(socks[-1], 7))
        finally:
            for s in socks:
                s.close()

    # ------------------------------------------------------------ timeouts

    def test_a_byte_trickle_is_not_activity_the_idle_timeout_closes_it(self):
        # Idle 2 s, lifetime far away: the trickler (one byte a second of a
        # query it never completes) is closed by the idle timeout; a client
        # completing a query every half second is not.
        d = self.start(tcp_idle_timeout_ms=2000, tcp_lifetime_ms=60000)
        trickle = connect_from(ABUSER, d.host, d.port)
        active = connect_from(OTHER, d.host, d.port)
        try:
            trickle.sendall(b"\x00\x40")  # a 64-byte query is announced
            start = time.monotonic()
            closed_at = None
            qid = 1
            while time.monotonic() - start < 8:
                if closed_at is None:
                    try:
                        trickle.sendall(b"\x00")
                    except OSError:
                        closed_at = time.monotonic() - start
                    if closed_at is None and closed_by_server(trickle):
                        closed_at = time.monotonic() - start
                self.assertTrue(served(active, qid), f"the active client was closed after {qid} queries")
                qid += 1
                time.sleep(0.5)
            self.assertIsNotNone(closed_at, "a client trickling one byte a second was still open after 8 s")
            self.assertGreaterEqual(closed_at, 1.5)
            self.assertGreaterEqual(self.closed(d, "idle"), 1)
            self.assertEqual(self.closed(d, "lifetime"), 0)
        finally:
            trickle.close()
            active.close()

    def test_lifetime_closes_a_trickler_and_a_client_that_asks_forever(self):
        # Idle 60 s, lifetime 3 s: both are closed by the lifetime, however
        # they keep the connection busy.
        d = self.start(tcp_idle_timeout_ms=60000, tcp_lifetime_ms=3000)
        trickle = connect_from(ABUSER, d.host, d.port)
        asker = connect_from(OTHER, d.host, d.port)
        try:
            trickle.sendall(b"\x00\x40")
            start = time.monotonic()
            closed = {}
            qid = 1
            while len(closed) < 2 and time.monotonic() - start < 12:
                if "trickle" not in closed:
                    try:
                        trickle.sendall(b"\x00")
                        if closed_by_server(trickle):
                            closed["trickle"] = time.monotonic() - start
                    except OSError:
                        closed["trickle"] = time.monotonic() - start
                if "asker" not in closed:
                    if not served(asker, qid):
                        closed["asker"] = time.monotonic() - start
                    qid += 1
                time.sleep(1.0)
            self.assertEqual(set(closed), {"trickle", "asker"}, f"still open after 12 s: {closed}")
            for who, t in closed.items():
                self.assertGreaterEqual(t, 2.5, f"{who} closed before its lifetime")
            self.assertGreaterEqual(qid, 3, "the asker was never answered")
            wait_for(lambda: self.closed(d, "lifetime") >= 2, 5, "both lifetime closes to be counted")
            self.assertEqual(self.closed(d, "idle"), 0)
            self.assert_tcp_answers(d, OTHER)  # a new connection is served
        finally:
            trickle.close()
            asker.close()

    # ------------------------------------------------------------ descriptors

    def test_out_of_descriptors_at_accept_backs_off_and_recovers(self):
        d = self.start()
        fds = [int(x) for x in os.listdir(f"/proc/{d.pid}/fd")]
        old = resource.prlimit(d.pid, resource.RLIMIT_NOFILE)
        resource.prlimit(d.pid, resource.RLIMIT_NOFILE, (max(fds) + 4, old[1]))
        clients = []
        try:
            for _ in range(12):  # a few are accepted, the rest wait in the backlog
                clients.append(connect_from(ABUSER, d.host, d.port))
            time.sleep(0.3)
            before = sum(weirtest.proc_cpu_us(d.pid)) / 1e6
            time.sleep(1.0)
            spent = sum(weirtest.proc_cpu_us(d.pid)) / 1e6 - before
            self.assertLess(spent, 0.3, "the daemon spins on a listener it cannot accept from")
            self.assertTrue(d.alive())
        finally:
            for c in clients:
                c.close()
            resource.prlimit(d.pid, resource.RLIMIT_NOFILE, old)
        self.assert_tcp_answers(d, OTHER)
        self.assertGreaterEqual(d.metrics().value(self.ACCEPT_PAUSED), 1)


class FastpathTcpAbuseTest(_TcpAbuse, unittest.TestCase):
    PREFIX = "weir_"
    PER_SOURCE_DEFAULT = 64
    ACCEPT_PAUSED = "weir_tcp_accept_paused_total"

    def start(self, **server):
        cfg = weirtest.fastpath_config([f"{self.sim.host}:{self.sim.port}"], server=server)
        d = weirtest.Fastpath(BUILD_DIR, cfg)
        self.addCleanup(d.stop)
        return d


class RecursorTcpAbuseTest(_TcpAbuse, unittest.TestCase):
    PREFIX = "weir_recursor_"
    PER_SOURCE_DEFAULT = 256
    ACCEPT_PAUSED = "weir_recursor_accept_paused_total"

    def start(self, **server):
        server = {"metrics_listen": "127.0.0.1:0", **server}
        cfg = weirtest.recursor_config(forwarders=[f"{self.sim.host}:{self.sim.port}"], server=server,
                                       resolver={"do_ip6": False})
        d = weirtest.Recursor(BUILD_DIR, cfg)
        self.addCleanup(d.stop)
        return d

    def test_stats_keys_match_the_metrics(self):
        d = self.start(tcp_max_connections_per_source=2)
        socks = [connect_from(ABUSER, d.host, d.port) for _ in range(3)]  # the third is refused
        try:
            wait_for(lambda: d.stats()["tcp_closed_per_source_limit"] == 1, 10, "the third connection refused")
            self.assertTrue(served(socks[0], 1))
            st = d.stats()
            m = d.metrics()
            self.assertEqual(st["tcp_connections"], 2)
            self.assertEqual(st["tcp_connections"], m.value("weir_recursor_tcp_connections"))
            self.assertEqual(st["tcp_accepted"], m.value("weir_recursor_tcp_connections_accepted_total"))
            for reason in ("idle", "lifetime", "pressure", "per_source_limit", "max_connections", "unsent",
                           "client"):
                self.assertEqual(st[f"tcp_closed_{reason}"],
                                 m.value("weir_recursor_tcp_connections_closed_total", reason=reason), reason)
        finally:
            for s in socks:
                s.close()


if __name__ == "__main__":
    unittest.main()
